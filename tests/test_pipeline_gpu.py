"""The stencil on a GPU: every variant bit for bit against NumPy, tails, pitches, misaligned bases and outputs
(refused by the TMA variants), strip splits across blocks, traces with one stamp set per stage."""

import numpy as np
import pytest

from cuadv.errors import LaunchConfigError
from cuadv.labs import pipeline as lab

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def stencil():
    return lab.Stencil()


def test_validate_every_variant(stencil, cp):
    assert lab.validate(stencil)


def tma_input(variant, x):
    """x itself, or for a tma variant whose rows x does not start 16-byte aligned, a copy with 16-byte rows."""
    if variant.kind == "tma" and not lab.Grid2D.of(x, "x").tma_loadable:
        return lab.pitched_copy(x)
    return x


def nan_output(variant, shape, cp):
    """A NaN-filled output for the variant: with TMA stores, one whose rows start 16-byte aligned."""
    out = cp.full(shape, cp.nan, dtype=cp.float32)
    return lab.pitched_copy(out) if variant.tma_store else out


@pytest.mark.parametrize("variant", lab.VARIANTS, ids=lambda v: v.key)
@pytest.mark.parametrize("shape", [(3, 2), (16, 128), (31, 257), (300, 129), (1, 3000), (70, 1030), (9, 4)])
def test_variant_shapes(stencil, cp, variant, shape):
    x = tma_input(variant, cp.asarray(np.random.default_rng().standard_normal(shape, dtype=np.float32)))
    out = nan_output(variant, shape, cp)
    grid = stencil(variant, x, out)
    assert grid >= 1
    assert np.array_equal(cp.asnumpy(out), lab.reference(cp.asnumpy(x)))


MIXED = [lab.SYNC, lab.tile("mbar", 4), lab.tile("thread", 2), lab.strip("sync", 512, 8),
         lab.strip("thread", 512, 8, 4), lab.strip("mbar", 512, 8, 4), lab.strip("mbar", 256, 8, 4),
         lab.strip("mbar", 1024, 8, 3), lab.tma(4, 16), lab.tma(3, 32), lab.tma(4, 32, store=True)]


@pytest.mark.parametrize("variant", MIXED, ids=lambda v: v.key)
def test_misaligned_views_take_4_byte_copies(stencil, cp, variant):
    storage = cp.asarray(np.random.default_rng().standard_normal((70, 300), dtype=np.float32))
    for view in (storage[:, 1:], storage[:, 3:299], storage[1:, 1:298]):  # 4-byte-aligned bases
        assert lab.Grid2D.of(view, "x").copy_alignment == 4
        out = cp.full(view.shape, cp.nan, dtype=cp.float32)
        if variant.kind == "tma":  # TMA cannot load it: refused before launch, nothing written
            with pytest.raises(LaunchConfigError, match="TMA rule: the global address must be 16-byte aligned"):
                stencil(variant, view, out)
            assert np.isnan(cp.asnumpy(out)).all()
            continue
        stencil(variant, view, out)
        assert np.array_equal(cp.asnumpy(out), lab.reference(cp.asnumpy(view)))


@pytest.mark.parametrize("variant", MIXED, ids=lambda v: v.key)
def test_pitched_and_misaligned_output(stencil, cp, variant):
    x = cp.asarray(np.random.default_rng().standard_normal((50, 200), dtype=np.float32))
    expected = lab.reference(cp.asnumpy(x))
    out_storage = cp.full((50, 212), cp.nan, dtype=cp.float32)
    stencil(variant, x, out_storage[:, :200])  # 16-byte pitch: vector stores
    assert np.array_equal(cp.asnumpy(out_storage[:, :200]), expected)
    assert np.isnan(cp.asnumpy(out_storage[:, 200:])).all()  # nothing written past the columns
    out_storage.fill(cp.nan)
    if variant.tma_store:  # TMA cannot store there: refused before launch, nothing written
        with pytest.raises(LaunchConfigError, match="TMA stores need an output whose base and row pitch"):
            stencil(variant, x, out_storage[:, 3:203])
        assert np.isnan(cp.asnumpy(out_storage)).all()
        return
    stencil(variant, x, out_storage[:, 3:203])  # base 12 bytes past a 16-byte boundary: 4-byte stores
    assert np.array_equal(cp.asnumpy(out_storage[:, 3:203]), expected)
    assert np.isnan(cp.asnumpy(out_storage[:, :3])).all() and np.isnan(cp.asnumpy(out_storage[:, 203:])).all()


