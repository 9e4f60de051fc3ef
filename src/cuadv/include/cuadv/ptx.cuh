// cuadv/ptx.cuh - thin wrappers, one per PTX instruction, with the minimum SM in the comment.
//
// Each wrapper is a template so that its architecture check fires only when it is used:
// using one below its SM fails at compile time with a message that names the SM.
#pragma once

#include <cuda/std/cstdint>

#if defined(__CUDA_ARCH__)
#define CUADV_ARCH __CUDA_ARCH__
#else
#define CUADV_ARCH 9999  // host pass of nvcc: nothing is emitted
#endif

// An architecture- or family-specific target (sm_90a, sm_100a, sm_100f, ...), where the instructions that exist only
// there may be used (multicast TMA at full speed, clusterlaunchcontrol's multicast response).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(__CUDA_ARCH_FEAT_SM100_ALL) || \
    defined(__CUDA_ARCH_SPECIFIC__) || defined(__CUDA_ARCH_FAMILY_SPECIFIC__)
#define CUADV_ARCH_SPECIFIC 1
#else
#define CUADV_ARCH_SPECIFIC 0
#endif

namespace cuadv::ptx {

using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;

template <int Dummy>
constexpr bool arch_at_least(int sm) { return Dummy != 0 || CUADV_ARCH >= sm * 10; }

// 32-bit shared::cta address of a generic pointer into this block's shared memory.
static inline __device__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// mbarrier.init.shared::cta.b64 [bar], count;  (sm_80)
template <int D = 0>
static inline __device__ void mbarrier_init(u64* bar, u32 count) {
  static_assert(arch_at_least<D>(80), "mbarrier.init needs sm_80");
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// fence.mbarrier_init.release.cluster;  (sm_90) - makes an mbarrier.init visible to the cluster.
template <int D = 0>
static inline __device__ void fence_mbarrier_init_release_cluster() {
  static_assert(arch_at_least<D>(90), "fence.mbarrier_init needs sm_90");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// mbarrier.arrive.expect_tx.relaxed.{cta,cluster}.shared::cta.b64 state, [bar], bytes;  (sm_90, PTX 8.6)
// One arrival plus `bytes` expected transaction bytes; relaxed: orders nothing by itself.
template <bool ClusterScope, int D = 0>
static inline __device__ void mbarrier_arrive_expect_tx_relaxed(u64* bar, u32 bytes) {
  static_assert(arch_at_least<D>(90), "mbarrier.arrive.expect_tx needs sm_90");
  u64 state;
  if constexpr (ClusterScope) {
    asm volatile("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cta.b64 %0, [%1], %2;"
                 : "=l"(state) : "r"(smem_addr(bar)), "r"(bytes) : "memory");
  } else {
    asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 %0, [%1], %2;"
                 : "=l"(state) : "r"(smem_addr(bar)), "r"(bytes) : "memory");
  }
  (void)state;
}

// mbarrier.arrive.expect_tx.shared::cta.b64 state, [bar], bytes;  (sm_90) - release at CTA scope (the defaults):
// as above, and this thread's earlier memory accesses happen before the completion of the phase it arrives on.
template <int D = 0>
static inline __device__ void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  static_assert(arch_at_least<D>(90), "mbarrier.arrive.expect_tx needs sm_90");
  u64 state;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(smem_addr(bar)), "r"(bytes)
               : "memory");
  (void)state;
}

// mbarrier.try_wait.parity.acquire.{cta,cluster}.shared::cta.b64 p, [bar], parity;  (sm_90)
// Acquire: reads after a successful wait see what was released into the completed phase.
template <bool ClusterScope, int D = 0>
static inline __device__ bool mbarrier_try_wait_parity_acquire(u64* bar, u32 parity) {
  static_assert(arch_at_least<D>(90), "mbarrier.try_wait.parity.acquire needs sm_90");
  u32 done;
  if constexpr (ClusterScope) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;"
                 " selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  } else {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;"
                 " selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  }
  return done != 0;
}

// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], bytes, [bar];  (sm_90)
// A 1-D bulk copy by the TMA unit: `bytes` (a multiple of 16; dst and src 16-byte aligned) from global memory
// into this block's shared memory, counted as transaction bytes on `bar` when they have landed.
template <int D = 0>
static inline __device__ void bulk_copy_global_to_shared(void* dst, const void* src, u32 bytes, u64* bar) {
  static_assert(arch_at_least<D>(90), "cp.async.bulk needs sm_90");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// fence.proxy.async.shared::cta;  (sm_90)
// Orders this thread's generic-proxy accesses to shared memory before its later async-proxy accesses: a TMA
// store reading what was written, or a TMA copy overwriting what was read (after the readers' release).
template <int D = 0>
static inline __device__ void fence_proxy_async_shared_cta() {
  static_assert(arch_at_least<D>(90), "fence.proxy.async needs sm_90");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// mapa.shared::cluster.u32 remote, local, rank;  (sm_90) - the same shared variable in block `rank` of the cluster.
// A pure address computation (not volatile), so the compiler may hoist or merge it.
template <int D = 0>
static inline __device__ u32 mapa_shared_cluster(u32 local, u32 rank) {
  static_assert(arch_at_least<D>(90), "mapa needs sm_90");
  u32 remote;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

// st.shared::cluster.v4.u32 [remote], v;  (sm_90)
template <int D = 0>
static inline __device__ void st_shared_cluster_v4(u32 remote, uint4 v) {
  static_assert(arch_at_least<D>(90), "st.shared::cluster needs sm_90");
  asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(remote), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w) : "memory");
}

// st.shared::cluster.u64 [remote], v;  (sm_90)
template <int D = 0>
static inline __device__ void st_shared_cluster_u64(u32 remote, u64 v) {
  static_assert(arch_at_least<D>(90), "st.shared::cluster needs sm_90");
  asm volatile("st.shared::cluster.u64 [%0], %1;" ::"r"(remote), "l"(v) : "memory");
}

// mbarrier.complete_tx.relaxed.cluster.shared::cluster.b64 [remote_bar], bytes;  (sm_90)
template <int D = 0>
static inline __device__ void mbarrier_complete_tx_cluster(u32 remote_bar, u32 bytes) {
  static_assert(arch_at_least<D>(90), "mbarrier.complete_tx needs sm_90");
  asm volatile("mbarrier.complete_tx.relaxed.cluster.shared::cluster.b64 [%0], %1;" ::"r"(remote_bar), "r"(bytes)
               : "memory");
}

// fence.acq_rel.cluster;  (sm_90) - with the relaxed mbarrier operation after it, a release pattern.
template <int D = 0>
static inline __device__ void fence_acq_rel_cluster() {
  static_assert(arch_at_least<D>(90), "fence.acq_rel.cluster needs sm_90");
  asm volatile("fence.acq_rel.cluster;" ::: "memory");
}

// fence.proxy.async::generic.acquire.sync_restrict::shared::cluster.cluster;  (sm_90, PTX 8.6)
// Before an async-proxy write (try_cancel) into shared memory the generic proxy has read.
template <int D = 0>
static inline __device__ void fence_proxy_async_generic_acquire_cluster() {
  static_assert(arch_at_least<D>(90), "fence.proxy.async::generic needs sm_90");
  asm volatile("fence.proxy.async::generic.acquire.sync_restrict::shared::cluster.cluster;" ::: "memory");
}

// fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;  (sm_90, PTX 8.6)
// After the generic proxy has read what the async proxy wrote, before the async proxy writes again.
template <int D = 0>
static inline __device__ void fence_proxy_async_generic_release_cluster() {
  static_assert(arch_at_least<D>(90), "fence.proxy.async::generic needs sm_90");
  asm volatile("fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;" ::: "memory");
}

// bar.sync id, count;  (sm_20) - a barrier for `count` threads (whole warps) of the block on barrier `id`
// (1 to 15; 0 is __syncthreads'); orders their shared and global accesses like __syncthreads.
static inline __device__ void named_barrier_sync(u32 id, u32 count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// bar.arrive id, count;  (sm_20) - this warp's arrival at barrier `id` without waiting; its shared and global
// accesses before it are ordered before the return of the bar.sync that completes the barrier.
static inline __device__ void named_barrier_arrive(u32 id, u32 count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// atom.relaxed.gpu.global.add.u64 old, [p], v;  (sm_70)
// cuda::atomic_ref<u64, thread_scope_device>::fetch_add(v, memory_order_relaxed), on the .global state
// space: on a generic address ptxas also emits paths for shared and local memory, and where they merge
// the thread waits for the result, right after the atomic, instead of where the result is first used.
template <int D = 0>
static inline __device__ u64 atom_add_relaxed_gpu_global(u64* p, u64 v) {
  static_assert(arch_at_least<D>(70), "atom.relaxed.gpu needs sm_70");
  u64 old;
  asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;"
               : "=l"(old) : "l"(static_cast<u64>(__cvta_generic_to_global(p))), "l"(v) : "memory");
  return old;
}

// %globaltimer: nanoseconds, the same clock on every SM (updates about every microsecond).  (sm_50)
static inline __device__ u64 globaltimer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// %smid: the SM this thread runs on (may change only across preemption; fine for traces).
static inline __device__ u32 smid() {
  u32 id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// %gridid: the temporal launch number of this grid in the context; every stream launch gets a new
// one (the replays of one captured graph node share theirs, measured on the H200).
static inline __device__ u64 grid_id() {
  u64 id;
  asm("mov.u64 %0, %%gridid;" : "=l"(id));
  return id;
}

#if CUADV_ARCH >= 1000
// clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [result], [bar];  (sm_100)
// Asks to cancel a not-yet-launched block; the async proxy writes 16 B into `result` and completes them on `bar`.
static inline __device__ void clusterlaunchcontrol_try_cancel(uint4* result, u64* bar) {
  asm volatile("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%0], [%1];"
               ::"r"(smem_addr(result)), "r"(smem_addr(bar)) : "memory");
}

// ... .multicast::cluster::all.b128 [result], [bar];  (sm_100a) - the response lands in every block of the cluster
// at the same offsets, each block's barrier receiving its own 16 transaction bytes.
static inline __device__ void clusterlaunchcontrol_try_cancel_multicast(uint4* result, u64* bar) {
  asm volatile(
      "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.multicast::cluster::all.b128 "
      "[%0], [%1];" ::"r"(smem_addr(result)), "r"(smem_addr(bar)) : "memory");
}

// clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, response;  (sm_100)
static inline __device__ bool clusterlaunchcontrol_query_cancel_is_canceled(uint4 r) {
  u32 ok;
  asm volatile("{ .reg .pred p; .reg .b128 r; mov.b128 r, {%1, %2};"
               " clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, r; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok) : "l"((static_cast<u64>(r.y) << 32) | r.x), "l"((static_cast<u64>(r.w) << 32) | r.z));
  return ok != 0;
}

// clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 {x, y, z, _}, response;  (sm_100)
// Undefined for a failed response: call only after is_canceled returned true.
static inline __device__ uint3 clusterlaunchcontrol_query_cancel_get_first_ctaid(uint4 r) {
  u32 x, y, z;  // the fourth word goes to the sink `_`, as in the PTX ISA's own example
  asm volatile("{ .reg .b128 r; mov.b128 r, {%3, %4};"
               " clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 {%0, %1, %2, _}, r; }"
               : "=r"(x), "=r"(y), "=r"(z)
               : "l"((static_cast<u64>(r.y) << 32) | r.x), "l"((static_cast<u64>(r.w) << 32) | r.z));
  return make_uint3(x, y, z);
}
#endif  // CUADV_ARCH >= 1000

// ---- cp.async (non-bulk) and the mbarrier operations a per-thread-copy pipeline needs ----

// cp.async.cg.shared.global [dst], [src], 16;  (sm_80)
// 16 bytes from global to shared memory, cached in L2 only; dst and src must both be 16-byte aligned.
// Asynchronous: complete only after cp.async.wait_group / wait_all or a cp.async.mbarrier.arrive has fired.
template <int D = 0>
static inline __device__ void cp_async_cg_16(void* dst, const void* src) {
  static_assert(arch_at_least<D>(80), "cp.async needs sm_80");
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)),
               "l"(static_cast<u64>(__cvta_generic_to_global(src)))
               : "memory");
}

// cp.async.ca.shared.global [dst], [src], 4;  (sm_80) - 4 bytes; dst and src 4-byte aligned.
template <int D = 0>
static inline __device__ void cp_async_ca_4(void* dst, const void* src) {
  static_assert(arch_at_least<D>(80), "cp.async needs sm_80");
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)),
               "l"(static_cast<u64>(__cvta_generic_to_global(src)))
               : "memory");
}

