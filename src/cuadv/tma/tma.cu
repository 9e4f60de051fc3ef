// tma.cu - 2-D tiles moved by the Tensor Memory Accelerator, against the same tiles moved by threads.
//   tma_copy                  box by box: TMA load -> shared -> TMA store, one thread per block streaming boxes
//                             through a ring of `stages` slots (loads `lookahead` boxes ahead of the store).
//   thread_copy               the same tiles, 16-byte loads and stores by 256 threads (the baseline).
//   tma_transpose<T>          TMA load, transpose in shared memory, TMA store into the transposed array.
//   thread_transpose<T>       the same with thread loads and stores (the classic shared-memory transpose).
//   tma_load_tiles            every box, as TMA delivers it (out-of-bounds fill included), into a dense array.
//   gemv_tma<Multicast, VB>   y[v] = A x[v]: the blocks of a cluster share a band of A; with Multicast each
//                             block loads 1/cluster of every tile and TMA writes it into every block.
// Tiles are numbered row-major (tile t is at column (t % tiles_x) * box_w and row (t / tiles_x) * box_h of the
// source) and dealt to a fixed number of blocks in units of `chunk` consecutive tiles: unit u goes to block
// u % gridDim.x (chunk = 1: block b takes tiles b, b + gridDim.x, ...). Consecutive tiles of a unit are side by
// side in a row, so a block with chunk > 1 streams runs of chunk * box_w columns. Tail tiles need no code: TMA
// fills the out-of-bounds part of a box in shared memory and a TMA store writes only the in-bounds part.
//
// Needs sm_90 (TMA, clusters); multicast needs an architecture-specific target (sm_90a, sm_100a).
#include <cooperative_groups.h>
#include <cuda/std/cstdint>

#include "cuadv/ptx.cuh"
#include "cuadv/tma.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "tma.cu needs sm_90 or newer (TMA, thread block clusters)"
#endif

namespace cg = cooperative_groups;
namespace ptx = cuadv::ptx;
namespace tma = cuadv::tma;
using cuadv::tma::TensorMap;
using u16 = cuda::std::uint16_t;
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;

constexpr int kMaxStages = 32;  // ring slots of tma_copy (a full barrier each)

// Every kernel's dynamic shared memory, declared once: a C++ template's own declaration would conflict in linkage
// with an extern "C" kernel's.
extern __shared__ __align__(128) unsigned char tma_smem[];

struct TmaTileParams {
  TensorMap src;        // the source array, box (box_h rows, box_w columns)
  TensorMap dst;        // the destination; for a transpose, the transposed array with box (box_w, box_h)
  int tiles_x, tiles_y; // tiles along the columns and the rows of the source
  int box_w, box_h;     // box in elements
  u32 box_bytes;        // box_w * box_h * element size: the transaction bytes of one load
  int stages;           // tma_copy: ring slots, 2 to kMaxStages
  int lookahead;        // tma_copy: loads issued ahead of the box being stored, 1 to stages
  int chunk;            // consecutive tiles of a row that a block takes at a time, >= 1
  int cache_hints;      // tma_copy: bit 0 loads, bit 1 stores with an L2 evict-first policy
  int burst;            // tma_copy: loads are issued once this many are due, 1 to lookahead
};
static_assert(sizeof(TmaTileParams) == 320, "mirrors cuadv.labs.tma.TmaTileParams");

struct ThreadTileParams {
  const unsigned char* src;
  unsigned char* dst;
  long long rows, cols;           // of the source, in elements
  long long src_pitch, dst_pitch; // bytes between rows
  int esize, box_w, box_h, tiles_x, tiles_y;
  int chunk;                      // as in TmaTileParams
};
static_assert(sizeof(ThreadTileParams) == 72, "mirrors cuadv.labs.tma.ThreadTileParams");

namespace tiles {

// The tiles of this block, in the order it takes them: units of `chunk` consecutive tiles (of the row-major
// list), unit u to block u % gridDim.x. The host keeps total + chunk below 2^31 and gridDim.x at most the
// number of units.
struct Order {
  int chunk;
  int count;  // tiles of this block

  __device__ Order(int total, int chunk_) : chunk(chunk_) {
    const int units = (total + chunk - 1) / chunk;
    const int b = static_cast<int>(blockIdx.x), g = static_cast<int>(gridDim.x);
    const int mine = b < units ? (units - 1 - b) / g + 1 : 0;
    count = mine * chunk;
    if (mine > 0 && (units - 1) % g == b) count -= units * chunk - total;  // this block has the short last unit
  }

