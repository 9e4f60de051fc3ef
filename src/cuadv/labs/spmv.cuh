// spmv.cuh - the tile body of the spmv lab: y = A x over CSR (float32 values, int32 columns and row offsets).
//
// The lab passes this file as the preamble of a cuadv.TileKernel; the kernel's body is one call of
// cuadv_spmv::run_tile for the tile the scheduler hands out. The tiles are built on the host
// (spmv_support.build_tiles); each is 16 bytes, int4 {row0, info, k0, k1}:
//   info > 0   a run of whole short rows: info = rows << 5 | flags | log2(lanes per row) (flags: kDynamicFlag),
//              the non-zeros [k0, k1) (fewer than kStage of them, at most kStage / 2 rows). Two bodies, chosen
//              when the kernel is compiled (ShortRows):
//                kRegisters  groups of `lanes` threads each own a row: they read its two offsets from global
//                            memory, load its columns and values and gather x (kRowUnroll elements per thread
//                            and round, all in flight at once) for up to kOwnRounds rounds, the whole warp sums
//                            what a longer row has left, and the lanes combine in registers with shuffles. No
//                            barrier; a warp takes batches of rows in turn, or (dynamic batches, tiles with
//                            kDynamicFlag) claims them from a counter in shared memory. cols and vals must be
//                            readable kRowUnroll - 1 elements past the last non-zero (see slot_sum).
//                kStaged     the products are staged in shared memory with coalesced loads (the row offsets
//                            copied beside them with cp.async), then groups of `lanes` threads sum each row
//                            from shared memory.
//   info == 0  one whole long row row0, non-zeros [k0, k1): the whole block streams it and reduces.
//   info < 0   a slice [k0, k1) of the long row row0, split over several tiles; ~info is the row's entry
//              in splits[] = {first tile, slices}. Each slice writes its sum to partials[tile]; the slice
//              that finishes last adds the partials in slice order (the same result every run) and
//              writes y, so y needs no zeroing and no floating-point atomics.
// Every row is written by exactly one tile (or by the last slice of its row).
//
// The same body, compiled with kGather = false, is a segmented sum: y[r] = sum of vals[k] over row r's [k0, k1)
// (the rows are the segments); cols and x are then never read and may be null.
#pragma once

#include <cuda/atomic>
#include <cuda_pipeline.h>

