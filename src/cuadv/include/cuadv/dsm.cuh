// cuadv/dsm.cuh - distributed shared memory (DSM) inside a thread block cluster, for user kernels.
// Needs sm_90 or newer (compile for sm_90a / sm_100a); every wrapper fails at compile time on an
// older target with a message naming sm_90. Launch the kernel with a cluster: a run-time cluster
// (cuadv.LaunchConfig(cluster=...)) or a compile-time __cluster_dims__, never both.
//
// The four lifetime rules of DSM (CUDA Programming Guide, distributed shared memory). Each is restated where it binds below.
//   1. The target block must still exist: a block may read or write another block's shared memory
//      only while that block is running, so no block of the cluster exits before the last
//      cluster barrier that follows every remote access (sync() at the end of the kernel).
//   2. Initialise before the first remote access: every block writes (zeroes, publishes) its own
//      shared memory, then the cluster barrier (sync(), or arrive_release() ... wait_acquire()),
//      and only then does any block touch another block's shared memory.
//   3. All DSM accesses are complete before any block exits: the closing sync() comes after the
//      last remote access of every thread; after it each block touches only its own shared memory.
//   4. Capacity, bank conflicts and remote latency are not free: a remote access costs about as
//      much as an L2 hit, and the cluster size changes how many blocks fit (cuadv.cooperative.
//      active_clusters); measure the sizes you use (cuadv bench cooperative, cuadv bench histogram).
//
// Example (launch with cluster=(C, 1, 1); every block reads its right neighbour's value):
//
//   #include <cuadv/dsm.cuh>
//   extern "C" __global__ void ring(int* out) {
//     __shared__ int mine;
//     if (threadIdx.x == 0) mine = blockIdx.x;                  // rule 2: publish your own first
//     cuadv::dsm::sync();                                        // ... then the cluster barrier
//     if (threadIdx.x == 0) {
//       const unsigned next = (cuadv::dsm::block_rank() + 1) % cuadv::dsm::num_blocks();
//       out[blockIdx.x] = *cuadv::dsm::map_shared_rank(&mine, next);
//     }
//     cuadv::dsm::sync();                                        // rules 1 and 3: nobody leaves early
//   }
#pragma once

#include <cooperative_groups.h>
#include <cuda/std/cstdint>

#include "cuadv/ptx.cuh"

