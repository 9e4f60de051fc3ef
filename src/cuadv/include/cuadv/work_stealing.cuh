// cuadv/work_stealing.cuh - one tile body, five scheduling policies.
//
//   FixedWork             one block per tile; the hardware scheduler balances and can preempt.
//   FixedBlocks           a grid sized to the GPU walks the tiles in strides: one prologue per block.
//   AtomicCounter         the dynamic scheduler users write today on Hopper (FlashAttention-3's
//                         DynamicPersistentTileScheduler kind): a grid sized to the GPU, each block
//                         starts at its own index, then takes tiles from a global counter
//                         (atomicAdd + grid size, issued before the tile so its latency hides behind
//                         it) until they are gone. The counter must be ZERO at launch: the host sets
//                         it with a memset before every launch (TileKernel enqueues one on the
//                         launch's stream, so a graph capture gets a memset node). Blocks never yield.
//   ClusterLaunchControl  (sm_100+) the CUDA Programming Guide 4.12 protocol: a running block cancels a pending block and
//                         takes its tile; cancellation fails once the work is gone or a
//                         higher-priority kernel is waiting, and then the block exits.
//   Steal                 the same loop on GPUs without CLC: the request is a ticket taken from
//                         this launch's counter; with clusters it is written into the same 16-byte
//                         result of every block and completed on the same mbarrier transaction (a
//                         single block hands it to its threads through shared memory, one barrier
//                         per tile); once the block's time slice is spent
//                         (quantum_ns, stretched to prologue_factor x its own prologue time so the
//                         prologue costs at most 1/(factor+1) of the block's life, and never before
//                         the block ran min_units tiles) the request fails on purpose, so the block
//                         exits and gives its SM back, and (Schedule::report) may report what its
//                         slice held (or, where no slice ends, what one would hold at the pace of a
//                         block that found the work gone), from which the host sizes the next
//                         launch's min_units.
//   Auto                  ClusterLaunchControl where the target has it (sm_100a / sm_100f and later a / f),
//                         else Steal (sm_90 and plain sm_100+ targets), else FixedWork.
//
// Use (the tile grid is the launch grid for FixedWork and ClusterLaunchControl; FixedBlocks and
// AtomicCounter launch the blocks (clusters) that fit at once, at most one per unit. Steal with a quantum needs
// at least ceil(units / min_units) blocks (clusters): each takes min_units tiles unless the work runs out,
// so together they take them all; the tile grid is always enough. Steal without a quantum, quantum_ns = 0,
// may launch only the blocks that fit at once, as FixedBlocks does):
//
//   __global__ void k(const __grid_constant__ cuadv::ws::Schedule s, float* data, int n) {
//     cuadv::ws::Scheduler<cuadv::ws::Auto> sched(s);
//     if (!sched.begin()) return;              // Steal: no tile left for this block
//     float alpha = expensive_prologue();      // once per running block, not per tile
//     sched.for_each([&](const cuadv::ws::Tile& t) { ... t.x, t.y, t.z ... });
//   }
//
// Contract: every thread of the block calls begin() and for_each() (they synchronise the block,
// and with clusters the cluster). Every tile is passed to the body exactly once over the launch.
// Exactly one thread submits each request (thread 0, or thread 0 of cluster rank 0).
// Nothing here orders the body's own memory accesses across tiles or blocks.
#pragma once

#include <cooperative_groups.h>
#include <cuda/atomic>
#include <cuda/std/type_traits>

#include "cuadv/ptx.cuh"

