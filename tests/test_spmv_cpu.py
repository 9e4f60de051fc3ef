"""The spmv lab without a GPU: the seeded generators give valid CSR (offsets monotone, columns in range, sorted
and unique in each row, nnz as asked), power-law rows have a heavy tail, the host tile list covers every
non-zero once and writes every row once (checked by running the tiles' meaning in NumPy), the tolerance rule,
and the tile kernel compiles for sm_90a and sm_100a under every policy with no spill."""

import numpy as np
import pytest

from cuadv.errors import ValidationError
from cuadv.labs import lab_by_name
from cuadv.labs import spmv_support as S
from cuadv.labs.spmv import smoke_matrix

N = 1 << 14


def assert_valid_csr(m: S.Csr):
    o = m.offsets
    assert o.dtype == np.int32 and m.cols.dtype == np.int32 and m.vals.dtype == np.float32
    assert o[0] == 0 and np.all(np.diff(o) >= 0) and o[-1] == m.cols.size == m.vals.size
    assert m.cols.size == 0 or (m.cols.min() >= 0 and m.cols.max() < m.n_cols)
    row = np.repeat(np.arange(m.n_rows), np.diff(o))
    same_row = row[1:] == row[:-1]
    assert np.all(np.diff(m.cols.astype(np.int64))[same_row] > 0), "columns sorted and unique within a row"


