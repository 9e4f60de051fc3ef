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
//                         this launch's counter, written into the same 16-byte result and completed
//                         on the same mbarrier transaction; once the block's time slice is spent
//                         (quantum_ns, stretched to prologue_factor x its own prologue time so the
//                         prologue costs at most 1/(factor+1) of the block's life, and never before
//                         the block ran min_units tiles) the request fails on purpose, so the block
//                         exits and gives its SM back, and (Schedule::report) may report what its
//                         slice held, from which the host sizes the next launch's min_units.
//   Auto                  ClusterLaunchControl where the target has it, else Steal.
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

// The ticket counter of a Steal kernel: one 64-bit word, the low half the next ticket (a unit
// index). Every update is a relaxed read-modify-write of this one location, whose single
// modification order makes tickets unique; no fence is paid per tile. The word resets itself, so
// back-to-back launches and graph replays on one stream need no host memset, in one of two ways:
//   tagged (stream launches): the high half is the launch's tag, the low 32 bits of %gridid. A
//     launch's first claim that finds another tag restarts the count under its own, so nothing
//     is counted at exit and a block launched after the work is gone leaves after one load.
//   counted (kCountExits; launches captured in a graph, whose replays share one %gridid): the high
//     half counts the units that exited, and the last one sets the word back to zero.
// Zero is a valid start for both. Two launches that may overlap need two StealStates.
struct StealState {
  unsigned long long word;  // (launch tag or exited units) << 32 | next ticket
  unsigned long long reported;  // %gridid + 1 of the last launch that wrote its slice report
};
constexpr unsigned long long kExited = 1ull << 32;
constexpr unsigned int kCountExits = 1;  // Schedule::flags: the counted reset
constexpr unsigned long long kRefused = ~0ull;  // a software request refused because the time slice is spent

// One record per tile when tracing, written by the block's thread 0.
struct TraceRecord {
  unsigned int smid;            // SM that ran the tile
  unsigned int block;           // linear index of the block that ran it
  unsigned long long start_ns;  // %globaltimer before the body
  unsigned long long end_ns;    // %globaltimer after thread 0 finished the body
};
static_assert(sizeof(TraceRecord) == 24, "TraceRecord layout is mirrored in cuadv/work_stealing.py");

// The scheduler's kernel parameter; pass it `const __grid_constant__`.
struct Schedule {
  unsigned int tiles[3];          // tile grid; each dimension a multiple of cluster[]
  unsigned int cluster[3];        // cluster shape (1, 1, 1 without clusters)
  unsigned long long quantum_ns;  // Steal: stop taking tiles after this long (0: never) ...
  unsigned int prologue_factor;   // ... or after this many times the block's own prologue, if later (0: off)
  unsigned int flags;             // Steal: kCountExits for launches captured in a graph
  StealState* state;              // Steal: this launch's counters; AtomicCounter: state->word is its counter,
                                  // which must be zero at launch (a memset before every launch)
  TraceRecord* trace;             // one record per tile, or nullptr
  const unsigned int* order;      // the i-th unit handed out is order[i] (a permutation), or nullptr: i
  unsigned int min_units;         // Steal: the slice never ends before the block ran this many units (0 or 1: off)
  unsigned int reserved;
  unsigned long long* report;     // Steal: what a spent slice held (SliceReport), for sizing the next launch; or nullptr
};
static_assert(sizeof(Schedule) == 80, "Schedule layout is mirrored in cuadv/work_stealing.py");

// What the first block of a launch whose slice was spent saw, packed in one word so the host reads it whole:
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
#if CUADV_ARCH >= 1000
using Auto = ClusterLaunchControl;
#else
using Auto = Steal;
#endif

namespace detail {
// Shared memory of the request protocol. Same offset in every block of a kernel, which the
// multicast response (hardware or software) relies on.
struct alignas(16) Slots {
  uint4 result;             // the response to the current request
  unsigned long long bar;   // its phase completes when `result` has arrived
  // State one thread keeps from before the tile body to after it, here rather than in registers: a
  // register is allocated in every thread and would stay taken across the body (see kept()).
  unsigned long long trace_start;  // tracing: %globaltimer before the body (the leader's)
  unsigned long long trace_index;  // tracing: the tile being timed
  unsigned long long start_ns;     // Steal: when the block began; its time slice counts from here
  unsigned long long slice_ns;     // Steal: the block's time slice (0: none)
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
// A volatile view of a slot: the compiler may not keep its value in a register across the body in
// place of reading it again (which it could, the body's stores going to other memory).
template <class T>
static inline __device__ volatile T& kept(T& slot) {
  return const_cast<volatile T&>(slot);
}
static inline __device__ unsigned int thread_rank() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
}  // namespace detail

template <class Policy>
class Scheduler {
  static constexpr bool kCancel = cuda::std::is_same_v<Policy, ClusterLaunchControl>;
  static constexpr bool kSteal = cuda::std::is_same_v<Policy, Steal>;
  static constexpr bool kCounter = cuda::std::is_same_v<Policy, AtomicCounter>;
  static constexpr bool kStrided = kCounter || cuda::std::is_same_v<Policy, FixedBlocks>;  // first unit: own index
  static constexpr bool kRequestLoop = kCancel || kSteal;
  static_assert(!kCancel || CUADV_ARCH >= 1000,
                "ClusterLaunchControl needs sm_100 or newer; use cuadv::ws::Steal (or Auto) below it");