namespace cuadv::ws {

namespace cg = cooperative_groups;

// The ticket counter of a Steal kernel: a 64-bit word, the low half the next ticket (a unit
// index). Every update is a relaxed read-modify-write of this one location, whose single
// modification order makes tickets unique; no fence is paid per tile. The counters reset
// themselves, so back-to-back launches and graph replays on one stream need no host memset, in one
// of two ways:
//   phased (stream launches): a stream has a pair of StealStates, and its launches alternate
//     between them (the host passes the first or, with kPhase1, the second). The claim that takes
//     a launch's ticket 0 zeroes the other one's word, which the previous launch used and the next
//     will; launches on one stream do not overlap, so nothing else touches it meanwhile. Nothing
//     is counted at exit, a block launched after the work is gone leaves after one load, and a
//     launch's first claims are plain (a tag in the word, restarted by a compare-and-swap, made
//     every block of the first wave contend on it at once).
//   counted (kCountExits; launches captured in a graph, whose replays all carry the flags they were
//     captured with): the high half counts the units that exited, and the last one sets the word
//     back to zero.
// Zero is a valid start for both. Two launches that may overlap need two StealStates (pairs).
struct StealState {
  unsigned long long word;  // (exited units, counted) << 32 | next ticket
  unsigned long long reported;  // %gridid + 1 of the last launch that wrote its slice report
};
static_assert(sizeof(StealState) == 16, "a pair of StealStates is STATE_BYTES in cuadv/state_pool.py");
constexpr unsigned long long kExited = 1ull << 32;
constexpr unsigned int kCountExits = 1;  // Schedule::flags: the counted reset
constexpr unsigned int kPhase1 = 2;  // Schedule::flags: a phased launch given the second StealState of its pair
constexpr unsigned long long kRefused = ~0ull;  // a software request refused because the time slice is spent

// One record per tile when tracing, written by the block's thread 0.
struct TraceRecord {
  unsigned int smid;            // SM that ran the tile
  unsigned int block;           // linear index of the block that ran it
  unsigned long long start_ns;  // %globaltimer before the body
  unsigned long long end_ns;    // %globaltimer after thread 0 finished the body
};
static_assert(sizeof(TraceRecord) == 24, "TraceRecord layout is mirrored in cuadv/work_stealing/trace.py");

// The scheduler's kernel parameter; pass it `const __grid_constant__`.
struct Schedule {
  unsigned int tiles[3];          // tile grid; each dimension a multiple of cluster[]
  unsigned int cluster[3];        // cluster shape (1, 1, 1 without clusters)
  unsigned long long quantum_ns;  // Steal: stop taking tiles after this long (0: never) ...
  unsigned int prologue_factor;   // ... or after this many times the block's own prologue, if later (0: off)
  unsigned int flags;             // Steal: kCountExits for launches captured in a graph, kPhase1 (stream launches)
  StealState* state;              // Steal: this launch's counters; AtomicCounter: state->word is its counter,
                                  // which must be zero at launch (a memset before every launch)
  TraceRecord* trace;             // one record per tile, or nullptr
  const unsigned int* order;      // the i-th unit handed out is order[i] (a permutation), or nullptr: i
  unsigned int min_units;         // Steal: the slice never ends before the block ran this many units (0 or 1: off)
  unsigned int reserved;
  unsigned long long* report;     // Steal: what a slice held or would hold (SliceReport), for sizing the next launch; or nullptr
};
static_assert(sizeof(Schedule) == 80, "Schedule layout is mirrored in cuadv/work_stealing/schedule.py");

// What the first sampled block of a launch to leave saw (report_slice), packed in one word so the host reads it whole:
// (slice / ns per unit, rounded up) << 32 | ns per unit (its prologue included). The host
// sizes the next launch from it: one block per that many units (TileKernel min_tiles=None).
constexpr unsigned int kReportEvery = 16;  // only blocks with blockIdx.x % 16 == 0 may report: fewer exchanges per launch

struct Tile {
  unsigned int x, y, z;
  unsigned long long index;  // x + tiles_x * (y + tiles_y * z)
};

struct FixedWork {};
struct FixedBlocks {};
struct AtomicCounter {};
struct Steal {};
struct ClusterLaunchControl {};
// clc's cancel request answers every block of the cluster (.multicast::cluster::all), which only an sm_100a / sm_100f
// (or later a / f) target has: a plain sm_100 or sm_120 target takes Steal, as cuadv's policy_for_arch does.
#if CUADV_ARCH >= 1000 && (CUADV_ARCH_SPECIFIC || CUADV_ARCH == 9999)
using Auto = ClusterLaunchControl;
#elif CUADV_ARCH >= 900
using Auto = Steal;
#else
using Auto = FixedWork;  // Steal needs sm_90 (elect.sync, mbarrier transaction counts); the grid is the tile grid
#endif

// Whether every thread of a block passes a block (or cluster) barrier between two tiles the block runs under
// Policy: the request loops (Steal, ClusterLaunchControl) and AtomicCounter hand the next tile over at one.
// FixedBlocks loops with none (its warps drift apart), FixedWork runs one tile per block. A body may then
// keep per-tile state in shared memory, reset by its last user, without a barrier of its own.
template <class Policy>
constexpr bool kBarrierBetweenTiles = cuda::std::is_same_v<Policy, Steal> ||
                                      cuda::std::is_same_v<Policy, AtomicCounter> ||
                                      cuda::std::is_same_v<Policy, ClusterLaunchControl>;

namespace detail {
// Shared memory of the request protocol. Same offset in every block of a kernel, which the
// multicast response (hardware or software) relies on.
struct alignas(16) Slots {
  uint4 result;             // the response to the current request
  unsigned long long bar;   // its phase completes when `result` has arrived
  // State one thread keeps from before the tile body to after it, here rather than in registers: a
  // register is allocated in every thread and would stay taken across the body (see kept()).
  unsigned long long start_ns;     // Steal: when the block began; its time slice counts from here
  alignas(16) unsigned long long trace[2];  // tracing: the tile being timed, %globaltimer before the body (the leader's)
  unsigned long long slice_ns;     // Steal: the block's time slice (0: none)
  uint3 local;                     // clusters: this block's index in its cluster, added to each response's first ctaid
};
static inline __device__ Slots& slots() {
  __shared__ Slots s;
  return s;
}
// AtomicCounter: the next unit, handed from the submitting thread to the unit's threads. Two slots used
// in turn, so one barrier per tile suffices: slot r % 2 is written again only in round r + 2, after
// every thread passed round r + 1's barrier, which comes after its read of round r's value.
static inline __device__ unsigned long long* next_unit_slots() {
  __shared__ unsigned long long s[2];
  return s;
}
// Steal without clusters: the response to the current request, handed from the submitting thread to the
// block's threads; two slots used in turn, as next_unit_slots.
static inline __device__ uint4* response_slots() {
  __shared__ uint4 s[2];
  return s;
}
// A volatile view of a slot: the compiler may not keep its value in a register across the body in
// place of reading it again (which it could, the body's stores going to other memory).
template <class T>
static inline __device__ volatile T& kept(T& slot) {
  return const_cast<volatile T&>(slot);
}
// Tracing: `index` and %globaltimer into trace[0] and trace[1] with one 16-byte volatile store, and
// the index read back from it, which the body then uses. A store alone may sink below the body
// (ptxas moves a shared store past global accesses), keeping the start in two registers of every
// thread across it; the body's accesses depending on the load that follows the store, it cannot.
static inline __device__ unsigned long long stamp_trace(unsigned long long (&trace)[2], unsigned long long index) {
  unsigned long long read;
  asm volatile("{\n\t.reg .u64 t;\n\tmov.u64 t, %%globaltimer;\n\tst.volatile.shared.v2.u64 [%1], {%2, t};\n\t"
               "ld.volatile.shared.u64 %0, [%1];\n\t}"
               : "=l"(read) : "r"(ptx::smem_addr(trace)), "l"(index) : "memory");
  return read;
}
// The unit index (x, y, z) of unit u of a grid of dx x dy x ... units when there are 2^32 or more: out of
// line, so that its 64-bit divisions (calls themselves) take no registers from a loop that decodes units.
static __device__ __noinline__ uint3 wide_unit_index(unsigned long long u, unsigned dx, unsigned dy) {
  return make_uint3(static_cast<unsigned>(u % dx), static_cast<unsigned>((u / dx) % dy),
                    static_cast<unsigned>(u / (static_cast<unsigned long long>(dx) * dy)));
}
// Thread 0 of the block (thread rank 0): no index multiplications, so nothing of it but %tid is kept.
static inline __device__ bool first_thread() {
  return (threadIdx.x | threadIdx.y | threadIdx.z) == 0;
}
}  // namespace detail

// The scheduler holds the Schedule (in the constant bank), whether its thread leads the block, and
// the current tile. What else it needs (units per dimension, cluster shape and rank) is derived from
// the Schedule or a special register where it is used, and what the request loop carries from before
// a tile body to after it lives in shared memory (detail::Slots): a value held in a register is held
// in every thread across every body, and the registers the body can have set its occupancy. Across
// the body the request loop keeps its round count and, in the submitting thread, the ticket in flight.
template <class Policy>
class Scheduler {
  static constexpr bool kCancel = cuda::std::is_same_v<Policy, ClusterLaunchControl>;
  static constexpr bool kSteal = cuda::std::is_same_v<Policy, Steal>;
  static constexpr bool kCounter = cuda::std::is_same_v<Policy, AtomicCounter>;
  static constexpr bool kStrided = kCounter || cuda::std::is_same_v<Policy, FixedBlocks>;  // first unit: own index
  static constexpr bool kRequestLoop = kCancel || kSteal;
  static_assert(!kCancel || (CUADV_ARCH >= 1000 && (CUADV_ARCH_SPECIFIC || CUADV_ARCH == 9999)),
                "ClusterLaunchControl needs sm_100a / sm_100f (or a later a / f target); use cuadv::ws::Steal (or "
                "Auto) on others");

