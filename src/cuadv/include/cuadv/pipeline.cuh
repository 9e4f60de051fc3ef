// cuadv/pipeline.cuh - a multi-stage shared-memory pipeline for user kernels: fill / steady state / drain over a
// ring of S stage slots, with the tail (fewer stages than slots, a last stage that is short) handled by the loop.
//
// Two forms:
//   run_stages<S, D>(stager, n, tracer, issue, compute)   every thread copies (sm_80+: cp.async / memcpy_async).
//     The stager says how a stage gets into shared memory and how threads agree it is there:
//       PlainStager        plain loads and stores, one __syncthreads per stage (the synchronous baseline);
//       ThreadStager       cuda::memcpy_async on a per-thread cuda::pipeline, plus one __syncthreads per stage;
//       MbarStager<S>      explicit full / empty mbarriers per slot, cp.async arriving for each thread (.noinc);
//                          no __syncthreads in the loop. Make it with make_mbar_stager<S, Threads>(full, empty).
//   TmaRing<S, Consumers> + TicketSource<Tiling>           (sm_90+) one producer thread issues one TMA box per
//     stage into slot m % S and completes its bytes on full[s]; the consumers release each slot on empty[s].
//
// Contracts (every stager): issue(m, st) is called by every thread of the block for stage m (the same m in every
// thread, stages in order); each thread's copies go through st.copy16 / st.copy4 between acquire(m) and
// commit(m). compute(k) may read the slots of stages k-D+1 .. k only. The block runs the same n in every
// thread. What is NOT provided: ordering of global stores made by compute (the caller's kernel owns those).
//
// Needs sm_80 (cp.async, mbarrier); the TMA ring sm_90. Include as <cuadv/pipeline.cuh>.
#pragma once

#include <cuda/atomic>
#include <cuda/pipeline>
#include <cuda/std/cstdint>

#include "cuadv/ptx.cuh"
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // the TMA ring: sm_90+ only
#include "cuadv/tma.cuh"
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "cuadv/pipeline.cuh needs sm_80 or newer (cp.async and mbarrier)"
#endif

