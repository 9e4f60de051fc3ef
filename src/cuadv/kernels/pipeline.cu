// pipeline.cu - a 2-D 5-point stencil staged through shared memory, three ways:
//   stencil_sync<Align>                      plain loads into one buffer, __syncthreads, compute (the baseline);
//   stencil_pipeline_thread<Stages, Align>   cuda::memcpy_async with a per-thread cuda::pipeline (the seed's
//                                            skeleton, made correct with two __syncthreads per tile);
//   stencil_pipeline_block<Stages, Align>    cuda::memcpy_async with a block-scoped cuda::pipeline
//                                            (pipeline_shared_state): no __syncthreads at all.
// The pipelined kernels run the same three phases: fill (Stages-1 tiles in flight before any compute), steady
// state (one tile issued per tile computed) and drain (compute what is in flight, issue nothing).
//
//   out[i][j] = c_center * x[i][j] + c_neighbour * (((x[i-1][j] + x[i+1][j]) + x[i][j-1]) + x[i][j+1])
// with x = 0 outside the array, every operation rounded to float32 in this order (__fmul_rn/__fadd_rn: no FMA
// contraction), so NumPy's float32 result is matched bit for bit.
//
// Align is the alignment the copies claim. 16: the input base is 16-byte aligned and its row pitch a multiple
// of 16 bytes (checked in Python before launch), so every full 4-float chunk is copied with
// cuda::aligned_size_t<16>; the chunks cut by the right edge of the array are copied element by element with
// aligned_size_t<4>. 4: no such guarantee; every element is a 4-byte copy. Nothing claims an alignment that
// was not checked.
//
// Needs sm_80 (cp.async); built for sm_90a and sm_100a.
#include <cooperative_groups.h>
#include <cuda/pipeline>
#include <cuda/std/cstdint>

#include "cuadv/ptx.cuh"

namespace cg = cooperative_groups;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "pipeline.cu needs sm_80 or newer (cp.async behind cuda::memcpy_async)"
#endif

namespace stencil {

constexpr int kThreads = 256;
constexpr int kTileW = 128;                            // output columns per tile
constexpr int kTileH = 16;                             // output rows per tile
constexpr int kHalo = 4;                               // 1 halo column is needed; 4 keep chunks 16-byte aligned
constexpr int kStageW = kTileW + 2 * kHalo;            // 136 floats = 544 B: each buffer row starts 16-aligned
constexpr int kStageH = kTileH + 2;                    // one halo row above and one below
constexpr int kStageFloats = kStageW * kStageH;        // 9,792 B per stage
constexpr int kChunksPerRow = kStageW / 4;             // 16-byte chunks per buffer row
constexpr int kRowsPerThread = kTileH / (kThreads / kTileW);
static_assert(kThreads % kTileW == 0 && kTileH % (kThreads / kTileW) == 0, "tile must map onto the block");

}  // namespace stencil

struct StencilParams {
  const float* in;
  float* out;
  long long rows, cols;        // elements
  long long in_pitch;          // elements between rows of `in`
  long long out_pitch;         // elements between rows of `out`
  float c_center, c_neighbour;
  unsigned long long* trace;   // null, or 4 %globaltimer stamps per tile: issued, wait, ready, done
  unsigned int trace_capacity; // tiles recorded per block
  unsigned int reserved;
};
static_assert(sizeof(StencilParams) == 72, "mirrors cuadv.labs.pipeline.StencilParams");