 public:
  __device__ explicit Scheduler(const Schedule& s) : s_(s), leader_(detail::first_thread()) {}

  // Finds this block's first tile. False: nothing left for it; return from the kernel at once
  // (before the prologue), as a block whose launch was cancelled would never have run.
  __device__ bool begin() {
    if constexpr (kStrided) {
      unit_ = cluster_index();
      if (!is_unit(unit_)) return false;
      tile_ = tile_of_unit(unit_for(unit_), local_index());
      return true;
    } else {
      const uint3 local = local_index();
      if constexpr (!kSteal) {  // this block's own tile (its unit's first block is blockIdx - local), or its unit's in order
        if (s_.order == nullptr) tile_ = make_tile(blockIdx.x, blockIdx.y, blockIdx.z);
        else tile_ = tile_of_ctaid(make_uint3(blockIdx.x - local.x, blockIdx.y - local.y, blockIdx.z - local.z), local);
      }
      if constexpr (kRequestLoop) {
        if (leader()) {
          detail::Slots& sl = detail::slots();
          ptx::mbarrier_init(&sl.bar, 1);
          if (clustered()) {
            ptx::fence_mbarrier_init_release_cluster();  // init visible to the cluster's remote completions
            // For decoding responses (kept_local_index); read after the unit's first sync.
            detail::kept(sl.local.x) = local.x;
            detail::kept(sl.local.y) = local.y;
            detail::kept(sl.local.z) = local.z;
          }
        }
      }
      if constexpr (kSteal) {
        // The first claim has no tile to overlap with, so it is a plain hand-off through shared
        // memory. It is never refused by the quantum, nor are the next min_units - 1: every block
        // takes min_units tickets unless the work is gone, and the grid has at least units / min_units
        // blocks, which is what makes tickets 0 .. units-1 all taken.
        detail::Slots& sl = detail::slots();
        if (submitter()) detail::kept(sl.start_ns) = ptx::globaltimer_ns();  // the slice counts from here
#if CUADV_ARCH >= 900
        if (clustered()) cg::this_cluster().sync();  // every block of the cluster runs before remote writes
#endif
        if (submitter()) publish(first_claim());
        sync_unit();  // the response (and the barrier init) is visible to every thread of the unit
        const uint4 first = sl.result;
        if (first.x == 0) {
          exit_protocol();
          return false;
        }
        tile_ = make_tile(first.y + local.x, first.z + local.y, first.w + local.z);
      }
      return true;
    }
  }

