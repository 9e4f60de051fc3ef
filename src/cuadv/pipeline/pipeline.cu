// pipeline.cu - a 2-D 5-point stencil staged through shared memory, in two layouts and four staging methods.
//
// Layouts:
//   tile   each stage is a 16 x 128 output tile plus its halo (18 x 136 floats); a block strides over tiles, so
//          every tile re-reads 2 halo rows and 8 halo columns (the layout this lab started with). The tma
//          method also has 32 and 64 x 128 tiles (2 halo rows in 34 or 66 instead of 18).
//   strip  a block walks down a strip of W columns (+ one 16-byte halo chunk each side); each stage brings the
//          next R input rows, and output row i is computed from rows i-1, i, i+1 already in the ring of stages,
//          so each input row is read once (no vertical halo re-reads).
// Staging methods (the same loop, only the stager changes):
//   sync   plain loads and stores into shared memory, one __syncthreads per stage (the baseline);
//   thread cuda::memcpy_async with a per-thread cuda::pipeline (thread scope), its wait followed by one
//          __syncthreads per stage so every thread's copies are visible;
//   mbar   a block-scope pipeline on explicit mbarriers: full[s] completes when every thread's cp.async of the
//          stage in slot s has landed (cp.async.mbarrier.arrive.noinc: the copy engine arrives for the thread),
//          empty[s] when every thread has finished reading slot s. No __syncthreads in the loop.
//   tma    (tile only) one TMA box per stage: an extra producer warp's lane 0 issues cp.async.bulk.tensor for
//          the tile with its halo, (TH + 2) x 136 floats, from a tensor map of the input; full[s] expects one
//          arrival (the producer's expect_tx of the full box) plus the box bytes, empty[s] one arrival per
//          consumer thread after its last read of slot s. The box may reach past any edge of the array: TMA
//          fills that part with zeros, which is the stencil's boundary, so neither the copy nor the compute has
//          edge code (only the stores are clipped). Each consumer thread computes 4 adjacent columns (float4
//          shared loads, neighbours by shuffle, 16-byte stores; or, in the TMA-store form, into a shared output
//          tile that one TMA store writes out). No __syncthreads in the loop. A block may take chunks of
//          side-by-side tiles (Tiling's chunk), so it reads longer runs of each input row, and the chunks may be
//          claimed from a ticket counter instead of split statically (TileSource); the producer passes each
//          stage's tile index to the consumers in shared memory, and a closing stage (index -1) ends their loop.
// Every pipelined kernel runs the same three phases: fill (the first S - D stages issued before any compute),
// steady state (one stage issued per stage computed) and drain (compute what is in flight, issue nothing);
// D is how many consecutive stages one compute reads (tile: 1, strip: 2). The tma kernel's producer warp fills
// all S slots and refills each as soon as the consumers release it.
//
//   out[i][j] = c_center * x[i][j] + c_neighbour * (((x[i-1][j] + x[i+1][j]) + x[i][j-1]) + x[i][j+1])
// with x = 0 outside the array, every operation rounded to float32 in this order (__fmul_rn/__fadd_rn: no FMA
// contraction), so NumPy's float32 result is matched bit for bit.
//
// Align is the alignment the copies claim. 16: the input base is 16-byte aligned and its row pitch a multiple of
// 16 bytes (checked in Python before launch), so every full 4-float chunk is copied with one 16-byte copy; the
// chunk cut by the right edge of the array is copied element by element. 4: no such guarantee; every element is
// a 4-byte copy. Output stores are 16 bytes wide only where flag kOutVec16 says the output base and pitch allow
// it (also checked in Python). Nothing claims an alignment that was not checked.
//
// Why not cuda::pipeline<thread_scope_block>: its producer_commit pairs cp.async.mbarrier.arrive (without .noinc,
// so the copy engine's arrival is balanced by a pending-count increment) with an explicit mbarrier.arrive. That is
// correct PTX (the ISA's own "Example 1"), but compute-sanitizer synccheck reported "Missing wait" at that explicit
// arrive on every thread's first commit, in a 1-tile launch where no wait can be missing: it counts the engine's
// arrival as the thread's own, and the explicit one as a second arrival on the same phase. The mbar stager gives
// each thread exactly one arrival per phase on each barrier and has every thread wait on every phase it arrives on.
//
// TMA needs the input's base and row pitch 16-byte aligned (and the other tensor-map rules), checked in Python
// before launch: an input that breaks them is refused, never loaded with a misaligned TMA.
//
// Needs sm_80 (cp.async, mbarrier), the tma kernels sm_90 (TMA); built for sm_90a and sm_100a.
#include <cuda/atomic>
#include <cuda/pipeline>
#include <cuda/std/cstdint>

