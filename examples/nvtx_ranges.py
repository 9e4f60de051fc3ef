"""Name your own launches on the Nsight Systems timeline with cuadv.nvtx ranges.

A range opened on the host covers the kernels launched inside it; Nsight Systems draws it on the
thread's NVTX row and projects it onto the GPU rows, so each kernel shows under the step that
launched it. Three forms: ``annotate`` (a with-block), ``Steps`` (consecutive ranges, each step
ending the previous one) and ``push`` (returns the call that closes the range).

    nsys profile -t cuda,nvtx -o nvtx_ranges python examples/nvtx_ranges.py
    nsys stats -r nvtx_sum nvtx_ranges.nsys-rep      # the ranges and their times, as a table

The ranges go through the ``nvtx`` package when it is installed (``pip install nvtx``; they then sit in
the domain "cuadv"), else through CuPy's NVTX bindings (CuPy is imported here); without either they do
nothing. Needs a CUDA GPU and CuPy. Checks the result against NumPy.
"""

from __future__ import annotations

import sys

import numpy as np

import cuadv
from cuadv import nvtx

SOURCE = r"""
// Three-point average with the ends held fixed, then a scale: two kernels per iteration.
extern "C" __global__ void smooth(const float* x, float* y, unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = (i == 0 || i == n - 1) ? x[i] : (x[i - 1] + x[i] + x[i + 1]) * (1.0f / 3.0f);
}
extern "C" __global__ void scale(float* y, float a, unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] *= a;
}
"""
BLOCK = 256


def build(arch: str | None = None) -> cuadv.CompiledModule:
    return cuadv.compile_source(SOURCE, name="nvtx_example", arch=arch)


def reference(x: np.ndarray, a: float, iterations: int) -> np.ndarray:
    """The iterations in NumPy float32, in the kernels' order of operations."""
    for _ in range(iterations):
        y = x.copy()
        y[1:-1] = (x[:-2] + x[1:-1] + x[2:]) * np.float32(1.0 / 3.0)
        x = y * np.float32(a)
    return x


def main(iterations: int = 8, n: int = 1 << 22) -> None:
    import cupy as cp

    a = 1.01
    with nvtx.annotate("setup: compile and upload"):
        module = build()
        smooth, scale = module.kernel("smooth"), module.kernel("scale")
        config = cuadv.LaunchConfig(grid=(n + BLOCK - 1) // BLOCK, block=BLOCK)
        x0 = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        bufs = [cp.asarray(x0), cp.empty(n, dtype=cp.float32)]

    steps = nvtx.Steps()
    for k in range(iterations):
        steps.step(f"iteration {k}")  # ends "iteration k-1"
        src, dst = bufs[k % 2], bufs[(k + 1) % 2]
        with nvtx.annotate("smooth"):
            cuadv.launch(smooth, config, src, dst, np.uint32(n))
        with nvtx.annotate("scale"):
            cuadv.launch(scale, config, dst, np.float32(a), np.uint32(n))
    steps.close()

    close = nvtx.push("check against NumPy")
    got = cp.asnumpy(bufs[iterations % 2])
    want = reference(x0, a, iterations)
    close()
    if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
        sys.exit(f"wrong result: largest difference {np.abs(got - want).max():.3g}")
    print(f"{iterations} iterations of smooth + scale over {n} floats match NumPy; "
          "under nsys each kernel shows inside its 'iteration k' range")


if __name__ == "__main__":
    main(*(int(v) for v in sys.argv[1:3]))