  // Calls body(tile) for every tile this block gets, then runs the policy's exit protocol.
  template <class Body>
  __device__ void for_each(Body&& body) {
    if constexpr (cuda::std::is_same_v<Policy, FixedWork>) {
      run_tile(body, tile_);
    } else if constexpr (cuda::std::is_same_v<Policy, FixedBlocks>) {
      const unsigned long long stride = grid_clusters(), units = unit_count();
      const uint3 local = local_index();
      for (unsigned long long i = unit_; i < units; i += stride) run_tile(body, tile_of_unit(unit_for(i), local));
    } else if constexpr (kCounter) {
      counter_loop(body);
    } else {
      if constexpr (kSteal) {
        if (submitter()) {  // only the submitter reads the slice
          detail::Slots& sl = detail::slots();
          const unsigned long long prologue = ptx::globaltimer_ns() - detail::kept(sl.start_ns);
          unsigned long long slice = s_.quantum_ns;
          if (slice != 0 && s_.prologue_factor != 0 && prologue * s_.prologue_factor > slice) slice = prologue * s_.prologue_factor;
          detail::kept(sl.slice_ns) = slice;
        }
      }
      // ran: units this block will have run after this round's tile. It also gives the parity of the
      // response barrier's phase this round waits for, (ran - 1) % 2, so no phase is kept besides it.
      unsigned int ran = 1;
      // Steal in one block: its response needs no transaction. It goes through shared memory as
      // AtomicCounter's next unit does, one barrier per tile, in two slots used in turn (slot ran % 2 is
      // written again in round ran + 2, after every thread passed round ran + 1's barrier, which follows
      // its read in round ran).
      const bool handed = kSteal && !clustered();
      uint4* slot = detail::response_slots();
      for (;; ++ran) {
        // Every thread has read the previous response before it is overwritten; on the first
        // pass also: the barrier init is visible and (clusters) every block of the cluster runs.
        if (!handed) sync_unit();
        const unsigned long long claim = request(ran);  // in flight while the body runs
        run_tile(body, tile_);
        if (handed) {
          if (submitter()) slot[ran & 1] = response_for(claim);
          __syncthreads();  // orders the submitter's response before every thread's read of it
          const uint4 response = slot[ran & 1];
          if (response.x == 0) break;  // refused, or no work left
          tile_ = make_tile(response.y, response.z, response.w);  // already mapped
          continue;
        }
        if constexpr (kSteal) complete_software_request(claim);
        if (!wait_and_decode((ran - 1) & 1)) break;  // a failed response: no further request, no decoding
      }
      if constexpr (kSteal) {
        report_slice(ran);  // refused (its slice spent) or the work gone: either way the block's pace
        exit_protocol();
      }
    }
  }