  // Row-major index of this block's k-th tile.
  __device__ int tile(int k) const {
    return (static_cast<int>(blockIdx.x) + (k / chunk) * static_cast<int>(gridDim.x)) * chunk + k % chunk;
  }
};

// Column and row (in elements) of tile t.
template <class P>
__device__ inline void origin(const P& p, int t, int& x, int& y) {
  x = (t % p.tiles_x) * p.box_w;
  y = (t / p.tiles_x) * p.box_h;
}

// The same walk as Order::tile(0), tile(1), ... without a division per step: in tma_copy one thread issues
// every TMA of its block, so the latency of its per-box arithmetic is on the critical path.
struct Walk {
  int tx, ty;            // the current tile, in tiles
  int left;              // tiles left in the current unit, the current one included
  int chunk, tiles_x;
  int jump_x, jump_y;    // from the last tile of a unit to the first of this block's next unit

  __device__ Walk(const Order& order, int tiles_x_) : chunk(order.chunk), tiles_x(tiles_x_) {
    const int t = order.tile(0);
    tx = t % tiles_x;
    ty = t / tiles_x;
    left = chunk;
    const int jump = (static_cast<int>(gridDim.x) - 1) * chunk + 1;
    jump_x = jump % tiles_x;
    jump_y = jump / tiles_x;
  }

  __device__ void next() {
    const bool last = --left == 0;
    if (last) left = chunk;
    tx += last ? jump_x : 1;
    ty += last ? jump_y : 0;
    if (tx >= tiles_x) {  // tx < 2 * tiles_x here: one carry at most
      tx -= tiles_x;
      ++ty;
    }
  }
};

// A ring position: the slot and the parity of its barrier's current phase.
struct Slot {
  int index = 0;
  u32 phase = 0;