def test_empty_launches_nothing(stencil, cp):
    x = cp.zeros((0, 100), dtype=cp.float32)
    for variant in (lab.tile("mbar", 4), lab.strip("mbar", 512, 8, 4), lab.tma(4, 32)):
        assert stencil(variant, x, x) == 0
    y = cp.zeros((100, 0), dtype=cp.float32)
    assert stencil(lab.strip("sync", 512, 8), y, y) == 0


def test_in_place_is_refused(stencil, cp):
    x = cp.zeros((8, 8), dtype=cp.float32)
    with pytest.raises(LaunchConfigError, match="in place"):
        stencil(lab.strip("mbar", 512, 8, 4), x, x)


def test_large_grid_many_stages_per_block(stencil, cp):
    x = cp.random.default_rng().standard_normal((2051, 3001), dtype=cp.float32)
    expected = lab.reference(cp.asnumpy(x))
    for variant in lab.VARIANTS:
        out = nan_output(variant, x.shape, cp)
        stencil(variant, tma_input(variant, x), out)
        assert np.array_equal(cp.asnumpy(out), expected), variant.label


@pytest.mark.parametrize("shape", [(5, 20000), (4000, 3), (1, 100000), (2, 1025)])
def test_strip_shares_span_strips(stencil, cp, shape):
    """Wide and tall-thin arrays: blocks whose share of (strip, row) pairs is many short runs or one long one."""
    x = cp.asarray(np.random.default_rng().standard_normal(shape, dtype=np.float32))
    expected = lab.reference(cp.asnumpy(x))
    for variant in lab.STRIP_VARIANTS:
        out = cp.full(shape, cp.nan, dtype=cp.float32)
        stencil(variant, x, out)
        assert np.array_equal(cp.asnumpy(out), expected), variant.label


def test_blocks_per_sm(stencil, cp):
    from cuadv.device import current_device

    sms = current_device().caps.sm_count
    x = cp.random.default_rng().standard_normal((4096, 4096), dtype=cp.float32)
    out = cp.empty_like(x)
    limited = lab.strip("mbar", 512, 8, 4, blocks_per_sm=2)
    assert stencil(limited, x, out) == 2 * sms
    assert np.array_equal(cp.asnumpy(out), lab.reference(cp.asnumpy(x)))
    full = lab.strip("mbar", 512, 8, 4)
    assert stencil(full, x, out) == stencil.blocks_per_sm(full, 16) * sms
    too_many = lab.strip("mbar", 512, 8, 4, blocks_per_sm=64)
    with pytest.raises(LaunchConfigError, match="blocks per SM requested"):
        stencil(too_many, x, out)


TICKETS = [v for v in lab.VARIANTS if v.tickets]


def counter(address: int, value: int | None = None) -> int:
    """Read (or first set) the 8-byte ticket counter at ``address``, after the device is idle."""
    from cuadv._cuda import check, driver

    drv = driver()
    check(drv.cuCtxSynchronize(), "cuCtxSynchronize")
    word = np.array([0 if value is None else value], dtype=np.uint64)
    if value is not None:
        check(drv.cuMemcpyHtoD(address, word.ctypes.data, 8), "cuMemcpyHtoD")
    check(drv.cuMemcpyDtoH(word.ctypes.data, address, 8), "cuMemcpyDtoH")
    return int(word[0])


@pytest.mark.parametrize("variant", TICKETS, ids=lambda v: v.key)
def test_tickets_reset_themselves(stencil, cp, variant):
    """Chunks claimed by ticket: back-to-back launches and graph replays, no host reset in between, each exact,
    and the counter back at zero after every launch (a launch takes chunks + grid tickets; the last one resets)."""
    from cuadv.graphs import Graph

    rng = np.random.default_rng()
    for shape in ((2051, 3001), (1, 300), (700, 129), (64, 128 * 13)):
        x = tma_input(variant, cp.asarray(rng.standard_normal(shape, dtype=np.float32)))
        expected = lab.reference(cp.asnumpy(x))
        for _ in range(3):
            out = nan_output(variant, shape, cp)
            stencil(variant, x, out)
            assert np.array_equal(cp.asnumpy(out), expected), (variant.label, shape)
            assert counter(stencil.tickets()) == 0
    x = cp.asarray(rng.standard_normal((999, 2000), dtype=np.float32))
    out = nan_output(variant, x.shape, cp)
    stream = cp.cuda.Stream(non_blocking=True)
    graph = Graph.capture(stream, lambda: stencil(variant, x, out, stream=stream))
    captured = lab._TICKETS.last_new  # the capture's own counter
    assert captured != stencil.tickets(stream)  # not the one the stream's own launches use
    for _ in range(4):
        out.fill(cp.nan)
        cp.cuda.Device().synchronize()  # the fill (CuPy's stream) is done before the replay on `stream` starts
        graph.launch(stream)
        stream.synchronize()
        assert np.array_equal(cp.asnumpy(out), lab.reference(cp.asnumpy(x)))
        assert counter(captured) == 0