  __device__ const Tile& tile() const { return tile_; }

 private:
  // ---- derived from the Schedule (its constant bank) or a special register where used ----
  __device__ unsigned cluster_size() const { return s_.cluster[0] * s_.cluster[1] * s_.cluster[2]; }
  __device__ bool clustered() const { return cluster_size() > 1; }
  __device__ unsigned units_dim(int d) const { return s_.tiles[d] / s_.cluster[d]; }
  __device__ unsigned long long tile_count() const {
    return static_cast<unsigned long long>(s_.tiles[0]) * s_.tiles[1] * s_.tiles[2];
  }
  __device__ unsigned long long unit_count() const {
    return static_cast<unsigned long long>(units_dim(0)) * units_dim(1) * units_dim(2);
  }
  // u < units, without a division: every dimension of the tile grid is a multiple of the cluster's, so
  // units = tiles / cluster exactly (no overflow: the u checked stay below 2^33, clusters at 16 blocks).
  __device__ bool is_unit(unsigned long long u) const { return u * cluster_size() < tile_count(); }
  // Units in one dimension (x): the unit index is the first block's x / cluster x, no division to decode.
  __device__ bool one_dimensional() const { return s_.tiles[1] == s_.cluster[1] && s_.tiles[2] == s_.cluster[2]; }
  __device__ bool leader() const { return leader_; }
  // The thread that submits each request: thread 0 of the block, or of the cluster's rank 0 block.
  __device__ bool submitter() const {
#if CUADV_ARCH >= 900
    if (clustered()) return leader() && cg::this_cluster().block_rank() == 0;
#endif
    return leader();
  }
  // This block's index within its cluster ((0, 0, 0) without clusters). %cluster_ctaid is computed
  // from %ctaid (divisions), so the request loop reads its copy in shared memory instead (kept_local_index).
  __device__ uint3 local_index() const {
#if CUADV_ARCH >= 900
    if (clustered()) {
      const dim3 local = cg::this_cluster().block_index();
      return make_uint3(local.x, local.y, local.z);
    }
#endif
    return make_uint3(0, 0, 0);
  }
  // The request loop: local_index() as begin() left it in shared memory, read where used (a volatile
  // read, which the compiler does not hoist out of the tile loop into registers).
  __device__ uint3 kept_local_index() const {
    if (!clustered()) return make_uint3(0, 0, 0);
    const detail::Slots& sl = detail::slots();
    return make_uint3(detail::kept(sl.local.x), detail::kept(sl.local.y), detail::kept(sl.local.z));
  }

  // AtomicCounter: units 0 .. grid-1 are the blocks' (clusters') first; the k-th claim of the launch
  // (counter value k) is unit grid + k. The claim is a relaxed atomicAdd: only uniqueness matters, its
  // single modification order gives it; nothing else is ordered by it.
  template <class Body>
  __device__ void counter_loop(Body& body) {
    const unsigned long long grid = grid_clusters();
    const bool submits = submitter();
    const uint3 local = local_index();
    unsigned long long* slot = detail::next_unit_slots();
#if CUADV_ARCH >= 900
    if (clustered()) cg::this_cluster().sync();  // every block of the cluster runs before the first remote write
#endif
    for (unsigned round = 0;; ++round) {
      unsigned long long next = 0;
      if (submits) next = atomicAdd(&s_.state->word, 1ull) + grid;  // in flight while the body runs
      run_tile(body, tile_);
      if (submits) publish_unit(&slot[round & 1], next);
      sync_unit();  // the published unit is visible to every thread of the unit (cluster)
      const unsigned long long unit = slot[round & 1];
      if (!is_unit(unit)) return;  // every block of the cluster leaves after the same barrier: no remote write after
      tile_ = tile_of_unit(unit_for(unit), local);
    }
  }

  // AtomicCounter: the next unit into this block's slot, and with clusters into every block's.
  __device__ void publish_unit(unsigned long long* slot, unsigned long long unit) const {
#if CUADV_ARCH >= 900
    if (clustered()) {
      const unsigned addr = ptx::smem_addr(slot);
      for (unsigned r = 0; r < cluster_size(); ++r) ptx::st_shared_cluster_u64(ptx::mapa_shared_cluster(addr, r), unit);
      return;
    }
#endif
    *slot = unit;
  }

