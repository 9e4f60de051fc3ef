"""A chain of small dependent kernels with programmatic dependent launch (PDL), from Python.

Each kernel is one "layer": y = x * scale + shift, with its own table of coefficients. Loading that
table into shared memory needs nothing from the previous layer, so it is the independent setup that
PDL lets overlap the previous kernel. The order inside the kernel is what matters:

    setup (own coefficients) -> cuadv::pdl::wait() -> cuadv::pdl::launch_dependents() -> work on x

- Nothing the previous layer writes is read before wait(): the trigger publishes no memory.
- The trigger sits right after the wait. A trigger before the wait would let every later layer be
  scheduled as far as blocks fit, which measured slower in a CUDA graph on an H200 when there is
  little setup to hide (cuadv bench pdl).

    PYTHONPATH=src python examples/pdl_layers.py [layers]

Only the public API: ``cuadv.pdl.launch_chain`` runs the chain in a stream, ``cuadv.pdl.prepare_chain(...,
graph=True)`` captures it once as a CUDA graph (the PDL links become programmatic edges). Checks the result
against NumPy, then times the graph with and without PDL and prints the time saved per kernel boundary.
On a GPU without PDL it runs the plain graph (the fallback).
"""

from __future__ import annotations

import sys

import numpy as np

import cuadv
from cuadv.pdl import Step, launch_chain, prepare_chain

TABLE = 1024  # coefficients per layer (scale, then shift)
THREADS = 256

SOURCE = r"""
#include <cuadv/pdl.cuh>

constexpr int kTable = 1024;

extern "C" __global__ void layer(const float* x, float* y, const float* coeffs, unsigned int n) {
  __shared__ float scale[kTable], shift[kTable];
  for (int j = threadIdx.x; j < kTable; j += blockDim.x) {  // independent setup: this layer's own table
    scale[j] = coeffs[j];
    shift[j] = coeffs[kTable + j];
  }
  __syncthreads();                   // the table is in shared memory before any thread reads it
  cuadv::pdl::wait();                // x (the previous layer's y) is complete and visible from here on
  cuadv::pdl::launch_dependents();   // the next layer may be scheduled now; its setup overlaps our work
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const unsigned int j = i % kTable;
    y[i] = __fadd_rn(__fmul_rn(x[i], scale[j]), shift[j]);  // no contraction: NumPy rounds the same way
  }
}
"""


def build(arch: str | None = None) -> cuadv.CompiledModule:
    return cuadv.compile_source(SOURCE, name="pdl_layers_example", arch=arch)


def reference(x: np.ndarray, coeffs: np.ndarray) -> np.ndarray:
    """The chain in NumPy float32: coeffs[k] holds layer k's scales, then its shifts."""
    j = np.arange(x.size) % TABLE
    for c in coeffs:
        x = x * c[:TABLE][j] + c[TABLE:][j]
    return x


def main(layers: int = 64) -> None:
    import cupy as cp

    caps = cuadv.current_device().caps
    has_pdl = caps.compute_capability >= (9, 0)
    if not has_pdl:
        print(f"PDL needs compute capability 9.0 (this GPU: {caps.cc_string()}); running the plain graph only")
    kernel = build().kernel("layer")
    n = caps.sm_count * THREADS * 4
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal(n, dtype=np.float32)
    coeffs = np.concatenate([rng.uniform(0.5, 1.5, (layers, TABLE)), rng.uniform(-0.1, 0.1, (layers, TABLE))],
                            axis=1).astype(np.float32)
    bufs = [cp.asarray(x0), cp.empty(n, dtype=cp.float32)]
    table = cp.asarray(coeffs)
    cp.cuda.Device().synchronize()  # the copies above ran on the default stream, which ours does not wait for
    cfg = cuadv.LaunchConfig(grid=caps.sm_count, block=THREADS)
    # a chain's links: Step(kernel, config, args), or the same as a plain (kernel, config, args) tuple
    steps = [Step(kernel, cfg, (bufs[k % 2], bufs[(k + 1) % 2], table[k], np.uint32(n))) for k in range(layers)]

    want = reference(x0, coeffs)
    per_kernel = {}
    with cp.cuda.Stream(non_blocking=True) as stream:  # stream=None below: CuPy's current stream, this one
        for pdl in (False, True) if has_pdl else (False,):
            bufs[0].set(x0)
            launch_chain(steps, pdl=pdl)  # in the stream, every link checked before the first launch
            if not np.array_equal(cp.asnumpy(bufs[layers % 2]), want):
                sys.exit(f"wrong result with pdl={pdl}")
            with prepare_chain(steps, pdl=pdl, graph=True) as chain:  # captured once
                per_kernel[pdl] = cuadv.time_gpu(chain, stream=stream, repeats=20).median_ms * 1e3 / layers
    if not has_pdl:
        print(f"{layers} layers as a CUDA graph: {per_kernel[False]:.2f} us per kernel")
        return
    saved = (per_kernel[False] - per_kernel[True]) * layers / (layers - 1)
    print(f"{layers} layers of {n} floats on {caps.name}, as a CUDA graph: {per_kernel[False]:.2f} us per kernel "
          f"without PDL, {per_kernel[True]:.2f} us with it: {saved:.2f} us saved per kernel boundary")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
