"""cuadv.histogram / bincount / count_bins: checks that ran late (after the min/max pass or not at all) or raised
the wrong error: range bounds NumPy turns into float16 or longdouble edges, big-endian arrays, weights passed as
minlength, a prepared bincount called with a 2-D array, a missing CuPy, a variant the GPU lacks, and count_bins'
``out``. Each raises before the GPU is reached. The cases of test_library_histograms_bad.py are not repeated."""

import sys
from fractions import Fraction

import numpy as np
import pytest

import cuadv
from cuadv import compiler
from cuadv.errors import KernelArgumentError, UnsupportedFeatureError
from cuadv.histograms import api, count_bins, launcher
from cuadv.histograms.launcher import HistogramEngine

from .library_fakes import A100, H200, FakeArray, FakeCupy, forbid

X = 0x100000  # the input's address; outputs elsewhere unless a case says otherwise
OUT = 0x200000


@pytest.fixture
def use_gpu(monkeypatch):
    """Plans for a fake GPU (``use_gpu(caps)``, default an H200); every way to the GPU after the checks fails."""
    def use(caps=H200) -> HistogramEngine:
        eng = HistogramEngine(caps)
        monkeypatch.setattr(api, "engine", lambda: eng)
        return eng

    forbid(monkeypatch, api, "_order_after_producer", "_minmax", "_aux_launch", "_new_output", "driver")
    use()
    return use


@pytest.fixture
def raw_engine(monkeypatch):
    """count_bins' engine on a fake H200: the occupancy query, the kernel build and the driver fail the test."""
    eng = HistogramEngine(H200)
    monkeypatch.setattr(launcher, "_engine", eng)
    forbid(monkeypatch, eng, "resident_units", "kernel")
    forbid(monkeypatch, launcher, "driver")
    return eng


def x_of(typestr="<i4", shape=(100,)):
    return FakeCupy(shape, typestr, address=X)


@pytest.mark.parametrize("lo, hi, error, text", [
    (np.float16(0), np.float16(1), TypeError, "Python int or float, NumPy integer, float32 or float64 scalars, not "
                                              "float16"),
    (np.longdouble(0), np.longdouble(1), TypeError, f"not {np.longdouble.__name__}"),
    (Fraction(0), Fraction(1, 3), TypeError, "range must hold two real numbers, got .*not Fraction"),
    (0, 2**1100, ValueError, r"range end an int of 1101 bits is outside \[-2\*\*63, 2\*\*64\)"),
    (-(2**1024), 0, ValueError, "an int of 1025 bits"),
    (0, 2**64, ValueError, r"range end 18446744073709551616 is outside .*pass a float end instead"),
    (-(2**63) - 1, 0, ValueError, "range end -9223372036854775809 is outside"),
], ids=["float16", "longdouble", "Fraction", "2**1100", "-2**1024", "2**64", "-2**63-1"])
@pytest.mark.parametrize("typestr", ["|u1", "<i4", "<f4"])
def test_range_bounds_that_give_no_float32_or_float64_edges_raise(use_gpu, lo, hi, error, text, typestr):
    """NumPy makes float16 edges of float16 bounds (uint8 input) and longdouble edges of longdouble ones, which the
    kernels, reading float or double, would misread; Fractions fail inside NumPy, ints past 64 bits in its isfinite."""
    with pytest.raises(error, match=text):
        cuadv.histogram(x_of(typestr), bins=10, range=(lo, hi))
    with pytest.raises(error, match=text):
        cuadv.prepare_histogram(x_of(typestr), bins=10, range=(lo, hi))


@pytest.mark.parametrize("dtype", list(api.INPUT_TYPES))
@pytest.mark.parametrize("bound", [int, float, np.int64, np.uint8, np.float32, np.float64])
def test_accepted_range_bounds_give_edges_a_built_kernel_reads(monkeypatch, use_gpu, dtype, bound):
    """Every accepted bound type gives numpy's edges, float32 or float64, and the binning module holds the bin
    index kernel of that input and edge type (float32 bounds keep uint8 and uint16 input's edges float32)."""
    built = []
    monkeypatch.setattr(compiler, "shipped", lambda *a, name_expressions=(), **k: built.extend(name_expressions))
    api.binning_module("sm_90a")
    lo, hi = bound(1), bound(7)
    p = cuadv.prepare_histogram(x_of(np.dtype(dtype).str), bins=10, range=(lo, hi))
    edges = p._edge_spec[3] if p._edge_spec else p._edges.dtype
    want = np.histogram_bin_edges(np.empty(0, dtype), 10, range=(lo, hi)).dtype
    assert edges == want and edges in (np.float32, np.float64)
    assert f"hist_bin_index<{api.INPUT_TYPES[dtype]}, {'float' if edges == np.float32 else 'double'}>" in built