  __device__ Tile make_tile(unsigned x, unsigned y, unsigned z) const {
    return Tile{x, y, z, x + static_cast<unsigned long long>(s_.tiles[0]) * (y + static_cast<unsigned long long>(s_.tiles[1]) * z)};
  }

  // First block (cluster-local index 0) of a unit of work, as the hardware's get_first_ctaid.
  __device__ uint3 first_ctaid_of_unit(unsigned long long u) const {
    if (one_dimensional())  // u < 2^31, no division
      return make_uint3(static_cast<unsigned>(u) * s_.cluster[0], 0, 0);
    const unsigned dx = units_dim(0), dy = units_dim(1);
    if (tile_count() < static_cast<unsigned long long>(cluster_size()) << 32) {  // every index and plane size fits 32 bits
      const unsigned v = static_cast<unsigned>(u), per_plane = dx * dy;
      return make_uint3((v % dx) * s_.cluster[0], ((v / dx) % dy) * s_.cluster[1], (v / per_plane) * s_.cluster[2]);
    }
    const uint3 c = detail::wide_unit_index(u, dx, dy);
    return make_uint3(c.x * s_.cluster[0], c.y * s_.cluster[1], c.z * s_.cluster[2]);
  }

  // The unit handed out i-th: order[i] when the schedule carries an order, else i.
  __device__ unsigned long long unit_for(unsigned long long i) const {
    return s_.order != nullptr ? s_.order[i] : i;
  }

  __device__ Tile tile_of_unit(unsigned long long u, uint3 local) const {
    const uint3 c = first_ctaid_of_unit(u);
    return make_tile(c.x + local.x, c.y + local.y, c.z + local.z);
  }

  // For grids launched over the tile grid (FixedWork, CLC): the block at `first` (cluster-local 0)
  // stands for the unit with its linear index, handed out through order like a ticket.
  __device__ Tile tile_of_ctaid(uint3 first, uint3 local) const {
    if (s_.order == nullptr) return make_tile(first.x + local.x, first.y + local.y, first.z + local.z);
    const unsigned long long i = first.x / s_.cluster[0] + static_cast<unsigned long long>(units_dim(0)) *
        (first.y / s_.cluster[1] + static_cast<unsigned long long>(units_dim(1)) * (first.z / s_.cluster[2]));
    return tile_of_unit(unit_for(i), local);
  }

  __device__ unsigned long long grid_clusters() const {
    return static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z / cluster_size();
  }

  __device__ unsigned long long cluster_index() const {
    const unsigned cx = blockIdx.x / s_.cluster[0], cy = blockIdx.y / s_.cluster[1], cz = blockIdx.z / s_.cluster[2];
    const unsigned gx = gridDim.x / s_.cluster[0], gy = gridDim.y / s_.cluster[1];
    return cx + static_cast<unsigned long long>(gx) * (cy + static_cast<unsigned long long>(gy) * cz);
  }

  __device__ void sync_unit() const {
#if CUADV_ARCH >= 900
    if (clustered()) {
      cg::this_cluster().sync();  // orders all blocks' previous reads of their result
      return;
    }
#endif
    __syncthreads();  // orders this block's previous reads of result
  }

  template <class Body>
  __device__ void run_tile(Body& body, const Tile& t) const {
    if constexpr (kRequestLoop) {  // the tile and its start wait in shared memory, not in registers across the body
      detail::Slots& sl = detail::slots();
      Tile timed = t;
      if (s_.trace != nullptr && leader()) timed.index = detail::stamp_trace(sl.trace, t.index);
      body(timed);
      if (s_.trace != nullptr && leader()) {
        const unsigned long long end = ptx::globaltimer_ns();
        s_.trace[detail::kept(sl.trace[0])] = TraceRecord{ptx::smid(), block_index(), detail::kept(sl.trace[1]), end};
      }
    } else {
      unsigned long long start = 0;
      if (s_.trace != nullptr && leader()) start = ptx::globaltimer_ns();
      body(t);
      if (s_.trace != nullptr && leader()) s_.trace[t.index] = TraceRecord{ptx::smid(), block_index(), start, ptx::globaltimer_ns()};
    }
  }

  __device__ static unsigned block_index() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }

