// histogram.cu - a histogram with bins sharded over a cluster's
// distributed shared memory (DSM), against global atomics and a single-block shared histogram.
//
// Input: bin indices of type T (int32 or uint8); a value v counts in bin v when 0 <= v < bins
// and is ignored otherwise (numpy.bincount of the in-range values). Output: uint32 counts, zero
// before the launch (every kernel accumulates into them with atomics; two launches gated on one
// verdict share them, only one of them counting).
//
// Kernels (templates, reached through name expressions):
//   hist_global<T>                    every element does atomicAdd on the global bins.
//   hist_block<T, Packed>             one private histogram per block in shared memory (32-bit
//                                     counters, `R` lane-interleaved replicas, or 16-bit ones packed
//                                     as in hist_cluster), flushed once.
//   hist_block_tma<T, Stages, V, Packed>  hist_block with its input copied by the TMA unit into a ring of
//                                     Stages chunks of V vectors per thread (sm_90).
//   hist_block_tma_float<Stages, V, Packed, Rule>  the same over float input, each value binned by numpy's rule for
//                                     even bins as it is read (one pass, no index buffer).
//   hist_cluster<T, Packed, Agg>      the bins sharded over the cluster's blocks: bin b lives in
//                                     block (b % C), local slot b / C; remote atomics through
//                                     cluster.map_shared_rank. Packed: two 16-bit counters per
//                                     32-bit word (twice the bins per block; wraps handled exactly,
//                                     see add_wrap_corrections). Agg: warp-aggregated increments
//                                     (__match_any_sync), one atomic per distinct bin per warp.
//   hist_hot<T>                       skew-aware hybrid: the low bins [0, hot) privatised per block in
//                                     shared memory, every other bin by a global atomic.
//   hist_exchange<Packed, C, V>       int32, DSM "mailboxes": the bins sharded as in hist_cluster, but
//                                     each block sorts a chunk of elements by owner block and sends
//                                     them in 16-byte remote stores; owners apply them with local
//                                     shared atomics (see Exchange). Optionally a private low range.
//
// Every kernel's parameters: (in, n, out, bins, its own, gate, want); a launch with a non-null gate counts
// only where *gate == want (see gated_off: how auto picks between two plans on the GPU).
//
// hist_global, hist_block, hist_cluster and hist_hot stream the input the same way (stream_values): a persistent
// grid, 16-byte vector loads, the next batch loaded before the current one is counted, and scalar code for the
// unaligned head and the tail; hist_block_tma the same way through its TMA ring (stream_values_tma). The
// shared-memory kernels route out-of-range values to a trash slot (no branch in the hot loop) and flush one
// global atomic per nonzero bin per block (one block's 16-bit counters: one 64-bit atomic per pair of bins).
// hist_exchange works in rounds of one chunk per block (out-of-range values dropped while sorting).
//
// The four lifetime rules of distributed shared memory (CUDA Programming Guide, thread block clusters), as hist_cluster and hist_exchange follow them:
//   1. the target block must still exist: no block leaves before the last cluster.sync();
//   2. every block zeroes its shard, then cluster.sync(), before the first remote access;
//   3. all DSM accesses are complete before any block exits: cluster.sync() after counting,
//      and after it each block touches only its own shard;
//   4. capacity, banks and remote latency need profiling: the lab measures cluster sizes 1-16.
//
// Needs sm_90 for hist_cluster and hist_exchange (clusters and DSM: instantiating them for an older
// target fails with a message saying so); hist_global, hist_block and hist_hot run on any target.
#include <cooperative_groups.h>
#include <cuda/std/cstdint>

#include "cuadv/histogram_bins.cuh"
#include "cuadv/pdl.cuh"
#include "cuadv/ptx.cuh"

namespace cg = cooperative_groups;
namespace ptx = cuadv::ptx;

namespace cuadv_hist {

using u32 = unsigned int;
using u64 = unsigned long long;

constexpr u32 kAllLanes = 0xFFFFFFFFu;

// ld.global.nc.L1::no_allocate.L2::256B.v4.u32  (sm_80): a read-only streaming load that does not
// fill L1 (every byte is read once) and asks L2 to prefetch the whole 256-byte block.
static __device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Element j of a 16-byte vector of T, as an unsigned bin index (a negative int32 becomes a large
// unsigned value and so falls outside [0, bins)).
template <typename T>
static __device__ __forceinline__ u32 element(const uint4& v, int j);

template <>
__device__ __forceinline__ u32 element<int>(const uint4& v, int j) {
  return (&v.x)[j];
}

template <>
__device__ __forceinline__ u32 element<unsigned char>(const uint4& v, int j) {
  return ((&v.x)[j >> 2] >> (8 * (j & 3))) & 0xFFu;
}

template <typename T>
struct Layout {
  static constexpr int kPerVec = 16 / sizeof(T);  // elements per 16-byte load
};

// %dynamic_smem_size: the dynamic shared memory this launch was given, in bytes.  (sm_20)
static __device__ __forceinline__ u32 dynamic_smem_size() {
  u32 size;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(size));
  return size;
}

// The gate of a launch (every counting kernel ends with `gate, want`): a null gate always counts; else the
// launch counts only where *gate == want, and every block of it leaves at once otherwise. The host launches
// two plans gated on one word that a sample kernel wrote earlier on the stream (hist_sample): the choice
// between them is made on the GPU, without a wait for the host. Every block reads the same word, so all
// blocks of a cluster leave together or none does.
static __device__ __forceinline__ bool gated_off(const u32* gate, u32 want) {
  return gate != nullptr && *gate != want;
}

// U vectors of one batch for this thread: v[k] = p[k * blockDim.x] (coalesced across the block).
template <int U>
static __device__ __forceinline__ void load_batch(uint4 (&v)[U], const uint4* p) {
#pragma unroll
  for (int k = 0; k < U; ++k) v[k] = load_stream(p + k * blockDim.x);
}

// Streams in[0, n) through `sink`: full batches of U vectors per thread (blockDim.x * U vectors
// per block, all threads of the block active: warp-collective code is allowed in sink.batch),
// then the leftover vectors and the scalar head and tail (divergent: sink.scalar only).
// Precondition: `in` is aligned to sizeof(T) (the host checks).
template <typename T, int U, class Sink>
static __device__ __forceinline__ void stream_values(const T* __restrict__ in, u64 n, Sink& sink) {
  constexpr int kPerVec = Layout<T>::kPerVec;
  const u64 tid = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const u64 nthreads = static_cast<u64>(gridDim.x) * blockDim.x;

  // Elements before the first 16-byte boundary (fewer than 16).
  u64 head = ((16u - (reinterpret_cast<u64>(in) & 15u)) & 15u) / sizeof(T);
  if (head > n) head = n;
  if (tid < head) sink.scalar(static_cast<u32>(in[tid]));

  const uint4* vec = reinterpret_cast<const uint4*>(in + head);
  const u64 nvec = (n - head) / kPerVec;
  const u64 per_batch = static_cast<u64>(blockDim.x) * U;
  const u64 nbatch = nvec / per_batch;

  // Persistent loop over whole batches; batch b+gridDim.x is in flight while batch b is counted.
  uint4 cur[U] = {};
  uint4 next[U] = {};
  u64 b = blockIdx.x;
  if (b < nbatch) load_batch<U>(cur, vec + b * per_batch + threadIdx.x);
  // Two batches per trip so `cur` and `next` swap roles without register copies.
  for (; b < nbatch; b += 2ull * gridDim.x) {
    const u64 nb = b + gridDim.x;
    if (nb < nbatch) load_batch<U>(next, vec + nb * per_batch + threadIdx.x);
    sink.template batch<U>(cur);
    if (nb >= nbatch) break;
    const u64 nnb = nb + gridDim.x;
    if (nnb < nbatch) load_batch<U>(cur, vec + nnb * per_batch + threadIdx.x);
    sink.template batch<U>(next);
  }

  // Fewer than one batch of whole vectors is left: spread over the grid, one vector per thread.
  for (u64 i = nbatch * per_batch + tid; i < nvec; i += nthreads) {
    const uint4 v = load_stream(vec + i);
#pragma unroll
    for (int j = 0; j < kPerVec; ++j) sink.scalar(element<T>(v, j));
  }
  // The tail: fewer than kPerVec elements after the last whole vector.
  for (u64 i = head + nvec * kPerVec + tid; i < n; i += nthreads) sink.scalar(static_cast<u32>(in[i]));
}

// This block's share of the ring's stream: chunk c of `chunk_vecs` vectors starts at vec + c * chunk_vecs, and the
// block takes chunks blockIdx.x + k * gridDim.x for k < mine (32-bit counts: fewer live registers).
template <typename T>
struct RingShare {
  u64 head;          // scalar elements before the first 16-byte boundary
  const uint4* vec;  // the first whole vector
  u64 nvec;          // whole vectors
  u32 chunk_vecs, chunk_bytes, nchunk, mine;
  const uint4* first;  // this block's first chunk
  u64 stride;          // vectors between this block's consecutive chunks

