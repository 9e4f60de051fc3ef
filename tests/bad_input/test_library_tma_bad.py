"""cuadv.tma: tensor maps, copy, transpose and their prepared forms. Each mistake (a TMA rule broken: rank, box,
strides, alignment, element type, swizzle, fill; a dst that does not match, is read-only or overlaps src; a bad
ring configuration) raises, naming the rule, the value and the limit, before the driver or a kernel is reached.
The cases of tests/test_tma_api_cpu.py and tests/test_tma_cpu.py are not repeated here."""

import numpy as np
import pytest

import cuadv.tma as tma
from cuadv.errors import KernelArgumentError, LaunchConfigError, UnsupportedFeatureError
from cuadv.tma import ops as tma_ops
from cuadv.tma import tensormap

from .library_fakes import A100, FakeArray, forbid, pitched

SRC, DST = 0x10000, 0x200000  # SRC: where pitched() puts an array


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    forbid(monkeypatch, tensormap, "_encode_tiled")
    forbid(monkeypatch, tma_ops, "_device_caps", "_engine")


def layout(shape=(64, 64), strides=None, box=(16, 16), dtype="float32", address=SRC, **options):
    itemsize = tensormap.element_size(dtype)
    if strides is None:
        strides = tuple(int(np.prod(shape[i + 1:])) * itemsize for i in range(len(shape)))
    return tma.TiledLayout(address, dtype, shape, strides, box, **options)


@pytest.mark.parametrize("kwargs, text", [
    (dict(shape=(2,) * 6, box=(1,) * 6), r"rank must be 1 to 5; got 6"),
    (dict(shape=(), strides=(), box=()), r"rank must be 1 to 5; got 0"),
    (dict(box=(16,)), r"box has 1 entries but the shape \(64, 64\) has rank 2"),
    (dict(box=(16, 512)), r"box dimensions must be 1 to 256; box dimension 1 is 512"),
    (dict(box=(8.5, 16)), r"box must hold integers; got \(8.5, 16\)"),
    (dict(box=64), r"box must be a sequence of integers, one per dimension; got 64"),
    (dict(shape=(64, 0), box=(16, 16)), r"dimension 1 has 0 \(an empty array needs no copy: skip the launch\)"),
    (dict(shape=(1, 2**32 + 1), strides=(2**34 + 16, 4), box=(1, 16)), r"every dimension must be 1 to 2\^32 "
                                                                       r"elements; dimension 1 has 4294967297"),
    (dict(shape=(4, 8, 8), strides=(264, 32, 4), box=(1, 8, 8)), r"dimension 0 has stride 264 B"),
    (dict(shape=(2, 16), strides=(2**40, 4)), r"strides must be below 2\^40 bytes; dimension 0 has 1099511627776 B"),
    (dict(strides=(-256, 4)), r"strides must be positive; dimension 0 has stride -256 B"),
    (dict(strides=(128, 4)), r"dimension 0 has stride 128 B but one index of it must span 256 B .*rows would overlap"),
    (dict(dtype="float64", box=(16, 8), address=SRC + 8), r"global address must be 16-byte aligned; got 0x10008"),
    (dict(element_strides=(1, 0)), r"element strides must be 1 to 8; dimension 1 has 0"),
    (dict(element_strides=(9, 1)), r"element strides must be 1 to 8; dimension 0 has 9"),
    (dict(swizzle="256B"), r"swizzle must be one of none, 32B, 64B, 128B; got '256B'"),
    (dict(swizzle="32B", box=(16, 16)), r"with swizzle 32B the box's inner extent must be at most 32 B; got 64 B"),
    (dict(oob_fill="inf"), r"oob_fill must be 'zero' or 'nan'; got 'inf'"),
    (dict(dtype="int32", oob_fill="nan"), r"NaN out-of-bounds fill needs a floating-point element type; got int32"),
    (dict(l2_promotion="512B"), r"l2_promotion must be one of none, 64B, 128B, 256B; got '512B'"),
    (dict(dtype="int8"), r"TMA element type must be one of uint8, .*float64 \(a name or a NumPy dtype\); got 'int8'"),
    (dict(dtype=np.int8), r"TMA element type must be one of uint8, .*; got <class 'numpy.int8'>"),
])
def test_tensor_map_rules(kwargs, text):
    with pytest.raises(tma.TensorMapError, match=text):
        layout(**kwargs)


@pytest.mark.parametrize("array, kwargs, error, text", [
    (pitched(16, 16, "<c8"), {}, tma.TensorMapError, r"TMA has no element type for '<c8'"),
    (pitched(16, 16, "|b1"), {}, tma.TensorMapError, r"TMA has no element type for '\|b1'.*dtype='uint8'"),
    (pitched(16, 16, "<u2"), dict(dtype="float32"), tma.TensorMapError, r"dtype 'float32' is 4 B but the array's "
                                                                        r"elements are 2 B"),
    (pitched(16, 16), dict(box=(16, 16.0)), tma.TensorMapError, r"box must hold integers"),
    (np.zeros((16, 16), np.float32), {}, tma.TensorMapError, r"cannot describe ndarray: a NumPy array lives in host "
                                                             r"memory"),
])
def test_tensor_map_from_an_array(array, kwargs, error, text):
    kwargs.setdefault("box", (16, 16))
    with pytest.raises(error, match=text):
        tma.TensorMap.tiled(array, **kwargs)