  // One request per round, submitted by one thread of the block (or of the cluster); each
  // block's thread 0 arrives on its own barrier expecting the 16 response bytes.
  // Steal: returns the raw ticket (or kRefused), whose value is first used after the body; `ran` units
  // run by this block so far (the current one included) decide whether the slice may end.
  __device__ unsigned long long request(unsigned int ran) {
    detail::Slots& sl = detail::slots();
    const bool submits = submitter();
    unsigned long long claim = kRefused;
    if (submits) {
      if constexpr (kCancel) {
        // Acquire write access to `result` for the async proxy, after the generic reads of the last round.
        ptx::fence_proxy_async_generic_acquire_cluster();
#if CUADV_ARCH >= 1000
        // try_cancel is a uniform instruction: invoke_one lets the compiler drop the peeling loop.
        if (clustered()) {
          cg::invoke_one(cg::coalesced_threads(), [&] { ptx::clusterlaunchcontrol_try_cancel_multicast(&sl.result, &sl.bar); });
        } else {
          cg::invoke_one(cg::coalesced_threads(), [&] { ptx::clusterlaunchcontrol_try_cancel(&sl.result, &sl.bar); });
        }
#endif
      } else {
        // Software stand-in for try_cancel: a ticket, or a refusal once the time slice is spent.
        const unsigned long long slice = detail::kept(sl.slice_ns);
        const bool expired = slice != 0 && ran >= s_.min_units && ptx::globaltimer_ns() - detail::kept(sl.start_ns) >= slice;
        // The ticket stays in flight across the body, its registers first read after it. elect.sync (invoke_one):
        // ptxas sees one lane take it, so it does not combine the warp's atomics into one (a vote, the atomic,
        // then a shuffle of its result, which waited for the ticket before the body).
        if (!expired) cg::invoke_one(cg::coalesced_threads(), [&] { claim = ptx::atom_add_relaxed_gpu_global(&s_.state->word, 1); });
      }
    }
    // Steal: the submitter arrives on its own block's barrier only after writing the response
    // (complete_software_request, clusters), so its arrival orders that write for the waiting threads;
    // a block without a cluster never uses the barrier (for_each hands the response over).
    if (leader() && !(kSteal && submits)) arrive_expect_response();
    return claim;
  }

  __device__ void arrive_expect_response() const {
    detail::Slots& sl = detail::slots();
    if (clustered()) ptx::mbarrier_arrive_expect_tx_relaxed<true>(&sl.bar, sizeof(uint4));
    else ptx::mbarrier_arrive_expect_tx_relaxed<false>(&sl.bar, sizeof(uint4));
  }

  __device__ cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> state_word() const {
    return cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(s_.state->word);
  }

  // A response from the state word before a claim: x = 1 if a unit was taken, y, z, w = its first
  // ctaid (what the hardware's get_first_ctaid returns).
  __device__ uint4 response_for(unsigned long long claim) const {
    if (claim == kRefused) return make_uint4(0, 0, 0, 0);
    const unsigned long long ticket = claim & 0xffffffffull;
    if (!is_unit(ticket)) return make_uint4(0, 0, 0, 0);
    const uint3 c = first_ctaid_of_unit(unit_for(ticket));
    return make_uint4(1, c.x, c.y, c.z);
  }

  // A block's first claim. A block launched after the work is gone sees it with one load and
  // leaves without a read-modify-write. Phased: the claim that takes ticket 0 (the launch's first)
  // zeroes the word of the pair's other state for the next launch on this stream, a relaxed store
  // that the kernel boundary orders before that launch's claims.
  __device__ uint4 first_claim() const {
    if (!is_unit(state_word().load(cuda::memory_order_relaxed) & 0xffffffffull)) return make_uint4(0, 0, 0, 0);
    const unsigned long long claim = state_word().fetch_add(1, cuda::memory_order_relaxed);
    if (!counted() && claim == 0) {
      StealState* other = s_.state + ((s_.flags & kPhase1) ? -1 : 1);
      cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(other->word).store(0, cuda::memory_order_relaxed);
    }
    return response_for(claim);
  }

  __device__ bool counted() const { return (s_.flags & kCountExits) != 0; }