  __device__ void next(int stages) {
    if (++index == stages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

__device__ inline u32 round128(u32 bytes) { return (bytes + 127u) & ~127u; }

// One thread initialises `count` single-arrival barriers.
__device__ inline void init_barriers(u64* bars, int count) {
  for (int i = 0; i < count; ++i) ptx::mbarrier_init(&bars[i], 1);
  ptx::fence_mbarrier_init_release_cluster();  // the inits are visible before any TMA completes bytes on them
  tma::fence_proxy_async_shared_cta();         // ... including to the async proxy that does the completing
}

}  // namespace tiles

// One thread streams its block's boxes through a ring of `stages` shared-memory slots. Loads run up to
// `lookahead` boxes ahead of the box being stored; each box is stored as soon as it has landed. A slot is refilled
// once the store that last used it has READ it (cp.async.bulk.wait_group.read: its global writes may still be in
// flight), so up to stages - lookahead stores may still be reading their slots when the thread issues a load:
// with 1 it waits for the store it issued just before; with more it rarely waits on a store at all. Loads leave
// in bursts of `burst` (a chunk's side-by-side boxes together, one long run per row) once that many are due.
extern "C" __global__ void __launch_bounds__(32) tma_copy(const __grid_constant__ TmaTileParams p) {
  __shared__ __align__(8) u64 full[kMaxStages];
  if (threadIdx.x != 0) return;  // the other lanes have nothing to do: a TMA copy needs one issuing thread
  unsigned char* base = tma::align128(tma_smem);
  const u32 stride = tiles::round128(p.box_bytes);
  const int stages = p.stages, ahead = p.lookahead, reading = p.stages - p.lookahead, burst = p.burst;
  const tiles::Order order(p.tiles_x * p.tiles_y, p.chunk);
  const int n = order.count;
  tiles::init_barriers(full, stages);
  tma::prefetch_tensormap(&p.src);
  tma::prefetch_tensormap(&p.dst);
  const bool hint_loads = (p.cache_hints & 1) != 0, hint_stores = (p.cache_hints & 2) != 0;
  const u64 policy = tma::createpolicy_evict_first();

  tiles::Walk next_load(order, p.tiles_x), next_store(order, p.tiles_x);
  tiles::Slot load_slot, store_slot;
  int issued = 0;  // loads issued so far: boxes 0 .. issued-1
  auto load = [&]() {  // box `issued`, into the next slot of the ring
    unsigned char* dst = base + load_slot.index * stride;
    u64* bar = &full[load_slot.index];
    const int x = next_load.tx * p.box_w, y = next_load.ty * p.box_h;
    ptx::mbarrier_arrive_expect_tx_relaxed<false>(bar, p.box_bytes);  // the full box, even a tail box
    if (hint_loads)
      tma::load_2d_hint(dst, &p.src, x, y, bar, policy);
    else
      tma::load_2d(dst, &p.src, x, y, bar);
    next_load.next();
    load_slot.next(stages);
    ++issued;
  };
  while (issued < n && issued < ahead) load();  // fill: slots 0 .. ahead-1 start empty
  for (int k = 0; k < n; ++k) {
    const unsigned char* src = base + store_slot.index * stride;
    tma::wait_parity<false>(&full[store_slot.index], store_slot.phase);  // box k is in shared memory
    // Only the async proxy touched this slot; the fence is the documented order before a TMA store reads
    // shared memory and costs one instruction per box.
    tma::fence_proxy_async_shared_cta();
    const int x = next_store.tx * p.box_w, y = next_store.ty * p.box_h;
    if (hint_stores)
      tma::store_2d_hint(&p.dst, x, y, src, policy);
    else
      tma::store_2d(&p.dst, x, y, src);
    tma::bulk_commit_group();
    next_store.next();
    store_slot.next(stages);
    // Boxes up to k+ahead may now be loaded: box j goes into the slot of box j-stages, stored at step j-stages
    // <= k-reading. Issued once `burst` are due (or the block's last ones are), which keeps box k+1 loaded in
    // time as long as burst <= ahead.
    const int last = k + ahead < n ? k + ahead : n - 1;
    if (last >= issued && (last - issued + 1 >= burst || last == n - 1)) {
      tma::bulk_wait_group_read_dynamic(reading);  // stores up to k-reading have read their slots (the newest
                                                   // `reading` may still be reading theirs)
      while (issued <= last) load();
    }
  }
  tma::bulk_wait_group<0>();  // every store has completed before the block's shared memory goes away
}

// The baseline: threads copy each tile with 16-byte loads and stores (the tail of a row byte by byte).
extern "C" __global__ void __launch_bounds__(256) thread_copy(const __grid_constant__ ThreadTileParams p) {
  const tiles::Order order(p.tiles_x * p.tiles_y, p.chunk);
  for (int k = 0; k < order.count; ++k) {
    int x0, y0;
    tiles::origin(p, order.tile(k), x0, y0);
    const long long w = p.cols - x0 < p.box_w ? p.cols - x0 : p.box_w;
    const long long h = p.rows - y0 < p.box_h ? p.rows - y0 : p.box_h;
    const int row_bytes = static_cast<int>(w) * p.esize;
    const int chunks = row_bytes / 16;  // whole 16-byte chunks per row (x0 * esize is a multiple of 16)
    const int total = static_cast<int>(h) * chunks;
    const unsigned char* src = p.src + y0 * p.src_pitch + static_cast<long long>(x0) * p.esize;
    unsigned char* dst = p.dst + y0 * p.dst_pitch + static_cast<long long>(x0) * p.esize;
    constexpr int kUnroll = 4;  // four independent 16-byte loads in flight per thread
    for (int i0 = threadIdx.x; i0 < total; i0 += kUnroll * blockDim.x) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u * blockDim.x;
        if (i < total)
          v[u] = *reinterpret_cast<const uint4*>(src + (i / chunks) * p.src_pitch + (i % chunks) * 16);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u * blockDim.x;
        if (i < total) *reinterpret_cast<uint4*>(dst + (i / chunks) * p.dst_pitch + (i % chunks) * 16) = v[u];
      }
    }
    const int tail = row_bytes - chunks * 16;  // fewer than 16 bytes at the end of each row of a tail tile
    if (tail > 0) {
      for (int i = threadIdx.x; i < h * tail; i += blockDim.x) {
        const long long r = i / tail, b = chunks * 16 + i % tail;
        dst[r * p.dst_pitch + b] = src[r * p.src_pitch + b];
      }
    }
  }
}

namespace tiles {

// out (w rows x h columns) = transpose of in (h rows x w columns). A warp takes a 32 x 32 block and walks its
// diagonals: at step d lane l reads row (l + d) % 32, column l, so for 4-byte elements and sides that are
// multiples of 32 both the reads and the writes hit 32 different banks.
template <typename T>
__device__ void transpose_smem(const T* in, T* out, int h, int w) {
  const int lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  const int blocks_r = (h + 31) / 32, blocks_c = (w + 31) / 32;
  for (int b = threadIdx.x >> 5; b < blocks_r * blocks_c; b += warps) {
    const int r0 = (b / blocks_c) * 32;
    const int c = (b % blocks_c) * 32 + lane;
#pragma unroll 4
    for (int d = 0; d < 32; ++d) {
      const int r = r0 + ((lane + d) & 31);
      if (r < h && c < w) out[c * h + r] = in[r * w + c];
    }
  }
}

}  // namespace tiles

// Two input and two output buffers: the load of box k+2 and the store of box k-1 overlap the transpose of box k.
template <typename T>
__global__ void __launch_bounds__(256) tma_transpose(const __grid_constant__ TmaTileParams p) {
  __shared__ __align__(8) u64 full[2];
  unsigned char* base = tma::align128(tma_smem);
  const u32 stride = tiles::round128(p.box_bytes);
  const tiles::Order order(p.tiles_x * p.tiles_y, p.chunk);
  const int n = order.count;
  if (threadIdx.x == 0) {
    tiles::init_barriers(full, 2);
    tma::prefetch_tensormap(&p.src);
    tma::prefetch_tensormap(&p.dst);
  }
  __syncthreads();  // the barriers are initialised before any thread waits on them

  auto load = [&](int k) {  // thread 0 only
    int x, y;
    tiles::origin(p, order.tile(k), x, y);
    ptx::mbarrier_arrive_expect_tx_relaxed<false>(&full[k & 1], p.box_bytes);
    tma::load_2d(base + (k & 1) * stride, &p.src, x, y, &full[k & 1]);
  };
  if (threadIdx.x == 0)
    for (int k = 0; k < n && k < 2; ++k) load(k);  // fill
  for (int k = 0; k < n; ++k) {
    const int s = k & 1;
    const T* in = reinterpret_cast<const T*>(base + s * stride);
    T* out = reinterpret_cast<T*>(base + (2 + s) * stride);
    tma::wait_parity<false>(&full[s], (k >> 1) & 1);  // box k is in shared memory
    if (threadIdx.x == 0) tma::bulk_wait_group_read<1>();  // the store of box k-2 no longer reads out[s]
    __syncthreads();  // ... which every thread may now overwrite
    tiles::transpose_smem(in, out, p.box_h, p.box_w);
    tma::fence_proxy_async_shared_cta();  // this thread's writes to out[s] are visible to the TMA store
    __syncthreads();  // every thread has fenced its writes and finished reading in[s]
    if (threadIdx.x == 0) {
      int x, y;
      tiles::origin(p, order.tile(k), x, y);
      tma::store_2d(&p.dst, y, x, out);  // the destination's column is the source's row
      tma::bulk_commit_group();
      if (k + 2 < n) load(k + 2);  // in[s] is free: nobody reads it any more
    }
  }
  if (threadIdx.x == 0) tma::bulk_wait_group<0>();  // stores complete before shared memory goes away
}

// The baseline: threads load the box (zero outside the array, as TMA fills it), transpose it in shared memory
// and store the in-bounds part, one element per thread per step.
template <typename T>
__global__ void __launch_bounds__(256) thread_transpose(const __grid_constant__ ThreadTileParams p) {
  T* in = reinterpret_cast<T*>(tma_smem);
  T* out = in + p.box_w * p.box_h;
  const tiles::Order order(p.tiles_x * p.tiles_y, p.chunk);
  const int area = p.box_w * p.box_h;
  for (int k = 0; k < order.count; ++k) {
    int x0, y0;
    tiles::origin(p, order.tile(k), x0, y0);
    for (int i = threadIdx.x; i < area; i += blockDim.x) {
      const int r = i / p.box_w, c = i % p.box_w;
      const bool inside = y0 + r < p.rows && x0 + c < p.cols;
      in[i] = inside ? *reinterpret_cast<const T*>(p.src + (y0 + r) * p.src_pitch + (x0 + c) * sizeof(T)) : T(0);
    }
    __syncthreads();  // the box is in shared memory
    tiles::transpose_smem(in, out, p.box_h, p.box_w);
    __syncthreads();  // the transposed box is complete
    for (int i = threadIdx.x; i < area; i += blockDim.x) {
      const int r = i / p.box_h, c = i % p.box_h;  // destination row = source column
      if (x0 + r < p.cols && y0 + c < p.rows)
        *reinterpret_cast<T*>(p.dst + (x0 + r) * p.dst_pitch + (y0 + c) * sizeof(T)) = out[i];
    }
    __syncthreads();  // both buffers are free for the next box
  }
}

// Each box exactly as TMA delivers it, out-of-bounds fill included, into out[tile][box_h][box_w].
extern "C" __global__ void __launch_bounds__(128) tma_load_tiles(const __grid_constant__ TmaTileParams p,
                                                                unsigned char* out) {
  __shared__ __align__(8) u64 full[1];
  unsigned char* buf = tma::align128(tma_smem);
  const tiles::Order order(p.tiles_x * p.tiles_y, p.chunk);
  if (threadIdx.x == 0) tiles::init_barriers(full, 1);
  __syncthreads();  // the barrier is initialised before any thread waits on it
  for (int k = 0; k < order.count; ++k) {
    const int t = order.tile(k);
    if (threadIdx.x == 0) {
      int x, y;
      tiles::origin(p, t, x, y);
      ptx::mbarrier_arrive_expect_tx_relaxed<false>(&full[0], p.box_bytes);
      tma::load_2d(buf, &p.src, x, y, &full[0]);
    }
    tma::wait_parity<false>(&full[0], k & 1);  // box k is in shared memory
    uint4* dst = reinterpret_cast<uint4*>(out + static_cast<long long>(t) * p.box_bytes);
    for (u32 i = threadIdx.x; i < p.box_bytes / 16; i += blockDim.x) dst[i] = reinterpret_cast<const uint4*>(buf)[i];
    __syncthreads();  // every thread has read the buffer before the next box overwrites it
  }
}

namespace gemv {

constexpr int kThreads = 256;                      // 8 warps; warp w owns rows [8w, 8w+8) of a tile
constexpr int kTileM = 64;                         // rows of A in a band: the blocks of a cluster share it
constexpr int kTileK = 64;                         // columns of A per tile
constexpr int kSlices = 8;                         // a tile is 8 boxes of kSliceRows x kTileK; a cluster has at most
                                                   // kSlices blocks, each loading one slice or more (the host checks)
constexpr int kSliceRows = kTileM / kSlices;
constexpr u32 kTileBytes = kTileM * kTileK * 4;    // 16 KB
constexpr u32 kSliceBytes = kTileBytes / kSlices;  // 2 KB
constexpr int kStages = 4;

}  // namespace gemv

struct GemvParams {
  TensorMap a;          // A [m, k] float32, box (kSliceRows rows, kTileK columns)
  const float* x;       // X [vectors, k]: block (bx, by) uses vectors [bx * VB, bx * VB + VB)
  float* y;             // Y [vectors, m]
  long long m, k;
  long long x_pitch, y_pitch;  // elements between rows of X and of Y
};
static_assert(sizeof(GemvParams) == 192, "mirrors cuadv.labs.tma.GemvParams");

// Y[v] = A X[v] for VB vectors per block. Block (bx, by) handles rows [64 by, 64 by + 64) of A; the blocks of a
// cluster (along x) need the same tiles of A. Per-block loads (Multicast = false): each block loads every tile
// itself and L2 serves the repeats. Multicast: block r of a cluster of c loads slices r, r + c, ... of each tile
// and TMA writes each slice into every block of the cluster, so A crosses from L2 once per cluster.
//
// Two barriers per stage and block: full[s] (one arrival: this block's expect_tx; completes when all 16 KB have
// landed, whoever loaded them) and, with multicast, empty[s] (one arrival from every block of the cluster once it
// has read its slot s: a block refills slot s in every block, so it waits until all of them have released it).
// Without multicast a block refills only its own slots, and its __syncthreads is the release.
template <bool Multicast, int VB>
__global__ void __launch_bounds__(gemv::kThreads) gemv_tma(const __grid_constant__ GemvParams p) {
  using namespace gemv;
  __shared__ __align__(8) u64 full[kStages];
  __shared__ __align__(8) u64 empty[kStages];
  cg::cluster_group cluster = cg::this_cluster();
  const u32 rank = cluster.block_rank();
  const u32 csize = cluster.num_blocks();
  const bool mcast = Multicast && csize > 1;  // a cluster of one loads for itself
  unsigned char* base = tma::align128(tma_smem);
  const int m0 = static_cast<int>(blockIdx.y) * kTileM;
  const int nk = static_cast<int>((p.k + kTileK - 1) / kTileK);
  const long long v0 = static_cast<long long>(blockIdx.x) * VB;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], csize);  // used only with multicast
    }
    ptx::fence_mbarrier_init_release_cluster();  // the inits are visible to the whole cluster ...
    tma::fence_proxy_async_shared_cta();         // ... and to the async proxy that completes bytes on them
    tma::prefetch_tensormap(&p.a);
  }
  // Every block's barriers are initialised before any block multicasts into it or arrives on them (and the
  // whole cluster is running: distributed shared memory needs its target block alive).
  cluster.sync();

  auto issue = [&](int kt) {  // thread 0: this block's share of tile kt into slot kt % kStages
    const int s = kt % kStages;
    unsigned char* slot = base + s * kTileBytes;
    ptx::mbarrier_arrive_expect_tx_relaxed<true>(&full[s], kTileBytes);  // all 8 slices land here
    const int first = mcast ? static_cast<int>(rank) : 0;
    const int step = mcast ? static_cast<int>(csize) : 1;
    for (int j = first; j < kSlices; j += step) {
      const int x = kt * kTileK, y = m0 + j * kSliceRows;
      if constexpr (Multicast) {
        if (mcast) {
          tma::load_2d_multicast(slot + j * kSliceBytes, &p.a, x, y, &full[s], static_cast<u16>((1u << csize) - 1));
          continue;
        }
      }
      tma::load_2d(slot + j * kSliceBytes, &p.a, x, y, &full[s]);
    }
  };

  if (threadIdx.x == 0)
    for (int kt = 0; kt < nk && kt < kStages; ++kt) issue(kt);  // fill: every slot starts empty

  float acc[kSliceRows][VB];
