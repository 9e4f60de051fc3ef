"""cuadv under torch.compile: the histogram and a TileKernel as torch custom ops, in one compiled graph.

Run: python examples/torch_compile_ops.py   (needs a CUDA GPU and PyTorch)
"""

import torch

import cuadv.torch_ops
from cuadv import TileKernel

cuadv.torch_ops.register()  # torch.ops.cuadv.histogram and torch.ops.cuadv.bincount

# v := alpha * v, 1024 elements per tile, scheduled by the GPU's best policy (steal on Hopper, clc on Blackwell).
scale_kernel = TileKernel("float* v, unsigned long long n, float alpha",
                          "for (unsigned int k = threadIdx.x; k < 1024; k += blockDim.x) {\n"
                          "        const unsigned long long i = tile.index * 1024 + k;\n"
                          "        if (i < n) v[i] *= alpha;\n"
                          "      }", block=256, name="example_scale")
cuadv.torch_ops.tile_op("example::scale", scale_kernel, "(Tensor(a!) v, float alpha) -> ()",
                        lambda v, alpha: (-(-v.numel() // 1024), (v, v.numel(), alpha)))


@torch.compile(fullgraph=True)  # fullgraph: a graph break would raise instead of silently splitting the graph
def normalised_histogram(x: torch.Tensor) -> torch.Tensor:
    y = x * 2.0
    torch.ops.example.scale(y, 0.25)  # y = x / 2, in place
    counts = torch.ops.cuadv.histogram(y, 64, 0.0, 1.0)
    return counts / counts.sum()


def main() -> None:
    x = torch.rand(10_000_019, device="cuda")
    got = normalised_histogram(x)
    want = torch.histc(x / 2, bins=64, min=0.0, max=1.0)  # torch's own histogram of the same values
    assert torch.allclose(got, want / want.sum())
    print(f"torch.compile(fullgraph=True) ran cuadv's histogram and a TileKernel in one graph on "
          f"{torch.cuda.get_device_name()}; matches torch.histc")


if __name__ == "__main__":
    main()
