"""The stencil on a GPU: every variant bit for bit against NumPy, tails, pitches and misaligned bases, traces."""

import numpy as np
import pytest

from cuadv.labs import pipeline as lab

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def stencil():
    return lab.Stencil()


def test_validate_every_variant(stencil, cp):
    assert lab.validate(stencil)


@pytest.mark.parametrize("variant", lab.VARIANTS, ids=lambda v: v.expression(16))
@pytest.mark.parametrize("shape", [(3, 2), (16, 128), (31, 257), (300, 129)])
def test_variant_shapes(stencil, cp, variant, shape):
    x = cp.asarray(np.random.default_rng().standard_normal(shape, dtype=np.float32))
    out = cp.full(shape, cp.nan, dtype=cp.float32)
    grid = stencil(variant, x, out)
    assert grid >= 1
    assert np.array_equal(cp.asnumpy(out), lab.reference(cp.asnumpy(x)))


@pytest.mark.parametrize("variant", [lab.SYNC, lab.Variant("block", 4), lab.Variant("thread", 2)],
                         ids=lambda v: v.label)
def test_misaligned_views_take_4_byte_copies(stencil, cp, variant):
    storage = cp.asarray(np.random.default_rng().standard_normal((70, 300), dtype=np.float32))
    for view in (storage[:, 1:], storage[:, 3:299], storage[1:, 1:298]):  # 4-byte-aligned bases
        assert lab.Grid2D.of(view, "x").copy_alignment == 4
        out = cp.full(view.shape, cp.nan, dtype=cp.float32)
        stencil(variant, view, out)
        assert np.array_equal(cp.asnumpy(out), lab.reference(cp.asnumpy(view)))


def test_pitched_output(stencil, cp):
    x = cp.asarray(np.random.default_rng().standard_normal((50, 200), dtype=np.float32))
    out_storage = cp.full((50, 212), cp.nan, dtype=cp.float32)
    stencil(lab.Variant("block", 4), x, out_storage[:, :200])
    assert np.array_equal(cp.asnumpy(out_storage[:, :200]), lab.reference(cp.asnumpy(x)))
    assert np.isnan(cp.asnumpy(out_storage[:, 200:])).all()  # nothing written past the columns


def test_empty_launches_nothing(stencil, cp):
    x = cp.zeros((0, 100), dtype=cp.float32)
    assert stencil(lab.Variant("block", 4), x, x) == 0


def test_large_grid_many_tiles_per_block(stencil, cp):
    x = cp.random.default_rng().standard_normal((2051, 3001), dtype=cp.float32)
    expected = lab.reference(cp.asnumpy(x))
    for variant in lab.VARIANTS:
        out = cp.full(x.shape, cp.nan, dtype=cp.float32)
        stencil(variant, x, out)
        assert np.array_equal(cp.asnumpy(out), expected), variant.label


@pytest.mark.parametrize("variant", lab.TIMELINE_VARIANTS, ids=lambda v: v.label)
def test_trace_is_ordered(stencil, cp, variant):
    x = cp.random.default_rng().standard_normal((1024, 1024), dtype=cp.float32)
    out = cp.empty_like(x)
    trace = lab.Trace()
    stencil(variant, x, out, trace=trace)
    rec = trace.records().astype(np.int64)
    tiles = lab.tile_count(1024, 1024)
    done = np.count_nonzero(rec[:, :, 3], axis=1)
    assert done.sum() == min(tiles, trace.blocks * trace.capacity)
    for block, n in zip(rec, done):
        b = block[:n]
        assert (b[:, 0] > 0).all()
        assert (b[:, 1] <= b[:, 2]).all() and (b[:, 2] <= b[:, 3]).all()  # wait <= ready <= done
        assert (np.diff(b[:, 3]) >= 0).all()  # tiles finish in order
        if variant.kind != "sync":
            assert (b[:, 0] <= b[:, 2]).all()  # issued before ready
    assert np.array_equal(cp.asnumpy(out), lab.reference(cp.asnumpy(x)))
    ph = lab.trace_phases(trace.records(), variant.stages)
    assert ph["block_span_us"] > 0


def test_smoke(cp):
    lab.PipelineLab().smoke()