namespace cuadv_spmv {

enum class ShortRows { kRegisters, kStaged };  // how a tile of short rows is summed (see the top of this file)

inline constexpr int kRowUnroll = 4;     // a slot of register_rows: consecutive elements per thread and round
inline constexpr int kOwnRounds = 2;     // rounds a group of register_rows gives its row before the warp takes over
inline constexpr int kStreamUnroll = 8;  // loads in flight per thread and array while staging a short-row tile
                                         // (kStaged)
inline constexpr int kLongUnroll = 6;    // ... while streaming a long row
inline constexpr int kLanesMask = 7;     // info bits of a short-row tile: log2(lanes per row), 0 to 5
inline constexpr int kDynamicFlag = 8;   // info bit of a short-row tile: its warps claim its batches (register_rows),
                                         // where the host's model finds that faster and dynamic batches are on

// Sum of vals[k] * x[cols[k]] (kGather; else vals[k]) over k in [k0, k1) by the whole block; the result is valid
// in thread 0.
template <int kThreads, bool kGather>
__device__ __forceinline__ float block_row_sum(int k0, int k1, const int* __restrict__ cols,
                                               const float* __restrict__ vals, const float* __restrict__ x) {
  __shared__ float red[32];
  float s = 0.f;
  // From the 128-byte line k0 is in: each warp's load of 32 consecutive elements is one line, not two.
  for (int base = k0 & ~31; base < k1; base += kThreads * kLongUnroll) {
    [[maybe_unused]] int c[kLongUnroll];
    float v[kLongUnroll];
#pragma unroll
    for (int u = 0; u < kLongUnroll; ++u) {
      const int k = base + u * kThreads + static_cast<int>(threadIdx.x);
      const bool in = k >= k0 && k < k1;
      if constexpr (kGather) c[u] = in ? __ldg(cols + k) : 0;
      v[u] = in ? __ldg(vals + k) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kLongUnroll; ++u) {
      if constexpr (kGather) {
        const int k = base + u * kThreads + static_cast<int>(threadIdx.x);
        // Outside the row c is 0, and x[0] may be infinite or NaN: the product is masked to +0 bitwise (a
        // predicated gather instead cost steal 2% on power-law and R-MAT, 2026-12-03 12:20).
        const int keep = -static_cast<int>(k >= k0 && k < k1);
        s += __int_as_float(__float_as_int(v[u] * __ldg(x + c[u])) & keep);
      } else {
        s += v[u];  // 0 outside the row
      }
    }
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

// One slot of register_rows: the sum of vals[j] * x[cols[j]] over j in [k, k + kRowUnroll) and j < b, given
// k < b. The slot's columns and values are loaded, then x is gathered for all of them, so a thread has
// 2 * kRowUnroll loads and then kRowUnroll gathers in flight. Elements past b are read too (the next rows, or
// past the last non-zero the kRowUnroll - 1 elements of padding cols and vals must have: DeviceCsr pads them),
// x is gathered at column 0 for them, and their products are masked to +0 bitwise: no predicate per element, so
// ptxas holds no load back behind a multiply-add (with a predicate each it did, short of predicate registers in
// the steal kernel), and a NaN or infinity read past the row cannot leak into it. Without kGather: the sum of
// vals[j], masked the same way.
template <bool kGather>
__device__ __forceinline__ float slot_sum(int k, int b, const int* __restrict__ cols,
                                          const float* __restrict__ vals, const float* __restrict__ x) {
  [[maybe_unused]] int c[kRowUnroll];
  float v[kRowUnroll], g[kRowUnroll];
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) {  // k + u < b + kRowUnroll - 1: in the row, the next ones or the padding
    if constexpr (kGather) c[u] = __ldg(cols + k + u);
    v[u] = __ldg(vals + k + u);
  }
  int keep[kRowUnroll];
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) keep[u] = (u - (b - k)) >> 31;  // arithmetic shift: all ones while k + u < b
  // Past the row the gather reads x[0]: one line that every such lane shares and L1 keeps, where the next row's
  // column would cost a lookup in L2, whose rate of tag lookups bounds this kernel (and cuSPARSE's).
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) {
    if constexpr (kGather) g[u] = __ldg(x + (c[u] & keep[u]));
    else g[u] = 1.f;
  }
  float s = v[0] * g[0];  // element k is in the row
#pragma unroll
  for (int u = 1; u < kRowUnroll; ++u) s += __int_as_float(__float_as_int(v[u] * g[u]) & keep[u]);
  return s;
}

// The claim counter of dynamic batches (register_rows), one per block.
__device__ __forceinline__ unsigned* batch_claims() {
  __shared__ unsigned claims;
  return &claims;
}

// A warp's claim of its next batch, taken by one lane (elect.sync: ptxas then makes it no warp-aggregated atomic,
// which costs a vote, population counts and a shuffle of the result; lane 0 before sm_90); 0 in the warp's other
// lanes. warp_claim hands it to every lane.
__device__ __forceinline__ unsigned claim_batch() {
  const unsigned counter = static_cast<unsigned>(__cvta_generic_to_shared(batch_claims()));
  unsigned claim;
#if CUADV_ARCH >= 900
  asm volatile("{\n\t.reg .pred leader;\n\tmov.u32 %0, 0;\n\telect.sync _|leader, 0xffffffff;\n\t"
               "@leader atom.shared.add.u32 %0, [%1], 1;\n\t}"
               : "=&r"(claim) : "r"(counter) : "memory");
#else
  claim = (threadIdx.x & 31) == 0 ? atomicAdd(batch_claims(), 1u) : 0u;
#endif
  return claim;
}

// The warp's claim in every lane: the sum over the warp of claim_batch's values (sm_80), or lane 0's.
__device__ __forceinline__ unsigned warp_claim(unsigned claim) {
#if CUADV_ARCH >= 800
  return __reduce_add_sync(0xffffffffu, claim);
#else
  return __shfl_sync(0xffffffffu, claim, 0);
#endif
}

