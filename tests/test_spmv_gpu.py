"""The spmv lab's tile kernel on the GPU: y = A x within the lab's tolerance of a float64 reference under every
policy and both tile lists, with both short-row bodies (registers, staged), for power-law, R-MAT and uniform
matrices, every lane width of the register body and rows around where the warp takes over from a group, empty
matrices, row counts that are no multiple of anything,
back-to-back launches (the split rows' counters reset themselves), an infinity and a NaN next to rows that must
not see them (the register body reads past a row and masks), the lab's smoke run, and the cuSPARSE / torch peers
on the same arrays."""

import numpy as np
import pytest

from cuadv import current_device
from cuadv.labs import spmv_support as S
from cuadv.labs.spmv import SpmvLab, smoke_matrix

pytestmark = pytest.mark.gpu


def policies():
    out = ["fixed_work", "fixed_blocks", "auto"]
    if current_device().caps.compute_capability >= (9, 0):
        out.append("steal")
    return out


@pytest.fixture(scope="module", params=list(S.SHORT_ROWS))
def kernel(request):
    return S.spmv_kernel(short_rows=request.param)


def run_checked(cp, kernel, m, x, group=S.GROUP_NNZ, launches=1, lanes_log2=None, dynamic=None):
    # slots=4: guided windows widen even on these small matrices; every tile list the kernel's body holds
    ref, abs_sum, _ = S.reference(m, x, use_scipy=False)
    tol = S.tolerance(m.lengths, abs_sum)
    dev = S.DeviceCsr(m, x, group, lanes_log2=lanes_log2, dynamic=dynamic, slots=4)
    for tiling in dev.tilings:
        if not dev.holds(kernel, tiling):
            continue
        for policy in policies():
            dev.y.fill(cp.nan)
            for _ in range(launches):
                dev.run(kernel, tiling, policy)
            S.check(f"{m.name} {tiling} {policy}", S.to_host(dev.y), ref, tol)
    return dev


def x_for(m, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, m.n_cols).astype(np.float32)


@pytest.mark.parametrize("kind", S.MATRICES)
def test_every_policy_and_tiling(cp, kernel, kind):
    m = S.generate(kind, 1 << 15, 8, seed=11)
    run_checked(cp, kernel, m, x_for(m))


@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("lanes_log2", range(6))
def test_every_lane_width(cp, kernel, lanes_log2, dynamic):
    # the host's model picks 2 to 32 lanes per row; each width, 1 included, must sum the same rows, with the batches
    # of every tile claimed by its warps (under the policies with a barrier between tiles) or of none
    for kind in ("power-law", "uniform"):
        m = S.generate(kind, 1 << 13, 8, seed=15)
        run_checked(cp, kernel, m, x_for(m), group=256, lanes_log2=lanes_log2, dynamic=dynamic)


@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("lanes_log2", range(6))
def test_rows_the_warp_finishes(cp, kernel, lanes_log2, dynamic):
    # a group gives its row OWN_ROUNDS rounds of ROW_UNROLL elements per lane, the warp sums the rest: rows just
    # short of, at and past that, and up to the longest short row, among short rows, in one tile list
    t = S.OWN_ROUNDS * S.ROW_UNROLL << lanes_log2
    rng = np.random.default_rng(lanes_log2)
    lens = rng.integers(0, 20, 400)
    lens[rng.choice(400, 7, replace=False)] = [t - 1, t, t + 1, 2 * t + 3, S.LONG_NNZ, S.LONG_NNZ - 1, 1]
    m = S._rows_to_csr("takeover", np.minimum(lens, S.LONG_NNZ), 4096, rng)
    run_checked(cp, kernel, m, x_for(m), lanes_log2=lanes_log2, dynamic=dynamic)


def test_cols_and_vals_are_padded(cp):
    m = S.generate("uniform", 1 << 10, 8, seed=16)
    dev = S.DeviceCsr(m, x_for(m))
    for dev_array, host in ((dev.cols, m.cols), (dev.vals, m.vals)):
        assert dev_array.size == m.nnz and dev_array.base.size == m.nnz + S.ROW_UNROLL - 1
        assert np.array_equal(dev_array.get(), host) and not dev_array.base[m.nnz:].get().any()


