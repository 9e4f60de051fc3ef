"""cuadv.torch_ops without a GPU: the ops are defined, their fake kernels give torch.compile the shapes, and a
bad tile op is refused before anything is registered."""

import pytest

torch = pytest.importorskip("torch")

from cuadv import torch_ops  # noqa: E402


class RecordingKernel:
    def __init__(self):
        self.calls = []

    def __call__(self, tiles, *args):
        self.calls.append((tiles, args))


def test_histogram_and_bincount_have_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    torch_ops.register()
    torch_ops.register()  # a second call does nothing
    with FakeTensorMode(shape_env=ShapeEnv()):
        x = torch.empty(1000, dtype=torch.int32)
        counts = torch.ops.cuadv.histogram(x, 64, 0.0, 64.0)
        assert counts.shape == (64,) and counts.dtype == torch.int64
        lengths = torch.ops.cuadv.bincount(x, 3)
        assert lengths.dtype == torch.int64 and lengths.dim() == 1  # its length is known only from the data


@pytest.mark.parametrize("qualname, schema, message", [
    ("cuadv::mine", "(Tensor(a!) v) -> ()", "cuadv's own"),
    ("mylib_cpu::ro", "(Tensor v) -> ()", "mark the tensors"),
    ("mylib_cpu::ret", "(Tensor(a!) v) -> Tensor", "returns nothing"),
    ("noname", "(Tensor(a!) v) -> ()", "mylib::name"),
])
def test_a_bad_tile_op_is_refused(qualname, schema, message):
    with pytest.raises(ValueError, match=message):
        torch_ops.tile_op(qualname, RecordingKernel(), schema, lambda v: (1, (v,)))


def test_tile_op_is_defined_once_and_fakes_in_place():
    from torch._subclasses.fake_tensor import FakeTensorMode

    kernel = RecordingKernel()
    scale = torch_ops.tile_op("mylib_cpu::scale", kernel, "(Tensor(a!) v, float alpha) -> ()",
                              lambda v, alpha: (v.numel(), (v, v.numel(), alpha)))
    with pytest.raises(ValueError, match="already defined"):
        torch_ops.tile_op("mylib_cpu::scale", kernel, "(Tensor(a!) v) -> ()", lambda v: (1, (v,)))
    with FakeTensorMode():
        assert scale(torch.empty(8), 2.0) is None
    assert kernel.calls == []  # the fake kernel never launches
