"""The stencil pipeline lab without a GPU: the NumPy reference, variants, parameter layout, copy alignment, the
strip split and stream (a Python model of pipeline.cu's Stream), compilation for sm_90a and sm_100a (no spills,
cp.async and 16-byte stores where they belong, TMA loads and no cp.async in the tma kernels, no
cp.async.mbarrier.arrive without .noinc), the TMA rules and other errors raised before launch, trace analysis and
plot."""

import re

import numpy as np
import pytest
from sass_tools import sass_ops

from cuadv.compiler import kernel_source
from cuadv.errors import LaunchConfigError
from cuadv.labs import pipeline as lab
from cuadv.memo import BoundedMemo


class FakeArray:
    def __init__(self, shape, typestr="<f4", strides=None, address=0x10000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (address, False), "version": 3}


def loop_reference(x: np.ndarray) -> np.ndarray:
    """Element by element, float32 rounding after every operation, zero outside the array."""
    rows, cols = x.shape
    f = np.float32
    get = lambda i, j: x[i, j] if 0 <= i < rows and 0 <= j < cols else f(0)  # noqa: E731
    out = np.empty_like(x)
    for i in range(rows):
        for j in range(cols):
            s = f(f(f(get(i - 1, j) + get(i + 1, j)) + get(i, j - 1)) + get(i, j + 1))
            out[i, j] = f(f(lab.C_CENTER * x[i, j]) + f(lab.C_NEIGHBOUR * s))
    return out


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (5, 1), (7, 9)])
def test_reference_matches_the_kernels_order(shape):
    x = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    assert np.array_equal(lab.reference(x), loop_reference(x))


def test_variants():
    assert [v.expression(16) for v in lab.TILE_VARIANTS if v.kind != "tma"] == [
        "stencil_tile_sync<16>", "stencil_tile_thread<2, 16>", "stencil_tile_thread<4, 16>",
        "stencil_tile_mbar<4, 16>"]
    assert {v.expression(16) for v in lab.TILE_VARIANTS if v.kind == "tma"} == {
        f"stencil_tile_tma<{s}, {th}, false>" for s in (3, 4, 6) for th in (16, 32)} | {
        "stencil_tile_tma<3, 64, false>", "stencil_tile_tma<4, 64, false>", "stencil_tile_tma<4, 32, true>",
        "stencil_tile_tma<3, 64, true>", "stencil_tile_tma<4, 64, true>"}  # chunk is a parameter, not a kernel
    assert lab.strip("mbar", 512, 8, 4).expression(4) == "stencil_strip_mbar<512, 8, 4, 4>"
    assert lab.strip("sync", 1024, 4).expression(16) == "stencil_strip_sync<1024, 4, 16>"
    assert lab.tile("mbar", 4).shared_bytes == 4 * lab.STAGE_BYTES == 4 * 18 * 136 * 4
    assert lab.strip("mbar", 512, 8, 4).shared_bytes == 4 * 8 * 520 * 4
    assert lab.strip("mbar", 512, 8, 4, blocks_per_sm=2).key == "strip_mbar4_w512r8_b2"
    assert lab.tile("thread", 2).key == "tile_thread2"
    assert len(set(v.key for v in lab.VARIANTS)) == len(lab.VARIANTS)
    assert len(set(v.label for v in lab.VARIANTS)) == len(lab.VARIANTS)
    # every blocks_per_sm variant shares its kernel with another one: no extra compile
    assert len(lab.stencil_expressions()) == len({v.expression(a) for v in lab.VARIANTS for a in lab.ALIGNS})
    assert set(lab.TIMELINE_VARIANTS) <= set(lab.VARIANTS)