#pragma unroll
  for (int r = 0; r < kSliceRows; ++r)
#pragma unroll
    for (int v = 0; v < VB; ++v) acc[r][v] = 0.0f;

  for (int kt = 0; kt < nk; ++kt) {
    const int s = kt % kStages;
    // This tile's x values, loaded before the wait so their latency overlaps it (0 past the end of k, where
    // TMA has filled A with zeros).
    float xv[VB][2];
    const long long k0 = static_cast<long long>(kt) * kTileK;
#pragma unroll
    for (int v = 0; v < VB; ++v)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long kk = k0 + lane + 32 * h;
        xv[v][h] = kk < p.k ? p.x[(v0 + v) * p.x_pitch + kk] : 0.0f;
      }
    tma::wait_parity<true>(&full[s], (kt / kStages) & 1);  // tile kt is in this block's shared memory
    const float* rows = reinterpret_cast<const float*>(base + s * kTileBytes) + warp * kSliceRows * kTileK;
#pragma unroll
    for (int r = 0; r < kSliceRows; ++r) {
      const float a0 = rows[r * kTileK + lane], a1 = rows[r * kTileK + lane + 32];
#pragma unroll
      for (int v = 0; v < VB; ++v) acc[r][v] = fmaf(a1, xv[v][1], fmaf(a0, xv[v][0], acc[r][v]));
    }
    __syncthreads();  // every thread of this block has finished reading slot s
    if (threadIdx.x == 0 && kt + kStages < nk) {
      if (mcast) {
        // Release slot s to every block of the cluster (each one refills it in all of them), then wait until
        // every block has released this block's slot s before refilling it everywhere.
        ptx::fence_acq_rel_cluster();  // this block's reads of slot s happen before any peer's refill
        for (u32 r = 0; r < csize; ++r)
          tma::mbarrier_arrive_relaxed_cluster(ptx::mapa_shared_cluster(ptx::smem_addr(&empty[s]), r));
        tma::wait_parity<true>(&empty[s], (kt / kStages) & 1);  // every block of the cluster released slot s
      }
      issue(kt + kStages);  // per-block loads: the __syncthreads above was the release
    }
  }

  // Each of the 8 x VB sums is spread over the warp's 32 lanes.
#pragma unroll
  for (int r = 0; r < kSliceRows; ++r)
#pragma unroll
    for (int v = 0; v < VB; ++v) {
      float sum = acc[r][v];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      const int row = m0 + warp * kSliceRows + r;
      if (lane == 0 && row < p.m) p.y[(v0 + v) * p.y_pitch + row] = sum;
    }
  // No block exits while a peer may still arrive on its empty barriers.
  cluster.sync();
}
