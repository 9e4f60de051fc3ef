"""cuadv.cooperative: block_sum and its prepared form, grid_sync_launch, max_cooperative_grid and two_phase. Each
mistake (a block that is no int or out of range, an ``out`` that does not fit, is read-only or overlaps x, a kernel
that is no cuadv Kernel, a launch over the limits) raises, naming the argument, the value and the limit, before the
GPU is reached. The cases of tests/test_cooperative_api_cpu.py are not repeated here."""

import numpy as np
import pytest

from cuadv import cooperative as co
from cuadv.errors import KernelArgumentError, LaunchConfigError
from cuadv.kernel import Kernel

from .library_fakes import FakeArray, forbid

X, OUT = 0x100000, 0x200000


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    forbid(monkeypatch, co, "_caps", "kernel", "max_active_blocks_per_sm", "launch", "prepare")


class FakeKernel(Kernel):
    """A Kernel with nothing loaded."""

    name = "fake"
    static_shared_bytes = 0

    def __init__(self):
        pass


@pytest.mark.parametrize("x, kwargs, error, text", [
    (FakeArray((100,), "<i4"), dict(block=2.5), TypeError, "block must be an int number of threads, got float 2.5"),
    (FakeArray((100,), "<i4"), dict(block="256"), TypeError, "block must be an int .*got str '256'"),
    (FakeArray((100,), "<i4"), dict(block=True), TypeError, "block must be an int .*got bool True"),
    (FakeArray((100,), "<i4"), dict(block=-1), LaunchConfigError, r"block of -1 threads is outside \[1, 1024\]"),
    (FakeArray((100,), "<i4"), dict(total="yes"), TypeError, "total must be True or False, got 'yes'"),
    (FakeArray((100,), "<i4"), dict(block=1, total=True), LaunchConfigError,  # would never come down to one sum
     "total=True needs block >= 2 .*got block=1"),
    (FakeArray((100,), "|b1"), {}, TypeError, "x must be int32 or float32, got bool"),
    (FakeArray((100,), "<i8"), {}, TypeError, "x must be int32 or float32, got int64"),
    (FakeArray((100,), "<i4", strides=(8,)), {}, ValueError, r"x must be contiguous, got byte strides \(8,\)"),
    (FakeArray((2**32,), "<f4"), {}, ValueError, "block_sum takes at most 4294967295 elements .*got 4294967296"),
    (object(), {}, KernelArgumentError, "cannot use object as a device array"),
])
def test_block_sum_mistakes(x, kwargs, error, text):
    for call in (co.block_sum, co.prepare_block_sum):
        with pytest.raises(error, match=text):
            call(x, **kwargs)


class NeverLaunched:
    def __call__(self, *args, **kwargs):
        raise AssertionError("launched although the arrays are bad")


@pytest.mark.parametrize("x, out, error, text", [
    (FakeArray((1000,), "<i4", address=X), FakeArray((7,), "<i4", address=OUT), ValueError,
     r"out must have ceil\(1000 / 128\) = 8 elements, got 7"),
    (FakeArray((1000,), "<i4", address=X), FakeArray((8,), "<f4", address=OUT), TypeError,
     "out must be int32, got float32"),
    (FakeArray((1000,), "<i4", address=X), FakeArray((8,), "<i4", address=OUT, readonly=True), KernelArgumentError,
     "out is read-only"),
    (FakeArray((1000,), "<i4", address=X), FakeArray((8,), "<i4", address=X + 16), ValueError,
     r"out \(at 0x100010\) overlaps x \(at 0x100000\): blocks would overwrite elements other blocks still read"),
    (FakeArray((1000,), "<i4", address=X), FakeArray((2, 4), "<i4", address=OUT), ValueError,
     r"out must be 1-D, got shape \(2, 4\)"),
    (FakeArray((1000,), "<i4", address=X), np.zeros(8, np.int32), KernelArgumentError,
     "out: a NumPy array lives in host memory"),
    (FakeArray((999,), "<i4", address=X), None, ValueError, "x has 999 elements; this BlockSum was prepared for 1000"),
    (FakeArray((1000,), "<f4", address=X), None, TypeError, "x must be int32, got float32"),
])
def test_a_prepared_block_sum_refuses_other_arrays(monkeypatch, x, out, error, text):
    monkeypatch.setattr(co, "kernel", lambda name: FakeKernel())
    monkeypatch.setattr(co, "prepare", lambda kernel, config: NeverLaunched())
    prepared = co.BlockSum(1000, np.int32, 128)
    with pytest.raises(error, match=text):
        prepared(x, out=out)


@pytest.mark.parametrize("call, error, text", [
    (lambda: co.grid_sync_launch("kernel", 256), KernelArgumentError, "kernel must be a cuadv Kernel "
                                                                      r"\(CompiledModule.kernel\(name\)\), got str"),
    (lambda: co.grid_sync_launch(FakeKernel(), 2048), LaunchConfigError, "block of 2048 threads exceeds the limit of "
                                                                         "1024 threads per block"),
    (lambda: co.grid_sync_launch(FakeKernel(), 256, grid=0), LaunchConfigError, r"grid dimension x = 0 is outside"),
    (lambda: co.grid_sync_launch(FakeKernel(), 256, shared_mem=-1), LaunchConfigError,
     "dynamic shared memory must be >= 0 bytes, got -1"),
    (lambda: co.max_cooperative_grid(None, 256), KernelArgumentError, "kernel must be a cuadv Kernel .*got NoneType"),
    (lambda: co.max_cooperative_grid(FakeKernel(), (0,)), LaunchConfigError, r"block dimension x = 0 is outside"),
    (lambda: co.max_cooperative_grid(FakeKernel(), 128, shared_mem=-4), LaunchConfigError, "got -4"),
    (lambda: co.prepare_two_phase(FakeArray((64,), "<u4"), 1.5), TypeError, "rounds must be an int, got float 1.5"),
    (lambda: co.prepare_two_phase(FakeArray((64,), "<u4"), True), TypeError, "rounds must be an int, got bool"),
    (lambda: co.prepare_two_phase(FakeArray((64,), "<u4"), block=0), LaunchConfigError, "block of 0 threads"),
    (lambda: co.prepare_two_phase(FakeArray((8, 8), "<u4")), ValueError, r"x must be 1-D, got shape \(8, 8\)"),
])
def test_cooperative_launch_mistakes(call, error, text):
    with pytest.raises(error, match=text):
        call()
