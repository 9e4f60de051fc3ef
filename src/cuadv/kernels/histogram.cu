// histogram.cu - exercise 2 of seed 002: a histogram with bins sharded over a cluster's
// distributed shared memory (DSM), against global atomics and a single-block shared histogram.
//
// Input: bin indices of type T (int32 or uint8); a value v counts in bin v when 0 <= v < bins
// and is ignored otherwise (numpy.bincount of the in-range values). Output: uint32 counts,
// zeroed by the host before the launch (every kernel accumulates into it with atomics).
//
// Kernels (templates, reached through name expressions):
//   hist_global<T>                    every element does atomicAdd on the global bins.
//   hist_block<T>                     one private histogram per block in shared memory (32-bit
//                                     counters, `R` lane-interleaved replicas), flushed once.
//   hist_cluster<T, Packed, Agg>      the bins sharded over the cluster's blocks: bin b lives in
//                                     block (b % C), local slot b / C; remote atomics through
//                                     cluster.map_shared_rank. Packed: two 16-bit counters per
//                                     32-bit word (twice the bins per block; wraps handled exactly,
//                                     see add_wrap_corrections). Agg: warp-aggregated increments
//                                     (__match_any_sync), one atomic per distinct bin per warp.
//
// All three stream the input the same way (stream_values): a persistent grid, 16-byte
// vector loads, the next batch loaded before the current one is counted, and scalar code for
// the unaligned head and the tail. The shared-memory kernels route out-of-range values to a
// trash slot (no branch in the hot loop) and flush one global atomic per nonzero bin per block.
//
// The four DSM lifetime rules of seed 002, as hist_cluster follows them:
//   1. the target block must still exist: no block leaves before the last cluster.sync();
//   2. every block zeroes its shard, then cluster.sync(), before the first remote access;
//   3. all DSM accesses are complete before any block exits: cluster.sync() after counting,
//      and after it each block touches only its own shard;
//   4. capacity, banks and remote latency need profiling: the lab measures cluster sizes 1-16.
//
// Needs sm_90 for hist_cluster (clusters and DSM: instantiating it for an older target fails with a
// message saying so); hist_global and hist_block run on any target.
#include <cooperative_groups.h>
#include <cuda/std/cstdint>

namespace cg = cooperative_groups;

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
template <typename T, bool Packed, bool Aggregate, bool Remote>
struct SharedSink {
  u32* out;            // global bins (packed wrap corrections go here during the run)
  u32 bins;            // real bins; slot `bins` is the trash slot
  u32 log2c;           // log2 of the cluster size (0 for one block)
  u32 word_shift;      // log2 of the bytes between consecutive local indices of one replica
  u32 rep_addr;        // shared::cta address of word 0 of this thread's replica
  u32 lane;

  __device__ __forceinline__ SharedSink(u32* out_, u32 bins_, u32 log2c_, u32 log2r, const u32* counters)
      : out(out_), bins(bins_), log2c(log2c_), word_shift(log2r + 2u) {
    lane = threadIdx.x & 31u;
    rep_addr = static_cast<u32>(__cvta_generic_to_shared(counters)) + 4u * (lane & ((1u << log2r) - 1u));
  }

  // Adds `count` to slot s (s <= bins); returns the old 32-bit word (Packed) or 0.
  __device__ __forceinline__ u32 increment(u32 s, u32 count) {
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
    const u32 shift = (local & 1u) << 4;
    const u32 delta = count << shift;
    const bool lo_carry = shift == 0 && (old & 0xFFFFu) + count > 0xFFFFu;
    const bool word_wrap = old + delta < old;
    if (__builtin_expect(lo_carry || word_wrap, 0)) {
      const u32 rank = Remote ? (s & ((1u << log2c) - 1u)) : 0u;
      const u32 lo_bin = ((local & ~1u) << log2c) | rank;
      const u32 hi_bin = lo_bin + (1u << log2c);  // >= bins: the trash slot or past it, never flushed
      if (lo_carry) {
        if (lo_bin < bins) atomicAdd(out + lo_bin, 0x10000u);
        if (hi_bin < bins) atomicAdd(out + hi_bin, 0xFFFFFFFFu);  // -1: the carry that went into hi
      }
      if (word_wrap && hi_bin < bins) atomicAdd(out + hi_bin, 0x10000u);
    }
  }

  __device__ __forceinline__ void scalar(u32 v) {
    const u32 s = min(v, bins);
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
      // All atomics first (their results in flight together), then the rare wrap checks.
      u32 old[K];
#pragma unroll
      for (int i = 0; i < K; ++i) old[i] = increment(min(element<T>(vec[i / kPerVec], i % kPerVec), bins), 1u);
#pragma unroll
      for (int i = 0; i < K; ++i) add_wrap_corrections(min(element<T>(vec[i / kPerVec], i % kPerVec), bins), 1u, old[i]);
    } else {
#pragma unroll
      for (int i = 0; i < K; ++i) scalar(element<T>(vec[i / kPerVec], i % kPerVec));
    }
  }
};

