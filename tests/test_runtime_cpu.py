"""The runtime layer without a GPU: the array and stream reader, the struct mirror, the feature
registry, and the compiled module's kernel lookup."""

import sys
import types
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from cuadv.compiler import compile_source
from cuadv import interop
from cuadv.errors import CuadvError, KernelArgumentError, NoGpuError, UnsupportedFeatureError
from cuadv.features import FEATURES, feature, require, why_not
from cuadv.interop import c_strides, device_array, library_of, stream_handle
from cuadv.params import StructArgument, c_struct


class FakeArray:
    """An object with a CUDA Array Interface (v3), as CuPy, Numba and PyTorch expose it."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x1000, stream=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (ptr, False), "version": 3, "stream": stream}


def test_device_array_reads_shape_strides_and_type():
    a = device_array(FakeArray((10, 7)))
    assert (a.ptr, a.shape, a.strides, a.itemsize, a.type_name) == (0x1000, (10, 7), (28, 4), 4, "float32")
    assert a.contiguous and a.size == 70 and a.nbytes == 280 and a.dtype == np.float32 and a.library == "other"
    b = device_array(FakeArray((10, 7), "<u2", strides=(32, 2)))
    assert b.strides == (32, 2) and not b.contiguous and b.type_name == "uint16"
    assert device_array(FakeArray((0, 3))).contiguous  # an empty array is contiguous whatever its strides say
    assert device_array(FakeArray((1, 7), strides=(999, 4))).contiguous  # an extent-1 dimension's stride is free
    assert not device_array(FakeArray((2, 7), strides=(32, 4))).contiguous  # pitched rows


def test_a_big_endian_array_is_refused_before_its_stream_is_waited_on(monkeypatch):
    """Kernels read elements little-endian: a '>f4' array would be read as other numbers with no error. One-byte
    types have no byte order ('>u1' and '|u1' are the same bytes)."""
    import cuadv.interop as interop

    monkeypatch.setattr(interop, "wait_for_stream", lambda *a: pytest.fail("the producer's stream was waited on"))
    with pytest.raises(KernelArgumentError, match=r"the array has big-endian byte order \(>f4\).*astype\('<f4'\)"):
        device_array(FakeArray((4,), ">f4", stream=5), stream=7)
    assert device_array(FakeArray((4,), ">u1")).type_name == "uint8"


def test_c_strides_give_extent_one_and_zero_dimensions_a_stride():
    assert c_strides((2, 3, 4), 4) == (48, 16, 4)
    assert c_strides((0, 3), 8) == (24, 8)


def test_host_and_foreign_objects_are_refused_with_the_fix():
    with pytest.raises(KernelArgumentError, match="host memory.*cupy.asarray"):
        device_array(np.zeros(3))
    with pytest.raises(KernelArgumentError, match="neither __cuda_array_interface__ nor __dlpack__"):
        device_array(object())


def test_library_of_names_the_maker():
    assert library_of(FakeArray((1,))) == "other"
    assert library_of(np.zeros(1)) == "other"


def test_stream_handle_forms():
    assert stream_handle(7) == 7
    assert stream_handle(types.SimpleNamespace(ptr=11)) == 11
    assert stream_handle(types.SimpleNamespace(cuda_stream=12)) == 12

    class Proto:
        def __cuda_stream__(self):
            return (0, 13)

    assert stream_handle(Proto()) == 13
    assert stream_handle(np.uint64(2**64 - 1)) == 2**64 - 1
    with pytest.raises(KernelArgumentError, match="cannot use str as a stream"):
        stream_handle("stream")


@pytest.mark.parametrize("bad, match", [(-1, "stream handle -1 is not a CUstream"),
                                        (2**64, "is not a CUstream"),
                                        (types.SimpleNamespace(ptr=-5), "stream handle -5"),
                                        (True, "stream must be a stream object"),
                                        (np.bool_(False), "stream must be a stream object")])
def test_stream_handle_rejects_what_is_no_handle(bad, match):
    """Checked in Python, before anything reaches the driver (which would take -1 as some other stream)."""
    with pytest.raises(KernelArgumentError, match=match):
        stream_handle(bad)


def test_stream_none_follows_cupys_current_stream(monkeypatch):
    monkeypatch.setattr(interop, "init_driver", lambda: 1)  # a GPU
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=0xBEEF))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert stream_handle(None, FakeArray((1,))) == 0xBEEF
    monkeypatch.delitem(sys.modules, "cupy")
    assert stream_handle(None, FakeArray((1,))) == 0  # no array library in use: the legacy default stream


def test_stream_none_without_a_gpu_raises_no_gpu_error_before_asking_cupy(monkeypatch):
    """CuPy's own answer without a driver is a runtime error about the driver's version, which misleads."""
    def no_gpu():
        raise NoGpuError("no CUDA GPU: the NVIDIA driver library could not be loaded (DynamicLibNotFoundError)")

    def asked():
        raise AssertionError("CuPy asked for its stream")

    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(get_current_stream=asked)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(interop, "init_driver", no_gpu)
    with pytest.raises(NoGpuError, match="no CUDA GPU"):
        stream_handle(None)


def test_stream_none_follows_torchs_current_stream_for_a_tensor(monkeypatch):
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(current_stream=lambda device: types.SimpleNamespace(cuda_stream=0xF00D))
    monkeypatch.setitem(sys.modules, "torch", torch)
    Tensor = type("Tensor", (), {"__module__": "torch", "device": "cuda:0"})
    assert stream_handle(None, Tensor()) == 0xF00D


def test_stream_none_without_arrays_follows_torchs_current_stream_where_cupys_is_null(monkeypatch):
    """time_gpu and wait get no array: under torch.cuda.stream(s) their None is s (a torch pool stream is not ordered
    with the legacy stream), unless CuPy has a current stream of its own; CuPy arrays keep CuPy's stream."""
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: True,
                                       current_stream=lambda device: types.SimpleNamespace(cuda_stream=0xF00D + device))
    monkeypatch.setattr(interop, "init_driver", lambda: 1)  # a GPU
    cupy = types.ModuleType("cupy")
    cupy_stream = types.SimpleNamespace(ptr=0)
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: cupy_stream)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    CupyArray = type("ndarray", (), {"__module__": "cupy"})
    assert stream_handle(None) == 0xF00D and stream_handle(None, 7) == 0xF00D
    assert stream_handle(None, CupyArray()) == 0  # the arguments' library: CuPy, on its null stream
    monkeypatch.setenv("CUADV_DEVICE", "1")
    assert stream_handle(None) == 0xF00E  # torch's current stream on the GPU cuadv works on
    monkeypatch.delenv("CUADV_DEVICE")
    cupy_stream.ptr = 0xBEEF
    assert stream_handle(None) == 0xBEEF
    torch.cuda.is_initialized = lambda: False
    cupy_stream.ptr = 0
    assert stream_handle(None) == 0  # torch imported but never used: not initialised by cuadv


