"""Blocks that exchange data mid-kernel: grid.sync() under a checked cooperative launch, with the
two-launch fallback, plus cuadv's block_sum and two_phase ops. Public API only; checks itself against NumPy.

The user kernel below has two phases: every block sums its grid-stride share of x with
``cuadv::groups::block_sum`` (phase 1), then every block reads all the partial sums and writes
y[i] = sum(x) - x[i] (phase 2). Between them the grid must agree that every partial is written:

- ``grid.sync()`` in one kernel, launched cooperatively by ``cuadv.cooperative.grid_sync_launch``,
  which checks the grid against the co-resident maximum first (a grid.sync() in a grid that does
  not fit on the GPU at once would deadlock); or
- the same phases as two kernels (the kernel boundary orders them): the fallback on GPUs without
  cooperative launch, and for grids larger than the maximum.

    PYTHONPATH=src python examples/cooperative_grid_sync.py [n]
"""

from __future__ import annotations

import sys

import numpy as np

import cuadv
from cuadv import cooperative

THREADS = 256

SOURCE = r"""
#include <cooperative_groups.h>
#include <cuadv/groups.cuh>
namespace cg = cooperative_groups;

__device__ void phase1(const int* x, int* partial, unsigned n) {
  int s = 0;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += x[i];
  s = cuadv::groups::block_sum(cg::this_thread_block(), s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__device__ void phase2(const int* x, const int* partial, int* y, unsigned n) {
  int s = 0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) s += partial[b];
  const int total = cuadv::groups::block_sum(cg::this_thread_block(), s);
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = total - x[i];
}

// Cooperative launch only (cuadv.cooperative.grid_sync_launch).
extern "C" __global__ void fused(const int* x, int* partial, int* y, unsigned n) {
  phase1(x, partial, n);
  cg::this_grid().sync();  // every block's partial sum is written and visible to every block
  phase2(x, partial, y, n);
}

// The fallback: the same phases, ordered by the kernel boundary.
extern "C" __global__ void first(const int* x, int* partial, int* y, unsigned n) { phase1(x, partial, n); }
extern "C" __global__ void second(const int* x, int* partial, int* y, unsigned n) { phase2(x, partial, y, n); }
"""


def build(arch: str | None = None) -> cuadv.CompiledModule:
    return cuadv.compile_source(SOURCE, name="cooperative_grid_sync", arch=arch)


def reference(x: np.ndarray) -> np.ndarray:
    """y = sum(x) - x, with int32 wrap-around as on the GPU."""
    wide = x.astype(np.int64)
    return ((wide.sum() - wide) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def main(n: int = 1_000_003) -> None:
    import cupy as cp

    module = build()
    fused, first, second = (module.kernel(k) for k in ("fused", "first", "second"))
    smem = THREADS * 4  # block_sum's dynamic shared memory
    host = np.random.default_rng(0).integers(-1000, 1001, size=n).astype(np.int32)
    x = cp.asarray(host)
    want = reference(host)

    top = cooperative.max_cooperative_grid(fused, THREADS, smem)
    partial = cp.zeros(top, dtype=cp.int32)
    y = cp.zeros(n, dtype=cp.int32)
    try:
        config = cooperative.grid_sync_launch(fused, THREADS, x, partial, y, np.uint32(n), shared_mem=smem)
        assert np.array_equal(cp.asnumpy(y), want), "grid.sync() version differs from NumPy"
        print(f"grid.sync(): {config.grid_blocks} blocks (the co-resident maximum {top}) match NumPy")
        try:
            cooperative.grid_sync_launch(fused, THREADS, x, partial, y, np.uint32(n), grid=top + 1, shared_mem=smem)
        except cuadv.LaunchConfigError as exc:
            print(f"refused before launch: {exc}")
    except cuadv.UnsupportedFeatureError as exc:
        print(f"no cooperative launch here ({exc}); running the two-kernel fallback only")

    y2 = cp.zeros(n, dtype=cp.int32)
    for k in (first, second):  # the fallback: any grid size works
        cuadv.launch(k, cuadv.LaunchConfig(grid=top, block=THREADS, shared_mem=smem), x, partial, y2, np.uint32(n))
    assert np.array_equal(cp.asnumpy(y2), want), "two-kernel version differs from NumPy"
    print("two kernels: match NumPy")

    sums = cooperative.block_sum(x, 256)
    total = cooperative.block_sum(x, 256, total=True)
    padded = np.zeros(-(-n // 256) * 256, dtype=np.int64)
    padded[:n] = host
    assert np.array_equal(cp.asnumpy(sums), padded.reshape(-1, 256).sum(axis=1))
    assert int(total.get()[0]) == int(host.astype(np.int64).sum())
    print(f"block_sum: {sums.size} block sums and the total {int(total.get()[0])} match NumPy")

    # cuadv's own two-phase op, both ways: each round x += sum(x) (mod 2^32), in place on uint32
    start = cp.asarray(host.view(np.uint32))
    want_rounds = cooperative.two_phase_reference(cp.asnumpy(start), 3)
    for mode in ("grid_sync", "two_kernels"):
        try:
            op = cooperative.prepare_two_phase(start, 3, mode=mode)  # launch checked once, partials kept
        except cuadv.UnsupportedFeatureError as exc:
            print(f"two_phase {mode}: {exc}")
            continue
        v = start.copy()
        op(v)
        assert np.array_equal(cp.asnumpy(v), want_rounds), f"two_phase {mode} differs from NumPy"
        print(f"two_phase, mode {mode!r}: 3 rounds on a grid of {op.grid} blocks match NumPy")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_003)
