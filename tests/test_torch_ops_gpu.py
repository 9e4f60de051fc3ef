"""cuadv.torch_ops on the GPU: the custom ops match cuadv and torch, run on torch's current stream, and
torch.compile(fullgraph=True) keeps them in one graph (a graph break would raise)."""

import numpy as np
import pytest

from cuadv import torch_ops
from cuadv.work_stealing import TileKernel

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    torch_ops.register()
    return torch


def test_histogram_and_bincount_ops_match_torch(torch):
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randint(-3, 5000, (100_003,), device="cuda", dtype=torch.int32, generator=g)
    counts = torch.ops.cuadv.histogram(x, 4096, 0.0, 4096.0)
    inside = x[(x >= 0) & (x <= 4096)].long()  # numpy's last bin is closed: 4096 counts in bin 4095
    reference = torch.bincount(inside.clamp(max=4095), minlength=4096)
    assert counts.dtype == torch.int64 and torch.equal(counts, reference)
    positive = x.clamp(min=0)
    assert torch.equal(torch.ops.cuadv.bincount(positive, 10), torch.bincount(positive, minlength=10))


def test_histogram_op_compiles_without_a_graph_break(torch):
    def f(x):
        counts = torch.ops.cuadv.histogram(x * 2, 256, 0.0, 256.0)
        return counts.float() / x.numel()

    compiled = torch.compile(f, fullgraph=True)
    x = torch.arange(0, 128, device="cuda", dtype=torch.int32).repeat(10)
    expected = torch.zeros(256, device="cuda")
    expected[0:256:2] = 10 / x.numel()
    assert torch.equal(compiled(x), expected)


def test_tile_op_compiles_and_writes_in_place(torch):
    kernel = TileKernel("float* v, unsigned long long n, float alpha",
                        "const unsigned long long i = tile.index * 256 + threadIdx.x;\n"
                        "      if (i < n) v[i] *= alpha;", policy="auto", block=256, name="torch_op_scale")
    scale = torch_ops.tile_op("cuadv_tests::scale", kernel, "(Tensor(a!) v, float alpha) -> ()",
                              lambda v, alpha: (-(-v.numel() // 256), (v, v.numel(), alpha)))

    def f(v):
        torch.ops.cuadv_tests.scale(v, 3.0)
        return v + 1

    v = torch.arange(1000, device="cuda", dtype=torch.float32)
    out = torch.compile(f, fullgraph=True)(v)
    expected = np.arange(1000, dtype=np.float32) * 3
    assert np.array_equal(v.cpu().numpy(), expected) and np.array_equal(out.cpu().numpy(), expected + 1)
    scale(v, 0.5)  # the eager wrapper
    assert np.array_equal(v.cpu().numpy(), expected * 0.5)


def test_a_tensor_that_requires_grad_is_counted(torch):
    """An activation or a parameter (requires_grad) is counted as torch.histc counts it: torch refuses its CUDA
    array interface, so cuadv reads its detached alias (the same memory)."""
    g = torch.Generator(device="cuda").manual_seed(11)
    w = torch.rand(50_001, device="cuda", generator=g).requires_grad_()
    reference = torch.histc(w.detach(), bins=64, min=0.0, max=1.0).long()
    assert torch.equal(torch.ops.cuadv.histogram(w, 64, 0.0, 1.0), reference)
    import cuadv

    counts, edges = cuadv.histogram(w, bins=64, range=(0.0, 1.0))
    assert torch.equal(counts, reference) and edges.numel() == 65 and not counts.requires_grad