def test_c_struct_checks_its_size_against_the_device_struct():
    layout = c_struct("P", [("a", "<u8"), ("n", "<u4"), ("t", "<u8")], size=24)
    assert layout.fields["t"][1] == 16  # natural alignment, as C lays it out
    with pytest.raises(AssertionError, match="mirror of P is 24 B but the device struct is 20 B"):
        c_struct("P", [("a", "<u8"), ("n", "<u4"), ("t", "<u8")], size=20)


def test_struct_argument_packs_fields_by_name_and_nests_raw_bytes():
    @dataclass(frozen=True)
    class Inner:
        def kernel_param_bytes(self):
            return bytes(range(16))

    @dataclass(frozen=True)
    class Params(StructArgument):
        LAYOUT: ClassVar[np.dtype] = c_struct("Params", [("ptr", "<u8"), ("n", "<i4"), ("_pad", "<u4"),
                                                         ("inner", "V16")], size=32)
        ptr: int
        n: int
        inner: Inner

    data = Params(0x1122, -3, Inner()).kernel_param_bytes()
    assert data == ((0x1122).to_bytes(8, "little") + (-3).to_bytes(4, "little", signed=True) + bytes(4)
                    + bytes(range(16)))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # 1e39 into a float field: inf, both ways
def test_pack_struct_writes_numpys_bytes_and_takes_its_conversions_where_struct_refuses():
    from cuadv.params import _pack_with_numpy, pack_struct

    layout = c_struct("Q", [("tiles", "<u4", (3,)), ("q", "<u8"), ("i", "<i4"), ("f", "<f4"), ("d", "<f8"),
                            ("h", "<u2")], size=48)
    cases = [
        {"tiles": (1, 2, 3), "q": 2**64 - 1, "i": -5, "f": 1.5, "d": -2.25, "h": 7},
        {"tiles": np.array([4, 5, 6], np.uint32), "q": np.uint64(9), "i": np.int32(-1), "f": np.float32(0.1)},
        {"tiles": None, "q": None, "i": True, "f": 3, "d": 1e39},  # absent or None: zero; an int for a float
        {"q": 7.9, "i": np.int64(3), "f": 1e39},  # struct refuses the float and the overflow: NumPy converts them
    ]
    for values in cases:
        assert pack_struct(layout, values) == _pack_with_numpy(layout, values)
    exact = [  # NumPy's conversions, bit for bit: these take its path
        {"f": np.int64(2**60 + 2**36 + 1)},  # rounded once, to float32 (through a double it would round twice)
        {"f": np.frombuffer(np.uint32(0x7F800001).tobytes(), np.float32)[0]},  # a signalling NaN keeps its bits
        {"d": float("nan")}, {"i": np.int8(-3)}, {"tiles": [7, 8, 9]},
    ]
    with np.errstate(invalid="ignore"):
        for values in exact:
            assert pack_struct(layout, values) == _pack_with_numpy(layout, values)
    two = c_struct("T", [("a", "<u4", (2,)), ("b", "<u4", (3,))], size=20)
    for bad in ({"q": -1}, {"tiles": (1, 2)}, {"nope": 1}, {"tiles": b"abc"}):  # what NumPy refuses still raises
        with pytest.raises((OverflowError, ValueError, TypeError)):
            pack_struct(layout, bad)
    with pytest.raises(ValueError):  # lengths that would cancel out in one flat list
        pack_struct(two, {"a": (1, 2, 3), "b": (4, 5)})
    nested = c_struct("N", [("ptr", "<u8"), ("inner", "V16")], size=24)
    assert pack_struct(nested, {"ptr": 1, "inner": np.zeros((), "V16")}) == (1).to_bytes(8, "little") + bytes(16)

    class Raw:  # a nested struct or a tensor map: its own bytes
        def __init__(self, data):
            self.data = data

        def kernel_param_bytes(self):
            return self.data

    for values in ({"ptr": 2, "inner": Raw(bytes(range(16)))}, {"ptr": 3}):
        assert pack_struct(nested, values) == _pack_with_numpy(nested, values)
    with pytest.raises(ValueError):  # bytes of another length: refused, never padded or cut
        pack_struct(nested, {"inner": Raw(bytes(15))})