@pytest.mark.parametrize("make, match", [
    (lambda: lab.tile("mbar", 9), "2 to 8 stages"),
    (lambda: lab.tile("sync", 3), "exactly 2 buffers"),
    (lambda: lab.strip("sync", 512, 8, 4), "exactly 3 buffers"),
    (lambda: lab.strip("mbar", 512, 8, 2), "3 to 8 stages"),
    (lambda: lab.Variant("tile", "warp", 2), "sync, thread or mbar"),
    (lambda: lab.Variant("diagonal", "mbar", 4), "tile or strip"),
    (lambda: lab.strip("mbar", 384, 8, 4), "strip width"),
    (lambda: lab.strip("mbar", 256, 6, 4), "multiple of 4"),
    (lambda: lab.strip("mbar", 1024, 1, 4), ">= 2"),
    (lambda: lab.Variant("tile", "mbar", 4, width=256), "tiles are 16 x 128"),
    (lambda: lab.strip("mbar", 512, 8, 4, blocks_per_sm=-1), "blocks per SM"),
    (lambda: lab.Variant("tile", "mbar", 4, rows_per_stage=32), "tiles are 16 x 128"),  # 32 rows: tma only
    (lambda: lab.tma(4, 8), "TMA tiles are 16, 32 or 64 rows x 128"),
    (lambda: lab.tma(4, 128), "TMA tiles are 16, 32 or 64 rows x 128"),
    (lambda: lab.Variant("tile", "tma", 4, width=256), "TMA tiles are 16, 32 or 64 rows x 128"),
    (lambda: lab.Variant("strip", "tma", 4, 512, 8), "TMA pipeline stages tiles"),
    (lambda: lab.tma(9), "2 to 8 stages"),
    (lambda: lab.tma(1, 32), "2 to 8 stages"),
    (lambda: lab.Variant("tile", "mbar", 4, tma_store=True), "TMA stores belong to the tma pipeline"),
    (lambda: lab.Variant("tile", "mbar", 4, chunk=2), "chunks of 1 to 64 tiles belong to the tma pipeline"),
    (lambda: lab.tma(4, 16, chunk=0), "chunks of 1 to 64 tiles"),
    (lambda: lab.Variant("tile", "mbar", 4, tickets=True), "ticket claims belong to the tma pipeline"),
])
def test_variant_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_params_layout():
    b = lab.StencilParams(1, 2, 3, 4, 5, 6, 0.5, 0.125, 7, 8, lab.OUT_VEC16).kernel_param_bytes()
    assert len(b) == lab.PARAMS_BYTES == 72
    assert np.frombuffer(b[48:56], np.float32).tolist() == [0.5, 0.125]
    assert int.from_bytes(b[56:64], "little") == 7 and int.from_bytes(b[64:68], "little") == 8
    assert int.from_bytes(b[68:72], "little") == 1


class FakeMap:
    def kernel_param_bytes(self):
        return bytes(range(128))


class FakeOutMap:
    def kernel_param_bytes(self):
        return bytes(range(128, 256))


def test_tma_params_layout():
    """StencilParams first (unchanged), the 64-byte-aligned input tensor map at offset 128, the output's at 256
    (zeros without TMA stores; static_assert in pipeline.cu)."""
    params = lab.StencilParams(1, 2, 3, 4, 5, 6, 0.5, 0.125, 7, 8, lab.OUT_VEC16)
    b = lab.StencilTmaParams(params, FakeMap()).kernel_param_bytes()
    assert len(b) == lab.TMA_PARAMS_BYTES == 384 and lab.TMA_MAP_OFFSET == 128
    assert b[:72] == params.kernel_param_bytes() and b[76:128] == bytes(52)  # no ticket counter: static split
    assert b[128:256] == bytes(range(128)) and b[256:] == bytes(128)
    assert lab.StencilTmaParams(params, FakeMap(), FakeOutMap()).kernel_param_bytes()[256:] == bytes(range(128, 256))
    assert b[72:76] == (1).to_bytes(4, "little")  # chunk: tiles a block takes at a time
    assert lab.StencilTmaParams(params, FakeMap(), chunk=8).kernel_param_bytes()[72:76] == (8).to_bytes(4, "little")
    with_tickets = lab.StencilTmaParams(params, FakeMap(), chunk=2, tickets=0x1234_5678_9A).kernel_param_bytes()
    assert len(with_tickets) == 384 and with_tickets[80:88] == (0x1234_5678_9A).to_bytes(8, "little")
    assert with_tickets[:80] == b[:72] + (2).to_bytes(4, "little") + bytes(4) and with_tickets[88:] == b[88:]
    assert "chunk 72, tickets 80" in kernel_source("pipeline.cu")
    assert "sizeof(StencilTmaParams) == 384" in kernel_source("pipeline.cu")


