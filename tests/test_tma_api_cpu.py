"""cuadv.tma's public ops without a GPU: every bad input raises before anything is launched (fake
__cuda_array_interface__ objects), a GPU without TMA gets UnsupportedFeatureError naming the fallback before
anything is compiled, the defaults are the lab's measured best, and the documented example's kernel (which
uses <cuadv/tma.cuh>) compiles for sm_90a and sm_100a."""

import struct

import numpy as np
import pytest

import cuadv.tma as tma
from cuadv.errors import LaunchConfigError, UnsupportedFeatureError
from cuadv.memo import BoundedMemo
from cuadv.tma import ops as tma_ops
from cuadv.tma.params import TMA_PARAMS_BYTES, ThreadTileParams, TmaTileParams

from bad_input.library_fakes import FakeArray, pitched  # the bad-input corpus's fakes (pytest puts tests/ on the path)
from repo_files import load_example


@pytest.fixture
def no_gpu_work(monkeypatch):
    """Any attempt to reach the GPU (capabilities, kernels) fails the test: the checks must come first."""
    def forbidden(*_a, **_k):
        raise AssertionError("reached the GPU before the arguments were checked")

    monkeypatch.setattr(tma_ops, "_device_caps", forbidden)
    monkeypatch.setattr(tma_ops, "_engine", forbidden)


@pytest.fixture
def gpu_without_tma(monkeypatch):
    monkeypatch.setattr(tma_ops, "_device_caps", lambda: {"tma": False, "compute_capability": (8, 6)})

    def forbidden(*_a, **_k):
        raise AssertionError("compiled or launched on a GPU without TMA")

    monkeypatch.setattr(tma_ops, "_engine", forbidden)


OPS = [pytest.param(tma.prepare_copy, id="copy"), pytest.param(tma.prepare_transpose, id="transpose")]


@pytest.mark.parametrize("prepare", OPS)
@pytest.mark.parametrize("src, kw, error, pattern", [
    (np.zeros((16, 16), np.float32), {}, tma.TensorMapError, r"src: cannot describe ndarray: a NumPy array lives in "
                                                             r"host memory"),
    (object(), {}, tma.TensorMapError, r"src: .*neither __cuda_array_interface__ nor __dlpack__"),
    (FakeArray((4, 4, 16)), {}, LaunchConfigError,
     r"src must be a 2-D array \(rows, columns\); got shape \(4, 4, 16\)"),
    (FakeArray((64,)), {}, LaunchConfigError, r"src must be a 2-D array .*got shape \(64,\)"),
    (FakeArray((16, 16), "|i1"), {}, tma.TensorMapError, r"src: TMA has no element type for '\|i1'.*dtype='uint8'"),
    (FakeArray((16, 16), "<f2"), dict(dtype="float32"), tma.TensorMapError,
     r"src: dtype 'float32' is 4 B but the array's elements are 2 B"),
    (FakeArray((100, 61)), {}, tma.TensorMapError, r"src: .*stride 244 B .*pad each row to 64 elements"),
    (pitched(100, 64, address=0x10004), {}, tma.TensorMapError, r"src: .*16-byte aligned; got 0x10004"),
    (FakeArray((64, 64), strides=(512, 8)), {}, tma.TensorMapError, r"src: .*innermost dimension must be contiguous"),
    (pitched(100, 64), dict(box=(300, 32)), tma.TensorMapError, r"src: .*box dimension 0 is 300"),
    (pitched(100, 64), dict(box=(32, 3)), tma.TensorMapError, r"src: .*inner extent must be a multiple of 16 bytes; "
                                                               r"got 3 x 4 B = 12 B"),
    (pitched(100, 64), dict(box=(0, 32)), tma.TensorMapError, r"box dimensions must be 1 to 256; box dimension 0 is 0"),
    (pitched(100, 64), dict(box=(8, 8, 8)), TypeError, r"box must be two integers \(rows, columns\)"),
    (pitched(100, 64), dict(box="big"), TypeError, r"box must be two integers"),
])
def test_bad_src_raises_before_launch(no_gpu_work, prepare, src, kw, error, pattern):
    with pytest.raises(error, match=pattern):
        prepare(src, **kw)