namespace cuadv::pipeline {

using u32 = cuadv::ptx::u32;
using u64 = cuadv::ptx::u64;

// ---------------------------------------------------------------------------------------------------------------
// Stagers: how a stage gets into shared memory and how threads agree that it is there / no longer read.
//   copy16 / copy4   one 16-byte / 4-byte piece of stage m (between acquire(m) and commit(m));
//   acquire(m)       before this thread writes stage m into slot m % S;
//   commit(m)        after this thread has issued all its pieces of stage m;
//   wait(k)          before any thread reads stage k: every thread's pieces of stage k are visible;
//   release(j, r)    after this thread's last read of stage j's slot; r: that slot will be refilled.

// Plain loads and stores: the copy is finished when copy16 returns; one barrier per stage publishes it.
struct PlainStager {
  __device__ void copy16(float* d, const float* s) {
    *reinterpret_cast<float4*>(d) = *reinterpret_cast<const float4*>(s);
  }
  __device__ void copy4(float* d, const float* s) { *d = *s; }
  __device__ void acquire(long long) {}
  __device__ void commit(long long) {}
  __device__ void wait(long long) {
    __syncthreads();  // every thread's stores of stage k are visible; every thread has finished the previous compute
  }
  __device__ void release(long long, bool) {}
};

// cuda::pipeline<thread_scope_thread>: each thread's copies of a stage are one commit group; consumer_wait waits
// for this thread's oldest unreleased group (cp.async.wait_group), then a barrier makes every thread's copies
// visible. consumer_wait waits on the oldest unreleased stage, so the stage before is released just before it,
// even where compute still reads that stage's slot (D = 2): at thread scope a release gates nothing
// (producer_acquire has nothing to wait for); the block barrier and the loop's refill order decide slot reuse.
struct ThreadStager {
  cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
  bool holding = false;  // a stage was waited for and is not yet released
  __device__ void copy16(float* d, const float* s) { cuda::memcpy_async(d, s, cuda::aligned_size_t<16>(16), pipe); }
  __device__ void copy4(float* d, const float* s) { cuda::memcpy_async(d, s, cuda::aligned_size_t<4>(4), pipe); }
  __device__ void acquire(long long) { pipe.producer_acquire(); }  // thread scope: nothing to wait for
  __device__ void commit(long long) { pipe.producer_commit(); }    // this thread's copies of stage m: one group
  __device__ void wait(long long) {
    if (holding) pipe.consumer_release();  // the previous stage, so that the wait below is for stage k
    pipe.consumer_wait();                  // this thread's copies of stage k have landed
    holding = true;
    __syncthreads();  // ... and every other thread's; every thread has finished the previous compute
  }
  __device__ void release(long long, bool) {}  // done by the next wait (see above)
};

// Explicit full/empty mbarriers, both expecting one arrival per thread of the block per phase, phase n of slot s
// belonging to stage s + n * S. full: each thread's one arrival is cp.async.mbarrier.arrive.noinc (made by the
// copy engine when the thread's copies have landed); every thread waits on it before reading. empty: each thread
// arrives after its last read of a slot that will be refilled, and waits on that phase before refilling the slot.
// So every thread arrives exactly once on each phase it waits on, and waits on each phase before it arrives on
// the next. (Not cuda::pipeline<thread_scope_block>: its producer_commit adds an explicit arrive beside the copy
// engine's, which compute-sanitizer synccheck reports as "Missing wait".)
template <int S>
struct MbarStager {
  u64* full;
  u64* empty;
  __device__ void copy16(float* d, const float* s) { ptx::cp_async_cg_16(d, s); }
  __device__ void copy4(float* d, const float* s) { ptx::cp_async_ca_4(d, s); }
  __device__ void acquire(long long m) {
    if (m >= S) wait_parity(&empty[m % S], static_cast<unsigned>((m / S - 1) & 1));  // stage m-S's readers are done
  }
  __device__ void commit(long long m) {
    ptx::cp_async_mbarrier_arrive_noinc(&full[m % S]);  // arrives once this thread's copies of stage m landed
  }
  __device__ void wait(long long k) {
    wait_parity(&full[k % S], static_cast<unsigned>((k / S) & 1));  // every thread's copies of stage k landed
  }
  __device__ void release(long long j, bool refill) {
    if (refill) ptx::mbarrier_arrive(&empty[j % S]);  // release: this thread's reads of slot j % S are done
  }
  // Acquire-wait (CTA scope) until the phase with this parity has completed.
  static __device__ void wait_parity(u64* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    while (!ptx::mbarrier_try_wait_parity_acquire<false>(bar, parity)) {
    }
#else
    while (!ptx::mbarrier_test_wait_parity(bar, parity)) {
    }
#endif
  }
};

// One thread initialises the 2 * S barriers (Threads arrivals each: the block size); the barrier after it makes
// them visible before any arrive or wait. Every thread of the block must call it.
template <int S, int Threads>
__device__ MbarStager<S> make_mbar_stager(u64* full, u64* empty) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      ptx::mbarrier_init(&full[s], Threads);
      ptx::mbarrier_init(&empty[s], Threads);
    }
  }
  __syncthreads();  // the initialised barriers are visible to every thread
  return MbarStager<S>{full, empty};
}

// A tracer that records nothing: what run_stages takes when the kernel keeps no per-stage timeline. A tracer's
// stamp(stage, field) is called with field 0 (issued), 1 (wait started), 2 (data ready), 3 (compute done).
struct NoTrace {
  __device__ void stamp(long long, int) const {}
};