  // The block leaves after running `done` units: its slice spent, or the work gone. The first sampled
  // block of the launch to leave writes what its slice held (or would have, at its pace) to the
  // (host-mapped) report word. Blocks whose slices end mostly do so while the whole grid competes,
  // before the work runs out, so where slices end one of them usually reports; where none does (slices
  // longer than the launch, as a long prologue stretches them), the first block to find the work gone
  // reports, so launches enqueued after this one ends need not be the full tile grid again.
  // After the loop, so it adds no registers across the body, but it changed ptxas's code of some loops
  // (docs/work_stealing.md); 32-bit arithmetic (slices past 4.29 s saturate; within per_unit of 2^32 ns the
  // rounding up wraps and reports fit = 1: slow next launches, never a wrong result).
  __device__ void report_slice(unsigned int done) const {
    if (!submitter() || s_.report == nullptr || blockIdx.x % kReportEvery != 0) return;
    const unsigned long long launch = ptx::grid_id() + 1;  // never 0, the state's initial value
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> reported(s_.state->reported);
    if (reported.exchange(launch, cuda::memory_order_relaxed) == launch) return;  // this launch has reported
    detail::Slots& sl = detail::slots();
    const unsigned long long elapsed = ptx::globaltimer_ns() - detail::kept(sl.start_ns), slice = detail::kept(sl.slice_ns);
    const unsigned per_unit = max(static_cast<unsigned>(min(elapsed, 0xffffffffull)) / done, 1u);
    // Rounded up: without min_units a block refuses only once the slice is spent, so it runs this many anyway.
    const unsigned fit = max((static_cast<unsigned>(min(slice, 0xffffffffull)) + per_unit - 1) / per_unit, 1u);
    const unsigned long long word = static_cast<unsigned long long>(fit) << 32 | per_unit;
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(*s_.report).store(word, cuda::memory_order_relaxed);
  }

  // Counted reset: the last unit of the grid to exit sets the word back to zero.
  __device__ void exit_protocol() const {
    if (!counted() || !submitter()) return;
    // Relaxed is enough: claims and exits update one word, so the exit that brings the count to
    // the number of units comes after every other unit's last update in its modification order.
    const unsigned long long before = state_word().fetch_add(kExited, cuda::memory_order_relaxed);
    if ((before >> 32) == grid_clusters() - 1) state_word().store(0, cuda::memory_order_relaxed);
  }

  // The first response, written into every block of the unit (made visible by the sync after it).
  __device__ void publish(uint4 response) const {
    detail::Slots& sl = detail::slots();
    if (clustered()) {
      const unsigned result_addr = ptx::smem_addr(&sl.result);
      for (unsigned r = 0; r < cluster_size(); ++r) ptx::st_shared_cluster_v4(ptx::mapa_shared_cluster(result_addr, r), response);
    } else {
      sl.result = response;
    }
  }

  // The second half of the software request of a cluster, after the body (so the ticket's latency was
  // hidden behind it): write the response into every block of the cluster, complete 16 transaction bytes
  // on each barrier, as the async proxy does for try_cancel. (A single block hands it over in for_each.)
  __device__ void complete_software_request(unsigned long long claim) const {
    if (!submitter()) return;
    const uint4 response = response_for(claim);
    detail::Slots& sl = detail::slots();
    const unsigned result_addr = ptx::smem_addr(&sl.result), bar_addr = ptx::smem_addr(&sl.bar);
    for (unsigned r = 0; r < cluster_size(); ++r)
      ptx::st_shared_cluster_v4(ptx::mapa_shared_cluster(result_addr, r), response);
    ptx::fence_acq_rel_cluster();  // the response stores above happen before the completions below
    for (unsigned r = 0; r < cluster_size(); ++r)
      ptx::mbarrier_complete_tx_cluster(ptx::mapa_shared_cluster(bar_addr, r), sizeof(uint4));
    arrive_expect_response();  // the arrival that completes this block's phase, after the response
  }

  // Wait for the phase of the response barrier with this parity, decode the response. False on a
  // failed response (never decoded further).
  __device__ bool wait_and_decode(unsigned parity) {
    detail::Slots& sl = detail::slots();
    if (clustered()) { while (!ptx::mbarrier_try_wait_parity_acquire<true>(&sl.bar, parity)) {} }
    else { while (!ptx::mbarrier_try_wait_parity_acquire<false>(&sl.bar, parity)) {} }
    const uint4 response = sl.result;
    if constexpr (kCancel) {
#if CUADV_ARCH >= 1000
      if (!ptx::clusterlaunchcontrol_query_cancel_is_canceled(response)) return false;
      // The cancelled block's index is the ticket: map it through order.
      tile_ = tile_of_ctaid(ptx::clusterlaunchcontrol_query_cancel_get_first_ctaid(response), kept_local_index());
      // Release read access to `result` to the async proxy: our reads above come before its next write.
      ptx::fence_proxy_async_generic_release_cluster();
#endif
    } else {
      // Steal's response is a generic store, ordered by the sync at the top of the loop.
      if (response.x == 0) return false;
      const uint3 local = kept_local_index();
      tile_ = make_tile(response.y + local.x, response.z + local.y, response.w + local.z);  // already mapped
    }
    return true;
  }

  const Schedule s_;  // by value: members stay in the constant bank of the kernel parameter
  const bool leader_;  // thread 0 of the block
  unsigned long long unit_ = 0;  // FixedBlocks, AtomicCounter: this block's first unit
  Tile tile_{};
};

}  // namespace cuadv::ws