@pytest.mark.parametrize("kind, rows", [("uniform", 1 << 10), ("power-law", 1 << 12)])
@pytest.mark.parametrize("lanes_log2", [0, 1, 3])
def test_non_finite_values_stay_in_their_rows(cp, kernel, lanes_log2, kind, rows):
    # the register body reads up to ROW_UNROLL - 1 elements past a row, gathering x[0] for them, and masks their
    # products; a long row's block gathers x[0] for its lanes outside the row: an infinity in x (x[0] among them)
    # and a NaN among the values must reach exactly the rows that hold them, short rows, long rows and slices
    m = S.generate(kind, rows, 8, seed=17)
    x = x_for(m)
    x[0] = np.inf
    x[m.cols[m.offsets[10]]] = np.inf  # the first column of row 10
    m.vals[m.offsets[20] + 1] = np.nan  # the second value of row 20
    dev = S.DeviceCsr(m, x, 64, lanes_log2=lanes_log2)
    if kind == "power-law":
        kinds = dev.tilings["split"][0].kinds()
        assert kinds["long rows"] > 0 and kinds["slices"] > 0, kinds
    prod = m.vals.astype(np.float64) * x.astype(np.float64)[m.cols]
    row = np.repeat(np.arange(m.n_rows), m.lengths)
    bad = np.zeros(m.n_rows, bool)
    bad[np.unique(row[~np.isfinite(prod)])] = True
    ref, abs_sum, _ = S.reference(S.Csr("finite", m.offsets, m.cols, np.where(np.isfinite(m.vals), m.vals, 0),
                                        m.n_cols), np.where(np.isfinite(x), x, 0), use_scipy=False)
    tol = S.tolerance(m.lengths, abs_sum)
    for tiling in ("whole", "split"):
        dev.y.fill(cp.nan)
        dev.run(kernel, tiling, "fixed_work")
        y = S.to_host(dev.y)
        assert not np.isfinite(y[bad]).any() and bad[10] and bad[20] and not bad.all()
        S.check(f"finite rows, {tiling}", np.where(bad, 0, y), np.where(bad, 0, ref), tol)


@pytest.mark.parametrize("group", [32, 256])
def test_small_tiles_take_every_path(cp, kernel, group):
    # small groups: many long rows, many split rows, every lane width
    m = S.generate("power-law", 1 << 14, 8, seed=12)
    dev = run_checked(cp, kernel, m, x_for(m), group=group)
    assert dev.tilings["split"][0].kinds()["slices"] > 0 and dev.tilings["whole"][0].kinds()["long rows"] > 0


def test_back_to_back_launches_and_tile_orders(cp, kernel):
    from cuadv import TileOrder

    m = S.generate("power-law", 1 << 14, 8, seed=13)
    x = x_for(m)
    # the slice counters and the batch claim counters reset themselves between launches
    run_checked(cp, kernel, m, x, group=64, launches=3, dynamic=True)
    ref, abs_sum, _ = S.reference(m, x, use_scipy=False)
    dev = S.DeviceCsr(m, x, 64)
    for tiling in ("whole", "split"):
        order = TileOrder.heaviest_first(dev.tilings[tiling][0].nnz())
        for policy in policies():
            dev.y.fill(cp.nan)
            dev.run(kernel, tiling, policy, order=order)
            S.check(f"heaviest first {tiling} {policy}", S.to_host(dev.y), ref, S.tolerance(m.lengths, abs_sum))


@pytest.mark.parametrize("rows", [1, 7, 1001, 4099])
def test_row_counts_with_tails_and_empty_rows(cp, kernel, rows):
    rng = np.random.default_rng(rows)
    lens = rng.integers(0, 40, rows)
    lens[rng.integers(0, rows)] = 0
    m = S._rows_to_csr("tails", lens, 64, rng)
    run_checked(cp, kernel, m, x_for(m), group=32)


@pytest.mark.parametrize("rows", [0, 1, 5000])
def test_empty_matrix(cp, kernel, rows):
    m = S.Csr("empty", np.zeros(rows + 1, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32), 3)
    dev = run_checked(cp, kernel, m, np.ones(3, np.float32))
    assert dev.y.size == rows


def test_staged_body_refuses_wider_tiles_than_its_stage(cp):
    m = S.generate("uniform", 1 << 15, 8, seed=19)
    dev = S.DeviceCsr(m, x_for(m), slots=4)
    staged, registers = S.spmv_kernel(short_rows="staged"), S.spmv_kernel()
    assert dev.tilings["split"][0].short_extent()[0] >= S.STAGE  # guided windows past the stage
    assert not dev.holds(staged, "split") and dev.holds(staged, "split_fixed") and dev.holds(registers, "split")
    dev.y.fill(cp.nan)
    with pytest.raises(ValueError, match="staged short-row body holds tiles of fewer than 4096"):
        dev.run(staged, "split", "fixed_work")
    assert cp.isnan(dev.y).all()  # nothing ran


def test_lab_smoke(cp):
    SpmvLab().smoke()
    m, _ = smoke_matrix()
    assert (m.lengths == 0).any() and m.lengths.max() > 32 * 4


def test_peers_agree_with_the_reference(cp):
    m = S.generate("R-MAT", 1 << 14, 8, seed=14)
    x = x_for(m)
    ref, abs_sum, _ = S.reference(m, x, use_scipy=False)
    dev = S.DeviceCsr(m, x)
    found, missing = S.peers(dev)
    kinds = {kind for kind, _, _ in found}
    assert {"cusparse", "cupyx"} <= kinds and ("torch" in kinds) != ("torch.sparse" in missing)
    for kind, label, fn in found:
        S.check(label, S.to_host(fn()), ref, S.tolerance(m.lengths, abs_sum))
    assert S.cusparse_version()[0].isdigit()