// The pipelined loop. `issue(m, stager)` copies stage m into slot m % S; `compute(k)` reads the slots of stages
// k-D+1 .. k. Fill: stages 0 .. S-D-1. Steady state: wait for stage k, refill the slot of stage k-D (last read by
// compute(k-1)) with stage k+S-D, compute stage k, release stage k-D+1. Drain: the last S-D stages. The tail is
// the loop's: n may be anything >= 0 (n < S - D: fill and drain only; n == 0: nothing).
template <int S, int D, class Stager, class Tracer, class Issue, class Compute>
__device__ void run_stages(Stager& st, long long n, const Tracer& tracer, Issue issue, Compute compute) {
  static_assert(S > D && S - D <= 8, "S - D stages ahead: at least 1, at most 8 (cp.async.wait_group)");
  constexpr int kAhead = S - D;
  auto put = [&](long long m) {
    st.acquire(m);
    issue(m, st);
    st.commit(m);
    tracer.stamp(m, 0);
  };
  auto take = [&](long long k) {
    tracer.stamp(k, 1);
    st.wait(k);
    tracer.stamp(k, 2);
  };
  auto finish = [&](long long k) {
    compute(k);
    tracer.stamp(k, 3);
    const long long j = k - D + 1;  // compute(k+1) no longer reads stage j
    if (j >= 0) st.release(j, j + S < n);
  };
  long long k = 0;
  for (long long m = 0; m < n && m < kAhead; ++m) put(m);  // fill
  for (; k + kAhead < n; ++k) {                              // steady state
    take(k);
    put(k + kAhead);
    finish(k);
  }
  for (; k < n; ++k) {  // drain
    take(k);
    finish(k);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Tiles of a 2-D array, TH x TW outputs each, numbered along the rows of tiles and dealt out in chunks of `chunk`
// consecutive tiles (side by side in a row of tiles, so a block reads longer runs of each input row). The static
// split: block b takes chunks b, b + gridDim.x, ... (chunk 1: tiles b, b + gridDim.x, ...); TicketSource may
// claim chunks by ticket instead. The last chunk may be short (the tail).
template <int TH, int TW>
struct Tiling2D {
  long long strips, tiles, chunk;
  // `extent`: anything with `rows` and `cols` members (the kernel's parameter struct, say).
  template <class Extent>
  __device__ explicit Tiling2D(const Extent& extent, unsigned chunk_tiles = 1)
      : strips((extent.cols + TW - 1) / TW), tiles(strips * ((extent.rows + TH - 1) / TH)), chunk(chunk_tiles) {}
  __device__ long long count_for_block() const {
    const long long chunks = (tiles + chunk - 1) / chunk;
    if (blockIdx.x >= chunks) return 0;
    const long long owned = (chunks - 1 - blockIdx.x) / gridDim.x + 1;
    const bool has_last = (chunks - 1) % gridDim.x == blockIdx.x;  // the last chunk may be short
    return owned * chunk - (has_last ? chunks * chunk - tiles : 0);
  }
  __device__ long long tile(long long k) const {
    return (blockIdx.x + (k / chunk) * static_cast<long long>(gridDim.x)) * chunk + k % chunk;
  }
  __device__ long long row0(long long t) const { return (t / strips) * TH; }
  __device__ long long col0(long long t) const { return (t % strips) * TW; }
};

// Where a block's tiles come from. Static (tickets == nullptr): the Tiling's split, chunks b, b + gridDim.x, ...
// Tickets: chunks claimed one at a time from a counter all blocks share (a steal without a time slice), so an SM
// that streams faster than others takes more chunks instead of idling at the end while they finish theirs.
// The claim is one relaxed fetch_add on one word (its modification order makes claims unique), made by one
// thread (the producer) when its current chunk is used up. Every block stops at its first failed claim (a ticket
// >= chunks), so a launch takes exactly chunks + gridDim.x tickets, and the block holding the last one sets the
// counter back to zero: the next launch on the stream (or the next replay of a graph) starts from zero without a
// host memset. Launches that may overlap need their own counters. Tiling: count_for_block(), tile(k), tiles, chunk
// (Tiling2D has them). Preconditions: a 1-D grid (the reset counts gridDim.x failed claims), and `tiling` outlives
// the source (it is kept by reference: pass a named Tiling, not a temporary).
template <class Tiling>
class TicketSource {
 public:
  __device__ TicketSource(unsigned long long* tickets, const Tiling& tiling)
      : tiling_(tiling), tickets_(tickets), count_(tiling.count_for_block()),
        chunks_((tiling.tiles + tiling.chunk - 1) / tiling.chunk) {}

  // The next tile of this block, or -1 once it has none left.
  __device__ long long next() {
    if (tickets_ == nullptr) return m_ < count_ ? tiling_.tile(m_++) : -1;
    while (!done_) {
      if (pos_ < tiling_.chunk && chunk_ * tiling_.chunk + pos_ < tiling_.tiles) return chunk_ * tiling_.chunk + pos_++;
      cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> counter(*tickets_);
      const unsigned long long ticket = counter.fetch_add(1, cuda::memory_order_relaxed);
      if (ticket >= static_cast<unsigned long long>(chunks_)) {
        done_ = true;
        // Relaxed: every claim of this launch precedes the last ticket in the word's modification order.
        if (ticket == chunks_ + gridDim.x - 1) counter.store(0, cuda::memory_order_relaxed);
      }
      chunk_ = static_cast<long long>(ticket);
      pos_ = 0;
    }
    return -1;
  }

 private:
  const Tiling& tiling_;
  unsigned long long* const tickets_;
  const long long count_, chunks_;
  long long m_ = 0;                 // static: tiles handed out so far
  long long chunk_ = 0;             // tickets: the claimed chunk ...
  long long pos_ = 0x7fffffffffffffffLL;  // ... and the next tile in it (none before the first claim)
  bool done_ = false;
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

// A TMA-fed ring of S slots on two barriers per slot, phase n of slot s belonging to stage s + n * S.
// full[s]: one arrival (the producer's arrive.expect_tx of the stage's bytes, or a plain arrive for a stage with
// no copy) plus the bytes, which the TMA unit completes. empty[s]: Consumers arrivals, one per consumer thread
// after its last read of the slot. Warp specialised: one producer thread issues every load, so no consumer waits
// for the others before a load goes out. Fill: the producer issues stages 0 .. S-1 into the empty ring. Steady
// state: it refills each slot with stage m once every consumer has released stage m - S. Drain: the consumers
// compute the last stages; nothing more is issued.
// (pipeline.cu's run_tma writes the same protocol out inline: routing it through TmaRing changed sm_100a SASS.)
template <int S, int Consumers>
struct TmaRing {
  u64* full;
  u64* empty;

  // The producer thread only, before the block barrier that publishes the barriers to every thread.
  __device__ void init() const {
    for (int s = 0; s < S; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], Consumers);
    }
    ptx::fence_mbarrier_init_release_cluster();  // the inits are visible before any TMA completes bytes on them
    tma::fence_proxy_async_shared_cta();         // ... including to the async proxy that does the completing
  }
  // Producer, before it writes stage m into slot m % S: stage m-S's readers are done (acquire).
  __device__ void producer_acquire(long long m) const {
    if (m >= S) tma::wait_parity<false>(&empty[slot(m)], static_cast<u32>((m / S - 1) & 1));
  }
  // Producer: release what it wrote for stage m (e.g. an index beside the slot) and expect `bytes` of TMA
  // completions on full[m % S]; the TMA copy then names full_barrier(m).
  __device__ void producer_commit(long long m, u32 bytes) const {
    ptx::mbarrier_arrive_expect_tx(&full[slot(m)], bytes);  // release the producer's writes; expect the bytes
  }
  // Producer: a stage with no copy (e.g. a closing stage); releases the producer's writes to the consumers.
  __device__ void producer_commit_empty(long long m) const {
    ptx::mbarrier_arrive(&full[slot(m)]);  // release: consumers that see this phase see the producer's writes
  }
  __device__ u64* full_barrier(long long m) const { return &full[slot(m)]; }
  static __device__ int slot(long long m) { return static_cast<int>(m % S); }
  // Consumer, before reading stage k: its bytes have landed and the producer's writes are visible (acquire).
  __device__ void consumer_wait(long long k) const {
    tma::wait_parity<false>(&full[k % S], static_cast<u32>((k / S) & 1));
  }
  // Consumer, after its last read of stage k's slot.
  __device__ void consumer_release(long long k) const {
    ptx::mbarrier_arrive(&empty[k % S]);  // release: this thread's reads of the slot are done
  }
};

#endif  // sm_90+

}  // namespace cuadv::pipeline