namespace stencil {

// Tile t covers output rows [row0, row0 + kTileH) and columns [col0, col0 + kTileW); tiles are numbered along
// the rows of tiles, and block b takes tiles b, b + gridDim.x, ... (a fixed number of blocks, so each block
// runs a long enough sequence to fill its pipeline).
struct Tiling {
  long long strips, tiles;
  __device__ explicit Tiling(const StencilParams& p)
      : strips((p.cols + kTileW - 1) / kTileW), tiles(strips * ((p.rows + kTileH - 1) / kTileH)) {}
  __device__ long long count_for_block() const {
    return blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  }
  __device__ long long tile(long long k) const { return blockIdx.x + k * static_cast<long long>(gridDim.x); }
  __device__ long long row0(long long t) const { return (t / strips) * kTileH; }
  __device__ long long col0(long long t) const { return (t % strips) * kTileW; }
};

// Thread 0's view of each tile, in nanoseconds: [issued, wait started, data ready, compute done].
struct Tracer {
  unsigned long long* base;
  unsigned int capacity;
  __device__ explicit Tracer(const StencilParams& p)
      : base(p.trace != nullptr && threadIdx.x == 0
                 ? p.trace + static_cast<unsigned long long>(blockIdx.x) * p.trace_capacity * 4
                 : nullptr),
        capacity(p.trace_capacity) {}
  __device__ void stamp(long long k, int field) const {
    if (base != nullptr && k < capacity) base[k * 4 + field] = cuadv::ptx::globaltimer_ns();
  }
};

// Visit this thread's share of the 16-byte chunks of a stage buffer: rows [row0-1, row0+kTileH] and columns
// [col0-kHalo, col0+kTileW+kHalo) of the input, clipped to the array. `full(dst, src)` gets whole chunks
// (only when Align == 16: the chunk is then 16-byte aligned in global and shared memory); `elem(dst, src)`
// gets single floats: every element when Align == 4, the chunk cut by the array's right edge otherwise.
template <int Align, class Full, class Elem>
__device__ void for_each_chunk(const StencilParams& p, long long row0, long long col0, float* buf, Full full,
                               Elem elem) {
  for (int slot = threadIdx.x; slot < kStageH * kChunksPerRow; slot += kThreads) {
    const int r = slot / kChunksPerRow;
    const int c = slot % kChunksPerRow;
    const long long gi = row0 - 1 + r;
    const long long gj = col0 - kHalo + 4 * c;  // first column of the chunk; col0 % 4 == 0 so never straddles 0
    if (gi < 0 || gi >= p.rows || gj < 0 || gj >= p.cols) continue;
    float* dst = buf + r * kStageW + 4 * c;
    const float* src = p.in + gi * p.in_pitch + gj;
    if (Align == 16 && gj + 4 <= p.cols) {
      full(dst, src);
    } else {
      const int valid = p.cols - gj < 4 ? static_cast<int>(p.cols - gj) : 4;  // the tail: fewer than 4 floats
      for (int e = 0; e < valid; ++e) elem(dst + e, src + e);
    }
  }
}

// Each thread computes kRowsPerThread outputs down one column, sliding a 3-row window through registers.
__device__ void compute_tile(const StencilParams& p, const float* buf, long long row0, long long col0) {
  const int tx = threadIdx.x % kTileW;
  const int first = (threadIdx.x / kTileW) * kRowsPerThread;  // first output row of this thread, in the tile
  const long long j = col0 + tx;
  if (j >= p.cols) return;
  const int s = kHalo + tx;  // buffer column of j
  long long i = row0 + first;
  if (i >= p.rows) return;
  float up = i > 0 ? buf[first * kStageW + s] : 0.0f;  // buffer row r holds input row row0 - 1 + r
  float mid = buf[(first + 1) * kStageW + s];
  for (int rr = first; rr < first + kRowsPerThread && i < p.rows; ++rr, ++i) {
    const float* row = buf + (rr + 1) * kStageW;
    const float down = i + 1 < p.rows ? buf[(rr + 2) * kStageW + s] : 0.0f;
    const float left = j > 0 ? row[s - 1] : 0.0f;
    const float right = j + 1 < p.cols ? row[s + 1] : 0.0f;
    const float sum = __fadd_rn(__fadd_rn(__fadd_rn(up, down), left), right);
    p.out[i * p.out_pitch + j] = __fadd_rn(__fmul_rn(p.c_center, mid), __fmul_rn(p.c_neighbour, sum));
    up = mid;
    mid = down;
  }
}

// The pipelined loop, shared by both pipeline scopes. ThreadScope: the pipeline tracks only this thread's
// copies, so a block barrier follows each wait (everyone's copies landed) and each compute (everyone has read
// the slot before it is refilled). Block scope: the pipeline's own barriers do both.
template <int Stages, int Align, bool ThreadScope, class Pipeline>
__device__ void pipelined(const StencilParams& p, float* bufs, Pipeline& pipe) {
  static_assert(Stages >= 2 && Stages <= 8, "2 to 8 stages (cp.async.wait_group takes at most 8 pending)");
  const Tiling tiling(p);
  const Tracer tracer(p);
  const long long n = tiling.count_for_block();

  auto issue = [&](long long k) {
    pipe.producer_acquire();  // block scope: every thread has released this slot; thread scope: no-op
    const long long t = tiling.tile(k);
    for_each_chunk<Align>(
        p, tiling.row0(t), tiling.col0(t), bufs + (k % Stages) * kStageFloats,
        [&](float* d, const float* s) { cuda::memcpy_async(d, s, cuda::aligned_size_t<16>(16), pipe); },
        [&](float* d, const float* s) { cuda::memcpy_async(d, s, cuda::aligned_size_t<4>(4), pipe); });
    pipe.producer_commit();  // this thread's copies of tile k form one stage
    tracer.stamp(k, 0);
  };
  auto consume = [&](long long k) {
    tracer.stamp(k, 1);
    pipe.consumer_wait();  // tile k's copies (this thread's; every thread's in block scope) have landed
    if constexpr (ThreadScope) __syncthreads();  // every thread's copies of tile k have landed
    tracer.stamp(k, 2);
    const long long t = tiling.tile(k);
    compute_tile(p, bufs + (k % Stages) * kStageFloats, tiling.row0(t), tiling.col0(t));
    tracer.stamp(k, 3);
    pipe.consumer_release();  // block scope: this thread no longer reads the slot
    if constexpr (ThreadScope) __syncthreads();  // no thread reads the slot any more: it may be refilled
  };

  const long long fill = n < Stages - 1 ? n : Stages - 1;
  long long k = 0;
  for (long long f = 0; f < fill; ++f) issue(f);  // fill: Stages-1 tiles in flight before the first compute
  for (; k + Stages - 1 < n; ++k) {                // steady state: issue tile k+Stages-1, then compute tile k
    issue(k + Stages - 1);
    consume(k);
  }
  for (; k < n; ++k) consume(k);  // drain: the last Stages-1 tiles, nothing left to issue
}

}  // namespace stencil