@pytest.mark.parametrize("call", [
    lambda: cuadv.histogram(x_of(">f8"), bins=10, range=(0.0, 1.0)),
    lambda: cuadv.histogram(x_of(">i4"), bins=10),
    lambda: cuadv.bincount(x_of(">i4")),
    lambda: cuadv.prepare_bincount(x_of(">i8")),
], ids=["histogram >f8", "histogram >i4", "bincount >i4", "prepare_bincount >i8"])
def test_big_endian_input_is_refused(use_gpu, call):
    with pytest.raises(TypeError, match=r"x has big-endian byte order \(>[if][48]\); the GPU reads little-endian"):
        call()


def test_a_big_endian_out_names_its_byte_order(use_gpu):
    out = FakeCupy((10,), ">i8", address=OUT)
    with pytest.raises(TypeError, match=r"out has big-endian byte order \(>i8\).*astype\('<i8'\)"):
        cuadv.histogram(x_of(), bins=10, range=(0, 10), out=out)
    with pytest.raises(TypeError, match=r"out has big-endian byte order \(>i8\)"):
        cuadv.bincount(x_of(), out=out)


@pytest.mark.parametrize("weights", [FakeCupy((100,), "<f8", address=OUT), np.ones(100), [1.0] * 100, (1, 2)],
                         ids=["device array", "numpy array", "list", "tuple"])
def test_weights_as_the_second_argument_are_refused_as_weights(use_gpu, weights):
    """numpy.bincount(x, w) and torch.bincount(x, w) take weights second; cuadv.bincount's second is minlength."""
    with pytest.raises(TypeError, match=r"weights are not supported \(cuadv.bincount counts only\)"):
        cuadv.bincount(x_of(), weights)
    with pytest.raises(TypeError, match="weights are not supported"):
        cuadv.prepare_bincount(x_of(), weights)


@pytest.mark.parametrize("minlength", [1.5, np.float64(3.0), "3", None])
def test_a_minlength_that_is_no_array_keeps_its_message(use_gpu, minlength):
    with pytest.raises(TypeError, match=f"minlength must be an int, got {type(minlength).__name__}"):
        cuadv.bincount(x_of(), minlength)


def test_a_prepared_bincount_checks_the_shape_at_each_call(use_gpu):
    p = cuadv.prepare_bincount(x_of())
    with pytest.raises(ValueError, match=r"bincount needs a 1-D array, got shape \(10, 10\)"):
        p(x_of(shape=(10, 10)))  # as many elements as prepared
    with pytest.raises(ValueError, match=r"bincount needs a 1-D array, got shape \(100, 1\)"):
        p(x_of(shape=(100, 1)))


@pytest.mark.parametrize("call", [
    lambda: cuadv.histogram(FakeArray((100,), "<f4", address=X), bins=10, range=(0.0, 1.0)),
    lambda: cuadv.histogram(FakeArray((100,), "<f4", address=X), bins=10),  # the min/max pass comes first
    lambda: cuadv.bincount(FakeArray((100,), "<i4", address=X)),
    lambda: cuadv.prepare_histogram(FakeArray((100,), "<i4", address=X), bins=10)(),
    lambda: cuadv.prepare_bincount(FakeArray((100,), "<i4", address=X))(),
], ids=["histogram", "histogram, default range", "bincount", "prepared histogram", "prepared bincount"])
def test_without_cupy_a_non_torch_input_raises_before_the_gpu(monkeypatch, use_gpu, call):
    """A Numba or cuda.core array gives CuPy output: without CuPy the call says so before the min/max pass."""
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy fails, as where it is not installed
    with pytest.raises(ModuleNotFoundError, match=r'CuPy is not installed: pip install "cuadv\[cupy\]", or pass a '
                                                  r"CuPy or torch array"):
        call()


def test_without_cupy_a_bincount_into_out_needs_no_cupy(monkeypatch, use_gpu):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(AssertionError, match="reached the GPU"):  # past the checks: nothing new to allocate
        cuadv.bincount(FakeArray((100,), "<i4", address=X), out=FakeCupy((10,), "<i8", address=OUT))


@pytest.mark.parametrize("variant", ["dsm", "exchange"])
def test_bincount_refuses_a_variant_the_gpu_lacks_before_the_min_max_pass(use_gpu, variant):
    use_gpu(A100)
    text = r"needs compute capability >= 9.0 \(got 8.0\); fallback: variant='shared', 'hot' or 'global'"
    with pytest.raises(UnsupportedFeatureError, match=text):
        cuadv.bincount(x_of(), variant=variant)
    with pytest.raises(UnsupportedFeatureError, match=text):
        cuadv.prepare_bincount(x_of(), variant=variant)