// cp.async.mbarrier.arrive.noinc.shared::cta.b64 [bar];  (sm_80)
// One arrive-on `bar`, performed asynchronously once every cp.async this thread issued before it has completed
// (their writes are then visible to a thread whose wait observes the phase). .noinc: the pending count is not
// raised first, so this IS the thread's arrival and `bar`'s expected count must include it; the thread must not
// also mbarrier.arrive for the same phase.
template <int D = 0>
static inline __device__ void cp_async_mbarrier_arrive_noinc(u64* bar) {
  static_assert(arch_at_least<D>(80), "cp.async.mbarrier.arrive needs sm_80");
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// mbarrier.arrive.shared::cta.b64 state, [bar];  (sm_80) - release at CTA scope (the defaults): this thread's
// earlier memory accesses happen before the completion of the phase it arrives on.
template <int D = 0>
static inline __device__ void mbarrier_arrive(u64* bar) {
  static_assert(arch_at_least<D>(80), "mbarrier.arrive needs sm_80");
  u64 state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(smem_addr(bar)) : "memory");
  (void)state;
}

// mbarrier.test_wait.parity.shared::cta.b64 p, [bar], parity;  (sm_80) - acquire at CTA scope (the defaults).
// True once the phase of `bar` with this parity has completed (the current phase or the one just before it).
template <int D = 0>
static inline __device__ bool mbarrier_test_wait_parity(u64* bar, u32 parity) {
  static_assert(arch_at_least<D>(80), "mbarrier.test_wait.parity needs sm_80");
  u32 done;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;"
               " selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

}  // namespace cuadv::ptx
