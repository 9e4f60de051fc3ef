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


def test_histogram_op_is_kept_out_of_cuda_graphs_where_torch_can_say_so():
    """Without lo and hi the op reads x's min and max back to the host, which no CUDA graph capture allows: inductor
    leaves an op with the cudagraph_unsafe tag out of its CUDA graphs."""
    torch_ops.register()
    unsafe = getattr(torch.Tag, "cudagraph_unsafe", None)
    if unsafe is None:
        pytest.skip(f"torch {torch.__version__} has no cudagraph_unsafe tag")
    assert unsafe in torch.ops.cuadv.histogram.default.tags
    assert unsafe not in torch.ops.cuadv.bincount.default.tags  # its data-dependent length keeps it out already


def test_tile_op_takes_keyword_arguments_in_its_fake_too():
    """A schema's arguments may be passed by name (and keyword-only ones must be): the eager callable, the op and
    its fake kernel take them."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    launches = []
    scale = torch_ops.tile_op("mylib_cpu::scale_kw", RecordingKernel(), "(Tensor(a!) v, *, float alpha) -> ()",
                              lambda v, *, alpha: launches.append(alpha) or (1, (v, alpha)))
    with FakeTensorMode():
        assert scale(torch.empty(8), alpha=2.0) is None
        assert torch.ops.mylib_cpu.scale_kw(torch.empty(8), alpha=3.0) is None
    assert launches == []  # fakes only


def test_two_threads_registering_define_the_ops_once():
    """register() and tile_op check and define under one lock: two threads at once neither both define an op
    (torch would raise 'registered multiple times') nor both succeed for one tile op name."""
    import threading

    start, errors, made = threading.Barrier(4), [], []

    def work(i):
        start.wait()
        try:
            torch_ops.register()
            made.append(torch_ops.tile_op("mylib_cpu::raced", RecordingKernel(), "(Tensor(a!) v) -> ()",
                                          lambda v: (1, (v,))))
        except ValueError as exc:
            errors.append(str(exc))
        except Exception as exc:  # a second definition of the same op
            errors.append(f"unexpected: {exc!r}")

    import sys

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, inside the check-then-define too
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(made) == 1 and len(errors) == 3 and all("already defined" in e for e in errors), errors
    assert hasattr(torch.ops.cuadv, "histogram")