@pytest.mark.parametrize("dst, pattern", [
    (pitched(100, 60), r"tma.copy: dst is float32\(100, 60\), src float32\(100, 64\)"),
    (pitched(100, 64, "<f2"), r"tma.copy: dst is float16\(100, 64\), src float32\(100, 64\)"),
])
def test_copy_dst_mismatch(no_gpu_work, dst, pattern):
    with pytest.raises(LaunchConfigError, match=pattern):
        tma.prepare_copy(pitched(100, 64), dst)


def test_copy_dst_rules(no_gpu_work):
    with pytest.raises(tma.TensorMapError, match=r"dst: .*16-byte aligned; got 0x20008"):
        tma.prepare_copy(pitched(100, 64), pitched(100, 64, address=0x20008))
    with pytest.raises(tma.TensorMapError, match=r"dst: .*stride 244 B"):
        tma.prepare_copy(pitched(100, 61), FakeArray((100, 61)))
    with pytest.raises(tma.TensorMapError, match=r"dst: TMA has no element type for '<i2'"):
        tma.prepare_copy(pitched(100, 64, "<u2"), pitched(100, 64, "<i2"), dtype=None)
    with pytest.raises(TypeError, match="config must be a cuadv.tma.TmaCopyConfig; got dict"):
        tma.prepare_copy(pitched(100, 64), config={"stages": 4})
    with pytest.raises(LaunchConfigError, match="stages must be 2 to 32; got 40"):
        tma.prepare_copy(pitched(100, 64), config=tma.TmaCopyConfig(stages=40))


def test_transpose_rules(no_gpu_work):
    with pytest.raises(LaunchConfigError, match=r"tma.transpose: dst is float32\(100, 64\), expected float32\(64, "
                                                r"100\)"):
        tma.prepare_transpose(pitched(100, 64), pitched(100, 64))
    with pytest.raises(LaunchConfigError, match="transpose supports 1-, 2- and 4-byte elements; got 8-byte float64"):
        tma.prepare_transpose(pitched(100, 64, "<f8"))
    # The transposed box (32 rows x 2 columns) has 8-byte rows: checked on a dst yet to be allocated, too.
    with pytest.raises(tma.TensorMapError, match=r"dst \(the transposed box 32 x 2\): .*inner extent .*8 B"):
        tma.prepare_transpose(pitched(100, 64), box=(2, 32))
    with pytest.raises(tma.TensorMapError, match=r"dst: .*inner extent"):
        tma.prepare_transpose(pitched(100, 64), pitched(64, 100, address=0x20000), box=(2, 32))
    with pytest.raises(tma.TensorMapError, match=r"dst: .*stride 100 B"):
        tma.prepare_transpose(pitched(100, 64, "|u1"), FakeArray((64, 100), "|u1", address=0x20000))


@pytest.mark.parametrize("prepare, name", [(tma.prepare_copy, "cuadv.tma.copy"),
                                           (tma.prepare_transpose, "cuadv.tma.transpose")])
def test_a_gpu_without_tma_gets_the_fallback(gpu_without_tma, prepare, name):
    src = pitched(1, 13)  # a legal array: the feature check is what fails
    with pytest.raises(UnsupportedFeatureError, match=rf"{name} \(TMA bulk tensor copies\) needs compute capability "
                                                      r">= 9.0 \(got 8.6\); fallback: cupy.copyto") as info:
        prepare(src, pitched(13, 1, address=0x20000) if prepare is tma.prepare_transpose else
                pitched(1, 13, address=0x20000))
    assert info.value.fallback and "torch" in info.value.fallback


def test_a_single_dense_row_is_legal(gpu_without_tma):
    # A (1, 13) float32 array reports a 52-byte row stride; with one row TMA never uses it.
    with pytest.raises(UnsupportedFeatureError):
        tma.prepare_copy(FakeArray((1, 13)), FakeArray((1, 13), address=0x20000))


