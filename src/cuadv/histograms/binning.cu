// binning.cu - the passes around the histogram kernels of histogram.cu that make cuadv.histogram and
// cuadv.bincount drop-ins for numpy/cupy: the data's range, the bin index of every element as
// numpy.histogram computes it, a sample for the skew check, and the widening of the uint32 counts
// to the int64 NumPy returns. The counting itself stays in histogram.cu (int32 or uint8 bin indices).
//
// Kernels (templates, reached through name expressions; any target, no cluster features):
//   hist_minmax<T>             per-block min and max (NaN propagates, as numpy's min/max).
//   hist_bin_index<T, E>       bin index of each element against the edges E[bins + 1] (numpy's rule:
//                              edges[i] <= v < edges[i + 1], the last bin closed), -1 outside; even edges
//                              may be computed in place instead of read.
//   hist_narrow<T>             bincount: v where 0 <= v < bins, else -1, as int32.
//   hist_sample                the skew verdict of a strided sample: its share in [0, hot) of those in [0, bins).
//   hist_widen<E>              out[i] (+)= counts[i] as int64 (0 past the counted bins), a slot folded into the
//                              last; the counts zeroed again; optionally the bin edges too.
//   hist_edges<E>              numpy.histogram_bin_edges for even bins (numpy.linspace's arithmetic), on the GPU.

#include <cuda/std/cstdint>

#include "cuadv/histogram_bins.cuh"
#include "cuadv/pdl.cuh"

namespace cuadv_binning {
using u32 = unsigned int;
using u64 = unsigned long long;

constexpr int kThreads = 256;  // every kernel here: blocks of 256 (__launch_bounds__(256, ...))

// min and max that keep a NaN once one is seen (b != b only for a NaN; integers never).
template <typename T>
static __device__ __forceinline__ T take_min(T a, T b) {
  return (b < a || b != b) ? b : a;
}
template <typename T>
static __device__ __forceinline__ T take_max(T a, T b) {
  return (b > a || b != b) ? b : a;
}
}  // namespace cuadv_binning

using cuadv_binning::u32;
using cuadv_binning::u64;

// part[2 * blockIdx.x] = min, part[2 * blockIdx.x + 1] = max of this block's grid-stride share: the 16-byte
// vectors of `in`, four in flight per thread, and the elements before the first and after the last whole vector,
// one each per thread. One element per thread in flight left the SMs too few bytes in flight: on an H100
// (2026-12-06) histogram(x, 4096) of 1 GiB of float32 without a range took 1.41 ms with it, 0.93 ms with this.
// Preconditions: n >= 1 (the host skips empty inputs), `in` aligned to sizeof(T) (check_input).
template <typename T>
__global__ void __launch_bounds__(256) hist_minmax(const T* __restrict__ in, u64 n, T* __restrict__ part) {
  constexpr u32 kPerVec = 16u / sizeof(T);
  constexpr int kBatch = 4;
  __shared__ T smin[cuadv_binning::kThreads];
  __shared__ T smax[cuadv_binning::kThreads];
  T lo = in[0];
  T hi = in[0];
  const auto take = [&](T v) {
    lo = cuadv_binning::take_min(lo, v);
    hi = cuadv_binning::take_max(hi, v);
  };
  const auto take_vector = [&](uint4 w) {
    union {
      uint4 w;
      T v[kPerVec];
    } u{w};
#pragma unroll
    for (u32 j = 0; j < kPerVec; ++j) take(u.v[j]);
  };
  const u64 head = min(n, static_cast<u64>((16u - (reinterpret_cast<u64>(in) & 15u)) & 15u) / sizeof(T));
  const u64 vectors = (n - head) / kPerVec;
  const uint4* body = reinterpret_cast<const uint4*>(in + head);
  const u64 stride = static_cast<u64>(gridDim.x) * blockDim.x;
  const u64 tid = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  u64 i = tid;
  for (; i + (kBatch - 1) * stride < vectors; i += kBatch * stride) {
    uint4 w[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) w[k] = body[i + k * stride];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) take_vector(w[k]);
  }
  for (; i < vectors; i += stride) take_vector(body[i]);
  const u64 tail = head + vectors * kPerVec;  // head and n - tail are below kPerVec <= 16 <= stride
  if (tid < head) take(in[tid]);
  if (tail + tid < n) take(in[tail + tid]);
  smin[threadIdx.x] = lo;
  smax[threadIdx.x] = hi;
  __syncthreads();  // every thread's partial is in shared memory before the tree reads it
  for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      smin[threadIdx.x] = cuadv_binning::take_min(smin[threadIdx.x], smin[threadIdx.x + s]);
      smax[threadIdx.x] = cuadv_binning::take_max(smax[threadIdx.x], smax[threadIdx.x + s]);
    }
    __syncthreads();  // this level is complete before the next reads it
  }
  if (threadIdx.x == 0) {
    part[2 * blockIdx.x] = smin[0];
    part[2 * blockIdx.x + 1] = smax[0];
  }
}

