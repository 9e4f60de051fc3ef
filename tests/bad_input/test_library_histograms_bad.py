"""cuadv.histogram / bincount and their prepared forms: each mistake raises, naming the argument, the value and
the rule (and the fallback where there is one), before the GPU is reached. The cases of
tests/test_histogram_api_cpu.py are not repeated here."""

import numpy as np
import pytest

import cuadv
from cuadv.errors import KernelArgumentError, UnsupportedFeatureError
from cuadv.histograms import api
from cuadv.histograms.launcher import HistogramEngine

from .library_fakes import A100, FakeArray, FakeCupy, forbid

X = 0x100000  # the input's address; outputs elsewhere unless a case says otherwise
OUT = 0x200000


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    forbid(monkeypatch, api, "engine", "_order_after_producer")


def engine_of(caps) -> HistogramEngine:
    """The histogram engine of a GPU with these capabilities (nothing compiled, nothing queried)."""
    return HistogramEngine(caps)


def out(shape=(10,), typestr="<i8", address=OUT, **kw):
    return FakeCupy(shape, typestr, address=address, **kw)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(x=np.zeros(10, np.int32)), KernelArgumentError, r"x: a NumPy array lives in host memory; copy it to the GPU "
     r"\(cupy.asarray or torch.as_tensor"),
    (dict(x=[1, 2, 3]), KernelArgumentError, "x must be a device array with __cuda_array_interface__ or __dlpack__ "
     r"\(CuPy, PyTorch, Numba, cuda.core\), got list"),
    (dict(x=FakeArray(typestr="|b1", address=X)), TypeError, "x has dtype bool; cuadv counts numbers of dtype int32"),
    (dict(x=FakeArray(typestr="|i1", address=X)), TypeError, "x has dtype int8"),
    (dict(x=FakeArray(typestr="<u4", address=X)), TypeError, "x has dtype uint32"),
    (dict(x=FakeArray(typestr="<c16", address=X)), TypeError, "x has dtype complex128"),
    (dict(x=FakeArray(typestr="<V2", address=X)), TypeError, "x has element type void16, which NumPy does not know"),
    (dict(x=FakeArray((10,), "<i4", strides=(-4,), address=X)), KernelArgumentError,
     r"x must be C-contiguous \(strides \(-4,\)"),
    (dict(bins=None), TypeError, "bins must be an int .*got NoneType None"),
    (dict(bins="10"), TypeError, "bins must be an int .*got str '10'"),
    (dict(bins=np.float64(10.0)), TypeError, "bins must be an int .*got float64"),
    (dict(bins=np.int64(1 << 31)), ValueError, r"bins = 2147483648 is outside \[1, 1073741824\]"),
    (dict(range=(0, 1, 2)), ValueError, r"range must be a pair \(lo, hi\), got \(0, 1, 2\)"),
    (dict(range=5), ValueError, "range must be a pair .*got 5"),
    (dict(range=(0, 1j)), TypeError, r"range must hold two real numbers, got \(0, 1j\)"),
    (dict(range=(True, 2)), TypeError, "range must hold two real numbers, got \\(True, 2\\)"),
    (dict(range=(float("-inf"), 0.0)), ValueError, r"range \(-inf, 0.0\) is not finite"),
    (dict(range=(np.float32(1), np.float32(0))), ValueError, "lo must be less than hi"),
    (dict(variant=None), ValueError, "variant must be one of auto, global, shared, dsm, hot, exchange; got None"),
    (dict(variant="DSM"), ValueError, "variant must be one of .*got 'DSM'"),
    (dict(stream="default"), KernelArgumentError, "cannot use str as a stream"),
    (dict(out=out(readonly=True)), KernelArgumentError, "out is read-only"),
    (dict(out=out(address=X)), ValueError, r"out \(bytes 0x100000 \+ 80\) overlaps x \(bytes 0x100000 \+ 400\)"),
    (dict(out=out(address=X + 392)), ValueError, "out .* overlaps x"),  # the last 8 bytes of x are out[0]
    (dict(out=out(strides=(16,))), KernelArgumentError, r"out must be C-contiguous \(strides \(16,\)"),
    (dict(out=out(())), ValueError, r"out must have shape \(10,\), got \(\)"),
    (dict(out=out(address=OUT + 4)), KernelArgumentError, "out at address 0x200004 is not aligned to its 8-byte"),
    (dict(out=out(typestr="<u8")), TypeError, "out must have dtype int64 .*got uint64"),
    (dict(out=FakeArray((10,), "<i8", address=OUT)), TypeError, "out is a other array, but a other input gives cupy "
                                                                "output; pass a cupy array"),
])
def test_histogram_mistakes(kwargs, error, text):
    args = dict(x=FakeArray((100,), "<i4", address=X), bins=10)
    args.update(kwargs)
    x = args.pop("x")
    with pytest.raises(error, match=text):
        cuadv.histogram(x, **args)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(bins=0), ValueError, r"bins = 0 is outside"),
    (dict(range=(3, 3)), ValueError, "lo must be less than hi"),
    (dict(variant="fastest"), ValueError, "variant must be one of"),
    (dict(stream=object()), KernelArgumentError, "cannot use object as a stream"),
    (dict(x=np.arange(10)), KernelArgumentError, "x: a NumPy array lives in host memory"),
])
def test_prepare_histogram_mistakes(kwargs, error, text):
    args = dict(x=FakeArray((100,), "<f4", address=X), bins=10)
    args.update(kwargs)
    x = args.pop("x")
    with pytest.raises(error, match=text):
        cuadv.prepare_histogram(x, **args)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(x=FakeArray(typestr="|i1", address=X)), TypeError, "x has dtype int8; cuadv counts non-negative integers of "
                                                             "dtype int32, int64, uint8, uint16"),
    (dict(x=FakeArray(typestr="|b1", address=X)), TypeError, "x has dtype bool"),
    (dict(x=FakeArray((), "<i4", address=X)), ValueError, r"bincount needs a 1-D array, got shape \(\)"),
    (dict(minlength=None), TypeError, "minlength must be an int, got NoneType"),
    (dict(minlength=True), TypeError, "minlength must be an int, got bool"),
    (dict(minlength="3"), TypeError, "minlength must be an int, got str"),
    (dict(stream=3.5), KernelArgumentError, "cannot use float as a stream"),
    (dict(out=out(readonly=True)), KernelArgumentError, "out is read-only"),
    (dict(out=out(address=X)), ValueError, "out .* overlaps x"),
    (dict(out=out((2, 5))), ValueError, r"out must be 1-D \(one count per bin\), got shape \(2, 5\)"),
])
def test_bincount_mistakes(kwargs, error, text):
    args = dict(x=FakeArray((100,), "<i4", address=X))
    args.update(kwargs)
    x = args.pop("x")
    with pytest.raises(error, match=text):
        cuadv.bincount(x, **args)