def shifted(array: FakeArray, nbytes: int) -> FakeArray:
    """The same layout, ``nbytes`` further on."""
    cai = array.__cuda_array_interface__
    return FakeArray(cai["shape"], cai["typestr"], cai["strides"], cai["data"][0] + nbytes)


@pytest.mark.parametrize("src, dst, kwargs, error, text", [
    (pitched(64, 64), pitched(64, 64), {}, LaunchConfigError, r"tma.copy: dst \(at 0x10000\) overlaps src \(at "
                                                              r"0x10000\).*pass a separate dst, or dst=None"),
    (pitched(64, 64), shifted(pitched(64, 64), 256 * 63), {}, LaunchConfigError, "overlaps src"),  # dst row 0: src's 63
    (pitched(64, 64), pitched(64, 64, address=DST, readonly=True), {}, KernelArgumentError, "dst is read-only"),
    (pitched(64, 64), np.zeros((64, 64), np.float32), {}, tma.TensorMapError, "dst: cannot describe ndarray"),
    (pitched(64, 64), FakeArray((64, 4, 16), address=DST), {}, LaunchConfigError,
     r"dst must be a 2-D array \(rows, columns\); got shape \(64, 4, 16\)"),
    (pitched(64, 64), pitched(64, 64, "<i4", address=DST), {}, LaunchConfigError, r"dst is int32\(64, 64\), src "
                                                                                  r"float32\(64, 64\)"),
    (pitched(64, 64), None, dict(box=(8.5, 256)), TypeError, r"box must be two integers \(rows, columns\); got "
                                                             r"\(8.5, 256\)"),
    (pitched(64, 64), None, dict(box=(True, 256)), TypeError, "box must be two integers"),
    (pitched(64, 64), None, dict(box=(-8, 256)), tma.TensorMapError, "box dimension 0 is -8"),
    (pitched(64, 64), None, dict(dtype="bfloat16"), tma.TensorMapError, "dtype 'bfloat16' is 2 B but the array's "
                                                                        "elements are 4 B"),
])
def test_copy_mistakes(src, dst, kwargs, error, text):
    with pytest.raises(error, match=text):
        tma.prepare_copy(src, dst, **kwargs)
    with pytest.raises(error, match=text):
        tma.copy(src, dst, **kwargs)


@pytest.mark.parametrize("dst, kwargs, error, text", [
    (pitched(64, 64), {}, LaunchConfigError, r"tma.transpose: dst \(at 0x10000\) overlaps src"),  # in place
    (pitched(64, 64, address=DST, readonly=True), {}, KernelArgumentError, "dst is read-only"),
    (pitched(64, 64, "<f2", address=DST), {}, LaunchConfigError, r"dst is float16\(64, 64\), expected "
                                                                 r"float32\(64, 64\)"),
    (None, dict(box=(32, 32.5)), TypeError, "box must be two integers"),
    (None, dict(box=(32, 3)), tma.TensorMapError, r"src: .*inner extent must be a multiple of 16 bytes; got 3 x 4 B"),
])
def test_transpose_mistakes(dst, kwargs, error, text):
    with pytest.raises(error, match=text):
        tma.prepare_transpose(pitched(64, 64), dst, **kwargs)
    with pytest.raises(error, match=text):
        tma.transpose(pitched(64, 64), dst, **kwargs)


@pytest.mark.parametrize("config, text", [
    (dict(stages=4, lookahead=5), r"lookahead must be 1 to stages \(4\); got 5"),
    (dict(stages=16, lookahead=4), r"stages - lookahead .* at most 8; got 12"),
    (dict(blocks_per_sm=0), r"blocks_per_sm must be >= 1 \(or None: as many as fit\); got 0"),
    (dict(persistent=False, blocks_per_sm=2), "with persistent=False the grid is one block per unit"),
    (dict(chunk=0), "chunk must be 1 to 1024 tiles; got 0"),
    (dict(stages=4, lookahead=2, burst=3), r"burst must be 1 to lookahead \(2\) loads; got 3"),
    (dict(l2_promotion="1KB"), "l2_promotion must be one of none, 64B, 128B, 256B; got '1KB'"),
    (dict(evict_first="all"), "evict_first must be one of none, loads, stores, both; got 'all'"),
])
def test_copy_config_mistakes(config, text):
    with pytest.raises(LaunchConfigError, match=text):
        tma.prepare_copy(pitched(64, 64), config=tma.TmaCopyConfig(**config))


def test_empty_pitched_needs_two_integers():
    with pytest.raises(TypeError, match=r"shape must be two integers \(rows, columns\); got \(3,\)"):
        tma.empty_pitched((3,), np.float32)


def test_column_blocks_of_one_array_do_not_overlap(monkeypatch):
    """Not a mistake: a copy between side-by-side column blocks of one pitched array (they share no byte) passes
    every check and reaches the feature check (a GPU without TMA here)."""
    monkeypatch.setattr(tma_ops, "_device_caps", A100.as_dict)
    left = FakeArray((64, 64), "<f4", (512, 4), SRC)  # columns 0 to 63 of 128-column rows
    right = FakeArray((64, 64), "<f4", (512, 4), SRC + 256)  # columns 64 to 127
    with pytest.raises(UnsupportedFeatureError, match="cuadv.tma.copy"):
        tma.prepare_copy(left, right)
    with pytest.raises(LaunchConfigError, match="overlaps src"):  # four columns further: 64 to 67 are in both
        tma.prepare_copy(FakeArray((64, 64), "<f4", (512, 4), SRC + 16), right)