def test_tma_variants():
    v = lab.tma(4, 32)
    assert v.layout == "tile" and v.reuse == 1 and lab.tma(4) == lab.tma(4, 16)
    assert v.label == "tile 32x128: 4-stage TMA pipeline, block scope"
    assert lab.tma(6).label == "tile 16x128: 6-stage TMA pipeline, block scope"
    assert v.key == "tile_tma4_r32" and lab.tma(3).key == "tile_tma3_r16"
    assert v.expression(16) == v.expression(4) == "stencil_tile_tma<4, 32, false>"  # one kernel: TMA needs 16 anyway
    st = lab.tma(3, 64, store=True)
    assert st.label == "tile 64x128: 3-stage TMA pipeline, block scope, TMA stores" and st.key == "tile_tma3_r64_st"
    assert st.expression(16) == "stencil_tile_tma<3, 64, true>"
    assert st.shared_bytes == lab.tma(3, 64).shared_bytes + 2 * 64 * 128 * 4  # two staged output tiles
    assert lab.tma(4).box_bytes == 18 * 136 * 4 and v.box_bytes == 34 * 136 * 4 and v.box_bytes % 16 == 0
    assert lab.tma(4).shared_bytes == 4 * 9856 + 128  # 9,792 B boxes in 128-byte aligned slots, + ring alignment
    assert v.shared_bytes == 4 * 18560 + 128
    assert max(t.shared_bytes for t in lab.VARIANTS if t.kind == "tma") <= 227 * 1024  # H200 / B200 opt-in limit
    assert lab.tma(4, 16).label in {t.label for t in lab.TILE_VARIANTS}  # the tile labels keep their shape
    assert lab.SYNC.label == "tile 16x128: sync (plain loads)"


def test_tma_variants_need_sm90():
    assert all(v.kind != "tma" for v in lab.variants_for("sm_80"))
    assert not any("tma" in e for e in lab.stencil_expressions("sm_80"))
    assert lab.variants_for("sm_90a") == lab.variants_for("sm_100a") == lab.VARIANTS
    assert lab.stencil_expressions() == lab.stencil_expressions("sm_100a")


def test_builds_for_sm80_without_the_tma_kernels():
    module = lab.PipelineLab().build("sm_80")[0]
    assert set(module.lowered_names) == set(lab.stencil_expressions("sm_80"))
    assert "cp.async.bulk" not in module.ptx


def test_tma_layout_is_the_tile_with_its_halo():
    layout = lab.tma_layout(lab.tma(4, 32), lab.Grid2D.of(FakeArray((100, 7), strides=(32, 4)), "x"))
    assert layout.box == (34, 136) and layout.box_bytes == lab.tma(4, 32).box_bytes
    assert layout.oob_fill == "zero" and layout.swizzle == "none"
    args = layout.driver_arguments()
    assert args["global_dim"] == (7, 100) and args["global_strides"] == (32,) and args["box_dim"] == (136, 34)


def test_copy_alignment_is_what_the_array_guarantees():
    assert lab.Grid2D.of(FakeArray((10, 8)), "x").copy_alignment == 16
    assert lab.Grid2D.of(FakeArray((10, 7)), "x").copy_alignment == 4  # 28-byte rows
    assert lab.Grid2D.of(FakeArray((10, 7), strides=(32, 4)), "x").copy_alignment == 16  # pitched
    assert lab.Grid2D.of(FakeArray((10, 8), address=0x10004), "x").copy_alignment == 4  # base off by 4
    with pytest.raises(LaunchConfigError, match="2-D float32"):
        lab.Grid2D.of(FakeArray((10, 8), "<f2"), "x")
    with pytest.raises(LaunchConfigError, match="contiguous rows"):
        lab.Grid2D.of(FakeArray((10, 8), strides=(64, 8)), "x")


def test_tile_count():
    assert lab.tile_count(0, 5) == 0 and lab.tile_count(1, 1) == 1
    assert lab.tile_count(16, 128) == 1 and lab.tile_count(17, 129) == 4