def test_bounded_memo_keeps_the_first_value_and_its_limit_across_threads():
    import threading

    from cuadv.memo import BoundedMemo

    memo = BoundedMemo(4)
    assert memo.get("a") is None and memo.put("a", 1) == 1 and memo.put("a", 2) == 1  # the first value stays
    errors = []

    def fill(base):
        try:
            for i in range(2000):
                memo.put((base, i), i)
                memo.get((base, i - 1))
        except Exception as exc:  # a KeyError or RuntimeError of an unlocked eviction
            errors.append(exc)

    threads = [threading.Thread(target=fill, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(memo) <= 4


def test_feature_registry_says_why_not_and_the_fallback():
    hopper = {"compute_capability": (9, 0), "clc": False, "cluster_launch": True, "cooperative_launch": True,
              "persisting_l2_max_bytes": 0, "mem_sync_domain_count": 4, "tma": True, "pdl": True,
              "stream_priority_low": 0, "stream_priority_high": -5}
    assert why_not("tma", hopper) is None
    assert "compute capability >= 10.0 (got 9.0)" in why_not("clc", hopper) and "steal" in why_not("clc", hopper)
    with pytest.raises(UnsupportedFeatureError, match=r"L2 access-policy window needs a GPU with persisting L2 "
                                                      r"\(not MIG\) \(got 0 B persisting L2\); fallback: no window"):
        require("l2_persistence", hopper, name="L2 access-policy window", fallback="no window")
    assert {f.key for f in FEATURES} >= {"clc", "cluster_launch", "tma", "pdl", "l2_persistence", "mem_sync_domains"}
    with pytest.raises(ValueError, match="unknown feature 'warp_drive'"):
        feature("warp_drive")


def test_a_missing_kernel_is_named_with_the_kernels_the_module_has():
    module = compile_source('extern "C" __global__ void present_a() {}\n'
                            'template <int N> __global__ void present_b() {}\n',
                            name="lookup", arch="sm_90a", name_expressions=["present_b<3>"])
    assert module.kernel_names() == ["present_a", "present_b<3>"]
    with pytest.raises(CuadvError,
                       match=r"module 'lookup' has no kernel 'absent'; its kernels: present_a, present_b<3>"):
        module.kernel("absent")


def test_the_legacy_stream_beside_a_blocking_capture_counts_as_capturing(monkeypatch):
    """cuStreamIsCapturing on the legacy stream while a blocking stream is captured answers
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (its work would join that capture): capturing() says True, so the callers
    refuse with their own message, instead of raising the driver's error."""
    from cuadv import _cuda, interop

    real = _cuda.driver()
    answers = {0: (real.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, None),
               5: (real.CUresult.CUDA_SUCCESS, real.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE),
               6: (real.CUresult.CUDA_SUCCESS, real.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE)}

    class Driver:
        def __getattr__(self, name):
            return getattr(real, name)

        def cuStreamIsCapturing(self, stream):
            return answers[int(stream)]

    monkeypatch.setattr(interop, "driver", Driver)
    assert [interop.capturing(s) for s in (0, 5, 6)] == [True, False, True]


def _fake_cupy(**cuda_attrs):
    import types

    return types.SimpleNamespace(cuda=types.SimpleNamespace(**cuda_attrs))


def test_a_cupy_stream_for_a_handle_keeps_cupys_non_owning_class_without_its_deprecation_warning():
    """CuPy 14's ExternalStream warns on every construction (802 warnings in one GPU test run, 2026-12-05); it is
    still the class that never destroys the caller's stream, so it stays, silently; other warnings pass."""
    import warnings

    class ExternalStream:
        def __init__(self, ptr):
            warnings.warn("ExternalStream is deprecated. Use Stream.from_external() instead ...", DeprecationWarning)
            warnings.warn("unrelated", DeprecationWarning)
            self.ptr = ptr

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        s = interop._cupy_stream(_fake_cupy(ExternalStream=ExternalStream), 0x1234)
    assert isinstance(s, ExternalStream) and s.ptr == 0x1234
    assert [str(w.message) for w in seen] == ["unrelated"]


def test_a_cupy_without_external_stream_gets_the_handle_through_the_cuda_stream_protocol(monkeypatch):
    seen = []

    class Stream:
        @classmethod
        def from_external(cls, obj):
            seen.append(obj.__cuda_stream__())
            return "wrapped"

    monkeypatch.setattr(interop, "_FROM_EXTERNAL", {})
    cp = _fake_cupy(Stream=Stream)
    assert interop._cupy_stream(cp, 0x5678) == "wrapped"
    assert seen == [(0, 0x5678)]
    # the wrapper is kept, never collected: a collected CuPy Stream destroys its handle, which is the caller's
    assert interop._cupy_stream(cp, 0x5678) == "wrapped" and seen == [(0, 0x5678)]
    assert interop._FROM_EXTERNAL == {0x5678: "wrapped"}