// Once per block, before its first tile (the TileKernel prologue): with dynamic batches, the claim counter starts
// at zero. Each tile's last claim sets it back to zero (register_rows).
template <bool kDynamicBatches>
__device__ __forceinline__ void begin_block() {
  if constexpr (kDynamicBatches) {
    if (threadIdx.x == 0) *batch_claims() = 0u;
    __syncthreads();  // the zeroed counter is visible to every warp before the block's first claim
  }
}

// A run of whole short rows summed in registers (ShortRows::kRegisters). The block is groups of 2**lanes_log2
// consecutive lanes (the host picks the width per tile, build_tiles); a warp takes a batch of 32 >> lanes_log2
// consecutive rows at a time, one row per group. Warp w takes batch w first, then batches w + warps, w + 2 warps,
// ... in turn, or with kDynamicBatches whichever batch it claims next: a warp that drew shorter rows takes more
// batches, so the tile's warps finish together, which is what a policy holding the block at a barrier between
// tiles (cuadv::ws::kBarrierBetweenTiles) waits for. In a batch, the group reads its row's two offsets from global
// memory; lane l takes slots (slot_sum) from the row's start + l * kRowUnroll, a step of the group's width apart,
// for at most kOwnRounds rounds. What a longer row has left, the whole warp then sums, one such row of the batch
// after another, 32 slots a round: one row many times longer than the batch's others costs the others no idle
// rounds. The group's lanes combine with butterfly shuffles and lane 0 writes y.
//
// Dynamic batches: every batch a warp runs makes one claim (claim_batch, in flight during the batch); claim c is
// batch warps + c, past the last batch the warp stops. So a tile makes exactly one claim per batch, its claims
// return 0 .. batches - 1, and the warp whose claim returns batches - 1, the tile's last, sets the counter back to
// zero for the block's next tile, which begins after the policy's barrier.
template <int kThreads, bool kDynamicBatches, bool kGather>
__device__ __forceinline__ void register_rows(int row0, int rows, int lanes_log2,
                                              const int* __restrict__ offsets, const int* __restrict__ cols,
                                              const float* __restrict__ vals, const float* __restrict__ x,
                                              float* __restrict__ y) {
  const int lanes = 1 << lanes_log2, groups = kThreads >> lanes_log2, step = kRowUnroll << lanes_log2;
  const int group = static_cast<int>(threadIdx.x) >> lanes_log2, lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  const int warp_lane = static_cast<int>(threadIdx.x) & 31;
  // Row r of the tile (none where r >= rows) by this thread's group; every lane of the warp calls it together.
  auto batch_row = [&](int r) {
    float s = 0.f;
    int rest = 0, b = 0;  // the warp takes over the row's [rest, b) where rest < b
    if (r < rows) {
      const int a = __ldg(offsets + row0 + r);
      b = __ldg(offsets + row0 + r + 1);
      rest = lane == 0 ? a + kOwnRounds * step : b;  // the group's first lane asks for the warp
      int k = a + lane * kRowUnroll;
#pragma unroll 1
      for (int round = 0; round < kOwnRounds && k < b; ++round, k += step) s += slot_sum<kGather>(k, b, cols, vals, x);
    }
    for (unsigned more = __ballot_sync(0xffffffffu, rest < b); more != 0; more &= more - 1) {
      const int owner = __ffs(more) - 1;  // the lane that leads that row's group
      const int begin = __shfl_sync(0xffffffffu, rest, owner), end = __shfl_sync(0xffffffffu, b, owner);
      float t = 0.f;
#pragma unroll 1
      for (int k = begin + warp_lane * kRowUnroll; k < end; k += 32 * kRowUnroll) {
        t += slot_sum<kGather>(k, end, cols, vals, x);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
      if (warp_lane == owner) s += t;
    }
    for (int o = 1; o < lanes; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (r < rows && lane == 0) y[row0 + r] = s;
  };
  if constexpr (!kDynamicBatches) {
    // The trip count depends only on the tile, so every lane of a warp reaches each shuffle and ballot together.
    for (int r = group; r - group < rows; r += groups) batch_row(r);
  } else {
    constexpr int kWarps = kThreads / 32;
    const int batch_log2 = 5 - lanes_log2, batches = (rows + (1 << batch_log2) - 1) >> batch_log2;
    const int row_in_batch = warp_lane >> lanes_log2;
    // The batch is the same in every lane of a warp (the warp's sum of its one claim).
    for (int batch = static_cast<int>(threadIdx.x) >> 5; batch < batches;) {
      unsigned claim = claim_batch();  // the warp's next batch, in flight during this one
      batch_row((batch << batch_log2) + row_in_batch);
      claim = warp_claim(claim);
      // An atomic, as the other warps' claims are: the tile's last claim, so none follows it in this tile.
      if (warp_lane == 0 && claim == static_cast<unsigned>(batches) - 1u) atomicExch(batch_claims(), 0u);
      batch = kWarps + static_cast<int>(claim);
    }
  }
}

// A run of whole short rows with kStaged: stage the products, then sum each row with a group of lanes. The
// tile's row offsets (rows + 1 of them, at most kStage / 2 + 1: the host counts 2 per row in a tile's weight)
// are copied to shared memory with cp.async, which needs no registers and lands while the products are loaded.
template <int kThreads, int kStage, bool kGather>
__device__ __forceinline__ void stream_tile(int4 d, const int* __restrict__ offsets,
                                            const int* __restrict__ cols, const float* __restrict__ vals,
                                            const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float stage[kStage];
  __shared__ int soff[kStage / 2 + 1];
  const int n = d.w - d.z, t = threadIdx.x;
  const int rows = d.y >> 5, lanes_log2 = d.y & kLanesMask, lanes = 1 << lanes_log2;
  for (int i = t; i <= rows; i += kThreads) __pipeline_memcpy_async(soff + i, offsets + d.x + i, sizeof(int));
  __pipeline_commit();
  for (int base = 0; base < n; base += kThreads * kStreamUnroll) {
    [[maybe_unused]] int c[kStreamUnroll];
    float v[kStreamUnroll];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const int i = base + u * kThreads + t;
      if constexpr (kGather) c[u] = i < n ? __ldg(cols + d.z + i) : 0;
      v[u] = i < n ? __ldg(vals + d.z + i) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const int i = base + u * kThreads + t;
      if (i < n) {
        if constexpr (kGather) stage[i] = v[u] * __ldg(x + c[u]);
        else stage[i] = v[u];
      }
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
// the floats of the stage (kStaged only). kDynamicBatches (kRegisters only; begin_block<true> must have run in
// the block): in the tiles flagged kDynamicFlag the warps claim the batches of short rows from a counter in shared
// memory, which needs a barrier between the block's tiles (cuadv::ws::kBarrierBetweenTiles of the policy).
// kGather = false: the segmented sum (the top of this file).
template <int kThreads, ShortRows kShort, int kStage, bool kDynamicBatches = false, bool kGather = true>
__device__ __forceinline__ void run_tile(unsigned long long index, const int4* __restrict__ tiles,
                                         const int2* __restrict__ splits, const int* __restrict__ offsets,
                                         const int* __restrict__ cols, const float* __restrict__ vals,
                                         const float* __restrict__ x, float* __restrict__ y, float* partials,
                                         unsigned int* counts) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
  const int4 d = __ldg(tiles + index);
  if (d.y > 0) {
    if constexpr (kShort == ShortRows::kStaged) {
      stream_tile<kThreads, kStage, kGather>(d, offsets, cols, vals, x, y);
    } else {
      const int rows = d.y >> 5, lanes_log2 = d.y & kLanesMask;
      // Only a kernel with dynamic batches instantiates the claimed copy.
      if constexpr (kDynamicBatches) {
        if (d.y & kDynamicFlag) {
          register_rows<kThreads, true, kGather>(d.x, rows, lanes_log2, offsets, cols, vals, x, y);
        } else {
          register_rows<kThreads, false, kGather>(d.x, rows, lanes_log2, offsets, cols, vals, x, y);
        }
      } else {
        register_rows<kThreads, false, kGather>(d.x, rows, lanes_log2, offsets, cols, vals, x, y);
      }
    }
  } else {
    const float s = block_row_sum<kThreads, kGather>(d.z, d.w, cols, vals, x);
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
