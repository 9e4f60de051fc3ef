// cuadv/groups.cuh - cooperative-groups reductions for user kernels (any GPU with cooperative groups).
//
//   block_sum(block, x)            the sum of x over a cg::thread_block, returned to every thread;
//                                  any block size, callable repeatedly; needs dynamic shared memory
//   tile_sum(tile, x)              the sum over a cg::thread_block_tile<N> (cg::reduce), in every lane
//   tile_sum_shfl_down(tile, x)    the same by a shfl_down tree: the sum is in lane 0 only
//   coalesced_atomic_add(g, p, x)  warp-aggregated atomics: the lanes of a coalesced group add their
//                                  values into *p with ONE atomic, issued by the group's rank 0
//
// cuadv's own block_sum op (cuadv.cooperative.block_sum) runs block_sum from this header; the lab
// checks every helper here against NumPy (cuadv bench cooperative).
//
// Example:
//
//   #include <cuadv/groups.cuh>
//   namespace cg = cooperative_groups;
//   extern "C" __global__ void sums(const float* in, float* out, unsigned n) {  // launch with
//     cg::thread_block block = cg::this_thread_block();                       // blockDim.x * 4 B of
//     const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;                // dynamic shared memory
//     const float s = cuadv::groups::block_sum(block, i < n ? in[i] : 0.0f);
//     if (block.thread_rank() == 0) out[blockIdx.x] = s;
//   }
#pragma once

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cuadv::groups {

namespace cg = cooperative_groups;

// The sum of x over the whole block, returned to every thread.
// Preconditions: every thread of the block calls it (it contains block.sync()); the launch gives at
// least blockDim * sizeof(T) bytes of dynamic shared memory, which this function owns for the
// duration of the call (do not keep other data in dynamic shared memory across it).
// Any block size (not only powers of two), and safe to call several times in a row: the last
// block.sync() keeps a later call from overwriting shared memory before every thread has read
// the total. Summation order is a fixed tree (floating-point results are deterministic for a block
// size, but not the order NumPy uses); integer sums wrap modulo 2^bits as the hardware adds.
template <typename T>
__device__ T block_sum(cg::thread_block block, T x) {
  extern __shared__ unsigned char block_sum_smem[];
  T* smem = reinterpret_cast<T*>(block_sum_smem);
  const unsigned int rank = block.thread_rank();
  const unsigned int size = block.size();
  smem[rank] = x;
  block.sync();  // every thread's value is in shared memory before the tree reads it
  unsigned int half = 1;
  while (half * 2 < size) half *= 2;  // largest power of two below size (size > 1)
  for (unsigned int s = size > 1 ? half : 0; s > 0; s >>= 1) {
    if (rank < s && rank + s < size) smem[rank] += smem[rank + s];
    block.sync();  // this level's partial sums are written before the next level reads them
  }
  const T total = smem[0];
  block.sync();  // every thread has read smem[0] before a later call overwrites shared memory
  return total;
}

// The sum over a tile of N threads (N a power of two <= 32), returned to every lane. No shared
// memory: cg::reduce uses warp shuffles (and redux.sync for 32-bit integers on sm_80+).
// Every thread of the tile must call it.
template <unsigned int N, typename T, typename Parent>
__device__ T tile_sum(const cg::thread_block_tile<N, Parent>& tile, T x) {
  return cg::reduce(tile, x, cg::plus<T>());
}

// The same sum by a hand-written shfl_down tree: log2(N) shuffles; ONLY lane 0 holds the total
// (other lanes hold partial sums). Every thread of the tile must call it.
template <unsigned int N, typename T, typename Parent>
__device__ T tile_sum_shfl_down(const cg::thread_block_tile<N, Parent>& tile, T x) {
  for (int offset = N / 2; offset > 0; offset /= 2) x += tile.shfl_down(x, offset);
  return x;
}

// Warp-aggregated atomic add: the group's values are summed by shuffles and its rank 0 makes one
// atomicAdd of the sum into *address (instead of one atomic per lane). Returns the group's sum in
// every lane. Call it with the group of lanes that are here now:
//
//   if (x & 1) cuadv::groups::coalesced_atomic_add(cg::coalesced_threads(), counter, 1);
//
// Independent thread scheduling does not promise that the lanes taking a divergent branch arrive
// together, so one warp may make several atomics (one per coalesced group); the total is still
// exact. Ordering: the atomic is relaxed (atomicAdd), device scope; it orders nothing else.
template <typename T>
__device__ T coalesced_atomic_add(const cg::coalesced_group& group, T* address, T value) {
  const T sum = cg::reduce(group, value, cg::plus<T>());
  if (group.thread_rank() == 0) atomicAdd(address, sum);
  return sum;
}

}  // namespace cuadv::groups