// Sum of the R replicas of slot `local` in this block's counters.
template <bool Packed>
static __device__ __forceinline__ u32 slot_total(const u32* counters, u32 local, u32 log2r) {
  u32 sum = 0;
  const u32 base = Packed ? ((local >> 1) << log2r) : (local << log2r);
  const u32 shift = Packed ? ((local & 1u) << 4) : 0u;
  for (u32 r = 0; r < (1u << log2r); ++r) {
    const u32 w = counters[base | r];
    sum += Packed ? ((w >> shift) & 0xFFFFu) : w;
  }
  return sum;
}

// Where block (or cluster) `unit` starts its flush over `count` slots: the units flush at about the
// same time, so they start at different bins instead of queueing on the same global addresses.
static __device__ __forceinline__ u32 flush_start(u32 unit, u32 count) {
  return static_cast<u32>((static_cast<u64>(unit) * 128u) % count);
}

// Words of shared counters one block holds: its shard of ceil((bins + 1) / C) slots (the real bins
// and the trash slot), times R replicas.
template <bool Packed>
static __device__ __forceinline__ u32 counter_words(u32 bins, u32 log2c, u32 log2r) {
  const u32 shard = (bins + (1u << log2c)) >> log2c;
  return (Packed ? (shard + 1u) >> 1 : shard) << log2r;
}

}  // namespace cuadv_hist

using cuadv_hist::u32;
using cuadv_hist::u64;

// Unroll factors: 16-byte loads per thread per batch (64 B in flight per thread, twice with the prefetch).
// Fewer with packed counters (their old values are held until the wrap checks).
template <typename T, bool Packed>
struct BatchVectors {
  static constexpr int value = Packed ? 1 : 2;
};

template <typename T>
__global__ void __launch_bounds__(1024) hist_global(const T* __restrict__ in, u64 n, u32* __restrict__ out, u32 bins) {
  cuadv_hist::GlobalSink<T> sink{out, bins};
  cuadv_hist::stream_values<T, BatchVectors<T, false>::value>(in, n, sink);
}

// Single-block shared memory: the classic privatised histogram. Needs (bins + 1) * R * 4 B of dynamic shared memory.
template <typename T>
__global__ void __launch_bounds__(1024) hist_block(const T* __restrict__ in, u64 n, u32* __restrict__ out, u32 bins,
                                                   u32 log2r) {
  extern __shared__ u32 counters[];
  const u32 words = cuadv_hist::counter_words<false>(bins, 0, log2r);
  if (4u * words > cuadv_hist::dynamic_smem_size()) __trap();  // the host sized shared memory wrongly
  for (u32 w = threadIdx.x; w < words; w += blockDim.x) counters[w] = 0;
  __syncthreads();  // the zeroed counters are visible to every thread of the block before the first increment

  cuadv_hist::SharedSink<T, false, false, false> sink(out, bins, 0u, log2r, counters);
  cuadv_hist::stream_values<T, BatchVectors<T, false>::value>(in, n, sink);

  __syncthreads();  // every increment of this block is complete before the counters are read
  const u32 start = cuadv_hist::flush_start(blockIdx.x, bins);
  for (u32 i = threadIdx.x; i < bins; i += blockDim.x) {
    const u32 bin = i < bins - start ? i + start : i - (bins - start);
    const u32 total = cuadv_hist::slot_total<false>(counters, bin, log2r);
    if (total) atomicAdd(out + bin, total);  // one global atomic per nonzero bin per block
  }
}

// DSM: the bins sharded over the cluster (runtime cluster dims of 2^log2c blocks along x).
template <typename T, bool Packed, bool Aggregate>
__global__ void __launch_bounds__(1024) hist_cluster(const T* __restrict__ in, u64 n, u32* __restrict__ out,
                                                     u32 bins, u32 log2c, u32 log2r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static_assert(sizeof(T) == 0, "hist_cluster needs sm_90 or newer (thread block clusters and distributed shared "
                                "memory); use hist_block or hist_global");
#else
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
  const u32 rank = cluster.block_rank();
  const u32 shard = (bins + (1u << log2c) - 1u) >> log2c;  // local indices of real bins in any block
  const u32 start = cuadv_hist::flush_start(blockIdx.x >> log2c, shard);
  for (u32 i = threadIdx.x; i < shard; i += blockDim.x) {
    const u32 local = i < shard - start ? i + start : i - (shard - start);
    const u32 bin = (local << log2c) | rank;
    if (bin >= bins) continue;
    const u32 total = cuadv_hist::slot_total<Packed>(counters, local, log2r);
    if (total) atomicAdd(out + bin, total);  // one global atomic per nonzero bin per cluster
  }
#endif
}