def test_prepare_bincount_mistake():
    with pytest.raises(ValueError, match="variant must be one of .*got 'shard'"):
        cuadv.prepare_bincount(FakeArray((100,), "<i4", address=X), variant="shard")


@pytest.mark.parametrize("variant", ["dsm", "exchange"])
def test_a_cluster_variant_without_clusters_names_the_fallback(monkeypatch, variant):
    monkeypatch.setattr(api, "engine", lambda: engine_of(A100))
    with pytest.raises(UnsupportedFeatureError, match=r"the DSM histogram \(thread block clusters\) needs compute "
                                                      r"capability >= 9.0 \(got 8.0\); fallback: variant='shared', "
                                                      r"'hot' or 'global'"):
        cuadv.histogram(FakeArray((100,), "<i4", address=X), bins=10, range=(0, 10), variant=variant)


@pytest.mark.parametrize("call, error, text", [
    (lambda h: h(FakeArray((99,), "<i4", address=X)), ValueError, "x has 99 elements of int32; this prepared histogram "
                                                                 "was made for 100 of int32"),
    (lambda h: h(FakeArray((100,), "<i8", address=X)), ValueError, "x has 100 elements of int64"),
    (lambda h: h(out=out((11,))), ValueError, r"out must have shape \(10,\), got \(11,\)"),
    (lambda h: h(out=out(address=X)), ValueError, "overlaps x"),
])
def test_a_prepared_histogram_refuses_other_arrays(monkeypatch, call, error, text):
    monkeypatch.setattr(api, "engine", lambda: engine_of(A100))
    prepared = cuadv.prepare_histogram(FakeArray((100,), "<i4", address=X), bins=10)
    with pytest.raises(error, match=text):
        call(prepared)


def test_empty_input_is_valid():
    """An empty x is no mistake: numpy counts nothing, in (0, 1) bins; the checks let it through to the GPU."""
    with pytest.raises(AssertionError, match="reached the GPU"):
        cuadv.histogram(FakeArray((0,), "<f4", address=X), bins=4)
    with pytest.raises(AssertionError, match="reached the GPU"):
        cuadv.bincount(FakeArray((0,), "<i4", address=X), minlength=3)
