"""cuadv.pipeline.stencil and its prepared form: each mistake (a coefficient that is no number, an unknown variant, an
``out`` that overlaps x, is read-only or has other rows, a TMA variant the GPU or the arrays cannot take) raises,
naming the argument and the rule (and the fallback), before the GPU is reached. The cases of
tests/test_pipeline_api_cpu.py are not repeated here."""

import numpy as np
import pytest

import cuadv.pipeline as pipeline
from cuadv.errors import KernelArgumentError, LaunchConfigError, UnsupportedFeatureError

from .library_fakes import FakeArray, forbid

X, OUT = 0x100000, 0x200000
COEF = dict(c_center=0.5, c_neighbour=0.125)
DEVICE_HAS_TMA = pipeline._device_has_tma  # the real check, before the fixture forbids it


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    forbid(monkeypatch, pipeline, "_device_has_tma", "_kernels")


def x64(**kw):
    return FakeArray((64, 64), address=X, **kw)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(c_center="a"), TypeError, "c_center must be a real number .*got str 'a'"),
    (dict(c_neighbour=None), TypeError, "c_neighbour must be a real number .*got NoneType None"),
    (dict(c_center=True), TypeError, "c_center must be a real number .*got bool True"),
    (dict(c_neighbour=1 + 2j), TypeError, r"c_neighbour must be a real number .*got complex \(1\+2j\)"),
    (dict(variant="fast"), ValueError, "variant must be 'auto', one of 'tma_store', 'tma', 'thread', 'mbar', 'sync' or "
                                       "a cuadv.pipeline.Variant; got 'fast'"),
    (dict(variant=3), ValueError, "variant must be .*got 3"),
    (dict(variant=["tma"]), ValueError, r"variant must be .*got \['tma'\]"),
    (dict(stream="s"), KernelArgumentError, "cannot use str as a stream"),
    (dict(x=FakeArray((64, 64), "<c8", address=X)), LaunchConfigError, r"x must be a 2-D float32 array; got complex64"),
    (dict(out=x64()), LaunchConfigError, r"out \(at 0x100000\) overlaps x \(at 0x100000\): the stencil reads "
                                         r"neighbours, so it cannot run in place"),
    (dict(out=FakeArray((64, 64), address=X + 256 * 63)), LaunchConfigError, "overlaps x"),  # out row 0 = x row 63
    (dict(out=FakeArray((64, 64), address=OUT, readonly=True)), KernelArgumentError, "out is read-only"),
    (dict(out=FakeArray((64, 64), strides=(512, 8), address=OUT)), LaunchConfigError, "out must have contiguous rows"),
    (dict(out=FakeArray((4096,), address=OUT)), LaunchConfigError, r"out must be a float32 array of x's shape "
                                                                   r"\(64, 64\); got float32 of shape \(4096,\)"),
])
def test_stencil_mistakes(kwargs, error, text):
    args = dict(x=x64(), out=None, **COEF)
    args.update(kwargs)
    x, out = args.pop("x"), args.pop("out")
    for call in (pipeline.stencil, pipeline.prepare_stencil):
        with pytest.raises(error, match=text):
            call(x, out, **args)


def test_a_tma_variant_on_a_gpu_without_tma_names_the_fallback(monkeypatch):
    monkeypatch.setattr(pipeline, "_device_has_tma", lambda: (False, "8.0"))
    with pytest.raises(UnsupportedFeatureError, match=r"stencil variant 'tma_store' \(TMA\) needs compute capability "
                                                      r">= 9.0 \(got 8.0\); fallback: variant='thread' or 'mbar'"):
        pipeline.stencil(x64(), variant="tma_store", **COEF)


def test_a_variant_without_a_built_kernel_is_refused_before_any_compile():
    from cuadv.pipeline import STENCIL_VARIANTS, Variant
    from cuadv.pipeline.stencil import VARIANTS

    unbuilt = Variant("tile", "thread", 3)
    assert unbuilt not in VARIANTS and STENCIL_VARIANTS["thread"] in VARIANTS
    for call in (pipeline.stencil, pipeline.prepare_stencil):
        with pytest.raises(ValueError, match=r"has no built kernel: a Variant must be one of "
                                             r"cuadv.pipeline.BUILT_VARIANTS"):
            call(x64(), variant=unbuilt, **COEF)


def test_a_gpu_before_compute_capability_8_names_the_capability_and_the_fallback(monkeypatch):
    """None of the stencil's kernels builds below 8.0 (they stage tiles with cp.async): the check comes before any
    compile, so the error is no NVRTC log."""
    from types import SimpleNamespace

    import cuadv.device as device

    from .runtime_fakes import AMPERE

    monkeypatch.setattr(pipeline, "_device_has_tma", DEVICE_HAS_TMA)
    turing = SimpleNamespace(compute_capability=(7, 5), cc_string=lambda: "7.5")
    monkeypatch.setattr(device, "current_device", lambda: SimpleNamespace(caps=turing))
    with pytest.raises(UnsupportedFeatureError, match=r"asynchronous copies into shared memory \(cp.async\) needs "
                                                      r"compute capability >= 8.0 \(got 7.5\); fallback: "):
        pipeline.prepare_stencil(x64(), **COEF)
    monkeypatch.setattr(device, "current_device", lambda: SimpleNamespace(caps=AMPERE))
    assert DEVICE_HAS_TMA() == (False, "8.0")


def test_tma_stores_into_rows_that_end_inside_16_bytes_are_refused(monkeypatch):
    monkeypatch.setattr(pipeline, "_device_has_tma", lambda: (True, "9.0"))
    x = FakeArray((64, 63), strides=(256, 4), address=X)
    with pytest.raises(LaunchConfigError, match=r"stores out by TMA, which writes whole 16-byte units: out's rows "
                                                r"\(63 float32\) end inside one.*fallback: variant='tma'"):
        pipeline.stencil(x, FakeArray((64, 63), strides=(256, 4), address=OUT), variant="tma_store", **COEF)


class NeverLaunched:
    def __call__(self, *args, **kwargs):
        raise AssertionError("launched although the arrays are bad")


@pytest.mark.parametrize("x, out, error, text", [
    (FakeArray((32, 64), address=X), None, LaunchConfigError, r"x has shape \(32, 64\) but this stencil was prepared "
                                                              r"for \(64, 64\); prepare another"),
    (x64(), x64(), LaunchConfigError, "overlaps x"),
    (x64(), FakeArray((64, 64), "<f8", address=OUT), LaunchConfigError, "out must be a float32 array of x's shape"),
    (x64(), np.zeros((64, 64), np.float32), KernelArgumentError, "out is a NumPy array in host memory"),
])
def test_a_prepared_stencil_refuses_other_arrays(x, out, error, text):
    prepared = pipeline.PreparedStencil((64, 64), pipeline.STENCIL_VARIANTS["thread"], 0.5, 0.125, NeverLaunched())
    with pytest.raises(error, match=text):
        prepared(x, out)
