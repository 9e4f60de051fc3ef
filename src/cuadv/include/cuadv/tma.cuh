// cuadv/tma.cuh - Tensor Memory Accelerator (TMA) helpers: tiled 2-D loads and stores driven by a tensor map,
// multicast loads into every block of a cluster, and the barriers that track them.
//
// Host side: build the tensor map in Python with cuadv.tma.TensorMap.tiled(array, box=(rows, cols)) and pass it
// as a kernel parameter, or inside a parameter struct, declared `const __grid_constant__` (the descriptor must
// stay in parameter space: TMA reads it through the generic address of the parameter). docs/tma.md shows a
// complete kernel; cuadv.tma.copy / transpose are built on this header (src/cuadv/tma/tma.cu).
//
// Coordinates are innermost first, in elements: {x = column, y = row}. A box that reaches past the array is
// filled with zeros (or NaN, as encoded) in shared memory, and a store writes only the in-bounds part, so tail
// tiles need no special code. The transaction count of a load is always the FULL box in bytes.
//
// Device-side contract of a load:
//   1. one thread: mbarrier_arrive_expect_tx(bar, box_bytes) and load_2d(smem, map, x, y, bar);
//   2. every consumer: wait(bar, parity); the data is then visible to the waiting thread (acquire).
// Of a store:
//   1. every thread that wrote the source tile: fence_proxy_async_shared_cta() (generic writes -> async proxy);
//   2. a block barrier; 3. one thread: store_2d + bulk_commit_group;
//   4. that thread: bulk_wait_group_read<N>() before the source tile is written again, bulk_wait_group<0>()
//      before the block exits.
#pragma once

#include <cuda/std/cstdint>

#include "cuadv/ptx.cuh"

namespace cuadv::tma {

using u16 = cuda::std::uint16_t;
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;

// The 128-byte CUtensorMap, opaque to device code (cuda.h does not compile under NVRTC, so no CUtensorMap here).
struct alignas(64) TensorMap {
  u64 opaque[16];
};
static_assert(sizeof(TensorMap) == 128, "a CUtensorMap is 128 bytes");

// CUADV_ARCH_SPECIFIC (ptx.cuh): an sm_XXa / sm_XXXf target, where multicast is supported at full speed.
template <int D>
constexpr bool arch_specific() { return D != 0 || CUADV_ARCH_SPECIFIC != 0; }

// prefetch.tensormap [map];  (sm_90) - fetch the descriptor into the cache before its first use.
template <int D = 0>
static inline __device__ void prefetch_tensormap(const TensorMap* map) {
  static_assert(ptx::arch_at_least<D>(90), "prefetch.tensormap needs sm_90");
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

// cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst], [map, {x, y}], [bar];
// (sm_90) - the box at (x, y) into this block's shared memory; completes box bytes on `bar`.
// `dst` must be 128-byte aligned (16 without swizzle; 128 keeps every swizzle mode legal).
template <int D = 0>
static inline __device__ void load_2d(void* dst, const TensorMap* map, int x, int y, u64* bar) {
  static_assert(ptx::arch_at_least<D>(90), "cp.async.bulk.tensor needs sm_90");
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(ptx::smem_addr(dst)), "l"(reinterpret_cast<u64>(map)), "r"(x), "r"(y), "r"(ptx::smem_addr(bar))
      : "memory");
}

// cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster
//     [dst], [map, {x, y}], [bar], mask;  (sm_90a / sm_100a)
// One read of the box from global memory, written to the same shared-memory offset `dst` in every block whose
// cluster rank is set in `mask`; each of those blocks' barriers at offset `bar` receives the box bytes.
// Preconditions: every destination block has initialised its barrier and is still running (cluster sync before
// the first multicast and before any block exits), and its buffer at `dst` is free (see the empty barriers in
// kernels/tma.cu's gemv).
template <int D = 0>
static inline __device__ void load_2d_multicast(void* dst, const TensorMap* map, int x, int y, u64* bar, u16 mask) {
  static_assert(arch_specific<D>(), "TMA multicast needs an architecture-specific target (sm_90a, sm_100a)");
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(ptx::smem_addr(dst)), "l"(reinterpret_cast<u64>(map)), "r"(x), "r"(y), "r"(ptx::smem_addr(bar)),
      "h"(mask)
      : "memory");
}

// cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [map, {x, y}], [src];  (sm_90)
// Writes the in-bounds part of the box at (x, y); tracked by the issuing thread's bulk async-groups.
template <int D = 0>
static inline __device__ void store_2d(const TensorMap* map, int x, int y, const void* src) {
  static_assert(ptx::arch_at_least<D>(90), "cp.async.bulk.tensor needs sm_90");
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
               ::"l"(reinterpret_cast<u64>(map)), "r"(x), "r"(y), "r"(ptx::smem_addr(src))
               : "memory");
}