template <int Align>
__global__ void __launch_bounds__(stencil::kThreads) stencil_sync(const __grid_constant__ StencilParams p) {
  using namespace stencil;
  extern __shared__ __align__(16) float stencil_smem[];
  const Tiling tiling(p);
  const Tracer tracer(p);
  const long long n = tiling.count_for_block();
  for (long long k = 0; k < n; ++k) {
    const long long t = tiling.tile(k);
    tracer.stamp(k, 0);
    for_each_chunk<Align>(
        p, tiling.row0(t), tiling.col0(t), stencil_smem,
        [](float* d, const float* s) { *reinterpret_cast<float4*>(d) = *reinterpret_cast<const float4*>(s); },
        [](float* d, const float* s) { *d = *s; });
    tracer.stamp(k, 1);
    __syncthreads();  // the whole tile is in shared memory
    tracer.stamp(k, 2);
    compute_tile(p, stencil_smem, tiling.row0(t), tiling.col0(t));
    tracer.stamp(k, 3);
    __syncthreads();  // every thread has read the buffer before the next tile overwrites it
  }
}

template <int Stages, int Align>
__global__ void __launch_bounds__(stencil::kThreads)
    stencil_pipeline_thread(const __grid_constant__ StencilParams p) {
  extern __shared__ __align__(16) float stencil_smem[];
  cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
  stencil::pipelined<Stages, Align, true>(p, stencil_smem, pipe);
}

template <int Stages, int Align>
__global__ void __launch_bounds__(stencil::kThreads)
    stencil_pipeline_block(const __grid_constant__ StencilParams p) {
  extern __shared__ __align__(16) float stencil_smem[];
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, Stages> state;
  // Collective: thread 0 initialises the stage barriers, then the block synchronises.
  auto pipe = cuda::make_pipeline(cg::this_thread_block(), &state);
  stencil::pipelined<Stages, Align, false>(p, stencil_smem, pipe);
}