namespace cuadv::dsm {

using u32 = cuda::std::uint32_t;
using cuadv::ptx::arch_at_least;

// ---- where am I in the cluster ----

// %cluster_ctarank: this block's rank in its cluster, 0 .. num_blocks() - 1.  (sm_90)
template <int D = 0>
static inline __device__ u32 block_rank() {
  static_assert(arch_at_least<D>(90), "%cluster_ctarank needs sm_90");
  u32 r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// %cluster_nctarank: the number of blocks in this cluster (1 when launched without a cluster).  (sm_90)
template <int D = 0>
static inline __device__ u32 num_blocks() {
  static_assert(arch_at_least<D>(90), "%cluster_nctarank needs sm_90");
  u32 n;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}

// ---- addressing another block's shared memory ----

// The same shared variable in block `rank` of this cluster, as a generic pointer: plain C++ loads,
// stores and atomics through it reach that block's shared memory (cg::cluster_group::map_shared_rank,
// which emits mapa). Rule 1: dereference it only while block `rank` is still running, i.e. before
// the cluster barrier that ends the kernel. Rule 2: only after that block initialised the variable
// and a cluster barrier separated the two.
template <typename T, int D = 0>
static inline __device__ T* map_shared_rank(T* local, u32 rank) {
  static_assert(arch_at_least<D>(90), "map_shared_rank (mapa) needs sm_90");
  return cooperative_groups::this_cluster().map_shared_rank(local, rank);
}

// The same variable in block `rank` as a 32-bit shared::cluster address, for the ld/st/red wrappers
// below (mapa.shared::cluster.u32; cuadv/ptx.cuh). A pure address computation: it touches no memory,
// so rules 1-3 bind the accesses made through the address, not this call.
template <int D = 0>
static inline __device__ u32 remote_address(const void* local, u32 rank) {
  static_assert(arch_at_least<D>(90), "mapa.shared::cluster needs sm_90");
  return cuadv::ptx::mapa_shared_cluster(cuadv::ptx::smem_addr(local), rank);
}

// ld.shared::cluster.u32 v, [addr];  (sm_90) - a weak load from any block of the cluster. It sees a
// remote block's store only when a cluster barrier (that block's arrive_release, this thread's
// wait_acquire) or an acquire/release pair ordered the two.
template <int D = 0>
static inline __device__ u32 ld_shared_cluster_u32(u32 addr) {
  static_assert(arch_at_least<D>(90), "ld.shared::cluster needs sm_90");
  u32 v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

// st.shared::cluster.u32 [addr], v;  (sm_90) - a weak store into any block of the cluster; the reader
// sees it after the next cluster barrier (arrive_release by this thread, wait_acquire by the reader).
template <int D = 0>
static inline __device__ void st_shared_cluster_u32(u32 addr, u32 v) {
  static_assert(arch_at_least<D>(90), "st.shared::cluster needs sm_90");
  asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// red.shared::cluster.add.u32 [addr], v;  (sm_90) - a relaxed atomic add, no return value. Atomic
// against every other atomic on the word from any block of the cluster; orders nothing else.
template <int D = 0>
static inline __device__ void red_shared_cluster_add_u32(u32 addr, u32 v) {
  static_assert(arch_at_least<D>(90), "red.shared::cluster needs sm_90");
  asm volatile("red.shared::cluster.add.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// atom.shared::cluster.add.u32 old, [addr], v;  (sm_90) - as red_shared_cluster_add_u32, returning the
// old word (a round trip to the remote SM: prefer red where the old value is not needed).
template <int D = 0>
static inline __device__ u32 atom_shared_cluster_add_u32(u32 addr, u32 v) {
  static_assert(arch_at_least<D>(90), "atom.shared::cluster needs sm_90");
  u32 old;
  asm volatile("atom.shared::cluster.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(addr), "r"(v) : "memory");
  return old;
}

// ---- the cluster barrier (split: arrive, then wait) ----
//
// Every thread of every block of the cluster arrives once per phase, then waits; a thread's next
// arrive must follow its wait. Work placed between arrive and wait overlaps the other blocks'
// arrival (it must not depend on them). None of these is .aligned: a thread may arrive or wait
// alone, without its warp converged.

// barrier.cluster.arrive.release;  (sm_90) - this thread arrives at the current phase. Release: its
// earlier writes (its own shared memory, other blocks' shared memory, global memory) are visible to
// every thread of the cluster that completes wait_acquire() on this phase. Rule 2: the arrive that
// follows initialisation; rule 3: the arrive that follows the last remote access.
template <int D = 0>
static inline __device__ void arrive_release() {
  static_assert(arch_at_least<D>(90), "barrier.cluster.arrive needs sm_90");
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}

// barrier.cluster.arrive.relaxed;  (sm_90) - arrives WITHOUT ordering this thread's earlier writes:
// use it only where the barrier guards lifetime (rule 1: "the other blocks are still running",
// "nobody reads my shared memory any more") and no data written before it is read after it.
template <int D = 0>
static inline __device__ void arrive_relaxed() {
  static_assert(arch_at_least<D>(90), "barrier.cluster.arrive.relaxed needs sm_90");
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}

// barrier.cluster.wait.acquire;  (sm_90) - waits until every thread of the cluster has arrived at the
// current phase. Acquire: what they wrote before a releasing arrive is visible to this thread after
// it. Rule 2: no remote access before this wait; rule 1: after it every block of the cluster has
// started (its shared memory exists) and has arrived at this phase; a peer may leave once its own wait
// returns, so no block touches a peer's shared memory after the last barrier of the kernel.
template <int D = 0>
static inline __device__ void wait_acquire() {
  static_assert(arch_at_least<D>(90), "barrier.cluster.wait needs sm_90");
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// arrive_release() then wait_acquire(): a full cluster barrier that also orders memory, as
// cg::this_cluster().sync(). Every thread of every block of the cluster must call it. The one at the
// end of a kernel is rules 1 and 3: no block exits while another may still access its shared memory.
template <int D = 0>
static inline __device__ void sync() {
  arrive_release<D>();
  wait_acquire<D>();
}

}  // namespace cuadv::dsm
