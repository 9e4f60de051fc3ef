// spmv.cuh - the tile body of the spmv lab: y = A x over CSR (float32 values, int32 columns and row offsets).
//
// The lab passes this file as the preamble of a cuadv.TileKernel; the kernel's body is one call of
// cuadv_spmv::run_tile for the tile the scheduler hands out. The tiles are built on the host
// (spmv_support.build_tiles); each is 16 bytes, int4 {row0, info, k0, k1}:
//   info > 0   a run of whole short rows: info = rows << 5 | log2(lanes per row), the non-zeros [k0, k1)
//              (fewer than kStage of them, at most kStage / 2 rows). Their products are staged in shared memory with coalesced loads,
//              then groups of `lanes` threads sum each row from shared memory.
//   info == 0  one whole long row row0, non-zeros [k0, k1): the whole block streams it and reduces.
//   info < 0   a slice [k0, k1) of the long row row0, split over several tiles; ~info is the row's entry
//              in splits[] = {first tile, slices}. Each slice writes its sum to partials[tile]; the slice
//              that finishes last adds the partials in slice order (the same result every run) and
//              writes y, so y needs no zeroing and no floating-point atomics.
// Every row is written by exactly one tile (or by the last slice of its row).
#pragma once

#include <cuda/atomic>
#include <cuda_pipeline.h>

namespace cuadv_spmv {

constexpr int kStreamUnroll = 8;  // loads in flight per thread and array while staging a short-row tile
constexpr int kLongUnroll = 6;    // ... while streaming a long row

// Sum of vals[k] * x[cols[k]] over k in [k0, k1) by the whole block; the result is valid in thread 0.
template <int kThreads>
static __device__ __forceinline__ float block_row_sum(int k0, int k1, const int* __restrict__ cols,
                                                      const float* __restrict__ vals, const float* __restrict__ x,
                                                      float* red) {
  float s = 0.f;
  for (int base = k0; base < k1; base += kThreads * kLongUnroll) {
    int c[kLongUnroll];
    float v[kLongUnroll];
#pragma unroll
    for (int u = 0; u < kLongUnroll; ++u) {
      const int k = base + u * kThreads + static_cast<int>(threadIdx.x);
      c[u] = k < k1 ? __ldg(cols + k) : 0;
      v[u] = k < k1 ? __ldg(vals + k) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kLongUnroll; ++u) s += v[u] * __ldg(x + c[u]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) red[warp] = s;
  __syncthreads();  // every warp's sum is in red[] before warp 0 reads them
  if (warp == 0) {
    s = lane < kThreads / 32 ? red[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  }
  return s;
}

// A run of whole short rows: stage the products, then sum each row with a group of lanes. The tile's row
// offsets (rows + 1 of them, at most kStage / 2 + 1: the host counts 2 per row in a tile's weight) are copied
// to shared memory with cp.async, which needs no registers and lands while the products are loaded.
template <int kThreads, int kStage>
static __device__ __forceinline__ void stream_tile(int4 d, const int* __restrict__ offsets,
                                                   const int* __restrict__ cols, const float* __restrict__ vals,
                                                   const float* __restrict__ x, float* __restrict__ y, float* stage,
                                                   int* soff) {
  const int n = d.w - d.z, t = threadIdx.x;
  const int rows = d.y >> 5, lanes_log2 = d.y & 31, lanes = 1 << lanes_log2;
  for (int i = t; i <= rows; i += kThreads) __pipeline_memcpy_async(soff + i, offsets + d.x + i, sizeof(int));
  __pipeline_commit();
  for (int base = 0; base < n; base += kThreads * kStreamUnroll) {
    int c[kStreamUnroll];
    float v[kStreamUnroll];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const int i = base + u * kThreads + t;
      c[u] = i < n ? __ldg(cols + d.z + i) : 0;
      v[u] = i < n ? __ldg(vals + d.z + i) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const int i = base + u * kThreads + t;
      if (i < n) stage[i] = v[u] * __ldg(x + c[u]);
    }
  }
  __pipeline_wait_prior(0);  // this thread's offset copies have landed in shared memory
  __syncthreads();  // every product and offset is in shared memory before any group sums a row
  const int group = t >> lanes_log2, lane = t & (lanes - 1), groups = kThreads >> lanes_log2;
  // The trip count depends only on the tile, so every lane of a warp reaches each shuffle together.
  for (int base = 0; base < rows; base += groups) {
    const int r = base + group;
    float s = 0.f;
    if (r < rows) {
      const int a = soff[r] - d.z, b = soff[r + 1] - d.z;
      for (int j = a + lane; j < b; j += lanes) s += stage[j];
    }
    for (int o = lanes >> 1; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (r < rows && lane == 0) y[d.x + r] = s;
  }
}

// One tile of the lab's tile list (see the top of this file). Every thread of the block calls it.
template <int kThreads, int kStage>
static __device__ __forceinline__ void run_tile(unsigned long long index, const int4* __restrict__ tiles,
                                                const int2* __restrict__ splits, const int* __restrict__ offsets,
                                                const int* __restrict__ cols, const float* __restrict__ vals,
                                                const float* __restrict__ x, float* __restrict__ y, float* partials,
                                                unsigned int* counts) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
  __shared__ float stage[kStage];
  __shared__ int soff[kStage / 2 + 1];
  __shared__ float red[32];
  const int4 d = __ldg(tiles + index);
  if (d.y > 0) {
    stream_tile<kThreads, kStage>(d, offsets, cols, vals, x, y, stage, soff);
  } else {
    const float s = block_row_sum<kThreads>(d.z, d.w, cols, vals, x, red);
    if (threadIdx.x == 0) {
      if (d.y == 0) {
        y[d.x] = s;
      } else {
        const int2 split = __ldg(splits + ~d.y);  // {first tile of the row, slices}
        partials[index] = s;
        cuda::atomic_ref<unsigned int, cuda::thread_scope_device> done(counts[~d.y]);
        // Release: this slice's partial is stored before its count; acquire (in the last slice): every
        // other slice's partial, stored before its count, is read after this one.
        if (done.fetch_add(1u, cuda::memory_order_acq_rel) == static_cast<unsigned int>(split.y) - 1u) {
          float total = 0.f;
          for (int i = 0; i < split.y; ++i) total += partials[split.x + i];  // slice order: deterministic
          y[d.x] = total;
          done.store(0u, cuda::memory_order_relaxed);  // zero for the next launch (ordered after this one)
        }
      }
    }
  }
  __syncthreads();  // this tile's reads of stage[], soff[] and red[] are done before the next tile writes them
}

}  // namespace cuadv_spmv