  template <int V>
  __device__ __forceinline__ static RingShare make(const T* in, u64 n) {
    RingShare r;
    r.head = ((16u - (reinterpret_cast<u64>(in) & 15u)) & 15u) / sizeof(T);
    if (r.head > n) r.head = n;
    r.vec = reinterpret_cast<const uint4*>(in + r.head);
    r.nvec = (n - r.head) / Layout<T>::kPerVec;
    r.chunk_vecs = blockDim.x * V;
    r.chunk_bytes = 16u * r.chunk_vecs;
    r.nchunk = static_cast<u32>(r.nvec / r.chunk_vecs);  // n < 2^32 elements (the host checks)
    r.mine = r.nchunk > blockIdx.x ? (r.nchunk - 1u - blockIdx.x) / gridDim.x + 1u : 0u;
    r.first = r.vec + static_cast<u64>(blockIdx.x) * r.chunk_vecs;
    r.stride = static_cast<u64>(gridDim.x) * r.chunk_vecs;
    return r;
  }

  // Chunk k of this block into stage s of the ring; its bytes land on full[s]. Thread 0 only.
  __device__ __forceinline__ void fetch(u32 k, u32 s, uint4* ring, u64* full) const {
    ptx::mbarrier_arrive_expect_tx(full + s, chunk_bytes);
    ptx::bulk_copy_global_to_shared(ring + s * chunk_vecs, first + k * stride, chunk_bytes, full + s);
  }
};

// Thread 0 starts the ring: the first Stages chunks of this block (hist_block_tma: before it zeroes 16-bit counters,
// so that the first bytes are on their way meanwhile).
template <typename T, int Stages, int V>
static __device__ __forceinline__ void start_ring(const T* __restrict__ in, u64 n, uint4* ring, u64* full) {
  const RingShare<T> r = RingShare<T>::template make<V>(in, n);
  for (u32 k = 0; k < Stages && k < r.mine; ++k) r.fetch(k, k, ring, full);
}

// The same stream with the whole chunks fed by the TMA unit (sm_90): chunk c (V vectors per thread, 16 KB per
// vector at 1024 threads) is copied by cp.async.bulk into stage c % Stages of a ring in shared memory, so Stages
// chunks per block are in flight whatever the registers allow (the register-fed loop holds one batch in flight
// per thread). Thread 0 issues the copies (the first Stages in start_ring); every thread reads
// its vectors of a stage into registers, releases the stage, then counts them. full[s] (an mbarrier) completes
// when the copy into stage s has landed. A stage is released through named barrier 1 + s: one bar.arrive per
// warp, and warp 0 waits in bar.sync for all of them before thread 0 refills the stage. Against one mbarrier
// arrival per thread, that took uint8 at 256 bins from 90.3% to 91.4% of the read-only ceiling on the H200
// (docs/results/h200-2026-12-03-0655); two vectors per chunk, half the waits and releases per byte, from there to
// 94.2%, and 16-bit counters at 64K bins from 77.9% to 91.6%. Warp w cannot arrive at barrier 1 + s for chunk
// k + Stages before that barrier completed for chunk k: its copy is issued only after. Needs blockDim.x a multiple
// of 32 and Stages <= 15 (barrier 0 is __syncthreads').
template <typename T, int Stages, int V, class Sink>
static __device__ __forceinline__ void stream_values_tma(const T* __restrict__ in, u64 n, Sink& sink, uint4* ring,
                                                         u64* full) {
  static_assert(Stages >= 1 && Stages <= 15, "named barriers 1..15 release the stages");
  constexpr int kPerVec = Layout<T>::kPerVec;
  const u64 tid = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const u64 nthreads = static_cast<u64>(gridDim.x) * blockDim.x;
  const RingShare<T> r = RingShare<T>::template make<V>(in, n);
  if (tid < r.head) sink.scalar(static_cast<u32>(in[tid]));
  const u32 chunk_vecs = r.chunk_vecs;
  const u32 mine = r.mine;

  u32 s = 0, parity = 0;  // stage of chunk k, and the phase parity of its barriers
  for (u32 k = 0; k < mine; ++k) {
    while (!ptx::mbarrier_try_wait_parity_acquire<false>(full + s, parity)) {
    }  // acquire: the chunk's bytes in stage s, landed by the copy, are visible to this thread
    uint4 v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = ring[s * chunk_vecs + j * blockDim.x + threadIdx.x];
    if (k + Stages < mine) {  // stage s takes chunk k + Stages once every warp has read it
      if (threadIdx.x < 32) {
        ptx::named_barrier_sync(1u + s, blockDim.x);  // every warp's reads of stage s are done ...
        if (threadIdx.x == 0) {
          ptx::fence_proxy_async_shared_cta();  // ... before the copy (async proxy) overwrites it
          r.fetch(k + Stages, s, ring, full);
        }
      } else {
        ptx::named_barrier_arrive(1u + s, blockDim.x);  // release: this warp's reads of stage s are done
      }
    }
    sink.template batch<V>(v);
    if (++s == Stages) s = 0, parity ^= 1u;
  }

  // Fewer than one chunk per block of whole vectors is left, then the scalar tail (as stream_values).
  for (u64 i = static_cast<u64>(r.nchunk) * chunk_vecs + tid; i < r.nvec; i += nthreads) {
    const uint4 v = load_stream(r.vec + i);
#pragma unroll
    for (int j = 0; j < kPerVec; ++j) sink.scalar(element<T>(v, j));
  }
  for (u64 i = r.head + r.nvec * kPerVec + tid; i < n; i += nthreads) sink.scalar(static_cast<u32>(in[i]));
}

// ---------------------------------------------------------------------------------------------
// Global atomics: the baseline every GPU has.
template <typename T>
struct GlobalSink {
  u32* out;
  u32 bins;

  __device__ __forceinline__ void scalar(u32 v) {
    if (v < bins) atomicAdd(out + v, 1u);  // result unused: compiles to a fire-and-forget RED
  }
  template <int U>
  __device__ __forceinline__ void batch(const uint4 (&v)[U]) {
#pragma unroll
    for (int k = 0; k < U; ++k)
#pragma unroll
      for (int j = 0; j < Layout<T>::kPerVec; ++j) scalar(element<T>(v[k], j));
  }
};

// float input binned where it is counted (hist_block_tma_float): the stream reads the floats' bits as int32, and
// each 32-bit lane becomes its bin index, or 0xffffffff outside the range, before `Inner`, the counters' own sink,
// takes it (the lanes of an int32 vector are its elements, element<int>).
template <class Inner, class Rule, bool Quick>
struct BinningSink {
  Inner& inner;
  const Rule& rule;  // cuadv::bins::EvenBins<float, ...>