# A Python model of strip::Stream and strip::Cursor in pipeline.cu: (pos, strip, row, q, len).
class StreamModel:
    def __init__(self, rows, cols, width, block, grid):
        work = -(-cols // width) * rows
        w0, self.w1 = work * block // grid, work * (block + 1) // grid
        self.rows = rows
        self.s0 = w0 // rows
        self.r0 = w0 - self.s0 * rows
        self.len0 = min(self.w1, (self.s0 + 1) * rows) - w0
        runs = (self.w1 - 1) // rows - self.s0 + 1 if self.w1 > w0 else 0
        self.total = (self.w1 - w0) + 2 * runs

    def run_length(self, strip):
        return min(self.w1 - strip * self.rows, self.rows)

    def at(self, pos):
        if pos < self.len0 + 2:
            return [pos, self.s0, self.r0 - 1 + pos, pos, self.len0]
        after = pos - (self.len0 + 2)
        j, q = divmod(after, self.rows + 2)
        strip = self.s0 + 1 + j
        return [pos, strip, q - 1, q, self.run_length(strip)]

    def next(self, c):
        c = [c[0] + 1, c[1], c[2] + 1, c[3] + 1, c[4]]
        if c[3] > c[4] + 1:
            c[1] += 1
            c[2], c[3], c[4] = -1, 0, self.run_length(c[1])
        return c


@pytest.mark.parametrize("rows, cols, width, grid", [
    (1, 1, 512, 1), (7, 1, 256, 1), (1, 5000, 256, 2), (33, 300, 256, 8), (129, 257, 256, 32), (35, 2100, 512, 9),
    (12, 4, 1024, 1), (1000, 1001, 512, 125), (16384, 16383, 512, 396), (5, 20000, 1024, 12),
])
def test_strip_stream_model(rows, cols, width, grid):
    """Every (strip, row) pair is output exactly once, by one block, with its neighbours in the same run; next()
    agrees with at(); the stage counts match."""
    strips = -(-cols // width)
    seen = np.zeros((strips, rows), dtype=np.int32)
    counts = lab.stage_counts(lab.strip("mbar", width, 8, 4), rows, cols, grid)
    for b in range(grid):
        s = StreamModel(rows, cols, width, b, grid)
        assert counts[b] == -(-s.total // 8)
        if s.total == 0:
            continue
        c = s.at(0)
        walked = [c]
        for pos in range(1, s.total):
            c = s.next(c)
            walked.append(c)
        if s.total < 5000:  # at() for every position (cheap enough on the small cases)
            assert walked == [s.at(p) for p in range(s.total)]
        else:
            assert all(walked[p] == s.at(p) for p in range(0, s.total, 97))
        for p, (pos, strip, row, q, length) in enumerate(walked):
            if 1 <= q <= length:  # an output position
                assert 0 <= row < rows and 0 <= strip < strips
                seen[strip, row] += 1
                above, below = walked[p - 1], walked[p + 1]  # never outside the stream
                assert (above[1], above[2]) == (strip, row - 1) and (below[1], below[2]) == (strip, row + 1)
        assert not (1 <= walked[0][3] <= walked[0][4]) and not (1 <= walked[-1][3] <= walked[-1][4])
    assert (seen == 1).all()


def test_stage_counts_tile():
    assert lab.stage_counts(lab.SYNC, 33, 300, 4) == [3, 2, 2, 2]  # 9 tiles over 4 blocks
    assert sum(lab.stage_counts(lab.SYNC, 1000, 1001, 7)) == lab.tile_count(1000, 1001)
    assert lab.stage_counts(lab.tma(4, 16), 33, 300, 4) == [3, 2, 2, 2]
    assert lab.stage_counts(lab.tma(4, 32), 33, 300, 4) == [2, 2, 1, 1]  # 2 x 3 tiles of 32 x 128
    assert lab.tile_count(64, 129, 32) == 4 and lab.tile_count(65, 128, 32) == 3
    # chunks of 4 of the 9 tiles: 0-3, 4-7, 8 dealt to blocks 0, 1, 2, 0, ...
    assert lab.stage_counts(lab.tma(4, 16, chunk=4), 33, 300, 2) == [5, 4]
    assert lab.stage_counts(lab.tma(4, 16, chunk=4), 33, 300, 3) == [4, 4, 1]
    for grid in range(1, 12):
        assert sum(lab.stage_counts(lab.tma(4, 16, chunk=4), 1000, 1001, grid)) == lab.tile_count(1000, 1001)


@pytest.fixture(scope="module", params=["sm_90a", "sm_100a"])
def module(request):
    return lab.PipelineLab().build(request.param)[0]


def test_compiles_without_spills(module):
    for expr in lab.stencil_expressions():
        res = module.resources_for(expr)
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_bytes == 0, (module.arch, res)
        assert res.registers <= 255
        if expr.startswith("stencil_strip"):
            assert res.registers <= 64, (module.arch, res)  # __launch_bounds__(256, 4): 4 blocks fit by registers


def test_kernels_use_the_copies_and_stores_they_claim(module, tmp_path):
    ops = sass_ops(module.cubin, tmp_path)
    low = module.lowered_names
    for v in lab.VARIANTS:
        for align in lab.ALIGNS:
            got = ops[low[v.expression(align)]]
            if v.kind == "tma":  # TMA box loads, no cp.async, 16-byte stores where the output allows them
                assert "UTMALDG.2D" in got and not any(o.startswith("LDGSTS") for o in got), (v, sorted(got))
                assert any(o.startswith("LDS") and ".128" in o for o in got), (v, sorted(got))
                if v.tma_store:  # the tile is staged in shared memory and leaves by TMA stores (STG: trace stamps)
                    assert "UTMASTG.2D" in got and not any(o.startswith("STG") and ".128" in o for o in got), v
                    assert any(o.startswith("STS") and ".128" in o for o in got), (v, sorted(got))
                else:
                    assert any(o.startswith("STG") and ".128" in o for o in got), (v, sorted(got))
                continue
            has_cp_async = any(o.startswith("LDGSTS") for o in got)
            assert has_cp_async == (v.kind != "sync"), (v, align)
            bypass_16 = any(o.startswith("LDGSTS") and ".128" in o for o in got)
            assert bypass_16 == (v.kind != "sync" and align == 16), (v, align, sorted(got))
            if v.layout == "strip":  # 16-byte output stores where the output allows them
                assert any(o.startswith("STG") and ".128" in o for o in got), (v, align, sorted(got))


def test_mbarrier_pipeline_arrives_once_per_phase(module):
    """The fix for synccheck's 'Missing wait': no cp.async.mbarrier.arrive without .noinc anywhere, and the block
    pipelines use no libcu++ block-scope cuda::pipeline."""
    arrives = re.findall(r"cp\.async\.mbarrier\.arrive[\w.:]*", module.ptx)
    assert arrives and all(".noinc" in a for a in arrives), set(arrives)
    assert "pipeline_shared_state" not in kernel_source("pipeline.cu")


def test_launch_errors_before_any_gpu_call(module):
    stencil = lab.Stencil.__new__(lab.Stencil)  # no compile: the checks run before a kernel is looked up
    stencil._fit, stencil._pieces = {}, BoundedMemo(8)
    with pytest.raises(LaunchConfigError, match="out has shape"):
        stencil(lab.SYNC, FakeArray((4, 8)), FakeArray((4, 9), address=0x20000))
    with pytest.raises(LaunchConfigError, match="cannot run in place"):
        stencil(lab.SYNC, FakeArray((4, 8)), FakeArray((4, 8), address=0x10000 + 64))
    with pytest.raises(LaunchConfigError, match="32 bits"):
        stencil(lab.strip("mbar", 512, 8, 4), FakeArray((1 << 31, 1)), FakeArray((1 << 31, 1), address=1 << 40))
    assert stencil(lab.SYNC, FakeArray((0, 8)), FakeArray((0, 8))) == 0  # empty: nothing launched
    assert stencil(lab.tma(4), FakeArray((0, 8)), FakeArray((0, 8))) == 0


@pytest.mark.parametrize("x, match", [
    (FakeArray((10, 8), address=0x10004), "global address must be 16-byte aligned"),
    (FakeArray((10, 7)), "strides must be multiples of 16 bytes"),  # 28-byte rows
    (FakeArray((10, 7), strides=(36, 4)), "strides must be multiples of 16 bytes"),
    (FakeArray((2, 4), strides=(1 << 40, 4)), "below 2\\^40"),
    (FakeArray((4, (1 << 31) + 4)), "32-bit signed"),
    (FakeArray(((1 << 31) + 1, 4)), "32-bit signed"),
])
def test_tma_rules_refused_before_any_gpu_call(x, match):
    """A tma variant never launches a TMA the rules forbid: LaunchConfigError naming the rule and the fallback."""
    stencil = lab.Stencil.__new__(lab.Stencil)  # no compile: the checks run before a kernel is looked up
    stencil._fit, stencil._pieces = {}, BoundedMemo(8)
    for variant in (lab.tma(4, 16), lab.tma(3, 32)):
        with pytest.raises(LaunchConfigError, match=match) as err:
            stencil(variant, x, FakeArray(x.__cuda_array_interface__["shape"], address=1 << 50))
        assert "fallback: the thread or mbar variants" in str(err.value) and variant.label in str(err.value)


@pytest.mark.parametrize("out, match", [
    (FakeArray((10, 8), address=(1 << 50) + 4), "base and row pitch are 16-byte aligned"),
    (FakeArray((10, 7), address=1 << 50), "base and row pitch are 16-byte aligned"),  # 28-byte rows
])
def test_tma_store_rules_refused_before_any_gpu_call(out, match):
    """A TMA-store variant refuses an output TMA cannot write, naming the fallback; the input is fine."""
    stencil = lab.Stencil.__new__(lab.Stencil)
    stencil._fit, stencil._pieces = {}, BoundedMemo(8)
    x = FakeArray(out.__cuda_array_interface__["shape"], strides=(32, 4))
    with pytest.raises(LaunchConfigError, match=match) as err:
        stencil(lab.tma(4, 32, store=True), x, out)
    assert "fallback: the same tma variant without TMA stores" in str(err.value)


def test_trace_phases():
    # One block, 4 stages: issued, wait, ready, done (ns).
    rec = np.zeros((2, 5, 4), dtype=np.uint64)
    rec[0, :4] = [[0, 100, 1000, 2000], [500, 2000, 2100, 3000], [2050, 3000, 3500, 4000], [3050, 4000, 4200, 5000]]
    ph = lab.trace_phases(rec, pipelined=True)
    assert ph["fill_us"] == 1.0 and ph["drain_us"] == pytest.approx(1.95) and ph["block_span_us"] == 5.0
    assert ph["stall_us"] == pytest.approx(0.35)
    assert lab.trace_phases(rec, pipelined=False)["drain_us"] == 0


def test_timeline_plot(tmp_path):
    rec = np.zeros((4, 6, 4), dtype=np.uint64)
    for b in range(4):
        for k in range(6):
            rec[b, k] = [1000 + k * 900, 1200 + k * 1000, 1500 + k * 1000, 2400 + k * 1000]
    path = tmp_path / "t.png"
    lab.plot_timeline({"a": (rec, 4, True), "sync": (rec, 3, False)}, path, "test")
    assert path.stat().st_size > 1000


def test_summary_picks_the_best_by_measurement():
    from cuadv.report.results import LabResult

    result = LabResult("pipeline", "t")
    pcts = {lab.SYNC: 60.0, lab.strip("sync", 512, 8): 75.0, lab.tile("thread", 2): 70.0,
            lab.strip("mbar", 512, 8, 4): 88.0, lab.strip("mbar", 1024, 4, 4): 86.0}
    for v, pct in pcts.items():
        result.figures[f"pipeline_{v.key}_16384x16384_pct_ceiling"] = pct
        result.figures[f"pipeline_{v.key}_16384x16384_x_sync"] = pct / 75.0
    result.figures["pipeline_cupy_16384x16384_pct_ceiling"] = 40.0
    lab.PipelineLab()._summary(result, measured_at="16384x16384")
    assert result.figures["pipeline_best_pct_ceiling"] == 88.0
    assert result.figures["pipeline_best_sync_pct_ceiling"] == 75.0
    assert result.figures["pipeline_best_x_sync"] == pytest.approx(88.0 / 75.0)
    assert "strip 512 cols x 8 rows: 4-stage mbarrier pipeline" in result.notes[-1] and "2.20x CuPy" in result.notes[-1]


def test_one_row_needs_no_pitch_for_tma():
    """A single row's stride is never used, so a 1 x 7 array (28-byte 'pitch') is TMA-loadable; its tensor map
    gets the row rounded up to 16 bytes."""
    g = lab.Grid2D.of(FakeArray((1, 7)), "x")
    assert g.tma_loadable and g.copy_alignment == 4
    assert lab.tma_layout(lab.tma(4), g).strides[0] == 32
    assert not lab.Grid2D.of(FakeArray((2, 7)), "x").tma_loadable
    assert not lab.Grid2D.of(FakeArray((1, 8), address=0x10004), "x").tma_loadable


def test_variant_kernels_are_refused_before_loading():
    """A tma variant on a build without TMA names sm_90; one whose kernel was never built says so (neither loads
    anything, so no GPU is needed)."""
    with pytest.raises(LaunchConfigError, match="needs sm_90 \\(TMA\\); built for sm_80"):
        lab.Stencil("sm_80").kernel(lab.tma(4, 16), 16)
    with pytest.raises(LaunchConfigError, match="stencil_tile_tma<5, 16, false> is not among those built"):
        lab.Stencil("sm_90a").kernel(lab.tma(5, 16), 16)
