"""Neighbouring blocks reading each other's shared memory: a 3-point stencil whose halo values come from
distributed shared memory (DSM) inside a thread block cluster. Public API only; checks itself against NumPy.

Every block loads its tile of x into shared memory. The tile's two halo values (the element before it
and the one after it) belong to the neighbouring blocks' tiles: inside a cluster they are read from the
neighbour's shared memory (``cuadv::dsm::map_shared_rank``), and only at the cluster's two edges from
global memory. The larger the cluster, the fewer halo reads go to global memory, and the fewer blocks
fit on the GPU at once (``cuadv.cooperative.active_clusters``). The calls shown:

- ``largest_cluster`` and ``active_clusters``: which cluster sizes this kernel can use, and how many
  clusters of each fit at once, before any launch;
- ``cluster_launch``: one checked launch with a run-time cluster shape;
- ``cluster_config`` then ``cuadv.prepare``: the same checks once, then a launcher to call many times
  (here inside ``cuadv.time_gpu``);
- the refusals before launch: a grid the cluster does not divide, a cluster larger than the largest.

Needs compute capability 9.0 (clusters); elsewhere it says so and stops.

    PYTHONPATH=src python examples/cluster_halo_stencil.py [n]
"""

from __future__ import annotations

import sys

import numpy as np

import cuadv
from cuadv import cooperative

BLOCK = 256
SOURCE = r"""
#include <cuadv/dsm.cuh>
namespace dsm = cuadv::dsm;

// y[i] = (x[i-1] + x[i] + x[i+1]) / 3, with x[-1] = x[n] = 0. Launch with a cluster (any size, 1-D) and
// blockDim.x * 4 bytes of dynamic shared memory; the grid covers n in whole clusters.
extern "C" __global__ void blur3(const float* x, float* y, unsigned n) {
  extern __shared__ float tile[];
  const unsigned t = threadIdx.x, width = blockDim.x;
  const unsigned long long i = (unsigned long long)blockIdx.x * width + t;
  tile[t] = i < n ? x[i] : 0.0f;  // past the end: 0, which is x[n]

  // DSM rule 2: every block's tile is written before any block reads a neighbour's.
  dsm::arrive_release();  // this thread's tile value is visible to the whole cluster after the wait below
  dsm::wait_acquire();    // every thread of every block of the cluster has stored its value

  const unsigned rank = dsm::block_rank(), last = dsm::num_blocks() - 1;
  float left, right;
  if (t > 0) left = tile[t - 1];
  else if (rank > 0) left = *dsm::map_shared_rank(&tile[width - 1], rank - 1);  // the left neighbour's tile
  else left = (i > 0 && i <= n) ? x[i - 1] : 0.0f;                             // the cluster's edge
  if (t + 1 < width) right = tile[t + 1];
  else if (rank < last) right = *dsm::map_shared_rank(&tile[0], rank + 1);      // the right neighbour's tile
  else right = i + 1 < n ? x[i + 1] : 0.0f;
  if (i < n) y[i] = (left + tile[t] + right) * (1.0f / 3.0f);

  dsm::sync();  // DSM rules 1 and 3: no block exits (freeing its tile) while a neighbour may still read it
}
"""


def build(arch: str | None = None) -> cuadv.CompiledModule:
    return cuadv.compile_source(SOURCE, name="cluster_halo_stencil", arch=arch)


def reference(x: np.ndarray) -> np.ndarray:
    """The kernel's sums in its order, in float32: ((left + centre) + right) * (1/3)."""
    padded = np.concatenate([[0], x, [0]]).astype(np.float32)
    return ((padded[:-2] + padded[1:-1]) + padded[2:]) * np.float32(1.0 / 3.0)


def main(n: int = 10_000_019) -> None:
    import cupy as cp

    caps = cuadv.current_device().caps
    if not caps.cluster_launch:  # before compiling: <cuadv/dsm.cuh> refuses targets below sm_90
        print(f"no thread block clusters on this GPU (compute capability {caps.cc_string()}; they need 9.0)")
        return
    kernel = build().kernel("blur3")
    smem = BLOCK * 4
    largest = cooperative.largest_cluster(kernel, BLOCK, smem)
    host = np.random.default_rng(0).integers(-1000, 1001, size=n).astype(np.float32)
    x = cp.asarray(host)
    want = reference(host)
    blocks = -(-n // BLOCK)
    print(f"n = {n:,}: {blocks:,} blocks of {BLOCK}; largest portable cluster for this kernel: {largest}")

    sizes = [c for c in (1, 2, 4, 8, 16) if c <= largest]
    for c in sizes:
        grid = -(-blocks // c) * c  # whole clusters: the cluster must divide the grid
        y = cp.full(n, cp.nan, dtype=cp.float32)
        cooperative.cluster_launch(kernel, grid, BLOCK, x, y, np.uint32(n), cluster=c, shared_mem=smem)
        assert np.array_equal(cp.asnumpy(y), want), f"cluster of {c} differs from NumPy"

        config = cooperative.cluster_config(kernel, grid, BLOCK, cluster=c, shared_mem=smem)
        run = cuadv.prepare(kernel, config)  # checked once; each call is one launch
        timing = cuadv.time_gpu(lambda: run(x, y, np.uint32(n)), repeats=20)
        fits = cooperative.active_clusters(kernel, BLOCK, cluster=c, shared_mem=smem)
        edges = 2 * grid // c
        print(f"cluster {c:2}: matches NumPy; {fits:5} clusters fit at once; {edges:6,} halo reads from global "
              f"memory ({2 * grid:,} without DSM); {timing.median_ms * 1e3:7.1f} us")

    try:
        cooperative.cluster_config(kernel, 2 * sizes[-1] + 1, BLOCK, cluster=sizes[-1], shared_mem=smem)
    except cuadv.LaunchConfigError as exc:
        print(f"refused before launch: {exc}")
    try:
        too_big = cooperative.largest_cluster(kernel, BLOCK, smem, non_portable=True) * 2
        cooperative.cluster_config(kernel, too_big, BLOCK, cluster=too_big, shared_mem=smem)
    except cuadv.LaunchConfigError as exc:  # above 16 on Hopper: the hardware's limit, before the kernel's
        print(f"refused before launch: {exc}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_019)