  __device__ __forceinline__ u32 bin(u32 bits) const {
    const float v = __uint_as_float(bits);
    return static_cast<u32>(Quick ? rule.quick_index(v) : rule.numpy_index(v));
  }
  __device__ __forceinline__ void scalar(u32 bits) { inner.scalar(bin(bits)); }
  template <int U>
  __device__ __forceinline__ void batch(const uint4 (&v)[U]) {
    uint4 b[U];
#pragma unroll
    for (int k = 0; k < U; ++k) b[k] = make_uint4(bin(v[k].x), bin(v[k].y), bin(v[k].z), bin(v[k].w));
    inner.template batch<U>(b);
  }
};

template <bool Quick, class Inner, class Rule>
static __device__ __forceinline__ BinningSink<Inner, Rule, Quick> binning_sink(Inner& inner, const Rule& rule) {
  return BinningSink<Inner, Rule, Quick>{inner, rule};
}

// ---------------------------------------------------------------------------------------------
// PTX wrappers for this block's shared-memory atomics on 32-bit shared::cta addresses.

// red.shared::cta.add.u32 [addr], v;  (sm_20) - relaxed add to this block's shared memory, no result.
static __device__ __forceinline__ void red_shared_cta_add(u32 addr, u32 v) {
  asm volatile("red.shared::cta.add.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// atom.shared::cta.add.u32 old, [addr], v;  (sm_20) - relaxed add returning the old word.
static __device__ __forceinline__ u32 atom_shared_cta_add(u32 addr, u32 v) {
  u32 old;
  asm volatile("atom.shared::cta.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(addr), "r"(v) : "memory");
  return old;
}

// One block's packed counters (bins 2w and 2w + 1 in word w) reach the global bins as pairs: one 64-bit atomic
// adds both halves to the adjacent global words, half the atomics of one per bin (the flush of 65,536 bins took
// 9-11 us per block). Exact because the global bins start at zero (count_bins and the drop-ins zero them) and a
// launch counts fewer than 2^32 elements (the host checks), so the low bin, which only ever grows, never carries
// into the high one. Every global update of such a pair (flush and wrap corrections) takes this 64-bit form, as
// atomics of different sizes on the same bytes are not atomic with respect to each other (PTX ISA, memory
// consistency model); `out` not 8-byte aligned (a user's out= view) keeps one 32-bit atomic per bin throughout.
static __device__ __forceinline__ bool global_pairs(const u32* out) {
  return (reinterpret_cast<u64>(out) & 7u) == 0;
}

// Packed 16-bit counters: the global corrections for one increment of `count` into local index
// `local` of the block of cluster rank `rank` (bin (local << log2c) | rank), given the old 32-bit
// word `old` its atomic returned. Rare: a half wraps once per 65536 increments. The word holds the
// halves of local indices local & ~1 (low) and local | 1 (high); see SharedSink for the scheme.
static __device__ __forceinline__ void packed_wrap_corrections(u32* out, u32 bins, u32 log2c, u32 local, u32 rank,
                                                               u32 count, u32 old) {
  const u32 shift = (local & 1u) << 4;
  const u32 delta = count << shift;
  const bool lo_carry = shift == 0 && (old & 0xFFFFu) + count > 0xFFFFu;
  const bool word_wrap = old + delta < old;
  if (__builtin_expect(lo_carry || word_wrap, 0)) {
    const u32 lo_bin = ((local & ~1u) << log2c) | rank;
    const u32 hi_bin = lo_bin + (1u << log2c);  // >= bins: a trash slot or past the end, never flushed
    if (log2c == 0 && hi_bin < bins && global_pairs(out)) {
      // Both corrections in one 64-bit add, as the flush adds this pair (see flush_pairs): the low half's
      // +65536 cannot carry into the high half, and the high half's -1 (+65536) wraps within it.
      const u64 d = (lo_carry ? 0xFFFFFFFF00010000ull : 0ull) + (word_wrap ? 0x1000000000000ull : 0ull);
      atomicAdd(reinterpret_cast<unsigned long long*>(out + lo_bin), d);
      return;
    }
    if (lo_carry) {
      if (lo_bin < bins) atomicAdd(out + lo_bin, 0x10000u);
      if (hi_bin < bins) atomicAdd(out + hi_bin, 0xFFFFFFFFu);  // -1: the carry that went into hi
    }
    if (word_wrap && hi_bin < bins) atomicAdd(out + hi_bin, 0x10000u);
  }
}

// ---------------------------------------------------------------------------------------------
// Shared-memory counters, local (one block) or sharded over a cluster (DSM).
//
// Slots: bins + 1. Slot `bins` is a trash slot that takes every out-of-range value, so the hot
// path has no branch; it is never flushed. With a cluster of C = 2^log2c blocks, slot s lives in
// block s % C at local index s / C (interleaved, so the hot low bins of skewed data spread over
// all blocks of the cluster instead of piling on one).
//
// Layout of one block's counters: local index `local` of replica r is 32-bit word
//   (local << log2r) | r            with 32-bit counters,
//   ((local >> 1) << log2r) | r     with packed counters (half local & 1 of the word).
// A thread uses replica (lane % R): with R = 32 each lane owns one bank, so a warp's atomics
// never conflict on a bank or an address; smaller R still spreads a hot bin over R words.
//
// Packed 16-bit counters, exact: the word W holds lo + 65536 * hi (mod 2^32). An increment of
// the low half that carries (old lo + d > 0xFFFF) adds 65536 to the low bin in global memory and
// -1 to the high bin (the carry landed there); an increment whose 32-bit add wraps adds 65536 to
// the high bin. The thread that made the atomic sees the old value, so each wrap is counted by
// exactly one thread; the flush adds what is left in each half. See add_wrap_corrections.
//
// Log2R >= 0: the replica count known at compile time (R = 32 for every bin count up to 575 that one
// block holds). Then the word of slot s for lane l is s * 32 + l, whose byte offset (s << 7) | (l << 2)
// is one shift-and-mask of the loaded word (the ncu profile of the uint8 kernel found it issue-bound
// at six instructions per element: shift and mask to extract, clamp, runtime shift, add, atomic). InRange: every value
// is < bins (uint8 over 256 bins), so no clamp to the trash slot.
template <typename T, bool Packed, bool Aggregate, bool Remote, int Log2R = -1, bool InRange = false>
struct SharedSink {
  static_assert(Log2R < 0 || (!Packed && !Remote), "a compile-time replica count is for local 32-bit counters");
  u32* out;            // global bins (packed wrap corrections go here during the run)
  u32 bins;            // real bins; slot `bins` is the trash slot
  u32 log2c;           // log2 of the cluster size (0 for one block)
  u32 word_shift;      // log2 of the bytes between consecutive local indices of one replica
  u32 rep_addr;        // shared::cta address of word 0 of this thread's replica
  u32 base_addr;       // shared::cta address of word 0 (Log2R >= 0)
  u32 lane;

  __device__ __forceinline__ SharedSink(u32* out_, u32 bins_, u32 log2c_, u32 log2r, const u32* counters)
      : out(out_), bins(bins_), log2c(log2c_), word_shift(log2r + 2u) {
    lane = threadIdx.x & 31u;
    base_addr = static_cast<u32>(__cvta_generic_to_shared(counters));
    rep_addr = base_addr + 4u * (lane & ((1u << log2r) - 1u));
  }

  __device__ __forceinline__ u32 clamp(u32 v) const { return InRange ? v : min(v, bins); }

  // Adds `count` to slot s (s <= bins); returns the old 32-bit word (Packed) or 0.
  __device__ __forceinline__ u32 increment(u32 s, u32 count) {
    if constexpr (Log2R >= 0) {
      constexpr u32 kLanes = (1u << Log2R) - 1u;
      red_shared_cta_add(base_addr + ((s << (Log2R + 2)) | ((lane & kLanes) << 2)), count);
      return 0;
    }
    const u32 local = Remote ? (s >> log2c) : s;
    const u32 addr = rep_addr + ((Packed ? (local >> 1) : local) << word_shift);
    const u32 delta = Packed ? (count << ((local & 1u) << 4)) : count;
    if constexpr (Remote) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // clusters: only hist_cluster (sm_90+) instantiates this
      // The same word in block s % C of the cluster. (ptxas turns map_shared_rank plus the generic
      // atomic into one ATOM on the shared window, the same code as mapa + atom.shared::cluster.)
      u32* local_word = static_cast<u32*>(__cvta_shared_to_generic(addr));
      u32* remote = cg::this_cluster().map_shared_rank(local_word, static_cast<int>(s & ((1u << log2c) - 1u)));
      if constexpr (Packed) return atomicAdd(remote, delta);
      atomicAdd(remote, delta);
#endif
      return 0;
    } else {
      if constexpr (Packed) return atom_shared_cta_add(addr, delta);
      red_shared_cta_add(addr, delta);
      return 0;
    }
  }

  // Packed counters only: the global corrections for a wrap seen in `old` (rare: once per 65536).
  __device__ __forceinline__ void add_wrap_corrections(u32 s, u32 count, u32 old) {
    const u32 local = Remote ? (s >> log2c) : s;
    const u32 rank = Remote ? (s & ((1u << log2c) - 1u)) : 0u;
    packed_wrap_corrections(out, bins, log2c, local, rank, count, old);
  }

  __device__ __forceinline__ void scalar(u32 v) {
    const u32 s = clamp(v);
    const u32 old = increment(s, 1u);
    if constexpr (Packed) add_wrap_corrections(s, 1u, old);
  }

  template <int U>
  __device__ __forceinline__ void batch(const uint4 (&vec)[U]) {
    constexpr int kPerVec = Layout<T>::kPerVec;
    constexpr int K = U * kPerVec;
    if constexpr (Aggregate) {
      // Lanes holding the same slot form one group; its first lane adds the group's size.
#pragma unroll
      for (int i = 0; i < K; ++i) {
        const u32 s = min(element<T>(vec[i / kPerVec], i % kPerVec), bins);
        const u32 peers = __match_any_sync(kAllLanes, s);
        if ((__ffs(peers) - 1) == static_cast<int>(lane)) {
          const u32 count = __popc(peers);
          const u32 old = increment(s, count);
          if constexpr (Packed) add_wrap_corrections(s, count, old);
        }
      }
    } else if constexpr (Packed) {
      // All atomics first (their results in flight together), then one test for all of them: an increment
      // of 1 wraps only a half that held 0xFFFF, that is where the old word with every bit outside that
      // half set is ~0. Three instructions per element and one branch per batch, against a branch each.
      u32 old[K];
#pragma unroll
      for (int i = 0; i < K; ++i) old[i] = increment(min(element<T>(vec[i / kPerVec], i % kPerVec), bins), 1u);
      bool wrapped = false;
#pragma unroll
      for (int i = 0; i < K; ++i) {
        const u32 s = min(element<T>(vec[i / kPerVec], i % kPerVec), bins);
        const u32 half = 0xFFFFu << ((((Remote ? (s >> log2c) : s)) & 1u) << 4);
        wrapped |= (old[i] | ~half) == ~0u;
      }
      if (__builtin_expect(wrapped, 0)) {
#pragma unroll
        for (int i = 0; i < K; ++i)
          add_wrap_corrections(min(element<T>(vec[i / kPerVec], i % kPerVec), bins), 1u, old[i]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < K; ++i) scalar(element<T>(vec[i / kPerVec], i % kPerVec));
    }
  }
};

// Where block (or cluster) `unit` starts its flush over `count` slots: the units flush at about the
// same time, so they start at different bins instead of queueing on the same global addresses.
static __device__ __forceinline__ u32 flush_start(u32 unit, u32 count) {
  return count ? static_cast<u32>((static_cast<u64>(unit) * 128u) % count) : 0u;  // count 0: no private range
}

// Replica of a slot that a flushing thread reads in round r of R = 2^log2r (at most 32): the lanes of a warp flush
// consecutive slots (words slot * R .. slot * R + R - 1), so reading replica r in every lane puts all 32 lanes on
// one bank when R = 32 (a 32-way conflict for each of the R reads: 4.8 us of flush per uint8 block, traced
// 2026-12-04). Lane l starts at replica l / (32 / R) instead: lane l % (32 / R) fixes the slot's bank group and
// l / (32 / R) the bank within it, so the warp's 32 reads of a round fall on 32 different banks.
static __device__ __forceinline__ u32 flush_replica(u32 r, u32 log2r) {
  return (r + ((threadIdx.x & 31u) >> (5u - log2r))) & ((1u << log2r) - 1u);
}

// Words of shared counters one block holds: its shard of ceil((bins + 1) / C) slots (the real bins
// and the trash slot), times R replicas.
template <bool Packed>
static __device__ __forceinline__ u32 counter_words(u32 bins, u32 log2c, u32 log2r) {
  const u32 shard = (bins + (1u << log2c)) >> log2c;
  return (Packed ? (shard + 1u) >> 1 : shard) << log2r;
}

// One block's packed counters by pairs (global_pairs): word w of each replica holds bins 2w (low half) and 2w + 1.
static __device__ __forceinline__ void flush_pairs(const u32* counters, u32* out, u32 bins, u32 log2r, u32 unit) {
  const u32 pairs = (bins + 1u) >> 1;
  const u32 start = flush_start(unit, pairs);
  for (u32 i = threadIdx.x; i < pairs; i += blockDim.x) {
    const u32 w = i < pairs - start ? i + start : i - (pairs - start);
    u32 lo = 0, hi = 0;  // the sums of the word's R replicas, half by half
    for (u32 r = 0; r < (1u << log2r); ++r) {
      const u32 word = counters[(w << log2r) | flush_replica(r, log2r)];
      lo += word & 0xFFFFu;
      hi += word >> 16;
    }
    if (2u * w + 1u < bins) {
      if (lo | hi) atomicAdd(reinterpret_cast<unsigned long long*>(out + 2u * w), (static_cast<u64>(hi) << 32) | lo);
    } else if (lo) {
      atomicAdd(out + 2u * w, lo);  // the last bin of an odd count: its high half is the trash slot
    }
  }
}

// Adds this block's counters (its shard of the bins: bin (local << log2c) | rank for local index `local`) to the
// global bins, one global atomic per nonzero bin (one block's packed counters: per pair of bins, flush_pairs),
// consecutive threads on consecutive local indices (one block: consecutive bins, so a warp's atomics share cache
// lines; a cluster: bins C apart), each block starting where `unit` says, so that blocks flushing at about the
// same time do not queue on the same addresses.
template <bool Packed>
static __device__ __forceinline__ void flush_counters(const u32* counters, u32* out, u32 bins, u32 log2c, u32 rank,
                                                      u32 log2r, u32 unit) {
  if (Packed && log2c == 0 && global_pairs(out)) return flush_pairs(counters, out, bins, log2r, unit);
  const u32 shard = (bins + (1u << log2c) - 1u) >> log2c;  // local indices of real bins in any block
  const u32 start = flush_start(unit, shard);
  for (u32 i = threadIdx.x; i < shard; i += blockDim.x) {
    const u32 local = i < shard - start ? i + start : i - (shard - start);
    const u32 bin = (local << log2c) | rank;
    if (bin >= bins) continue;
    u32 total = 0;  // the sum of the slot's R replicas
    const u32 base = Packed ? ((local >> 1) << log2r) : (local << log2r);
    const u32 shift = Packed ? ((local & 1u) << 4) : 0u;
    for (u32 r = 0; r < (1u << log2r); ++r) {
      const u32 w = counters[base | flush_replica(r, log2r)];
      total += Packed ? ((w >> shift) & 0xFFFFu) : w;
    }
    if (total) atomicAdd(out + bin, total);  // one global atomic per nonzero bin per block
  }
}

// ---------------------------------------------------------------------------------------------
// Skew-aware hybrid: the low bins [0, hot) in a private shared-memory histogram (32-bit counters,
// one copy), every other in-range value by a global atomic. Truncated Zipf data puts almost all of
// its mass in the low bins; uniform data over many bins mostly takes the global path.
template <typename T>
struct HotSink {
  u32* out;
  u32 bins;
  u32 hot;        // private bins [0, hot)
  u32 hot_addr;   // shared::cta address of the private counters

  __device__ __forceinline__ void scalar(u32 v) {
    if (v < hot) {
      red_shared_cta_add(hot_addr + 4u * v, 1u);
    } else if (v < bins) {
      atomicAdd(out + v, 1u);  // result unused: a fire-and-forget RED to L2
    }
  }
  template <int U>
  __device__ __forceinline__ void batch(const uint4 (&v)[U]) {
#pragma unroll
    for (int k = 0; k < U; ++k)
#pragma unroll
      for (int j = 0; j < Layout<T>::kPerVec; ++j) scalar(element<T>(v[k], j));
  }
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // clusters and DSM: only hist_exchange (sm_90+) uses these
// ---------------------------------------------------------------------------------------------
// PTX wrappers for distributed shared memory and the split cluster barrier (all sm_90).

// mapa_shared_cluster (the same offset in another block of the cluster) and st_shared_cluster_v4 (a weak
// 16-byte store there, seen by the reader after a cluster barrier: arrive.release by the writer, wait.acquire
// by the reader) come from cuadv/ptx.cuh.
using cuadv::ptx::mapa_shared_cluster;
using cuadv::ptx::st_shared_cluster_v4;

// st.shared::cluster.u32 [addr], v;  (sm_90) - a weak 4-byte store, ordered like st_shared_cluster_v4.
static __device__ __forceinline__ void st_shared_cluster_u32(u32 addr, u32 v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// red.shared::cluster.add.u32 [addr], v;  (sm_90) - relaxed add into a cluster block's shared memory.
static __device__ __forceinline__ void red_shared_cluster_add(u32 addr, u32 v) {
  asm volatile("red.shared::cluster.add.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// atom.shared::cluster.add.u32 old, [addr], v;  (sm_90) - relaxed add returning the old word.
static __device__ __forceinline__ u32 atom_shared_cluster_add(u32 addr, u32 v) {
  u32 old;
  asm volatile("atom.shared::cluster.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(addr), "r"(v) : "memory");
  return old;
}

// barrier.cluster.arrive.release;  (sm_90) - this thread's arrival at the cluster barrier; release: its
// earlier shared-memory writes (local and remote) are visible to every thread of the cluster that has
// waited on this phase. Every thread of every block of the cluster arrives; a thread's next arrive
// must follow its wait. Not .aligned: a thread may arrive alone (no warp convergence needed).
static __device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}

// barrier.cluster.wait.acquire;  (sm_90) - waits until every thread of the cluster has arrived at the
// current phase; acquire: their writes before arriving are visible to this thread.
static __device__ __forceinline__ void cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// %lanemask_lt: the lanes below this one.  (sm_20)
static __device__ __forceinline__ u32 lanemask_lt() {
  u32 m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

// ---------------------------------------------------------------------------------------------
// DSM exchange ("mailbox"): the bins sharded over a cluster of C blocks as in hist_cluster (bin b in
// block b % C at local index b / C, interleaved so the hot low bins of skewed data spread over the
// cluster), but elements travel to their owner in bulk instead of one remote atomic each:
//
//   partition  each warp sorts its elements by owner into this block's stage (16-bit local indices,
//              one run of `cap` entries per owner), reserving room with one shared atomic per owner
//              present in the warp (ballots on the owner bits group the lanes);
//   send       the runs go to the owners' mailboxes with 16-byte remote stores, plus one count word;
//   barrier    cluster arrive (release) after sending; wait (acquire) one round later, so the
//              partition of the next chunk overlaps the barrier's latency;
//   apply      each block adds the entries its mailbox received with local shared atomics.
//
// Two mailboxes and two stages alternate between rounds, so one cluster barrier per round orders
// everything: a sender writes mailbox m in round r only after its wait on round r - 1, which every
// owner passed only after applying round r - 2 (the last reader of m). Run cursors cycle through
// three buffers (reset one round after their last reader, one round before their next writer).
//
// A run that outgrows `cap` (skewed data: many elements of one chunk for one owner) sends the rest
// by remote atomics, exactly as hist_cluster does; `cap` is 1.25x the uniform share, so uniform data
// never gets there. Optional: a private shared histogram of the low bins [0, hot) in every block
// (the skew-aware range), so that hot bins never reach the exchange.
//
// Shared memory of one block (bytes, every array 16-byte aligned; mirrored by exchange_layout in
// histogram.py):
//   hot counters      4 * round4(hot)
//   shard counters    4 * round4(Packed ? ceil(shard / 2) : shard),  shard = ceil(bins / C)
//   stage  [2][C][stride] u16,  stride = cap padded so consecutive runs start 4 banks apart
//   mailbox[2][C][cap]    u16   (mailbox[m][s]: the entries sender rank s sent in a round using m)
//   mailbox counts [2][C] u32
//   run cursors    [3][C] u32
constexpr u32 kExchangeThreads = 1024;  // the exchange's block size: its run capacities assume it

template <bool Packed, int C, int V>
struct ExchangeLayout {
  static_assert(C == 2 || C == 4 || C == 8 || C == 16, "cluster sizes 2, 4, 8, 16");
  static_assert(V == 1 || V == 2, "1 or 2 vectors per thread per round");
  static constexpr u32 kLog2C = C == 2 ? 1 : C == 4 ? 2 : C == 8 ? 3 : 4;
  static constexpr u32 kChunk = kExchangeThreads * V * 4;  // elements per block per round
  // Entries per (sender, owner) run: 1.25x a uniform chunk's share, in whole 16-byte vectors.
  static constexpr u32 kCap = ((5u * kChunk + 4u * C - 1u) / (4u * C) + 7u) & ~7u;
  // Stage entries between owners' runs: kCap padded so that kStride / 2 words = 4 (mod 32), which
  // starts consecutive runs 4 banks apart (the partition's stores of one warp spread over the banks).
  static constexpr u32 kStride = 2u * (kCap / 2u + ((4u - kCap / 2u) & 31u));
  static constexpr u32 kGroup = kExchangeThreads / C;  // threads that send (apply) one run (mailbox)
  u32 shard;  // local indices per block: ceil(bins / C) (out-of-range values are dropped before)
  u32 counters_off, stage_off, mbox_off, mcount_off, cursor_off, bytes;

  __device__ __forceinline__ ExchangeLayout(u32 bins, u32 hot) {
    shard = (bins + (C - 1)) >> kLog2C;
    const u32 counter_words = Packed ? (shard + 1u) >> 1 : shard;
    counters_off = 4u * ((hot + 3u) & ~3u);
    stage_off = counters_off + 4u * ((counter_words + 3u) & ~3u);
    mbox_off = stage_off + 2u * 2u * C * kStride;
    mcount_off = mbox_off + 2u * 2u * C * kCap;
    cursor_off = mcount_off + 4u * 2u * C;
    bytes = (cursor_off + 4u * 3u * C + 15u) & ~15u;
  }
};

template <bool Packed, int C, int V>
struct Exchange {
  using Layout = ExchangeLayout<Packed, C, V>;
  static constexpr u32 kLog2C = Layout::kLog2C;
  static constexpr u32 cap = Layout::kCap;
  static constexpr u32 stride = Layout::kStride;
  static constexpr u32 kGroup = Layout::kGroup;
  u32* out;
  u32 bins, hot, rank, lane;
  u32 hot_addr, counters_addr, cursor_addr, mcount_addr, mbox_addr;  // shared::cta addresses
  unsigned short* stage;
  const unsigned short* mbox;
  const u32* mcount;
  const u32* cursor;

  __device__ __forceinline__ Exchange(unsigned char* smem, const Layout& L, u32* out_, u32 bins_, u32 hot_, u32 rank_)
      : out(out_), bins(bins_), hot(hot_), rank(rank_) {
    lane = threadIdx.x & 31u;
    const u32 base = static_cast<u32>(__cvta_generic_to_shared(smem));
    hot_addr = base;
    counters_addr = base + L.counters_off;
    cursor_addr = base + L.cursor_off;
    mcount_addr = base + L.mcount_off;
    mbox_addr = base + L.mbox_off;
    stage = reinterpret_cast<unsigned short*>(smem + L.stage_off);
    mbox = reinterpret_cast<const unsigned short*>(smem + L.mbox_off);
    mcount = reinterpret_cast<const u32*>(smem + L.mcount_off);
    cursor = reinterpret_cast<const u32*>(smem + L.cursor_off);
  }

  // Adds `count` to local index `local` in the block of rank `owner` by a remote atomic (packed: with
  // the exact wrap corrections). The slow path: overflowing runs, head and tail.
  __device__ __forceinline__ void remote_increment(u32 owner, u32 local, u32 count) {
    const u32 addr = mapa_shared_cluster(counters_addr + 4u * (Packed ? local >> 1 : local), owner);
    if constexpr (Packed) {
      const u32 old = atom_shared_cluster_add(addr, count << ((local & 1u) << 4));
      packed_wrap_corrections(out, bins, kLog2C, local, owner, count, old);
    } else {
      red_shared_cluster_add(addr, count);
    }
  }

  // Head and tail elements, one at a time (divergent callers allowed).
  __device__ __forceinline__ void scalar(u32 v) {
    if (v < hot) {
      red_shared_cta_add(hot_addr + 4u * v, 1u);
    } else if (v < bins) {
      remote_increment(v & (C - 1u), v >> kLog2C, 1u);
    }
  }

  // Stores one element at place `pos` of its owner's run, or, past `cap` (the run is full this round:
  // skewed data), adds it by a remote atomic, one per distinct value per warp. Warp-collective.
  __device__ __forceinline__ void place_or_overflow(u32 v, bool valid, u32 pos, u32 stage_buf) {
    const u32 owner = v & (C - 1u);
    const u32 local = v >> kLog2C;
    if (valid && pos < cap) stage[(stage_buf * C + owner) * stride + pos] = static_cast<unsigned short>(local);
    const bool overflow = valid && pos >= cap;
    if (__any_sync(kAllLanes, overflow)) {
      const u32 same = __match_any_sync(kAllLanes, overflow ? v : ~0u);
      if (overflow && static_cast<u32>(__ffs(same) - 1) == lane) remote_increment(owner, local, __popc(same));
    }
  }

  // Sorts this thread's K elements of the round into the stage (`stage_buf`) by owner rank, reserving
  // room with the run cursors of `cur` (0..2). Warp-collective: every lane of the warp calls it.
  //
  // Ballot sort (one shared atomic per warp and owner):
  //   1. per element slot: ballots on the valid flag and the owner bits give each lane the lanes with
  //      the same owner (`peers`) and lane o (< C) the lanes whose owner is o; lane o keeps a running
  //      count of owner o's elements over the slots, and every element its place in the warp's run;
  //   2. lanes o < C reserve their run in the block's run for owner o with one shared atomic each;
  //   3. every element is stored at its place (or overflows).
  // Atomic sort: one returning shared atomic per element on its owner's cursor (C cursors: lanes of
  // a warp with the same owner meet on one address). Fewer instructions, more atomic traffic; the
  // lab measures both.
  template <int K>
  __device__ __forceinline__ void partition(const u32 (&v)[K], u32 stage_buf, u32 cur, bool atomic_sort) {
    if (atomic_sort) {
      u32 pos[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        pos[k] = cap;
        if (v[k] >= hot && v[k] < bins)
          pos[k] = atom_shared_cta_add(cursor_addr + 4u * (cur * C + (v[k] & (C - 1u))), 1u);
      }
#pragma unroll
      for (int k = 0; k < K; ++k) place_or_overflow(v[k], v[k] >= hot && v[k] < bins, pos[k], stage_buf);
    } else {
      u32 lane_sel[kLog2C];  // ~0 where this lane's bit b is 0: lane o builds the peer mask of owner o
#pragma unroll
      for (u32 b = 0; b < kLog2C; ++b) lane_sel[b] = ((lane >> b) & 1u) ? 0u : ~0u;
      u32 place[K];  // the element's place in the warp's run for its owner
      u32 run = 0;   // lane o < C: elements of owner o in this warp so far
      const u32 lt = lanemask_lt();
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const bool valid = v[k] >= hot && v[k] < bins;
        const u32 valid_lanes = __ballot_sync(kAllLanes, valid);
        u32 peers = valid_lanes;
        u32 of_lane = valid_lanes;
#pragma unroll
        for (u32 b = 0; b < kLog2C; ++b) {
          const bool bit = (v[k] & (1u << b)) != 0;
          const u32 set = __ballot_sync(kAllLanes, bit);
          peers &= set ^ (bit ? 0u : ~0u);  // the lanes whose bit b equals this lane's
          of_lane &= set ^ lane_sel[b];     // the lanes whose bit b equals bit b of this lane's index
        }
        place[k] = __shfl_sync(kAllLanes, run, v[k] & (C - 1u)) + __popc(peers & lt);
        run += __popc(of_lane);
      }
      u32 base = 0;
      if (lane < C && run) base = atom_shared_cta_add(cursor_addr + 4u * (cur * C + lane), run);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const u32 pos = __shfl_sync(kAllLanes, base, v[k] & (C - 1u)) + place[k];
        place_or_overflow(v[k], v[k] >= hot && v[k] < bins, pos, stage_buf);
      }
    }
    if (hot) {  // the private low bins (a uniform branch: hot is a kernel parameter)
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (v[k] < hot) red_shared_cta_add(hot_addr + 4u * v[k], 1u);
    }
  }

  // Sends this round's runs (stage `stage_buf`, cursors `cur`) to mailbox `m` of every owner: one
  // count word per owner, then the runs in 16-byte vectors. The threads form C groups of
  // blockDim.x / C, group o sending run o (a uniform run is about one vector per thread; a full one,
  // `cap` entries, 0.625 * V vectors per thread: at most 2).
  __device__ __forceinline__ void send(u32 stage_buf, u32 cur, u32 m) {
    constexpr u32 group = kGroup;
    const u32 o = threadIdx.x / group;
    const u32 n = min(cursor[cur * C + o], cap);
    const u32 dst = mapa_shared_cluster(mbox_addr + 2u * (m * C + rank) * cap, o);  // this block's mailbox at o
    if (threadIdx.x % group == 0) st_shared_cluster_u32(mapa_shared_cluster(mcount_addr + 4u * (m * C + rank), o), n);
    const unsigned short* src = stage + (stage_buf * C + o) * stride;
    // Entries past the count in the last vector are stale; the owner ignores them.
    for (u32 e = (threadIdx.x % group) << 3; e < n; e += group << 3)
      st_shared_cluster_v4(dst + 2u * e, *reinterpret_cast<const uint4*>(src + e));
  }

  // Adds every entry of this block's mailbox `m` to its shard, with local shared atomics. Group s of
  // blockDim.x / C threads takes the entries sender s sent.
  __device__ __forceinline__ void apply(u32 m) {
    constexpr u32 group = kGroup;
    const u32 s = threadIdx.x / group;
    const u32 n = mcount[m * C + s];
    const unsigned short* src = mbox + (m * C + s) * cap;
    for (u32 e = (threadIdx.x % group) << 3; e < n; e += group << 3) {
      const u32 valid = min(8u, n - e);
      const uint4 w = *reinterpret_cast<const uint4*>(src + e);
      u32 local[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        local[2 * i] = (&w.x)[i] & 0xFFFFu;
        local[2 * i + 1] = (&w.x)[i] >> 16;
      }
      if constexpr (Packed) {
#pragma unroll
        for (u32 h = 0; h < 8; h += 4) {  // four atomics in flight, then their rare wrap checks
          u32 old[4];
#pragma unroll
          for (u32 i = 0; i < 4; ++i) {
            const u32 word = counters_addr + 4u * (local[h + i] >> 1);
            old[i] = h + i < valid ? atom_shared_cta_add(word, 1u << ((local[h + i] & 1u) << 4)) : 0u;
          }
#pragma unroll
          for (u32 i = 0; i < 4; ++i)
            if (h + i < valid) packed_wrap_corrections(out, bins, kLog2C, local[h + i], rank, 1u, old[i]);
        }
      } else {
#pragma unroll
        for (u32 i = 0; i < 8; ++i)
          if (i < valid) red_shared_cta_add(counters_addr + 4u * local[i], 1u);
      }
    }
  }

  // Every nonzero bin this block holds, by one global atomic each: its private low bins, then its shard.
  __device__ __forceinline__ void flush(const unsigned char* smem, const Layout& L) {
    flush_counters<false>(reinterpret_cast<const u32*>(smem), out, hot, 0u, 0u, 0u, blockIdx.x);
    flush_counters<Packed>(reinterpret_cast<const u32*>(smem + L.counters_off), out, bins, kLog2C, rank, 0u,
                           blockIdx.x >> kLog2C);
  }
};

// V vectors per thread of chunk `chunk` (kExchangeThreads * V vectors, coalesced across the block);
// past the last vector: all ones (out of range for any bins <= 2^30, so dropped).
template <int V>
static __device__ __forceinline__ void load_chunk(uint4 (&v)[V], const uint4* vec, u64 nvec, u64 chunk) {
  const u64 first = chunk * (kExchangeThreads * V) + threadIdx.x;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const u64 i = first + static_cast<u64>(k) * kExchangeThreads;
    v[k] = i < nvec ? load_stream(vec + i) : make_uint4(~0u, ~0u, ~0u, ~0u);
  }
}
#endif  // clusters

}  // namespace cuadv_hist

using cuadv_hist::u32;
using cuadv_hist::u64;

// Unroll factors: 16-byte loads per thread per batch (64 B in flight per thread, twice with the prefetch).
// Fewer with packed counters in hist_cluster (their old values are held until the wrap checks, beside the
// remote path's registers; hist_block takes two).
template <typename T, bool Packed>
struct BatchVectors {
  static constexpr int value = Packed ? 1 : 2;
};

template <typename T>
__global__ void __launch_bounds__(1024) hist_global(const T* __restrict__ in, u64 n, u32* __restrict__ out, u32 bins,
                                                    const u32* __restrict__ gate, u32 want) {
  if (cuadv_hist::gated_off(gate, want)) return;
  cuadv_hist::GlobalSink<T> sink{out, bins};
  cuadv_hist::stream_values<T, BatchVectors<T, false>::value>(in, n, sink);
}

// Single-block shared memory: the classic privatised histogram, its counters at `counters` (the
// block's dynamic shared memory). `stream(sink)` feeds the values: register loads or the TMA ring.
// Packed: 16-bit counters two per word (int32 bins that one block holds only so), wraps as SharedSink handles them.
template <typename T, bool Packed, class Stream>
static __device__ __forceinline__ void block_histogram(u32* __restrict__ out, u32 bins, u32 log2r, u32* counters,
                                                       const Stream& stream) {
  const u32 words = cuadv_hist::counter_words<Packed>(bins, 0, log2r);
  for (u32 w = threadIdx.x; w < words; w += blockDim.x) counters[w] = 0;
  __syncthreads();  // the zeroed counters are visible to every thread of the block before the first increment

  if constexpr (Packed) {
    cuadv_hist::SharedSink<T, true, false, false> sink(out, bins, 0u, log2r, counters);
    stream(sink);
  } else if (log2r == 5 && sizeof(T) == 1 && bins >= 256) {  // uint8 over 256 bins: every value in range
    cuadv_hist::SharedSink<T, false, false, false, 5, true> sink(out, bins, 0u, log2r, counters);
    stream(sink);
  } else if (log2r == 5) {
    cuadv_hist::SharedSink<T, false, false, false, 5> sink(out, bins, 0u, log2r, counters);
    stream(sink);
  } else {
    cuadv_hist::SharedSink<T, false, false, false> sink(out, bins, 0u, log2r, counters);
    stream(sink);
  }

  __syncthreads();  // every increment of this block is complete before the counters are read
#if __CUDA_ARCH__ >= 900
  cuadv::pdl::launch_dependents();  // the widening pass (a programmatic dependent) may be placed as blocks leave
#endif
  cuadv_hist::flush_counters<Packed>(counters, out, bins, 0u, 0u, log2r, blockIdx.x);
}

// Needs (bins + 1) * R * 4 B of dynamic shared memory (Packed: ceil((bins + 1) / 2) * R * 4 B).
template <typename T, bool Packed>
__global__ void __launch_bounds__(1024) hist_block(const T* __restrict__ in, u64 n, u32* __restrict__ out, u32 bins,
                                                   u32 log2r, const u32* __restrict__ gate, u32 want) {
  if (cuadv_hist::gated_off(gate, want)) return;
  extern __shared__ u32 counters[];
  if (4u * cuadv_hist::counter_words<Packed>(bins, 0, log2r) > cuadv_hist::dynamic_smem_size())
    __trap();  // the host sized shared memory wrongly
  // Two vectors per batch with 16-bit counters too: one block per SM leaves 64 registers per thread, and the
  // bytes in flight set the pace (H200, 64K bins: 88.0% of the read-only ceiling against 78.7% for the one-block
  // dsm kernel with one; three spill and read 59.6%).
  block_histogram<T, Packed>(out, bins, log2r, counters, [&](auto& sink) {
    cuadv_hist::stream_values<T, BatchVectors<T, false>::value>(in, n, sink);
  });
}

// hist_block fed by the TMA unit (sm_90): Stages chunks of V * 16 * blockDim.x bytes in flight per block, into
// 32-bit or (Packed) 16-bit counters. Dynamic shared memory: the counters, rounded up to 128 B, then the ring
// (Stages chunks), then Stages mbarriers; the host sizes it as tma_ring_bytes in plans.py does. `feed(sink)`: the
// sink the stream feeds, made from the counters' own (itself, or hist_block_tma_float's binning in front of it).
template <typename T, int Stages, int V, bool Packed, class Feed>
static __device__ __forceinline__ void block_histogram_tma(const T* __restrict__ in, u64 n, u32* __restrict__ out,
                                                           u32 bins, u32 log2r, const Feed& feed) {
  extern __shared__ __align__(128) unsigned char tma_smem[];
  const u32 counter_bytes = (4u * cuadv_hist::counter_words<Packed>(bins, 0, log2r) + 127u) & ~127u;
  const u32 ring_bytes = Stages * V * 16u * blockDim.x;
  if (counter_bytes + ring_bytes + 8u * Stages > cuadv_hist::dynamic_smem_size())
    __trap();  // the host sized shared memory wrongly
  u32* counters = reinterpret_cast<u32*>(tma_smem);
  uint4* ring = reinterpret_cast<uint4*>(tma_smem + counter_bytes);
  u64* full = reinterpret_cast<u64*>(tma_smem + counter_bytes + ring_bytes);
  if (threadIdx.x == 0) {
    for (int s = 0; s < Stages; ++s) ptx::mbarrier_init(full + s, 1u);  // thread 0's arrive.expect_tx per copy
    ptx::fence_mbarrier_init_release_cluster();  // the initialised barriers are visible before any copy completes on them
    ptx::fence_proxy_async_shared_cta();  // ... including to the async proxy that does the completing
    // 16-bit counters (128 KB at 64K bins): the first chunks land while they are zeroed. The 32-bit kernels start
    // the ring after it, as two blocks per SM take them only at 32 registers, which starting it here exceeds.
    if constexpr (Packed) cuadv_hist::start_ring<T, Stages, V>(in, n, ring, full);
  }
  // (block_histogram's first __syncthreads orders the barriers' initialisation before any other thread's wait.)
  block_histogram<T, Packed>(out, bins, log2r, counters, [&](auto& sink) {
    if constexpr (!Packed)
      if (threadIdx.x == 0) cuadv_hist::start_ring<T, Stages, V>(in, n, ring, full);
    auto&& fed = feed(sink);
    cuadv_hist::stream_values_tma<T, Stages, V>(in, n, fed, ring, full);
  });
}

template <typename T, int Stages, int V, bool Packed>
__global__ void __launch_bounds__(1024) hist_block_tma(const T* __restrict__ in, u64 n, u32* __restrict__ out,
                                                       u32 bins, u32 log2r, const u32* __restrict__ gate, u32 want) {
  if (cuadv_hist::gated_off(gate, want)) return;
  block_histogram_tma<T, Stages, V, Packed>(in, n, out, bins, log2r, [](auto& sink) -> auto& { return sink; });
}

// float input counted in one pass: hist_block_tma over the floats' bits, each turned into its bin by numpy's
// rule for even bins (cuadv/histogram_bins.cuh) before the counters' own sink takes it; outside the range
// 0xffffffff, which the sink counts in its trash slot. The binning pass and its 4-byte index per element are gone.
// Rule (FLOAT_RULES in plans.py), a kernel each: one kernel holding them all spilled up to 104 bytes at the 32
// registers two blocks per SM allow (sm_90a), numpy's estimate's division being a call:
//   kQuickComputed  the quick estimate (inv, margin) and one edge, computed from (start, step, stop);
//   kQuickTable     the same against `edges` (numpy's table), read only for values within the margin of one;
//   kNumpyEstimate  numpy's estimate and a step against either (the host's margin reached kQuickMarginLimit).
enum FloatRule : int { kQuickComputed = 0, kQuickTable = 1, kNumpyEstimate = 2 };

// Registers for two blocks per SM (two run where the plan's shared memory lets them, as for hist_block_tma): each
// rule's binning fits the 32 registers that allows, but for the ring of 2 chunks of 2 vectors (sm_90a spilled 32
// bytes) and the 16-bit counters (56 registers, one block).
template <int Stages, int V, bool Packed>
constexpr int kFloatBlocksPerSm = Packed || (Stages == 2 && V == 2) ? 1 : 2;

template <int Stages, int V, bool Packed, int Rule>
__global__ void __launch_bounds__(1024, kFloatBlocksPerSm<Stages, V, Packed>) hist_block_tma_float(
    const float* __restrict__ in, u64 n, u32* __restrict__ out, u32 bins, u32 log2r, const u32* __restrict__ gate,
    u32 want, const float* __restrict__ edges, float lo, float span, float inv, float margin, double start,
    double step, double stop) {
  using cuadv::bins::Edges;
  constexpr bool kQuick = Rule != kNumpyEstimate;
  constexpr Edges kFrom = Rule == kQuickComputed ? Edges::computed : Rule == kQuickTable ? Edges::table : Edges::either;
  if (cuadv_hist::gated_off(gate, want)) return;
  if ((margin < static_cast<float>(cuadv::bins::kQuickMarginLimit)) != kQuick ||
      (kFrom == Edges::table && edges == nullptr) || (kFrom == Edges::computed && edges != nullptr))
    __trap();  // the host chose the kernel of another rule
  const cuadv::bins::EvenBins<float, kFrom> rule(edges, bins, lo, span, inv, margin, start, step, stop);
  block_histogram_tma<int, Stages, V, Packed>(reinterpret_cast<const int*>(in), n, out, bins, log2r, [&](auto& sink) {
    return cuadv_hist::binning_sink<kQuick>(sink, rule);
  });
}

// DSM: the bins sharded over the cluster (runtime cluster dims of 2^log2c blocks along x).
template <typename T, bool Packed, bool Aggregate>
__global__ void __launch_bounds__(1024) hist_cluster(const T* __restrict__ in, u64 n, u32* __restrict__ out,
                                                     u32 bins, u32 log2c, u32 log2r, const u32* __restrict__ gate,
                                                     u32 want) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static_assert(sizeof(T) == 0, "hist_cluster needs sm_90 or newer (thread block clusters and distributed shared "
                                "memory); use hist_block or hist_global");
#else
  if (cuadv_hist::gated_off(gate, want)) return;
  extern __shared__ u32 counters[];
  cg::cluster_group cluster = cg::this_cluster();
  if (cluster.num_blocks() != (1u << log2c)) __trap();  // launched with a cluster size other than 2^log2c
  const u32 words = cuadv_hist::counter_words<Packed>(bins, log2c, log2r);
  if (4u * words > cuadv_hist::dynamic_smem_size()) __trap();  // the host sized shared memory wrongly

  for (u32 w = threadIdx.x; w < words; w += blockDim.x) counters[w] = 0;
  cluster.sync();  // rule 2: every shard of the cluster is zeroed (and visible) before any block increments it

  if (log2c == 0) {  // a cluster of one: every bin is local, no DSM address translation
    cuadv_hist::SharedSink<T, Packed, Aggregate, false> sink(out, bins, 0u, log2r, counters);
    cuadv_hist::stream_values<T, BatchVectors<T, Packed>::value>(in, n, sink);
  } else {
    cuadv_hist::SharedSink<T, Packed, Aggregate, true> sink(out, bins, log2c, log2r, counters);
    cuadv_hist::stream_values<T, BatchVectors<T, Packed>::value>(in, n, sink);
  }

  cluster.sync();  // rules 1 and 3: every block's increments into every shard are complete; no block has left
  // From here each block reads only its own shard, so blocks may exit independently.
  cuadv_hist::flush_counters<Packed>(counters, out, bins, log2c, cluster.block_rank(), log2r, blockIdx.x >> log2c);
#endif
}

// Skew-aware hybrid: bins [0, hot) privatised per block (32-bit counters), the rest by global atomics.
// Needs 4 * hot B of dynamic shared memory.
template <typename T>
__global__ void __launch_bounds__(1024) hist_hot(const T* __restrict__ in, u64 n, u32* __restrict__ out, u32 bins,
                                                 u32 hot, const u32* __restrict__ gate, u32 want) {
  if (cuadv_hist::gated_off(gate, want)) return;
  extern __shared__ u32 counters[];
  if (hot > cuadv_hist::dynamic_smem_size() / 4) __trap();  // the host sized shared memory wrongly
  for (u32 w = threadIdx.x; w < hot; w += blockDim.x) counters[w] = 0;
  __syncthreads();  // the zeroed counters are visible to every thread of the block before the first increment

  cuadv_hist::HotSink<T> sink{out, bins, hot, static_cast<u32>(__cvta_generic_to_shared(counters))};
  cuadv_hist::stream_values<T, BatchVectors<T, false>::value>(in, n, sink);

  __syncthreads();  // every increment of this block is complete before the counters are read
  cuadv_hist::flush_counters<false>(counters, out, hot, 0u, 0u, 0u, blockIdx.x);  // the low bins [0, hot)
}

// DSM exchange (mailboxes), int32 input: C blocks of 1024 threads per cluster (the launch's cluster size
// must be C), V 16-byte vectors per thread per round, bins [0, hot) privatised per block; `cap`: the
// run capacity the host computed (checked against ExchangeLayout::kCap); `atomic_sort`: 1 for the
// atomic sort, 0 for the ballot sort (see Exchange::partition); `closed_last`: 1 where v == bins counts in
// bin bins - 1 (numpy's closed last bin, for int32 input over range (0, bins) counted in place without the
// extra slot that would push 2^20 bins past the 16-bit mailbox entries). Shared memory: ExchangeLayout.
template <bool Packed, int C, int V>
__global__ void __launch_bounds__(1024, 1) hist_exchange(const int* __restrict__ in, u64 n, u32* __restrict__ out,
                                                         u32 bins, u32 hot, u32 cap, u32 atomic_sort,
                                                         u32 closed_last, const u32* __restrict__ gate, u32 want) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static_assert(C == 0, "hist_exchange needs sm_90 or newer (thread block clusters and distributed shared memory); "
                        "use hist_hot, hist_block or hist_global");
#else
  if (cuadv_hist::gated_off(gate, want)) return;
  using cuadv_hist::Exchange;
  using cuadv_hist::ExchangeLayout;
  extern __shared__ uint4 exchange_smem[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(exchange_smem);
  cg::cluster_group cluster = cg::this_cluster();
  if (cluster.num_blocks() != C) __trap();  // launched with a cluster size other than C
  using Layout = ExchangeLayout<Packed, C, V>;
  const Layout L(bins, hot);
  if (blockDim.x != cuadv_hist::kExchangeThreads || cap != Layout::kCap || L.shard > 65536u ||
      L.bytes > cuadv_hist::dynamic_smem_size())
    __trap();  // the host planned another shape

  for (u32 w = threadIdx.x; w < L.bytes / 16u; w += blockDim.x) exchange_smem[w] = make_uint4(0u, 0u, 0u, 0u);
  cluster.sync();  // rule 2: every block's counters, cursors and stage are zeroed before any remote access

  Exchange<Packed, C, V> ex(smem, L, out, bins, hot, cluster.block_rank());
  // The value counted in bin bins - 1 besides bins - 1 itself: bins where the last bin is closed. Never ~0u,
  // which pads the last chunk and must stay out of range.
  const u32 last = closed_last ? bins : bins - 1u;
  const auto bin_of = [last, bins](u32 v) { return v == last ? bins - 1u : v; };

  // The unaligned head and the tail (fewer than 4 elements each): one remote atomic per element.
  const u64 tid = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  u64 head = ((16u - (reinterpret_cast<u64>(in) & 15u)) & 15u) / sizeof(int);
  if (head > n) head = n;
  if (tid < head) ex.scalar(bin_of(static_cast<u32>(in[tid])));
  const uint4* vec = reinterpret_cast<const uint4*>(in + head);
  const u64 nvec = (n - head) / 4u;
  if (head + 4u * nvec + tid < n) ex.scalar(bin_of(static_cast<u32>(in[head + 4u * nvec + tid])));

  // Rounds: block b takes chunk r * gridDim.x + b in round r; every block of the cluster runs the same
  // number of rounds (the barrier needs all of them), with an empty chunk past the end.
  const u64 per_chunk = cuadv_hist::kExchangeThreads * V;  // vectors
  const u64 nchunk = (nvec + per_chunk - 1u) / per_chunk;
  const u64 rounds = (nchunk + gridDim.x - 1u) / gridDim.x;
  uint4 cur[V];
  uint4 next[V];
#pragma unroll
  for (int k = 0; k < V; ++k) next[k] = make_uint4(~0u, ~0u, ~0u, ~0u);
  if (rounds) cuadv_hist::load_chunk<V>(cur, vec, nvec, blockIdx.x);
  u32 cursors = 0;  // r % 3: this round's run cursors
  for (u64 r = 0; r < rounds; ++r) {
    const u32 buf = static_cast<u32>(r & 1u);  // this round's stage and mailbox
#pragma unroll
    for (int k = 0; k < V; ++k) {  // one 16-byte vector (4 elements) per thread at a time: fewer live registers
      const u32 values[4] = {bin_of(cur[k].x), bin_of(cur[k].y), bin_of(cur[k].z), bin_of(cur[k].w)};
      ex.partition(values, buf, cursors, atomic_sort != 0);
    }
    // The next chunk's loads fly during the barrier wait, the apply and the send (registers are
    // scarcer during the partition).
    if (r + 1u < rounds) cuadv_hist::load_chunk<V>(next, vec, nvec, (r + 1u) * gridDim.x + blockIdx.x);
    __syncthreads();  // this round's stage and run cursors are complete before send reads them; the last
                      // round's send (the last reader of the cursors reset below) is complete
    const u32 stale = cursors == 0 ? 2u : cursors - 1u;  // last round's cursors; next written in round r + 2
    if (threadIdx.x < C) reinterpret_cast<u32*>(smem + L.cursor_off)[stale * C + threadIdx.x] = 0;
    if (r > 0) {
      cuadv_hist::cluster_wait_acquire();  // every block's round r - 1 mailbox writes are visible here
      ex.apply(buf ^ 1u);
    }
    ex.send(buf, cursors, buf);
    cuadv_hist::cluster_arrive_release();  // this round's mailbox writes released; this block has applied
                                           // round r - 1, so mailbox buf ^ 1 may be rewritten in round r + 1
#pragma unroll
    for (int k = 0; k < V; ++k) cur[k] = next[k];
    cursors = cursors == 2 ? 0u : cursors + 1u;
  }
  if (rounds) {
    cuadv_hist::cluster_wait_acquire();  // the last round's mailbox writes are visible here
    ex.apply(static_cast<u32>((rounds - 1u) & 1u));
  }
  cluster.sync();  // rules 1 and 3: every remote access into every block (mailboxes, overflow and head/tail
                   // atomics) is complete, no block has left; this block's own atomics are complete before
                   // its flush reads the counters
  ex.flush(smem, L);
#endif
}