// The bin index of every element (cuadv::bins::EvenBins) against `edges`, or, where edges is null, the even
// edges of (start, step, stop) computed in place; (inv, margin): the quick estimate's, from the host.
// [keep_lo, keep_hi]: the values numpy keeps by comparing them in their own type (int64 input against an integer
// range end, exact where the cast to E is not), tested before the cast; elsewhere T's extremes.
// 6 blocks per SM (at most 40 registers): with the bound of 256 threads alone ptxas gave sm_100a's double-edge
// kernels 32 registers and an 8-byte spill, and sm_90a's up to 48 (5 blocks per SM).
template <typename T, typename E>
__global__ void __launch_bounds__(256, 6) hist_bin_index(const T* __restrict__ in, u64 n, int* __restrict__ idx,
                                                      const E* __restrict__ edges, u32 bins, T keep_lo, T keep_hi,
                                                      E lo, E span, E inv, E margin, double start, double step,
                                                      double stop) {
  cuadv::bins::edges_dispatch(edges, bins, lo, span, inv, margin, start, step, stop, [&](const auto& rule) {
    const auto bin = [&](T v) { return v >= keep_lo && v <= keep_hi ? rule.index(static_cast<E>(v)) : -1; };
    const u64 stride = static_cast<u64>(gridDim.x) * blockDim.x;
    u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
    // Four elements a stride apart per pass, all four loads issued before the first is binned: one load in
    // flight per thread leaves the SM too few bytes in flight to stream at the memory's rate.
    constexpr int kBatch = 4;
    for (; i + (kBatch - 1) * stride < n; i += kBatch * stride) {
      T v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) v[k] = in[i + k * stride];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) idx[i + k * stride] = bin(v[k]);
    }
    for (; i < n; i += stride) idx[i] = bin(in[i]);
  });
}

// bincount of wider or narrower integers: the value as an int32 index where 0 <= v < bins, else -1.
template <typename T>
__global__ void __launch_bounds__(256) hist_narrow(const T* __restrict__ in, u64 n, int* __restrict__ idx, u32 bins) {
  for (u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<u64>(gridDim.x) * blockDim.x) {
    const T v = in[i];
    idx[i] = (v >= T(0) && static_cast<u64>(v) < bins) ? static_cast<int>(v) : -1;
  }
}

// One block: the skew verdict of `samples` evenly spaced elements of idx[0, n): *verdict = 1 where some lie
// in [0, bins) and at least share_num / share_den of those lie in [0, hot), else 0. The host either reads it
// (a prepared call, once) or gates two counting launches on it (a one-shot call: no wait for the host).
extern "C" __global__ void __launch_bounds__(256) hist_sample(const int* __restrict__ idx, u64 n, u32 bins, u32 hot,
                                                              u32 samples, u32 share_num, u32 share_den,
                                                              u32* __restrict__ verdict) {
  __shared__ u32 tally[2];
  if (threadIdx.x < 2) tally[threadIdx.x] = 0;
  __syncthreads();  // the tally is zeroed before any thread adds to it
  u32 in_range = 0;
  u32 in_hot = 0;
  for (u32 s = threadIdx.x; s < samples; s += blockDim.x) {
    const u32 v = static_cast<u32>(idx[static_cast<u64>(s) * n / samples]);
    in_range += v < bins;
    in_hot += v < hot;
  }
  atomicAdd(&tally[0], in_range);
  atomicAdd(&tally[1], in_hot);
  __syncthreads();  // every thread's adds are complete before thread 0 reads the tally
  if (threadIdx.x == 0) {
    const u64 range = tally[0];
    verdict[0] = range > 0 && static_cast<u64>(tally[1]) * share_den >= range * share_num ? 1u : 0u;
  }
}

// out[i] = (accumulate ? out[i] : 0) + (i < m ? counts[i] : 0) for i < len, as int64; the last output also
// takes counts[fold] where fold != ~0u (fold >= m: the slot that counted v == bins, numpy's closed last
// bin). Then every one of the `slots` counters is zero again (each by the thread that read it), so the next
// count needs no memset. edges != nullptr: also writes the bins + 1 edges (edge_value), which saves their own
// launch where no kernel reads them before this one.
template <typename E>
__global__ void __launch_bounds__(256) hist_widen(u32* __restrict__ counts, u32 m, u32 slots,
                                                  long long* __restrict__ out, u64 len, u32 accumulate, u32 fold,
                                                  E* __restrict__ edges, u32 bins, double start, double step,
                                                  double stop) {
#if __CUDA_ARCH__ >= 900
  // Launched as a programmatic dependent of the counting kernel (sm_90): its blocks are placed as the counting
  // kernel's leave, and this orders every read of the counts behind that grid's completion and memory flush.
  cuadv::pdl::wait();
#endif
  const u64 end = len > slots ? len : slots;
  for (u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x; i < end || (edges && i <= bins);
       i += static_cast<u64>(gridDim.x) * blockDim.x) {
    if (i < len) {
      long long add = i < m ? static_cast<long long>(counts[i]) : 0ll;
      if (i == len - 1u && fold != ~0u) {
        add += counts[fold];
        counts[fold] = 0;
      }
      out[i] = accumulate ? out[i] + add : add;
    }
    if (i < slots && i != fold) counts[i] = 0;  // read above by this thread only (i < m), or never
    if (edges && i <= bins) edges[i] = cuadv::bins::edge_value<E>(i, bins, start, step, stop);
  }
}

// The bin edges numpy.histogram_bin_edges returns for even bins (edge_value), where a kernel reads them
// before hist_widen (the binning pass).
template <typename E>
__global__ void __launch_bounds__(256) hist_edges(E* __restrict__ edges, u32 bins, double start, double step,
                                                  double stop) {
  for (u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x; i <= bins;
       i += static_cast<u64>(gridDim.x) * blockDim.x)
    edges[i] = cuadv::bins::edge_value<E>(i, bins, start, step, stop);
}
