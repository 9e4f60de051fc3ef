// spmv.cuh - the tile body of the spmv lab: y = A x over CSR (float32 values, int32 columns and row offsets).
//
// The lab passes this file as the preamble of a cuadv.TileKernel; the kernel's body is one call of
// cuadv_spmv::run_tile for the tile the scheduler hands out. The tiles are built on the host
// (spmv_support.build_tiles); each is 16 bytes, int4 {row0, info, k0, k1}:
//   info > 0   a run of whole short rows: info = rows << 5 | log2(lanes per row), the non-zeros [k0, k1)
//              (fewer than kStage of them, at most kStage / 2 rows). Two bodies, chosen when the kernel is
//              compiled (ShortRows):
//                kRegisters  groups of `lanes` threads each own a row: they read its two offsets from global
//                            memory, load its columns and values and gather x (kRowUnroll elements per thread
//                            and round, all in flight at once), sum in registers and combine the lanes with
//                            shuffles. No shared memory, no barrier. cols and vals must be readable
//                            kRowUnroll - 1 elements past the last non-zero (see register_rows).
//                kStaged     the products are staged in shared memory with coalesced loads (the row offsets
//                            copied beside them with cp.async), then groups of `lanes` threads sum each row
//                            from shared memory.
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

enum class ShortRows { kRegisters, kStaged };  // how a tile of short rows is summed (see the top of this file)

constexpr int kRowUnroll = 4;     // a slot of register_rows: consecutive elements per thread and round
constexpr int kStreamUnroll = 8;  // loads in flight per thread and array while staging a short-row tile (kStaged)
constexpr int kLongUnroll = 6;    // ... while streaming a long row

// Sum of vals[k] * x[cols[k]] over k in [k0, k1) by the whole block; the result is valid in thread 0.
template <int kThreads>
static __device__ __forceinline__ float block_row_sum(int k0, int k1, const int* __restrict__ cols,
                                                      const float* __restrict__ vals, const float* __restrict__ x) {
  __shared__ float red[32];
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
  __syncthreads();  // warp 0 has read red[] before any warp writes it for the block's next long row
  return s;
}

// A run of whole short rows summed in registers (ShortRows::kRegisters). The block is groups of 2**lanes_log2
// consecutive lanes (the host picks the width per tile, build_tiles); group g owns rows g, g + groups, ... of the
// tile, so a warp takes 32 >> lanes_log2 consecutive rows at a time. Lane l of the group owning row [a, b) takes
// its elements in slots of kRowUnroll consecutive ones, a + l * kRowUnroll, then a step of the group's width on:
// each slot's columns and values are loaded, then x is gathered through the read-only cache for all of them, so a
// thread has 2 * kRowUnroll loads and then kRowUnroll gathers in flight. A slot may run past b: it reads on into
// the next rows, or into the padding of at most kRowUnroll - 1 elements after the last non-zero that cols and vals
// must have (DeviceCsr pads them), and its products past b are masked to +0 (bitwise: no predicate per element,
// so nothing holds a load back, and a NaN or infinity read past the row cannot leak into it). The group's lanes then
// combine with butterfly shuffles and lane 0 writes y.
template <int kThreads>
static __device__ __forceinline__ void register_rows(int row0, int rows, int lanes_log2,
                                                     const int* __restrict__ offsets, const int* __restrict__ cols,
                                                     const float* __restrict__ vals, const float* __restrict__ x,
                                                     float* __restrict__ y) {
  const int lanes = 1 << lanes_log2, groups = kThreads >> lanes_log2, step = kRowUnroll << lanes_log2;
  const int group = static_cast<int>(threadIdx.x) >> lanes_log2, lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  // The trip count depends only on the tile, so every lane of a warp reaches each shuffle together.
  for (int r = group; r - group < rows; r += groups) {
    float s = 0.f;
    if (r < rows) {
      const int b = __ldg(offsets + row0 + r + 1);
#pragma unroll 1
      for (int k = __ldg(offsets + row0 + r) + lane * kRowUnroll; k < b; k += step) {
        int c[kRowUnroll];
        float v[kRowUnroll], g[kRowUnroll];
#pragma unroll
        for (int u = 0; u < kRowUnroll; ++u) {  // k + u < b + kRowUnroll - 1: in the row, the next ones or the padding
          c[u] = __ldg(cols + k + u);
          v[u] = __ldg(vals + k + u);
        }
#pragma unroll
        for (int u = 0; u < kRowUnroll; ++u) g[u] = __ldg(x + c[u]);
        s += v[0] * g[0];  // slot 0 is in the row: k < b
#pragma unroll
        for (int u = 1; u < kRowUnroll; ++u) {
          const int keep = (u - (b - k)) >> 31;  // arithmetic shift: all ones while k + u < b, else zero
          s += __int_as_float(__float_as_int(v[u] * g[u]) & keep);
        }
      }
    }
    for (int o = 1; o < lanes; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (r < rows && lane == 0) y[row0 + r] = s;
  }
}

// A run of whole short rows with kStaged: stage the products, then sum each row with a group of lanes. The
// tile's row offsets (rows + 1 of them, at most kStage / 2 + 1: the host counts 2 per row in a tile's weight)
// are copied to shared memory with cp.async, which needs no registers and lands while the products are loaded.
template <int kThreads, int kStage>
static __device__ __forceinline__ void stream_tile(int4 d, const int* __restrict__ offsets,
                                                   const int* __restrict__ cols, const float* __restrict__ vals,
                                                   const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float stage[kStage];
  __shared__ int soff[kStage / 2 + 1];
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
  __syncthreads();  // this tile's reads of stage[] and soff[] are done before the block's next tile writes them
}

// One tile of the lab's tile list (see the top of this file). Every thread of the block calls it. kStage:
// the floats of the stage (kStaged only).
template <int kThreads, ShortRows kShort, int kStage>
static __device__ __forceinline__ void run_tile(unsigned long long index, const int4* __restrict__ tiles,
                                                const int2* __restrict__ splits, const int* __restrict__ offsets,
                                                const int* __restrict__ cols, const float* __restrict__ vals,
                                                const float* __restrict__ x, float* __restrict__ y, float* partials,
                                                unsigned int* counts) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
  const int4 d = __ldg(tiles + index);
  if (d.y > 0) {
    if constexpr (kShort == ShortRows::kStaged) {
      stream_tile<kThreads, kStage>(d, offsets, cols, vals, x, y);
    } else {
      register_rows<kThreads>(d.x, d.y >> 5, d.y & 31, offsets, cols, vals, x, y);
    }
  } else {
    const float s = block_row_sum<kThreads>(d.z, d.w, cols, vals, x);
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
}

}  // namespace cuadv_spmv