def test_empty_arrays_need_no_gpu(no_gpu_work):
    src, dst = FakeArray((0, 16)), FakeArray((0, 16))
    op = tma.prepare_copy(src, dst)
    assert op.launch is None and op() is dst
    t = tma.prepare_transpose(FakeArray((16, 0)), FakeArray((0, 16)))
    assert t.launch is None and t.dst is not None


def test_defaults_are_the_labs_best_on_the_h200():
    # H200, 2026-12-02: tile 8 x 256, one block per 4 boxes, all 4 loaded at once: 97.4% (the persistent 24-slot
    # ring before it, docs/results/h200-2026-12-01-0920: 92.2%).
    c = tma.BEST_COPY_CONFIG
    assert (c.stages, c.lookahead, c.blocks_per_sm, c.chunk, c.burst, c.l2_promotion, c.evict_first, c.persistent) == \
        (4, 4, None, 4, 4, "128B", "none", False)
    assert tma.default_copy_box(4) == (8, 256) and tma.default_copy_box(2) == (16, 256)
    assert tma.default_copy_box(1) == (32, 256) and tma.default_copy_box(8) == (4, 256)
    assert c.shared_bytes(8 * 256 * 4) <= 232448  # an H200 block's opt-in shared memory
    # Best transpose: tile 256 x 32 (83.1%); 64 x 64 where that does not fit. Same bytes for narrower types.
    assert tma.default_transpose_boxes(4) == ((256, 32), (64, 64))
    assert tma.default_transpose_boxes(2) == ((256, 64), (64, 128))
    assert tma.default_transpose_boxes(1) == ((256, 128), (64, 256))


def test_parameter_structs_are_the_bytes_the_kernels_read():
    class Map:
        def __init__(self, fill):
            self.fill = fill

        def kernel_param_bytes(self):
            return bytes([self.fill]) * 128

    b = TmaTileParams(Map(1), Map(2), 3, 4, 64, 32, 2**32 - 1, 4, 3, 5, 2, 6).kernel_param_bytes()
    tail = struct.pack("<iiiiIiiiii", 3, 4, 64, 32, 2**32 - 1, 4, 3, 5, 2, 6)
    assert b == bytes([1]) * 128 + bytes([2]) * 128 + tail + bytes(TMA_PARAMS_BYTES - 296)
    t = ThreadTileParams(2**40, 2**41, 7, 13, 64, 16, 4, 64, 8, 1, 1, 3).kernel_param_bytes()
    assert t == struct.pack("<QQqqqqiiiiii", 2**40, 2**41, 7, 13, 64, 16, 4, 64, 8, 1, 1, 3)


def test_public_names():
    for name in tma.__all__:
        assert getattr(tma, name) is not None, name
    # The names the pipeline lab imports from the tensor-map module stay there.
    from cuadv.tma.tensormap import TensorMap, TensorMapError, TiledLayout, describe_array, pitch_elements  # noqa


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_examples_user_kernel_compiles_with_the_header(arch):
    module = load_example("tma_copy_transpose").build(arch)
    res = module.resources_for("scale_boxes")
    assert res.spill_store_bytes == 0 and res.stack_bytes == 0
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in module.ptx


def test_a_grid_of_one_block_per_unit_takes_no_blocks_per_sm():
    from cuadv.errors import LaunchConfigError

    with pytest.raises(LaunchConfigError, match="persistent=False"):
        tma.TmaCopyConfig(stages=4, chunk=4, blocks_per_sm=1, persistent=False)


