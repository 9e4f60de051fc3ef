"""The spmv lab's tile kernel on the GPU: y = A x within the lab's tolerance of a float64 reference under every
policy and both tile lists, for power-law, R-MAT and uniform matrices, empty matrices, row counts that are no
multiple of anything, back-to-back launches (the split rows' counters reset themselves), the lab's smoke run,
and the cuSPARSE / torch peers on the same arrays."""

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


@pytest.fixture(scope="module")
def kernel():
    return S.spmv_kernel()


def run_checked(cp, kernel, m, x, group=S.GROUP_NNZ, launches=1):
    ref, abs_sum, _ = S.reference(m, x, use_scipy=False)
    tol = S.tolerance(m.lengths, abs_sum)
    dev = S.DeviceCsr(m, x, group)
    for tiling in ("whole", "split"):
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
    run_checked(cp, kernel, m, x, group=64, launches=3)  # the slice counters reset themselves between launches
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
