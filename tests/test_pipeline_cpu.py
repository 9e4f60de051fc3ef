"""The stencil pipeline lab without a GPU: the NumPy reference, variants, parameter layout, copy alignment,
compilation for sm_90a and sm_100a (no spills, cp.async in the pipelined kernels), trace analysis and plot."""


import numpy as np
import pytest
from sass_tools import sass_ops

from cuadv.errors import LaunchConfigError
from cuadv.labs import pipeline as lab



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
    assert [v.expression(16) for v in lab.VARIANTS] == [
        "stencil_sync<16>", "stencil_pipeline_thread<2, 16>", "stencil_pipeline_block<2, 16>",
        "stencil_pipeline_thread<4, 16>", "stencil_pipeline_block<4, 16>", "stencil_pipeline_block<8, 16>"]
    assert lab.Variant("block", 4).shared_bytes == 4 * lab.STAGE_BYTES == 4 * 18 * 136 * 4
    with pytest.raises(ValueError, match="2 to 8 stages"):
        lab.Variant("block", 9)
    with pytest.raises(ValueError, match="exactly one buffer"):
        lab.Variant("sync", 2)
    with pytest.raises(ValueError, match="sync, thread or block"):
        lab.Variant("warp", 2)


def test_params_layout():
    b = lab.StencilParams(1, 2, 3, 4, 5, 6, 0.5, 0.125, 7, 8).kernel_param_bytes()
    assert len(b) == lab.PARAMS_BYTES == 72
    assert np.frombuffer(b[48:56], np.float32).tolist() == [0.5, 0.125]
    assert int.from_bytes(b[56:64], "little") == 7 and int.from_bytes(b[64:68], "little") == 8


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


@pytest.fixture(scope="module", params=["sm_90a", "sm_100a"])
def module(request):
    return lab.PipelineLab().build(request.param)[0]


def test_compiles_without_spills(module):
    for expr in lab.stencil_expressions():
        res = module.resources_for(expr)
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_bytes == 0, (module.arch, res)
        assert res.registers <= 255


def test_pipelined_kernels_use_cp_async(module, tmp_path):
    ops = sass_ops(module.cubin, tmp_path)
    low = module.lowered_names
    for v in lab.VARIANTS:
        for align in lab.ALIGNS:
            got = ops[low[v.expression(align)]]
            has_cp_async = any(o.startswith("LDGSTS") for o in got)
            assert has_cp_async == (v.kind != "sync"), (v, align)
            bypass_16 = any(o.startswith("LDGSTS") and ".128" in o for o in got)
            assert bypass_16 == (v.kind != "sync" and align == 16), (v, align, sorted(got))


def test_trace_phases():
    # One block, 4 tiles, 2 stages: issued, wait, ready, done (ns).
    rec = np.zeros((2, 5, 4), dtype=np.uint64)
    rec[0, :4] = [[0, 100, 1000, 2000], [500, 2000, 2100, 3000], [2050, 3000, 3500, 4000], [3050, 4000, 4200, 5000]]
    ph = lab.trace_phases(rec, stages=2)
    assert ph["fill_us"] == 1.0 and ph["drain_us"] == pytest.approx(1.95) and ph["block_span_us"] == 5.0
    assert ph["stall_us"] == pytest.approx(0.35)


def test_timeline_plot(tmp_path):
    rec = np.zeros((4, 6, 4), dtype=np.uint64)
    for b in range(4):
        for k in range(6):
            rec[b, k] = [1000 + k * 900, 1200 + k * 1000, 1500 + k * 1000, 2400 + k * 1000]
    path = tmp_path / "t.png"
    lab.plot_timeline({"a": (rec, 4), "sync": (rec, 1)}, path, "test")
    assert path.stat().st_size > 1000