 public:
  __device__ explicit Scheduler(const Schedule& s) : s_(s) {
    for (int d = 0; d < 3; ++d) units_dim_[d] = s.tiles[d] / s.cluster[d];
    units_ = static_cast<unsigned long long>(units_dim_[0]) * units_dim_[1] * units_dim_[2];
    cluster_size_ = s.cluster[0] * s.cluster[1] * s.cluster[2];
    clustered_ = cluster_size_ > 1;
    local_ = make_uint3(0, 0, 0);
#if CUADV_ARCH >= 900
    if (clustered_) {
      const dim3 local = cg::this_cluster().block_index();
      local_ = make_uint3(local.x, local.y, local.z);
      cluster_rank_ = cg::this_cluster().block_rank();
    }
#endif
    leader_ = detail::thread_rank() == 0;
  }

  // Finds this block's first tile. False: nothing left for it; return from the kernel at once
  // (before the prologue), as a block whose launch was cancelled would never have run.
  __device__ bool begin() {
    if constexpr (kStrided) {
      unit_ = cluster_index();
      if (unit_ >= units_) return false;
      tile_ = tile_of_unit(unit_for(unit_));
      return true;
    } else {
      tile_ = tile_of_ctaid(make_uint3(blockIdx.x - local_.x, blockIdx.y - local_.y, blockIdx.z - local_.z));
      if constexpr (kRequestLoop) {
        if (leader_) {
          detail::Slots& sl = detail::slots();
          ptx::mbarrier_init(&sl.bar, 1);
          if (clustered_) ptx::fence_mbarrier_init_release_cluster();  // init visible to the cluster's remote completions
        }
      }
      if constexpr (kSteal) {
        // The first claim has no tile to overlap with, so it is a plain hand-off through shared
        // memory. It is never refused by the quantum, nor are the next min_units - 1: every block
        // takes min_units tickets unless the work is gone, and the grid has at least units / min_units
        // blocks, which is what makes tickets 0 .. units-1 all taken.
        detail::Slots& sl = detail::slots();
        if (leader_ && cluster_rank_ == 0) detail::kept(sl.start_ns) = ptx::globaltimer_ns();  // the slice counts from here
        if (clustered_) cg::this_cluster().sync();  // every block of the cluster runs before remote writes
        if (leader_ && cluster_rank_ == 0) publish(first_claim());
        sync_unit();  // the response (and the barrier init) is visible to every thread of the unit
        const uint4 first = sl.result;
        if (first.x == 0) {
          exit_protocol();
          return false;
        }
        tile_ = make_tile(first.y + local_.x, first.z + local_.y, first.w + local_.z);
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
      const unsigned long long stride = grid_clusters();
      for (unsigned long long i = unit_; i < units_; i += stride) run_tile(body, tile_of_unit(unit_for(i)));
    } else if constexpr (kCounter) {
      counter_loop(body);
    } else {
      if constexpr (kSteal) {
        if (leader_ && cluster_rank_ == 0) {  // only the submitter reads the slice
          detail::Slots& sl = detail::slots();
          const unsigned long long prologue = ptx::globaltimer_ns() - detail::kept(sl.start_ns);
          unsigned long long slice = s_.quantum_ns;
          if (slice != 0 && s_.prologue_factor != 0 && prologue * s_.prologue_factor > slice) slice = prologue * s_.prologue_factor;
          detail::kept(sl.slice_ns) = slice;
        }
      }
      unsigned int ran = 1;  // units this block will have run after this round's tile
      unsigned long long claim = 0;
      for (;; ++ran) {
        // Every thread has read the previous response before it is overwritten; on the first
        // pass also: the barrier init is visible and (clusters) every block of the cluster runs.
        sync_unit();
        claim = request(ran);  // in flight while the body runs
        run_tile(body, tile_);
        if constexpr (kSteal) complete_software_request(claim);
        if (!wait_and_decode()) break;  // a failed response: no further request, no decoding
      }
      if constexpr (kSteal) {
        if (claim == kRefused) report_slice(ran);  // only the submitter's request is ever refused
        exit_protocol();
      }
    }
  }

  __device__ const Tile& tile() const { return tile_; }

 private:
  // AtomicCounter: units 0 .. grid-1 are the blocks' (clusters') first; the k-th claim of the launch
  // (counter value k) is unit grid + k. The claim is a relaxed atomicAdd: only uniqueness matters, its
  // single modification order gives it; nothing else is ordered by it.
  template <class Body>
  __device__ void counter_loop(Body& body) {
    const unsigned long long grid = grid_clusters();
    const bool submitter = leader_ && cluster_rank_ == 0;
    unsigned long long* slot = detail::next_unit_slots();
#if CUADV_ARCH >= 900
    if (clustered_) cg::this_cluster().sync();  // every block of the cluster runs before the first remote write
#endif
    for (unsigned round = 0;; ++round) {
      unsigned long long next = 0;
      if (submitter) next = atomicAdd(&s_.state->word, 1ull) + grid;  // in flight while the body runs
      run_tile(body, tile_);
      if (submitter) publish_unit(&slot[round & 1], next);
      sync_unit();  // the published unit is visible to every thread of the unit (cluster)
      const unsigned long long unit = slot[round & 1];
      if (unit >= units_) return;  // every block of the cluster leaves after the same barrier: no remote write after
      tile_ = tile_of_unit(unit_for(unit));
    }
  }

  // AtomicCounter: the next unit into this block's slot, and with clusters into every block's.
  __device__ void publish_unit(unsigned long long* slot, unsigned long long unit) const {
#if CUADV_ARCH >= 900
    if (clustered_) {
      const unsigned addr = ptx::smem_addr(slot);
      for (unsigned r = 0; r < cluster_size_; ++r) ptx::st_shared_cluster_u64(ptx::mapa_shared_cluster(addr, r), unit);
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
    if (units_dim_[1] == 1 && units_dim_[2] == 1)  // 1-D: u < 2^31, no division
      return make_uint3(static_cast<unsigned>(u) * s_.cluster[0], 0, 0);
    if (units_ <= 0xffffffffull) {  // every index and plane size fits 32 bits: far cheaper division
      const unsigned v = static_cast<unsigned>(u), per_plane = units_dim_[0] * units_dim_[1];
      return make_uint3((v % units_dim_[0]) * s_.cluster[0], ((v / units_dim_[0]) % units_dim_[1]) * s_.cluster[1],
                        (v / per_plane) * s_.cluster[2]);
    }
    const unsigned ux = static_cast<unsigned>(u % units_dim_[0]);
    const unsigned uy = static_cast<unsigned>((u / units_dim_[0]) % units_dim_[1]);
    const unsigned uz = static_cast<unsigned>(u / (static_cast<unsigned long long>(units_dim_[0]) * units_dim_[1]));
    return make_uint3(ux * s_.cluster[0], uy * s_.cluster[1], uz * s_.cluster[2]);
  }

  // The unit handed out i-th: order[i] when the schedule carries an order, else i.
  __device__ unsigned long long unit_for(unsigned long long i) const {
    return s_.order != nullptr ? s_.order[i] : i;
  }

  __device__ Tile tile_of_unit(unsigned long long u) const {
    const uint3 c = first_ctaid_of_unit(u);
    return make_tile(c.x + local_.x, c.y + local_.y, c.z + local_.z);
  }

  // For grids launched over the tile grid (FixedWork, CLC): the block at `first` (cluster-local 0)
  // stands for the unit with its linear index, handed out through order like a ticket.
  __device__ Tile tile_of_ctaid(uint3 first) const {
    if (s_.order == nullptr) return make_tile(first.x + local_.x, first.y + local_.y, first.z + local_.z);
    const unsigned long long i = first.x / s_.cluster[0] + static_cast<unsigned long long>(units_dim_[0]) *
        (first.y / s_.cluster[1] + static_cast<unsigned long long>(units_dim_[1]) * (first.z / s_.cluster[2]));
    return tile_of_unit(unit_for(i));
  }

  __device__ unsigned long long grid_clusters() const {
    return static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z / cluster_size_;
  }

  __device__ unsigned long long cluster_index() const {
    const unsigned cx = blockIdx.x / s_.cluster[0], cy = blockIdx.y / s_.cluster[1], cz = blockIdx.z / s_.cluster[2];
    const unsigned gx = gridDim.x / s_.cluster[0], gy = gridDim.y / s_.cluster[1];
    return cx + static_cast<unsigned long long>(gx) * (cy + static_cast<unsigned long long>(gy) * cz);
  }

  __device__ void sync_unit() const {
#if CUADV_ARCH >= 900
    if (clustered_) {
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
      if (s_.trace != nullptr && leader_) {
        detail::kept(sl.trace_index) = t.index;
        detail::kept(sl.trace_start) = ptx::globaltimer_ns();
      }
      body(t);
      if (s_.trace != nullptr && leader_) {
        const unsigned long long end = ptx::globaltimer_ns();
        s_.trace[detail::kept(sl.trace_index)] = TraceRecord{ptx::smid(), block_index(), detail::kept(sl.trace_start), end};
      }
    } else {
      unsigned long long start = 0;
      if (s_.trace != nullptr && leader_) start = ptx::globaltimer_ns();
      body(t);
      if (s_.trace != nullptr && leader_) s_.trace[t.index] = TraceRecord{ptx::smid(), block_index(), start, ptx::globaltimer_ns()};
    }
  }

  __device__ static unsigned block_index() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }

  // One request per round, submitted by one thread of the block (or of the cluster); each
  // block's thread 0 arrives on its own barrier expecting the 16 response bytes.
  // Steal: returns the raw ticket (or kRefused), whose value is first used after the body; `ran` units
  // run by this block so far (the current one included) decide whether the slice may end.
  __device__ unsigned long long request(unsigned int ran) {
    detail::Slots& sl = detail::slots();
    const bool submitter = leader_ && cluster_rank_ == 0;
    unsigned long long claim = kRefused;
    if (submitter) {
      if constexpr (kCancel) {
        // Acquire write access to `result` for the async proxy, after the generic reads of the last round.
        ptx::fence_proxy_async_generic_acquire_cluster();
#if CUADV_ARCH >= 1000
        // try_cancel is a uniform instruction: invoke_one lets the compiler drop the peeling loop.
        if (clustered_) {
          cg::invoke_one(cg::coalesced_threads(), [&] { ptx::clusterlaunchcontrol_try_cancel_multicast(&sl.result, &sl.bar); });
        } else {
          cg::invoke_one(cg::coalesced_threads(), [&] { ptx::clusterlaunchcontrol_try_cancel(&sl.result, &sl.bar); });
        }
#endif
      } else {
        // Software stand-in for try_cancel: a ticket, or a refusal once the time slice is spent.
        const unsigned long long slice = detail::kept(sl.slice_ns);
        const bool expired = slice != 0 && ran >= s_.min_units && ptx::globaltimer_ns() - detail::kept(sl.start_ns) >= slice;
        if (!expired) claim = state_word().fetch_add(1, cuda::memory_order_relaxed);
      }
    }
    // Steal: the submitter arrives on its own block's barrier only after writing the response
    // (complete_software_request), so its arrival orders that write for the waiting threads.
    if (leader_ && !(kSteal && submitter)) arrive_expect_response();
    return claim;
  }

  __device__ void arrive_expect_response() const {
    detail::Slots& sl = detail::slots();
    if (clustered_) ptx::mbarrier_arrive_expect_tx_relaxed<true>(&sl.bar, sizeof(uint4));
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
    if (ticket >= units_) return make_uint4(0, 0, 0, 0);
    const uint3 c = first_ctaid_of_unit(unit_for(ticket));
    return make_uint4(1, c.x, c.y, c.z);
  }

  // A block's first claim. A block launched after the work is gone sees it with one load and
  // leaves without a read-modify-write. Tagged: the first block of a launch to see another
  // launch's tag starts this launch's count (taking ticket 0).
  __device__ uint4 first_claim() const {
    auto word = state_word();
    unsigned long long seen = word.load(cuda::memory_order_relaxed);
    if (!counted()) {
      const unsigned long long tag = (ptx::grid_id() & 0xffffffffull) << 32;
      while ((seen & ~0xffffffffull) != tag) {  // an earlier launch's count: restart it under this tag
        if (word.compare_exchange_weak(seen, tag | 1, cuda::memory_order_relaxed)) return response_for(tag);
      }
    }
    if ((seen & 0xffffffffull) >= units_) return make_uint4(0, 0, 0, 0);
    return response_for(word.fetch_add(1, cuda::memory_order_relaxed));
  }

  __device__ bool counted() const { return (s_.flags & kCountExits) != 0; }

  // The block gave its SM back after running `done` units. The first sampled block of the launch to
  // do so writes what its slice held to the (host-mapped) report word: it ran while the whole grid
  // competed, where later blocks may run in the lighter tail and look faster than the launch was.
  // After the loop, so it costs the loop no registers; 32-bit arithmetic (slices past 4.29 s saturate).
  __device__ void report_slice(unsigned int done) const {
    if (!(leader_ && cluster_rank_ == 0) || s_.report == nullptr || blockIdx.x % kReportEvery != 0) return;
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
    if (!counted() || !(leader_ && cluster_rank_ == 0)) return;
    // Relaxed is enough: claims and exits update one word, so the exit that brings the count to
    // the number of units comes after every other unit's last update in its modification order.
    const unsigned long long before = state_word().fetch_add(kExited, cuda::memory_order_relaxed);
    if ((before >> 32) == grid_clusters() - 1) state_word().store(0, cuda::memory_order_relaxed);
  }

  // The first response, written into every block of the unit (made visible by the sync after it).
  __device__ void publish(uint4 response) const {
    detail::Slots& sl = detail::slots();
    if (clustered_) {
      const unsigned result_addr = ptx::smem_addr(&sl.result);
      for (unsigned r = 0; r < cluster_size_; ++r) ptx::st_shared_cluster_v4(ptx::mapa_shared_cluster(result_addr, r), response);
    } else {
      sl.result = response;
    }
  }

  // The second half of the software request, after the body (so the ticket's latency was hidden
  // behind it): write the response into every block of the cluster, complete 16 transaction bytes
  // on each barrier, as the async proxy does for try_cancel.
  __device__ void complete_software_request(unsigned long long claim) const {
    if (!(leader_ && cluster_rank_ == 0)) return;
    const uint4 response = response_for(claim);
    detail::Slots& sl = detail::slots();
    if (clustered_) {
      const unsigned result_addr = ptx::smem_addr(&sl.result), bar_addr = ptx::smem_addr(&sl.bar);
      for (unsigned r = 0; r < cluster_size_; ++r) ptx::st_shared_cluster_v4(ptx::mapa_shared_cluster(result_addr, r), response);
      ptx::fence_acq_rel_cluster();  // the response stores above happen before the completions below
      for (unsigned r = 0; r < cluster_size_; ++r) ptx::mbarrier_complete_tx_cluster(ptx::mapa_shared_cluster(bar_addr, r), sizeof(uint4));
    } else {
      sl.result = response;
      // The response store happens before the completion below; only this block waits on it, so
      // a CTA-scope fence suffices (a cluster-scope one would wait for the body's global stores).
      ptx::fence_acq_rel_cta();
      ptx::mbarrier_complete_tx_cta(&sl.bar, sizeof(uint4));
    }
    arrive_expect_response();  // the arrival that completes this block's phase, after the response
  }

  // Wait for the response, decode it. False on a failed response (never decoded further).
  __device__ bool wait_and_decode() {
    detail::Slots& sl = detail::slots();
    if (clustered_) { while (!ptx::mbarrier_try_wait_parity_acquire<true>(&sl.bar, phase_)) {} }
    else { while (!ptx::mbarrier_try_wait_parity_acquire<false>(&sl.bar, phase_)) {} }
    phase_ ^= 1;
    const uint4 response = sl.result;
    uint3 first;
    if constexpr (kCancel) {
#if CUADV_ARCH >= 1000
      if (!ptx::clusterlaunchcontrol_query_cancel_is_canceled(response)) return false;
      first = ptx::clusterlaunchcontrol_query_cancel_get_first_ctaid(response);
      tile_ = tile_of_ctaid(first);  // the cancelled block's index is the ticket: map it through order
#endif
    } else {
      if (response.x == 0) return false;
      first = make_uint3(response.y, response.z, response.w);
      tile_ = make_tile(first.x + local_.x, first.y + local_.y, first.z + local_.z);  // already mapped
    }
    // Release read access to `result` to the async proxy: our reads above come before its next
    // write. Steal's response is a generic store, ordered by the sync at the top of the loop.
    if constexpr (kCancel) ptx::fence_proxy_async_generic_release_cluster();
    return true;
  }

  const Schedule s_;  // by value: members stay in the constant bank of the kernel parameter
  unsigned units_dim_[3];
  unsigned long long units_ = 0;
  unsigned long long unit_ = 0;
  unsigned cluster_size_ = 1;
  unsigned cluster_rank_ = 0;
  uint3 local_;
  bool clustered_ = false;
  bool leader_ = false;
  unsigned phase_ = 0;
  Tile tile_{};
};

}  // namespace cuadv::ws