@pytest.mark.parametrize("kind", S.MATRICES)
def test_generators_are_valid_and_deterministic(kind):
    a, b = S.generate(kind, N, 8, seed=3), S.generate(kind, N, 8, seed=3)
    assert_valid_csr(a)
    assert a.n_rows == N and a.n_cols == N
    for f in ("offsets", "cols", "vals"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    c = S.generate(kind, N, 8, seed=4)
    assert not np.array_equal(a.cols, c.cols)
    if kind == "R-MAT":  # duplicate edges merged: at most the edges drawn, most of them kept
        assert 0.7 * N * 8 <= a.nnz <= N * 8
    else:
        assert a.nnz == N * 8


def test_power_law_has_a_heavy_tail_and_uniform_does_not():
    p, u, r = (S.generate(k, N, 8, seed=1).stats() for k in ("power-law", "uniform", "R-MAT"))
    assert p["max_row"] >= 100 * 8 and p["gini"] > 0.4
    assert r["max_row"] >= 100 * 8 and r["gini"] > 0.5
    assert u["max_row"] <= 10 and u["gini"] < 0.15 and u["empty_rows"] == 0


def test_power_law_reaches_hundreds_of_thousands_at_full_size_shape():
    # the cap is rows / 8 and the longest Pareto(1.3) draw of 2**22 rows is far past it: check on the lengths only
    rng = np.random.default_rng(18)
    lens = S._exact_total(rng.pareto(1.3, 1 << 22) + 1, 8 << 22, (1 << 22) // 8, rng)
    assert lens.sum() == 8 << 22 and 100_000 <= lens.max() <= (1 << 22) // 8


def test_gini():
    assert S.gini(np.full(10, 3)) == pytest.approx(0.0)
    assert S.gini(np.array([0, 0, 0, 10])) == pytest.approx(0.75)
    assert S.gini(np.zeros(0, int)) == 0.0


def emulate(m: S.Csr, x: np.ndarray, t: S.Tiles, stage: int) -> np.ndarray:
    """What spmv.cuh computes for a tile list, in float64, asserting the tile invariants on the way."""
    off = m.offsets.astype(np.int64)
    prod = m.vals.astype(np.float64) * x.astype(np.float64)[m.cols]
    y = np.full(m.n_rows, np.nan)
    written = np.zeros(m.n_rows, int)
    covered = np.zeros(m.nnz, int)
    partial = {}
    for i, (r0, info, k0, k1) in enumerate(t.tiles.astype(np.int64)):
        covered[k0:k1] += 1
        if info > 0:
            rows, lanes = info >> 5, 1 << (info & 31)
            assert 1 <= rows <= stage // 2 and lanes <= 32 and k1 - k0 < stage
            assert k0 == off[r0] and k1 == off[r0 + rows]
            for r in range(r0, r0 + rows):
                y[r] = prod[off[r]:off[r + 1]].sum()
                written[r] += 1
        elif info == 0:
            assert (k0, k1) == (off[r0], off[r0 + 1])
            y[r0] = prod[k0:k1].sum()
            written[r0] += 1
        else:
            first, count = t.splits[~info]
            assert first <= i < first + count and count > 1
            partial.setdefault(r0, {})[i] = prod[k0:k1].sum()
            if len(partial[r0]) == count:
                y[r0] = sum(partial[r0][j] for j in range(first, first + count))
                written[r0] += 1
    assert np.all(covered == 1), "every non-zero in exactly one tile"
    assert np.all(written == 1), "every row written exactly once"
    return y


@pytest.mark.parametrize("kind", S.MATRICES)
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("group", [32, S.GROUP_NNZ])
def test_tiles_cover_every_nonzero_once(kind, split, group):
    m = S.generate(kind, N, 8, seed=5)
    x = np.random.default_rng(0).uniform(-1, 1, m.n_cols).astype(np.float32)
    t = S.build_tiles(m.offsets, split, group, 4 * group)
    ref, abs_sum, _ = S.reference(m, x, use_scipy=False)
    y = emulate(m, x, t, 2 * group)
    assert np.allclose(y, ref, rtol=0, atol=1e-9)
    if split:
        assert t.nnz().max() <= 4 * group
    assert t.kinds()["slices"] == (0 if not split else t.kinds()["slices"])


def test_tiles_of_the_smoke_matrix_take_every_path():
    m, x = smoke_matrix()
    assert m.lengths[5] == 0
    whole, split = S.build_tiles(m.offsets, False, 32, 128), S.build_tiles(m.offsets, True, 32, 128)
    assert whole.kinds()["long rows"] >= 2 and whole.kinds()["slices"] == 0
    assert split.kinds()["slices"] == 3 + 8 and split.splits.tolist()[1][1] == 8
    lanes = set((split.tiles[split.tiles[:, 1] > 0, 1] & 31).tolist())
    assert len(lanes) > 1  # more than one group width
    for t in (whole, split):
        emulate(m, x, t, 64)


@pytest.mark.parametrize("rows", [0, 1, 7, 1001])
def test_empty_matrices(rows):
    offsets = np.zeros(rows + 1, np.int32)
    for split in (False, True):
        t = S.build_tiles(offsets, split)
        assert t.count == -(-rows // S.GROUP_NNZ) and t.splits.shape == (0, 2)
        m = S.Csr("empty", offsets, np.zeros(0, np.int32), np.zeros(0, np.float32), 5)
        assert np.array_equal(emulate(m, np.zeros(5, np.float32), t, S.STAGE), np.zeros(rows))


def test_tolerance_rule_and_check():
    lens = np.array([0, 1, 1024])
    abs_sum = np.array([0.0, 2.0, 3.0])
    eps = np.finfo(np.float32).eps
    assert np.allclose(S.tolerance(lens, abs_sum), [0.0, 4 * eps * 2 * 2.0, 4 * eps * 12 * 3.0])
    tol = S.tolerance(lens, abs_sum)
    assert S.check("ok", np.array([0, 1, 1], np.float32), np.array([0.0, 1.0, 1.0]), tol) == 0.0
    with pytest.raises(ValidationError, match="row 0"):
        S.check("empty row not zero", np.array([1e-30, 1, 1], np.float32), np.array([0.0, 1.0, 1.0]), tol)
    with pytest.raises(ValidationError, match="1 rows out of tolerance; row 2"):
        S.check("nan", np.array([0, 1, np.nan], np.float32), np.array([0.0, 1.0, 1.0]), tol)


def test_effective_bytes():
    m = S.Csr("t", np.array([0, 2, 3], np.int32), np.array([0, 1, 1], np.int32), np.ones(3, np.float32), 4)
    assert m.effective_bytes() == 8 * 3 + 4 * 3 + 4 * 4 + 4 * 2


@pytest.mark.parametrize("arch, policies", [("sm_90a", ["fixed_work", "fixed_blocks", "steal", "auto"]),
                                            ("sm_100a", ["fixed_work", "fixed_blocks", "clc", "auto"])])
def test_tile_kernel_compiles_without_spills(arch, policies):
    # Every policy 'auto' can pick (steal on sm_90a, clc on sm_100a) and the two static ones; at the 48 registers
    # of 5 blocks per SM, steal compiled for sm_100a (where auto runs clc) spills 20 bytes with NVRTC 13.5.
    k = S.spmv_kernel()
    for policy in policies:
        res = k.compile(arch, policy).resources_for(k.name)
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_bytes == 0, (policy, res)
        assert res.registers <= 65536 // (S.THREADS * S.MIN_BLOCKS)
        assert res.static_shared_bytes >= 4 * S.STAGE


def test_lab_is_registered_after_scheduling():
    from cuadv.labs import all_labs

    names = [lab.name for lab in all_labs()]
    assert names.index("spmv") == names.index("scheduling") + 1
    assert lab_by_name("spmv").title.startswith("Sparse matrix-vector product")