// createpolicy.fractional.L2::evict_first.b64 policy, 1.0;  (sm_80)
// An L2 cache policy for the .L2::cache_hint forms below: the lines they touch are the first to be evicted
// (streamed data that will not be read again). A hint: it changes no result.
template <int D = 0>
static inline __device__ u64 createpolicy_evict_first() {
  static_assert(ptx::arch_at_least<D>(80), "createpolicy needs sm_80");
  u64 policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint
//     [dst], [map, {x, y}], [bar], policy;  (sm_90) - load_2d with an L2 cache policy (createpolicy_*).
template <int D = 0>
static inline __device__ void load_2d_hint(void* dst, const TensorMap* map, int x, int y, u64* bar, u64 policy) {
  static_assert(ptx::arch_at_least<D>(90), "cp.async.bulk.tensor needs sm_90");
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(ptx::smem_addr(dst)), "l"(reinterpret_cast<u64>(map)), "r"(x), "r"(y), "r"(ptx::smem_addr(bar)),
      "l"(policy)
      : "memory");
}

// cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group.L2::cache_hint [map, {x, y}], [src], policy;  (sm_90)
// store_2d with an L2 cache policy for the lines it writes.
template <int D = 0>
static inline __device__ void store_2d_hint(const TensorMap* map, int x, int y, const void* src, u64 policy) {
  static_assert(ptx::arch_at_least<D>(90), "cp.async.bulk.tensor needs sm_90");
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group.L2::cache_hint [%0, {%1, %2}], [%3], %4;"
               ::"l"(reinterpret_cast<u64>(map)), "r"(x), "r"(y), "r"(ptx::smem_addr(src)), "l"(policy)
               : "memory");
}

// cp.async.bulk.commit_group;  (sm_90) - closes the group of this thread's bulk stores issued since the last one.
template <int D = 0>
static inline __device__ void bulk_commit_group() {
  static_assert(ptx::arch_at_least<D>(90), "cp.async.bulk.commit_group needs sm_90");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// cp.async.bulk.wait_group.read N;  (sm_90) - at most N of this thread's groups still READ their shared source:
// the older sources may be overwritten. Says nothing about the global writes.
template <int N, int D = 0>
static inline __device__ void bulk_wait_group_read() {
  static_assert(ptx::arch_at_least<D>(90), "cp.async.bulk.wait_group needs sm_90");
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// bulk_wait_group_read<N> for a run-time N (0 to 8): at most n of this thread's groups still read their source.
// An n above 8 waits as for 0, which is stricter and so still correct.
static inline __device__ void bulk_wait_group_read_dynamic(int n) {
  switch (n) {
    case 1: bulk_wait_group_read<1>(); break;
    case 2: bulk_wait_group_read<2>(); break;
    case 3: bulk_wait_group_read<3>(); break;
    case 4: bulk_wait_group_read<4>(); break;
    case 5: bulk_wait_group_read<5>(); break;
    case 6: bulk_wait_group_read<6>(); break;
    case 7: bulk_wait_group_read<7>(); break;
    case 8: bulk_wait_group_read<8>(); break;
    default: bulk_wait_group_read<0>(); break;
  }
}

// cp.async.bulk.wait_group N;  (sm_90) - at most N of this thread's groups are incomplete (writes performed).
template <int N, int D = 0>
static inline __device__ void bulk_wait_group() {
  static_assert(ptx::arch_at_least<D>(90), "cp.async.bulk.wait_group needs sm_90");
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

using ptx::fence_proxy_async_shared_cta;  // (in ptx.cuh: kernels without TMA boxes use it too)

// mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [remote];  (sm_90, PTX 8.6)
// One arrival on a barrier of any block of the cluster (address from ptx::mapa_shared_cluster). Relaxed: orders
// nothing by itself; precede a batch of these with one ptx::fence_acq_rel_cluster() so that this thread's
// earlier accesses (and, through a preceding __syncthreads, its block's) happen before whatever the barrier's
// waiters do next - one fence for all the peers instead of a release per arrival.
template <int D = 0>
static inline __device__ void mbarrier_arrive_relaxed_cluster(u32 remote_bar) {
  static_assert(ptx::arch_at_least<D>(90), "mbarrier.arrive.relaxed.cluster needs sm_90");
  asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote_bar) : "memory");
}

// Spin until the barrier's phase with this parity has completed (acquire; cluster scope when TMA multicasts or
// other blocks arrive on it).
template <bool ClusterScope>
static inline __device__ void wait_parity(u64* bar, u32 parity) {
  while (!ptx::mbarrier_try_wait_parity_acquire<ClusterScope>(bar, parity)) {
  }
}

// The next 128-byte aligned address at or after p (TMA destinations; dynamic shared memory is only 16-aligned).
static inline __device__ unsigned char* align128(unsigned char* p) {
  const u32 s = ptx::smem_addr(p);
  return p + ((128u - (s & 127u)) & 127u);
}

}  // namespace cuadv::tma