def test_only_the_length_of_a_bincounts_out_waits_for_the_data(monkeypatch, use_gpu):
    """The min/max pass gives the length (21 here); an out of another length raises then, before anything is
    written to it (the driver, the binning kernels and the output allocation fail the test)."""
    monkeypatch.setattr(api, "_order_after_producer", lambda x, stream: None)
    monkeypatch.setattr(api, "_minmax", lambda src, stream, arch, sm_count, needed_by: (np.int32(0), np.int32(20)))
    with pytest.raises(ValueError, match=r"out must have shape \(21,\), got \(10,\)"):
        cuadv.bincount(x_of(), out=FakeCupy((10,), "<i8", address=OUT), stream=0)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(out=FakeCupy((10,), "<u4", address=OUT, readonly=True)), KernelArgumentError, "out is read-only"),
    (dict(out=FakeCupy((10,), "<u4", address=X)), ValueError, r"out \(bytes 0x100000 \+ 40\) overlaps x \(bytes "
                                                              r"0x100000 \+ 400\)"),
    (dict(out=FakeCupy((10,), "<u4", address=X + 396)), ValueError, "overlaps x"),  # out[0] is x's last element
    (dict(out=FakeCupy((2, 5), "<u4", address=OUT)), ValueError, r"out must be 1-D \(one count per bin\), got "
                                                                 r"shape \(2, 5\)"),
    (dict(out=FakeCupy((10,), ">u4", address=OUT)), TypeError, r"out has big-endian byte order \(>u4\)"),
    (dict(x=FakeCupy((100,), "<f4", address=X)), TypeError, "histogram input must be int32 or uint8, got float32"),
    (dict(x=FakeCupy((100,), ">i4", address=X)), TypeError, r"x has big-endian byte order \(>i4\)"),
    (dict(bins=2.0), TypeError, r"bins must be an int \(even bins; arrays of edges are not supported\), got float"),
    (dict(bins=True), TypeError, "bins must be an int"),
    (dict(bins=np.bool_(True)), TypeError, "bins must be an int"),
])
def test_count_bins_checks_out_x_and_bins_as_histogram_does(raw_engine, kwargs, error, text):
    args = dict(x=x_of(), bins=10, out=FakeCupy((10,), "<u4", address=OUT))
    args.update(kwargs)
    x = args.pop("x")
    with pytest.raises(error, match=text):
        count_bins(x, **args)


def test_count_bins_with_a_good_out_gets_past_the_checks(raw_engine):
    with pytest.raises(AssertionError, match="reached the GPU"):  # the occupancy query: the checks let it through
        count_bins(x_of(), 10, out=FakeCupy((10,), "<u4", address=OUT))


class OnGpu(FakeCupy):
    """A CuPy-like array that says which GPU holds it (``data.device_id``), as CuPy's do."""

    def __init__(self, device: int, typestr: str = "<i4"):
        super().__init__((100,), typestr, address=X)
        self.data = type("MemoryPointer", (), {"ptr": X, "device_id": device})()


class DlpackOnGpu(FakeCupy):
    """A DLPack producer on a GPU (kDLCUDA) besides its CUDA array interface, as a torch tensor is."""

    def __init__(self, device: int):
        super().__init__((100,), "<i4", address=X)
        self._device = device

    def __dlpack_device__(self):
        return (2, self._device)


@pytest.mark.parametrize("x", [OnGpu(1), DlpackOnGpu(1)], ids=["cupy", "dlpack"])
def test_an_input_on_another_gpu_raises_naming_both(use_gpu, raw_engine, x):
    """cuadv runs on GPU 0 (CUADV_DEVICE unset): an input in GPU 1's memory would fault in its kernels (or be read
    over the peer link); every entry point names both GPUs and the way out before the GPU is reached."""
    text = r"x is in the memory of GPU 1, but cuadv runs on GPU 0; copy it there .* \(CUADV_DEVICE=1\)"
    for call in (lambda: cuadv.histogram(x, bins=10, range=(0, 10)),
                 lambda: cuadv.prepare_histogram(x, bins=10, range=(0, 10)),
                 lambda: cuadv.bincount(x, minlength=10),
                 lambda: count_bins(x, 10)):
        with pytest.raises(KernelArgumentError, match=text):
            call()


def test_an_input_on_the_gpu_cuadv_runs_on_is_accepted(monkeypatch, raw_engine):
    """CUADV_DEVICE=1 with the input on GPU 1: the device check passes (count_bins goes on to the GPU, which this
    test forbids)."""
    monkeypatch.setenv("CUADV_DEVICE", "1")
    with pytest.raises(AssertionError, match="reached the GPU"):
        count_bins(OnGpu(1), 10, out=FakeCupy((10,), "<u4", address=OUT))


def test_a_min_max_pass_under_a_capture_raises_before_any_launch(monkeypatch):
    """The min/max pass (histogram without range, bincount) waits on the host, which a stream being captured into a
    CUDA graph forbids: it raises naming the call and its way out, launching nothing."""
    monkeypatch.setattr(api, "capturing", lambda stream: True)
    forbid(monkeypatch, api, "_aux_launch", "copy_to_host")
    src = launcher.device_array(x_of(), "x")
    with pytest.raises(UnsupportedFeatureError, match=r"^cuadv.histogram without range needs x's min and max read "
                                                      r"back to the host, which no CUDA graph capture allows \(got a "
                                                      r"stream being captured\); fallback: pass range=\(lo, hi\)"):
        api._minmax(src, 7, "sm_90a", 132, ("cuadv.histogram without range", "pass range=(lo, hi)"))
