// cooperative.cu - cooperative groups, grid-wide sync and thread block clusters.
//
//   block_sums<T>        the classic block_sum over cg::thread_block, one sum per block
//   tile_sums<TILE>      warp-level reductions over cg::tiled_partition<TILE>: cg::reduce and a
//                        hand-written shfl_down tree, which must agree
//   odd_sums             cg::coalesced_threads() inside a divergent branch: the lanes that took it
//                        reduce together and one of them does the atomic (warp-aggregated atomics)
//   two_phase            the two-phase kernel under cooperative launch: phase1; grid.sync();
//                        phase2, for `rounds` rounds
//   phase1 / phase2      the same two phases as separate kernels (two launches per round)
//   sync_loop            `iters` grid.sync() calls and nothing else: the cost of one sync
//   empty                nothing: the cost of one kernel boundary
//   cluster_ring         run-time cluster dims: each block reads its neighbour's shared memory
//                        through cluster.map_shared_rank
//   cluster_ring_fixed   the same body with compile-time __cluster_dims__(2, 1, 1)
//
// Grid sync needs a cooperative launch (any GPU with cooperative launch); clusters need sm_90.
// block_sum and the tile reductions come from cuadv/groups.cuh (the same code as before the move:
// SASS and ptxas resources identical for sm_90a and sm_100a); DSM helpers for user kernels are in
// cuadv/dsm.cuh. The Python side is cuadv.cooperative (block_sum, grid_sync_launch, cluster helpers).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include "cuadv/groups.cuh"

namespace cg = cooperative_groups;

using u32 = unsigned int;
using u64 = unsigned long long;

// The classic block_sum, for any block size (the textbook loop assumes a power of two) and callable
// more than once (the textbook version returns smem[0] while a later call may already overwrite it):
// cuadv::groups::block_sum in cuadv/groups.cuh. Needs blockDim * sizeof(T) bytes of dynamic shared memory.
using cuadv::groups::block_sum;

template <typename T>
__global__ void block_sums(const T* __restrict__ in, T* __restrict__ out, u32 n) {
  cg::thread_block block = cg::this_thread_block();
  const u32 i = block.group_index().x * block.size() + block.thread_rank();
  const T total = block_sum(block, i < n ? in[i] : T(0));
  if (block.thread_rank() == 0) out[block.group_index().x] = total;
}

// One sum per TILE consecutive threads, two ways.
template <int TILE>
__global__ void tile_sums(const int* __restrict__ in, int* __restrict__ by_reduce, int* __restrict__ by_shuffle,
                          u32 n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<TILE> tile = cg::tiled_partition<TILE>(block);
  const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
  const int x = i < n ? in[i] : 0;
  const int reduced = cuadv::groups::tile_sum(tile, x);
  const int shuffled = cuadv::groups::tile_sum_shfl_down(tile, x);  // lane 0 of the tree holds the tile's sum
  if (tile.thread_rank() == 0) {
    by_reduce[i / TILE] = reduced;
    by_shuffle[i / TILE] = shuffled;  // lane 0 of the shfl_down tree holds the tile's sum
  }
}

// Per warp: the sum and the count of the odd values, by the lanes holding one.
extern "C" __global__ void odd_sums(const int* __restrict__ in, int* __restrict__ warp_sum,
                                    int* __restrict__ warp_count, u32 n) {
  const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
  const int x = i < n ? in[i] : 0;
  if (x & 1) {
    // The lanes that are here now. Independent thread scheduling does not promise they are all
    // the odd lanes of the warp, so each group adds its share with its own atomic.
    cg::coalesced_group active = cg::coalesced_threads();
    const int sum = cg::reduce(active, x, cg::plus<int>());
    if (active.thread_rank() == 0) {
      atomicAdd(warp_sum + i / 32, sum);
      atomicAdd(warp_count + i / 32, static_cast<int>(active.size()));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The two-phase kernel. One round: every block sums its grid-stride share of x into
// partial[block] (phase 1); every block then adds the grand total to its share of x (phase 2).
// All arithmetic is modulo 2^32, so NumPy's uint32 reproduces it exactly.

__device__ void phase1_body(const u32* x, u32* partial, u64 n) {
  cg::thread_block block = cg::this_thread_block();
  u32 s = 0;
  for (u64 i = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<u64>(gridDim.x) * blockDim.x)
    s += x[i];
  s = block_sum(block, s);
  if (block.thread_rank() == 0) partial[blockIdx.x] = s;
}

__device__ void phase2_body(u32* x, const u32* partial, u64 n) {
  cg::thread_block block = cg::this_thread_block();
  u32 s = 0;
  for (u32 b = threadIdx.x; b < gridDim.x; b += blockDim.x) s += partial[b];
  const u32 total = block_sum(block, s);
  for (u64 i = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<u64>(gridDim.x) * blockDim.x)
    x[i] += total;
}

// Cooperative launch only. partials holds 2 * gridDim.x words: round r uses half r % 2, so one
// grid.sync() per round suffices (a block can reach round r + 2's phase 1, which rewrites half
// r % 2, only after every block passed round r + 1's sync, so after every block's round-r phase 2).
extern "C" __global__ void two_phase(u32* x, u32* partials, u64 n, u32 rounds) {
  cg::grid_group grid = cg::this_grid();
  for (u32 r = 0; r < rounds; ++r) {
    u32* partial = partials + (r & 1u) * gridDim.x;
    phase1_body(x, partial, n);
    grid.sync();  // every block's partial sum is written and visible to every block of the grid
    phase2_body(x, partial, n);
  }
}

// The same phases as two kernels: the kernel boundary orders them and makes phase 1 visible.
extern "C" __global__ void phase1(const u32* x, u32* partial, u64 n) { phase1_body(x, partial, n); }
extern "C" __global__ void phase2(u32* x, const u32* partial, u64 n) { phase2_body(x, partial, n); }

// Cooperative launch only: `iters` grid-wide barriers and nothing else.
extern "C" __global__ void sync_loop(u32 iters, u32* done) {
  cg::grid_group grid = cg::this_grid();
  for (u32 i = 0; i < iters; ++i) grid.sync();  // orders nothing here: the barrier's own cost
  if (grid.thread_rank() == 0) *done = iters;
}

extern "C" __global__ void empty() {}

// ---------------------------------------------------------------------------------------------
// Clusters (sm_90 and newer only: on older targets these kernels are not compiled, and the host
// refuses to launch them naming compute capability 9.0).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// Clusters. Each block publishes its linear block index in its own shared memory; after
// cluster.sync() it reads the value of the next block of its cluster through DSM. Record per
// block: {cluster rank, cluster size, the neighbour's block index}.

__device__ void ring_body(int* out) {
  __shared__ int published;
  cg::cluster_group cluster = cg::this_cluster();
  const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x == 0) published = b;
  cluster.sync();  // every block of the cluster has published before anyone reads (lifetime rule 2)
  if (threadIdx.x == 0) {
    const u32 next = (cluster.block_rank() + 1) % cluster.num_blocks();
    const int* remote = cluster.map_shared_rank(&published, next);
    out[3 * b] = static_cast<int>(cluster.block_rank());
    out[3 * b + 1] = static_cast<int>(cluster.num_blocks());
    out[3 * b + 2] = *remote;
  }
  cluster.sync();  // no block exits while a neighbour may still read its shared memory (rules 1 and 3)
}

extern "C" __global__ void cluster_ring(int* out) { ring_body(out); }

extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_ring_fixed(int* out) { ring_body(out); }
#endif  // __CUDA_ARCH__ >= 900