@pytest.mark.parametrize("variant", [lab.tma(4, 64, chunk=2, tickets=True), lab.tma(3, 64, True, 1, True)],
                         ids=lambda v: v.key)
def test_tiles_come_from_the_counter(stencil, cp, variant):
    """The ticket path really runs: with the counter set to `chunks` before a launch every claim fails and nothing
    is written; set to `chunks - 1`, only the last chunk's tiles are computed. Either way the launch takes
    chunks + grid tickets in all, so the block holding the last one leaves the counter at zero."""
    rows, cols = 300, 128 * 7 + 4  # 5 x 8 tiles of 64 x 128: 40 tiles; rows of 3600 B (TMA needs 16-byte rows)
    x = cp.asarray(np.random.default_rng().standard_normal((rows, cols), dtype=np.float32))
    expected = lab.reference(cp.asnumpy(x))
    strips, th = -(-cols // lab.TILE_W), variant.rows_per_stage
    tiles = lab.tile_count(rows, cols, th)
    chunks = -(-tiles // variant.chunk)
    for start, first_tile in ((chunks, tiles), (chunks - 1, (chunks - 1) * variant.chunk)):
        out = nan_output(variant, (rows, cols), cp)
        counter(stencil.tickets(), start)
        try:
            stencil(variant, x, out)
        finally:  # a counter left non-zero would skip tiles in every later launch on this stream
            got, left = cp.asnumpy(out), counter(stencil.tickets())
            counter(stencil.tickets(), 0)
        done = np.zeros((rows, cols), dtype=bool)
        for t in range(first_tile, tiles):
            r0, c0 = (t // strips) * th, (t % strips) * lab.TILE_W
            done[r0:r0 + th, c0:c0 + lab.TILE_W] = True
        assert np.array_equal(got[done], expected[done]) and np.isnan(got[~done]).all(), (variant.label, start)
        assert left == 0


@pytest.mark.parametrize("variant", lab.TIMELINE_VARIANTS + (lab.tile("mbar", 4), lab.SYNC, lab.tma(3, 32),
                                     lab.tma(3, 64, store=True), lab.tma(4, 32, chunk=4),
                                     lab.tma(3, 64, True, 4, tickets=True), lab.tma(4, 64, chunk=3, tickets=True)),
                         ids=lambda v: v.key)
def test_trace_is_ordered(stencil, cp, variant):
    x = cp.random.default_rng().standard_normal((1024, 1024), dtype=cp.float32)
    out = cp.empty_like(x)
    trace = lab.Trace()
    grid = stencil(variant, x, out, trace=trace)
    rec = trace.records().astype(np.int64)
    done = np.count_nonzero(rec[:, :, 3], axis=1)
    if variant.tickets:  # any block may take any number of tiles; together they take each once
        assert trace.blocks == grid and trace.capacity == lab.tile_count(1024, 1024, variant.rows_per_stage)
        assert done.sum() == trace.capacity
    else:
        counts = lab.stage_counts(variant, 1024, 1024, grid)
        assert trace.blocks == grid and trace.capacity == max(counts)
        assert done.tolist() == counts  # one stamp set per stage, nothing past a block's last stage
    assert (np.count_nonzero(rec[:, :, 1], axis=1) == done).all()  # no stamp for the closing stage
    for block, n in zip(rec, done):
        b = block[:n]
        assert (b[:, 0] > 0).all()
        assert (b[:, 1] <= b[:, 2]).all() and (b[:, 2] <= b[:, 3]).all()  # wait <= ready <= done
        assert (np.diff(b[:, 3]) >= 0).all()  # stages finish in order
        if variant.kind != "sync":
            assert (b[:, 0] <= b[:, 2]).all()  # issued before ready
    assert np.array_equal(cp.asnumpy(out), lab.reference(cp.asnumpy(x)))
    ph = lab.trace_phases(trace.records(), variant.kind != "sync")
    assert ph["block_span_us"] > 0


def test_trace_too_large_is_refused(stencil, cp, monkeypatch):
    x = cp.zeros((1024, 1024), dtype=cp.float32)
    out = cp.empty_like(x)
    monkeypatch.setattr(lab, "TRACE_LIMIT_BYTES", 1 << 16)
    with pytest.raises(LaunchConfigError, match="trace a smaller array"):
        stencil(lab.tma(4, 64, chunk=2, tickets=True), x, out, trace=lab.Trace())


def test_smoke(cp):
    lab.PipelineLab().smoke()
