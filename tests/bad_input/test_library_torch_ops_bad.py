"""cuadv.torch_ops: a CPU tensor given to a cuadv op is refused naming the fallback, the fake kernels refuse what the
real ops refuse (so torch.compile reports it where it traces the call), and a malformed tile op is refused before
anything is registered. Needs PyTorch (a CPU build suffices); the cases of tests/test_torch_ops_cpu.py are not
repeated here."""

import pytest

torch = pytest.importorskip("torch")

from cuadv import torch_ops  # noqa: E402
from cuadv.errors import KernelArgumentError  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def registered():
    torch_ops.register()


@pytest.mark.parametrize("call, text", [
    (lambda: torch.ops.cuadv.histogram(torch.zeros(8), 4, 0.0, 1.0),
     r"torch.ops.cuadv.histogram needs a CUDA tensor; x is on cpu; fallback: torch.histc\(x, bins, lo, hi\)"),
    (lambda: torch.ops.cuadv.bincount(torch.zeros(8, dtype=torch.int32)),
     r"torch.ops.cuadv.bincount needs a CUDA tensor; x is on cpu; fallback: torch.bincount\(x, minlength=minlength\)"),
])
def test_a_cpu_tensor_names_the_fallback(call, text):
    with pytest.raises(KernelArgumentError, match=text):
        call()


@pytest.mark.parametrize("call, error, text", [
    (lambda x: torch.ops.cuadv.histogram(x, 0, 0.0, 1.0), ValueError, r"bins = 0 is outside \[1, 1073741824\]"),
    (lambda x: torch.ops.cuadv.histogram(x.bool(), 4), TypeError, "x has dtype bool; cuadv counts numbers"),
    (lambda x: torch.ops.cuadv.histogram(x.to(torch.complex64), 4), TypeError, "x has dtype complex64"),
    (lambda x: torch.ops.cuadv.histogram(x, 4, 0.0), ValueError, "give both lo and hi, or neither .*lo=0.0, hi=None"),
    (lambda x: torch.ops.cuadv.bincount(x.float()), TypeError, "x has dtype float32; cuadv counts non-negative "
                                                               "integers"),
    (lambda x: torch.ops.cuadv.bincount(x.reshape(2, 4)), ValueError, r"bincount needs a 1-D tensor, got shape "
                                                                      r"\(2, 4\)"),
])
def test_the_fake_kernels_refuse_what_the_ops_refuse(call, error, text):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()):
        x = torch.empty(8, dtype=torch.int32)
        with pytest.raises(error, match=text):
            call(x)


def kernel(tiles, *args):
    raise AssertionError("launched")


@pytest.mark.parametrize("args, text", [
    ((None, kernel, "(Tensor(a!) v) -> ()", lambda v: (1, (v,))), "qualname and schema must be str, got NoneType"),
    (("mylib_bad::a", kernel, b"(Tensor(a!) v) -> ()", lambda v: (1, (v,))), "got str and bytes"),
    (("mylib_bad::b", "kernel", "(Tensor(a!) v) -> ()", lambda v: (1, (v,))), "kernel .* and launch .* must be "
                                                                              "callable, got str and function"),
    (("mylib_bad::c", kernel, "(Tensor(a!) v) -> ()", (1, ())), "must be callable, got function and tuple"),
])
def test_a_malformed_tile_op_is_refused(args, text):
    with pytest.raises(TypeError, match=text):
        torch_ops.tile_op(*args)