#include "cuadv/pipeline.cuh"  // the stagers, run_stages, Tiling2D, TicketSource, TmaRing (and ptx.cuh)
#include "cuadv/ptx.cuh"
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // the TMA helpers: only the tma kernels (sm_90+) use them
#include "cuadv/tma.cuh"
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "pipeline.cu needs sm_80 or newer (cp.async and mbarrier)"
#endif

struct StencilParams {
  const float* in;
  float* out;
  long long rows, cols;        // elements
  long long in_pitch;          // elements between rows of `in`
  long long out_pitch;         // elements between rows of `out`
  float c_center, c_neighbour;
  unsigned long long* trace;   // null, or 4 %globaltimer stamps per stage: issued, wait, ready, done
  unsigned int trace_capacity; // stages recorded per block
  unsigned int flags;          // kOutVec16
};
static_assert(sizeof(StencilParams) == 72, "mirrors cuadv.labs.pipeline.StencilParams");

namespace stencil {

namespace ptx = cuadv::ptx;
using u32 = cuadv::ptx::u32;
using u64 = cuadv::ptx::u64;

constexpr int kThreads = 256;
constexpr unsigned kOutVec16 = 1u;  // flags: out's base and row pitch are 16-byte aligned (16-byte stores allowed)
constexpr int kHalo = 4;            // 1 halo column is needed; 4 keep every chunk 16-byte aligned

// Thread 0's view of each stage, in nanoseconds: [issued, wait started, data ready, compute done]. Reads the
// parameters at each stamp rather than keeping a pointer live in every thread's registers.
struct Tracer {
  const StencilParams& p;
  __device__ explicit Tracer(const StencilParams& params) : p(params) {}
  __device__ void stamp(long long k, int field, unsigned thread = 0) const { stamp_at(k, field, now(thread), thread); }
  // A stamp taken earlier (now()), written once the stage is known to exist.
  __device__ void stamp_at(long long k, int field, unsigned long long ns, unsigned thread = 0) const {
    if (p.trace != nullptr && threadIdx.x == thread && k < p.trace_capacity) {
      p.trace[(static_cast<unsigned long long>(blockIdx.x) * p.trace_capacity + k) * 4 + field] = ns;
    }
  }
  // The time, read only by the thread that stamps (0 for the others, and when not tracing).
  __device__ unsigned long long now(unsigned thread = 0) const {
    return p.trace != nullptr && threadIdx.x == thread ? ptx::globaltimer_ns() : 0;
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Stagers and the pipelined loop (fill / steady state / drain) live in cuadv/pipeline.cuh; see the contracts there.
using PlainStager = cuadv::pipeline::PlainStager;
using ThreadPipeStager = cuadv::pipeline::ThreadStager;
template <int S>
using MbarStager = cuadv::pipeline::MbarStager<S>;
using cuadv::pipeline::run_stages;

// One thread initialises the 2 * S barriers (kThreads arrivals each); a block barrier publishes them.
template <int S>
__device__ MbarStager<S> make_mbar_stager(u64* full, u64* empty) {
  return cuadv::pipeline::make_mbar_stager<S, kThreads>(full, empty);
}

// ---------------------------------------------------------------------------------------------------------------
// Tile layout.
namespace tile {

constexpr int kTileW = 128;                          // output columns per tile
constexpr int kTileH = 16;                           // output rows per tile
constexpr int kStageW = kTileW + 2 * kHalo;          // 136 floats = 544 B: each buffer row starts 16-aligned
constexpr int kStageH = kTileH + 2;                  // one halo row above and one below
constexpr int kStageFloats = kStageW * kStageH;      // 9,792 B per stage
constexpr int kChunksPerRow = kStageW / 4;           // 16-byte chunks per buffer row
constexpr int kRowsPerThread = kTileH / (kThreads / kTileW);
static_assert(kThreads % kTileW == 0 && kTileH % (kThreads / kTileW) == 0, "tile must map onto the block");

// Tile t covers output rows [row0, row0 + TH) and columns [col0, col0 + kTileW); tiles are numbered along the
// rows of tiles and dealt out in chunks of `chunk` consecutive tiles (side by side in a row of tiles, so a
// block reads longer runs of each input row). The static split: block b takes chunks b, b + gridDim.x, ...
// (chunk 1: tiles b, b + gridDim.x, ...); the tma kernels may claim chunks by ticket instead (TileSource).
template <int TH>
using Tiling = cuadv::pipeline::Tiling2D<TH, kTileW>;  // built from StencilParams (its rows and cols)

// This thread's share of the 16-byte chunks of a stage buffer: input rows [row0-1, row0+kTileH] and columns
// [col0-kHalo, col0+kTileW+kHalo), clipped to the array.
template <int Align, class Stager>
__device__ void issue(const StencilParams& p, long long row0, long long col0, float* buf, Stager& st) {
  for (int slot = threadIdx.x; slot < kStageH * kChunksPerRow; slot += kThreads) {
    const int r = slot / kChunksPerRow;
    const int c = slot % kChunksPerRow;
    const long long gi = row0 - 1 + r;
    const long long gj = col0 - kHalo + 4 * c;  // first column of the chunk; col0 % 4 == 0 so never straddles 0
    if (gi < 0 || gi >= p.rows || gj < 0 || gj >= p.cols) continue;
    float* dst = buf + r * kStageW + 4 * c;
    const float* src = p.in + gi * p.in_pitch + gj;
    if (Align == 16 && gj + 4 <= p.cols) {
      st.copy16(dst, src);
    } else {
      const int valid = p.cols - gj < 4 ? static_cast<int>(p.cols - gj) : 4;  // the tail: fewer than 4 floats
      for (int e = 0; e < valid; ++e) st.copy4(dst + e, src + e);
    }
  }
}

// Each thread computes kRowsPerThread outputs down one column, sliding a 3-row window through registers.
__device__ void compute(const StencilParams& p, const float* buf, long long row0, long long col0) {
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

template <int S, int Align, class Stager>
__device__ void run(const StencilParams& p, float* smem, Stager& st) {
  const Tiling<kTileH> tiling(p);
  const Tracer tracer(p);
  run_stages<S, 1>(
      st, tiling.count_for_block(), tracer,
      [&](long long m, Stager& s) {
        const long long t = tiling.tile(m);
        issue<Align>(p, tiling.row0(t), tiling.col0(t), smem + (m % S) * kStageFloats, s);
      },
      [&](long long k) {
        const long long t = tiling.tile(k);
        compute(p, smem + (k % S) * kStageFloats, tiling.row0(t), tiling.col0(t));
      });
}

}  // namespace tile

// ---------------------------------------------------------------------------------------------------------------
// Strip layout. The (strip, row) pairs of the array, strip-major, are split into gridDim.x contiguous equal
// ranges; a block's range is a few runs (a run: consecutive rows of one strip). The block streams its runs as
// one sequence of input rows, each run with a halo row above and below: position 0 is the row above the first
// run, then its rows, then the row below, then the next run's row above, and so on. Position p lives in ring row
// p % (S * R) of shared memory (stage p / R, slot (p / R) % S); the output of a run's row at position p is
// computed from positions p-1, p, p+1, which are in the same run. Rows outside the array are never loaded and
// read as 0.
namespace strip {

// One position of a block's stream. Rows and strips fit in 32 bits (checked in Python before launch).
struct Cursor {
  long long pos;  // stream position
  int strip;      // strip index of the run
  int row;        // input row (-1 or rows: a halo outside the array)
  int q;          // index within the run: 0 = halo above, 1 .. len = the run's rows, len + 1 = halo below
  int len;        // rows in the run
  __device__ bool output() const { return q >= 1 && q <= len; }
};

struct Stream {
  long long rows;   // array rows (the height of every strip)
  long long w1;     // end of this block's range, in strip-major (strip, row) order
  long long s0;     // strip of the first run
  long long r0;     // first row of the first run
  long long len0;   // rows in the first run
  long long total;  // positions in the stream

  __device__ Stream(const StencilParams& p, long long strips) : rows(p.rows) {
    const long long work = strips * p.rows;
    const long long w0 = work * blockIdx.x / gridDim.x;
    w1 = work * (blockIdx.x + 1) / gridDim.x;
    s0 = rows > 0 ? w0 / rows : 0;
    r0 = w0 - s0 * rows;
    len0 = (w1 < (s0 + 1) * rows ? w1 : (s0 + 1) * rows) - w0;
    const long long runs = w1 > w0 ? (w1 - 1) / rows - s0 + 1 : 0;
    total = (w1 - w0) + 2 * runs;
  }
  // Rows of strip `strip` in this block's range, when the strip is not the first run's.
  __device__ int run_length(long long strip) const {
    const long long left = w1 - strip * rows;
    return static_cast<int>(left < rows ? left : rows);
  }
  // The position `pos` (0 <= pos < total).
  __device__ Cursor at(long long pos) const {
    if (pos < len0 + 2) {
      const int q = static_cast<int>(pos);
      return Cursor{pos, static_cast<int>(s0), static_cast<int>(r0) - 1 + q, q, static_cast<int>(len0)};
    }
    const long long after = pos - (len0 + 2);
    const long long j = after / (rows + 2);  // whole strips after the first run
    const int q = static_cast<int>(after - j * (rows + 2));
    const long long strip = s0 + 1 + j;
    return Cursor{pos, static_cast<int>(strip), q - 1, q, run_length(strip)};
  }
  // The position after c (c.pos + 1 < total).
  __device__ void next(Cursor& c) const {
    ++c.pos;
    ++c.row;
    if (++c.q > c.len + 1) {  // past the halo below: the next run starts with its halo above
      ++c.strip;
      c.q = 0;
      c.row = -1;
      c.len = run_length(c.strip);
    }
  }
};

template <int W, int R, int S, int Align>
struct Layout {
  static_assert(W % 4 == 0 && kThreads % (W / 4) == 0, "a strip's 4-column groups must tile the block");
  static constexpr int kGroups = W / 4;                // 4-column groups: one per thread and row group
  static constexpr int kRowGroups = kThreads / kGroups;
  static_assert(R >= 2 && R % kRowGroups == 0, "rows per stage: >= 2 and a multiple of the row groups");
  static constexpr int kRowsPerThread = R / kRowGroups;
  static constexpr int kRowStride = W + 2 * kHalo;     // floats per ring row (a multiple of 4: rows 16-aligned)
  static constexpr int kChunks = kRowStride / 4;       // 16-byte chunks per ring row
  static constexpr int kRingRows = S * R;

  const StencilParams& p;
  const Stream stream;
  float* ring;

  __device__ Layout(const StencilParams& params, float* smem)
      : p(params), stream(params, (params.cols + W - 1) / W), ring(smem) {}

  __device__ long long stages() const { return (stream.total + R - 1) / R; }

  // This thread's chunks of stage m: R rows x kChunks chunks, columns [strip*W - kHalo, strip*W + W + kHalo) of
  // each row, clipped to the array. A thread's slots visit rows in increasing order, so one cursor walks them.
  template <class Stager>
  __device__ void issue(long long m, Stager& st) const {
    const long long first = m * R;
    float* stage = ring + (m % S) * R * kRowStride;
    Cursor c = stream.at(first);
    int at_row = 0;
    for (int slot = threadIdx.x; slot < R * kChunks; slot += kThreads) {
      const int rr = slot / kChunks;
      const int ch = slot % kChunks;
      if (first + rr >= stream.total) break;  // past the end of the stream (rr only grows)
      for (; at_row < rr; ++at_row) stream.next(c);
      if (c.row < 0 || c.row >= p.rows) continue;  // a halo outside the array: never loaded, read as 0
      const long long gj = static_cast<long long>(c.strip) * W - kHalo + 4 * ch;  // strip * W % 4 == 0: a chunk never straddles column 0
      if (gj < 0 || gj >= p.cols) continue;
      float* dst = stage + rr * kRowStride + 4 * ch;
      const float* src = p.in + static_cast<long long>(c.row) * p.in_pitch + gj;
      if (Align == 16 && gj + 4 <= p.cols) {
        st.copy16(dst, src);
      } else {
        const int valid = p.cols - gj < 4 ? static_cast<int>(p.cols - gj) : 4;  // the tail: fewer than 4 floats
        for (int e = 0; e < valid; ++e) st.copy4(dst + e, src + e);
      }
    }
  }

  // This thread's 4 columns of position c (ring row `ring_row`), 0 outside the array; reads only loaded floats.
  __device__ float4 load(const Cursor& c, int ring_row, int group) const {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const long long j = static_cast<long long>(c.strip) * W + 4 * group;
    if (c.row < 0 || c.row >= p.rows || j >= p.cols) return v;
    const float* s = ring + ring_row * kRowStride + kHalo + 4 * group;
    if (j + 4 <= p.cols) return *reinterpret_cast<const float4*>(s);
    v.x = s[0];
    if (j + 1 < p.cols) v.y = s[1];
    if (j + 2 < p.cols) v.z = s[2];
    return v;
  }

  // Output row `row` of strip `in_strip`, columns j .. j+3, from the rows above (a), at (b) and below (d).
  __device__ void emit(int row, int in_strip, int ring_row, int group, float4 a, float4 b, float4 d) const {
    const long long j = static_cast<long long>(in_strip) * W + 4 * group;
    if (j >= p.cols) return;
    const float* s = ring + ring_row * kRowStride + kHalo + 4 * group;
    const float left = j > 0 ? s[-1] : 0.0f;
    const float right = j + 4 < p.cols ? s[4] : 0.0f;
    const float cc = p.c_center, cn = p.c_neighbour;
    auto f = [&](float up, float down, float l, float r, float x) {
      return __fadd_rn(__fmul_rn(cc, x), __fmul_rn(cn, __fadd_rn(__fadd_rn(__fadd_rn(up, down), l), r)));
    };
    float* o = p.out + static_cast<long long>(row) * p.out_pitch + j;
    if (j + 4 <= p.cols) {
      const float4 y = make_float4(f(a.x, d.x, left, b.y, b.x), f(a.y, d.y, b.x, b.z, b.y),
                                   f(a.z, d.z, b.y, b.w, b.z), f(a.w, d.w, b.z, right, b.w));
      if (p.flags & kOutVec16) {
        // st.global.v4 through the intrinsic: a plain float4 store here gets merged with the scalar branch below
        // into 4-byte stores.
        __stwb(reinterpret_cast<float4*>(o), y);
      } else {
        o[0] = y.x;
        o[1] = y.y;
        o[2] = y.z;
        o[3] = y.w;
      }
      return;
    }
    // The last group of a row that ends inside it: 1 to 3 columns (load() left the missing ones 0).
    const int valid = static_cast<int>(p.cols - j);
    o[0] = f(a.x, d.x, left, valid > 1 ? b.y : 0.0f, b.x);
    if (valid > 1) o[1] = f(a.y, d.y, b.x, valid > 2 ? b.z : 0.0f, b.y);
    if (valid > 2) o[2] = f(a.z, d.z, b.y, 0.0f, b.z);
  }

  // Stage k: outputs at positions [k*R - 1, k*R + R - 1), this thread's row group taking kRowsPerThread of them;
  // reads positions k*R - 2 .. k*R + R - 1, i.e. stages k-1 and k only.
  __device__ void compute(long long k) const {
    const int group = threadIdx.x % kGroups;
    const long long start = k * R - 1 + (threadIdx.x / kGroups) * kRowsPerThread;
    const long long lo = start < 1 ? 1 : start;                                   // position 0 is a halo row
    const long long hi = start + kRowsPerThread < stream.total - 1 ? start + kRowsPerThread
                                                                   : stream.total - 1;  // so is the last one
    if (lo >= hi) return;
    Cursor c = stream.at(lo - 1);
    int rr = static_cast<int>((lo - 1) % kRingRows);
    float4 up = load(c, rr, group);
    stream.next(c);
    rr = rr + 1 == kRingRows ? 0 : rr + 1;
    float4 mid = load(c, rr, group);
    for (int n = static_cast<int>(hi - lo); n > 0; --n) {  // a window of 3 rows slides down the positions
      const int row = c.row, in_strip = c.strip, mid_rr = rr;
      const bool output = c.output();
      stream.next(c);
      rr = rr + 1 == kRingRows ? 0 : rr + 1;
      const float4 down = load(c, rr, group);
      if (output) emit(row, in_strip, mid_rr, group, up, mid, down);
      up = mid;
      mid = down;
    }
  }
};

template <int W, int R, int S, int Align, class Stager>
__device__ void run(const StencilParams& p, float* smem, Stager& st) {
  const Layout<W, R, S, Align> layout(p, smem);
  const Tracer tracer(p);
  run_stages<S, 2>(
      st, layout.stages(), tracer, [&](long long m, Stager& s) { layout.issue(m, s); },
      [&](long long k) { layout.compute(k); });
}

}  // namespace strip
}  // namespace stencil

// ---------------------------------------------------------------------------------------------------------------
// Kernels. Dynamic shared memory: S stage buffers (tile: S * 9,792 B; strip: S * R * (W + 8) * 4 B; the tma
// kernels come last).

template <int Align>
__global__ void __launch_bounds__(stencil::kThreads) stencil_tile_sync(const __grid_constant__ StencilParams p) {
  extern __shared__ __align__(16) float stencil_smem[];
  stencil::PlainStager st;
  stencil::tile::run<2, Align>(p, stencil_smem, st);
}

template <int S, int Align>
__global__ void __launch_bounds__(stencil::kThreads) stencil_tile_thread(const __grid_constant__ StencilParams p) {
  extern __shared__ __align__(16) float stencil_smem[];
  stencil::ThreadPipeStager st;
  stencil::tile::run<S, Align>(p, stencil_smem, st);
}

template <int S, int Align>
__global__ void __launch_bounds__(stencil::kThreads) stencil_tile_mbar(const __grid_constant__ StencilParams p) {
  extern __shared__ __align__(16) float stencil_smem[];
  __shared__ __align__(8) stencil::u64 full[S], empty[S];
  auto st = stencil::make_mbar_stager<S>(full, empty);
  stencil::tile::run<S, Align>(p, stencil_smem, st);
}

template <int W, int R, int Align>
__global__ void __launch_bounds__(stencil::kThreads, 4) stencil_strip_sync(const __grid_constant__ StencilParams p) {
  extern __shared__ __align__(16) float stencil_smem[];
  stencil::PlainStager st;
  stencil::strip::run<W, R, 3, Align>(p, stencil_smem, st);
}

template <int W, int R, int S, int Align>
__global__ void __launch_bounds__(stencil::kThreads, 4) stencil_strip_thread(const __grid_constant__ StencilParams p) {
  extern __shared__ __align__(16) float stencil_smem[];
  stencil::ThreadPipeStager st;
  stencil::strip::run<W, R, S, Align>(p, stencil_smem, st);
}

template <int W, int R, int S, int Align>
__global__ void __launch_bounds__(stencil::kThreads, 4) stencil_strip_mbar(const __grid_constant__ StencilParams p) {
  extern __shared__ __align__(16) float stencil_smem[];
  __shared__ __align__(8) stencil::u64 full[S], empty[S];
  auto st = stencil::make_mbar_stager<S>(full, empty);
  stencil::strip::run<W, R, S, Align>(p, stencil_smem, st);
}

// ---------------------------------------------------------------------------------------------------------------
// TMA-fed tiles (the tma method): the tile layout's Tiling and halo, one cp.async.bulk.tensor box per stage.
// sm_90+ only (the lab asks for these kernels only on such targets).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

// The tma kernels' parameters: the common ones, the tiles a block takes at a time (Tiling's chunk), the ticket
// counter (null: the static split; see TileSource), then the input's tensor map (box TH + 2 rows x 136 columns,
// zero fill out of bounds) at offset 128, and the output's (box TH x 128; used by the TMA-store form only) at 256.
struct StencilTmaParams {
  StencilParams p;
  unsigned int chunk;
  unsigned long long* tickets;
  cuadv::tma::TensorMap map;
  cuadv::tma::TensorMap out_map;
};
// Offsets: chunk 72, tickets 80 (8-byte aligned), map 128 and out_map 256 (TensorMap is 64-byte aligned).
static_assert(sizeof(StencilTmaParams) == 384 && alignof(StencilTmaParams) == 64,
              "mirrors cuadv.labs.pipeline.StencilTmaParams");

namespace stencil::tile {

namespace tma = cuadv::tma;

// TH x kTileW outputs a stage, loaded as one box of (TH + 2) x kStageW floats (one halo row above and below, kHalo
// columns each side) into a 128-byte aligned slot; box row r holds input row row0 - 1 + r, column c input column
// col0 - kHalo + c.
template <int TH>
struct TmaBox {
  static constexpr int kGroups = kTileW / 4;             // 4-column groups of a tile row: one per lane
  static constexpr int kRowGroups = kThreads / kGroups;  // one per warp
  static_assert(TH % kRowGroups == 0, "a tile's rows must split evenly over the warps");
  static constexpr int kRowsPerThread = TH / kRowGroups;
  static constexpr u32 kBytes = kStageW * (TH + 2) * 4;      // the transaction bytes of one load
  static constexpr u32 kSlotBytes = (kBytes + 127) / 128 * 128;
  static constexpr u32 kOutBytes = TH * kTileW * 4;           // a staged output tile (TMA-store form), 128-B multiple
};

__device__ inline float point(float cc, float cn, float up, float down, float left, float right, float x) {
  return __fadd_rn(__fmul_rn(cc, x), __fmul_rn(cn, __fadd_rn(__fadd_rn(__fadd_rn(up, down), left), right)));
}

// Columns col0 + 4g .. +3 (g = lane) of this warp's kRowsPerThread rows, a 3-row window of float4 sliding down
// in registers; a column's left and right neighbours come from the lanes beside it (shuffles), the two at the
// warp's edges from the halo in shared memory. TMA wrote zeros wherever the box left the array, so the reads
// need no edge tests; the stores are clipped to the array (16 bytes wide where kOutVec16 allows and all 4
// columns are inside). Every lane takes part in the shuffles, also one whose columns are past the array.
// With `staged` (the TMA-store form) the tile goes to shared memory instead, TH x kTileW floats, unclipped:
// the TMA store writes only its in-bounds part.
template <int TH>
__device__ void compute_tma(const StencilParams& p, const float* box, long long row0, long long col0,
                            float* staged = nullptr) {
  using Box = TmaBox<TH>;
  static_assert(Box::kGroups == 32, "one 4-column group per lane: the shuffles below assume it");
  const int g = threadIdx.x % Box::kGroups;
  const int first = threadIdx.x / Box::kGroups * Box::kRowsPerThread;  // first output row, in the tile
  const long long j = col0 + 4 * g;
  const long long valid = p.cols - j;  // columns of the group inside the array (>= 4: all of them; <= 0: none)
  const bool vec = (p.flags & kOutVec16) && valid >= 4;
  const float cc = p.c_center, cn = p.c_neighbour;
  const float* s = box + first * kStageW + kHalo + 4 * g;  // box row `first`: the row above output row `first`
  float4 up = *reinterpret_cast<const float4*>(s);
  float4 mid = *reinterpret_cast<const float4*>(s + kStageW);
#pragma unroll
  for (int r = 0; r < Box::kRowsPerThread; ++r) {
    const long long i = row0 + first + r;
    if (i >= p.rows) break;  // the same for every lane of the warp
    s += kStageW;  // mid's row
    const float4 down = *reinterpret_cast<const float4*>(s + kStageW);
    float left = __shfl_up_sync(0xffffffffu, mid.w, 1);
    float right = __shfl_down_sync(0xffffffffu, mid.x, 1);
    if (g == 0) left = s[-1];
    if (g == Box::kGroups - 1) right = s[4];
    const float4 y = make_float4(point(cc, cn, up.x, down.x, left, mid.y, mid.x),
                                 point(cc, cn, up.y, down.y, mid.x, mid.z, mid.y),
                                 point(cc, cn, up.z, down.z, mid.y, mid.w, mid.z),
                                 point(cc, cn, up.w, down.w, mid.z, right, mid.w));
    float* o = p.out + i * p.out_pitch + j;
    if (staged != nullptr) {
      *reinterpret_cast<float4*>(staged + (first + r) * kTileW + 4 * g) = y;  // a warp writes 512 contiguous bytes
    } else if (vec) {
      __stwb(reinterpret_cast<float4*>(o), y);  // the intrinsic keeps it one st.global.v4 (see strip::emit)
    } else if (valid > 0) {
      o[0] = y.x;
      if (valid > 1) o[1] = y.y;
      if (valid > 2) o[2] = y.z;
      if (valid > 3) o[3] = y.w;
    }
    up = mid;
    mid = down;
  }
}

// Where a block's tiles come from: the static split (tp.tickets == nullptr) or chunks claimed by ticket from a
// self-resetting counter (cuadv/pipeline.cuh's TicketSource, which documents the protocol).
template <int TH>
using TileSource = cuadv::pipeline::TicketSource<Tiling<TH>>;

// (cuadv/pipeline.cuh's TmaRing is this ring as a reusable piece; it stays written out here because calling it
// changed the sm_100a SASS of the 4-stage kernels.)
// A ring of S slots on two barriers per slot, phase n of slot s belonging to stage s + n * S. full[s]: one
// arrival (the producer's arrive.expect_tx of the full box) plus the box bytes, which the TMA unit completes;
// the producer writes the stage's tile index into tile_of[s] before that arrival, which releases it. After a
// block's last tile, one more stage carries the index -1 and no box (a plain arrival), which ends the consumers'
// loop: with tickets only the producer learns when the tiles run out. empty[s]: kThreads arrivals, one per
// consumer thread after its last read of the slot.
// Warp specialised: the block's kThreads consumer threads compute; one extra warp produces, its lane 0 issuing
// every load, so no consumer ever waits for the others before a load goes out. Fill: the producer issues
// stages 0 .. S-1 into the empty ring. Steady state: it refills each slot with stage m as soon as every
// consumer has released stage m - S, while the consumers wait for stage k, compute it and release its slot.
// Drain: the consumers compute the last stages, then meet the -1; nothing more is issued.
// Store (the TMA-store form): each tile is computed into one of two shared output buffers, which consumer
// thread 0 then writes out with one TMA store; a tile's buffer is rewritten two tiles later, once that store
// has read it (bulk_wait_group_read before the consumers' barrier of the tile in between).
template <int S, int TH, bool Store>
__device__ void run_tma(const StencilTmaParams& tp, unsigned char* ring, u64* full, u64* empty, long long* tile_of) {
  using Box = TmaBox<TH>;
  const StencilParams& p = tp.p;
  const Tiling<TH> tiling(p, tp.chunk);
  const Tracer tracer(p);
  if (threadIdx.x == kThreads) {  // the producer
    for (int s = 0; s < S; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kThreads);
    }
    ptx::fence_mbarrier_init_release_cluster();  // the inits are visible before any TMA completes bytes on them
    tma::fence_proxy_async_shared_cta();         // ... including to the async proxy that does the completing
    tma::prefetch_tensormap(&tp.map);
  }
  __syncthreads();  // the initialised barriers are visible to every thread before any arrive or wait
  if (threadIdx.x >= kThreads) {  // the producer warp: lane 0 issues stage m into slot m % S
    if (threadIdx.x != kThreads) return;
    TileSource<TH> source(tp.tickets, tiling);
    for (long long m = 0;; ++m) {  // fill (m < S), then steady state, then the closing stage
      const int s = static_cast<int>(m % S);
      const long long t = source.next();  // before the wait: a ticket's latency overlaps it
      if (m >= S) tma::wait_parity<false>(&empty[s], static_cast<u32>((m / S - 1) & 1));  // stage m-S's reads done
      tile_of[s] = t;
      if (t < 0) {
        ptx::mbarrier_arrive(&full[s]);  // release: the consumers that see this phase read tile_of[s] == -1
        return;
      }
      ptx::mbarrier_arrive_expect_tx(&full[s], Box::kBytes);  // release tile_of[s]; expect the full box's bytes
      tma::load_2d(ring + s * Box::kSlotBytes, &tp.map, static_cast<int>(tiling.col0(t) - kHalo),
                   static_cast<int>(tiling.row0(t) - 1), &full[s]);
      tracer.stamp(m, 0, kThreads);
    }
  }
  for (long long k = 0;; ++k) {  // the consumers: steady state, then drain, until the closing stage
    const unsigned long long waited = tracer.now();
    tma::wait_parity<false>(&full[k % S], static_cast<u32>((k / S) & 1));  // stage k's index and box (acquire)
    const long long t = tile_of[k % S];
    if (t < 0) break;  // the closing stage: not a stage of the trace
    tracer.stamp_at(k, 1, waited);
    tracer.stamp(k, 2);
    float* staged = Store ? reinterpret_cast<float*>(ring + S * Box::kSlotBytes + (k % 2) * Box::kOutBytes) : nullptr;
    compute_tma<TH>(p, reinterpret_cast<const float*>(ring + (k % S) * Box::kSlotBytes), tiling.row0(t),
                    tiling.col0(t), staged);
    tracer.stamp(k, 3);
    ptx::mbarrier_arrive(&empty[k % S]);  // release: this thread's reads of the slot (and of tile_of) are done
    if constexpr (Store) {
      tma::fence_proxy_async_shared_cta();  // this thread's writes of `staged` before the TMA store reads it
      if (threadIdx.x == 0) tma::bulk_wait_group_read<0>();  // tile k-1's store has read its buffer (reused at k+1)
      // Every consumer's fenced writes of tile k happen before thread 0's store of it; and no consumer writes
      // tile k+1 into the other buffer before thread 0 has seen tile k-1's store finish reading it.
      ptx::named_barrier_sync(1, kThreads);
      if (threadIdx.x == 0) {
        tma::store_2d(&tp.out_map, static_cast<int>(tiling.col0(t)), static_cast<int>(tiling.row0(t)), staged);
        tma::bulk_commit_group();
      }
    }
  }
  if (Store && threadIdx.x == 0) tma::bulk_wait_group<0>();  // the last stores are done before the block exits
}

}  // namespace stencil::tile

// kThreads consumer threads and one producer warp. Dynamic shared memory: S * TmaBox<TH>::kSlotBytes (with
// Store: plus 2 * TmaBox<TH>::kOutBytes of output buffers) + 128 (the ring is moved up to a 128-byte boundary).
// Store: the output leaves by TMA stores through p.out_map (whose base and pitch are 16-byte aligned).
template <int S, int TH, bool Store>
__global__ void __launch_bounds__(stencil::kThreads + 32) stencil_tile_tma(const __grid_constant__ StencilTmaParams p) {
  extern __shared__ __align__(128) unsigned char stencil_tma_smem[];
  __shared__ __align__(8) stencil::u64 full[S], empty[S];
  __shared__ long long tile_of[S];
  stencil::tile::run_tma<S, TH, Store>(p, cuadv::tma::align128(stencil_tma_smem), full, empty, tile_of);
}
#endif  // sm_90+