def test_one_shot_launch_keys_name_every_input_of_the_checks():
    """A kept launch is reused only for the same op, arrays (address, shape, strides, type, read-only flag) and
    options; calls without a dst, or with options that are not plain values, are not kept."""
    ops = tma_ops
    src, dst = pitched(64, 64), pitched(64, 64, address=0x200000)
    key = ops._launch_key("copy", src, dst, {"box": [8, 256], "dtype": None, "config": None})
    assert key == ops._launch_key("copy", src, dst, {"box": (8, 256), "dtype": None, "config": None})
    others = [ops._launch_key("transpose", src, dst, {"box": [8, 256]}),
              ops._launch_key("copy", src, pitched(64, 64, address=0x200000, readonly=True), {"box": [8, 256]}),
              ops._launch_key("copy", src, pitched(64, 60, address=0x200000), {"box": [8, 256]}),
              ops._launch_key("copy", src, pitched(64, 64, "<i4", address=0x200000), {"box": [8, 256]}),
              ops._launch_key("copy", src, dst, {"box": (16, 16)}),
              ops._launch_key("copy", src, dst, {"box": [8, 256], "dtype": "float32"}),
              ops._launch_key("copy", src, dst, {"box": [8, 256], "config": tma.TmaCopyConfig(stages=2)})]
    assert key is not None and key not in others and len(set(others)) == len(others)
    assert ops._launch_key("copy", src, None, {}) is None
    assert ops._launch_key("copy", src, dst, {"config": {"stages": 2}}) is None
    assert ops._launch_key("copy", src, dst, {"dtype": ["float32"]}) is None
    assert ops._launch_key("copy", src, np.zeros((4, 4), np.float32), {}) is None


@pytest.mark.parametrize("box", [(8.0, 256), (True, 256), iter((8, 256))], ids=["float", "bool", "iterator"])
def test_a_one_shot_box_is_read_once_and_as_the_constructor_reads_it(monkeypatch, box):
    """With (8, 256) kept for these arrays, a box of floats or bools still raises as the prepared op does (no GPU is
    reached: the check comes first), and a one-use iterator of (8, 256) is read once and finds the kept launch."""
    src, dst = pitched(64, 64), pitched(64, 64, address=0x200000)
    options = {"box": (8, 256), "dtype": None, "config": None}
    kept = BoundedMemo(tma_ops.KEPT_LAUNCHES_MAX)
    kept.put(tma_ops._launch_key("copy", src, dst, options), (None, b""))
    monkeypatch.setattr(tma_ops, "_KEPT_LAUNCHES", kept)
    if isinstance(box, tuple):
        with pytest.raises(TypeError, match="box must be two integers"):
            tma.copy(src, dst, box=box)
    else:
        assert tma.copy(src, dst, box=box) is dst  # the kept launch (None: nothing to launch) was found


@pytest.mark.parametrize("prepare", OPS)
@pytest.mark.parametrize("shape", [(1, 2**31 + 256), (2**31 + 8, 16)], ids=["columns", "rows"])
def test_extents_past_the_32_bit_tma_coordinates_raise_before_the_gpu(no_gpu_work, prepare, shape):
    """TMA's box coordinates (x = tile * box_w in the kernels) are 32-bit signed: a dimension over 2^31 elements
    passes every tensor-map rule (the driver takes up to 2^32) but would wrap to negative coordinates."""
    with pytest.raises(LaunchConfigError, match=r"src: .*32-bit signed TMA coordinates.*at most 2\^31"):
        prepare(FakeArray(shape, "|u1"))
    tma.prepare_copy(FakeArray((0, 2**31 + 256), "|u1"), FakeArray((0, 2**31 + 256), "|u1", address=0x20000))


def test_a_single_row_may_report_any_row_stride(gpu_without_tma):
    # A new axis reports a 0 stride (NumPy's convention, followed by DLPack producers): one row, never stepped over.
    for stride in (0, -64):
        with pytest.raises(UnsupportedFeatureError):
            tma.prepare_copy(FakeArray((1, 13), strides=(stride, 4)), FakeArray((1, 13), address=0x20000))


def test_element_strides_rules_and_box_bytes():
    """TMA loads ceil(box / element stride) elements along a dimension, and ignores the innermost dimension's
    element stride (interleave none): so box_bytes counts the former and a stride there is refused."""
    lay = tma.TiledLayout(0x10000, "float32", (64, 64), (256, 4), (64, 32), element_strides=(3, 1))
    assert lay.box_bytes == 22 * 32 * 4
    assert tma.TiledLayout(0x10000, "float32", (64, 64), (256, 4), (64, 32)).box_bytes == 64 * 32 * 4
    with pytest.raises(tma.TensorMapError, match=r"innermost dimension's element stride must be 1 .*; got 2"):
        tma.TiledLayout(0x10000, "float32", (64, 64), (256, 4), (64, 32), element_strides=(1, 2))
