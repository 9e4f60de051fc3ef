// cuadv/pdl.cuh - programmatic dependent launch (PDL) from device code, sm_90 and newer.
//
// A kernel launched with the programmatic-stream-serialization attribute (cuadv LaunchConfig(pdl=True))
// may start before the previous kernel in its stream has finished:
//
//   previous kernel:  [setup][produce ...................][tail]
//                              | launch_dependents()
//   this kernel:               [independent setup][wait()][consume]
//
// Contract:
//   - launch_dependents() only lets the next grid be *scheduled*; it publishes no memory.
//   - wait() returns when every prerequisite grid has completed and its memory operations are
//     visible. Nothing the previous kernel writes may be read before wait() - not even data
//     written before its launch_dependents() (that is the race pdl lab shows).
//   - Without the launch attribute both calls are no-ops, so one kernel serves both modes.
//
// Where the two calls go in a kernel of a chain (cuadv.pdl.launch_chain / prepare_chain set the
// attribute on every link after the first; docs/pdl.md has the measured table):
//
//   independent setup -> wait() -> launch_dependents() -> the work that reads the previous output
//
//   - launch_dependents() right after wait(): the next kernel is scheduled while this one works, and
//     never more than one kernel ahead. Fastest without setup on the H200 (stream and graph).
//   - launch_dependents() before the setup: every later kernel may be scheduled as far as blocks fit.
//     Hides the most setup (3.27 us saved per boundary with 3 us of setup, graph), slower without.
//   - Never called: the implicit trigger when each block exits (the least overlap).
//   - The dependent grid's blocks need room beside the running grid's: a grid that fills every SM
//     leaves PDL nothing to overlap.
#pragma once

#include "cuadv/ptx.cuh"
#include "cuadv/timer.cuh"

namespace cuadv::pdl {

// griddepcontrol.launch_dependents;  (sm_90)
// The dependent grid may launch once every block of this grid has executed this or exited.
template <int D = 0>
static inline __device__ void launch_dependents() {
  static_assert(ptx::arch_at_least<D>(90), "griddepcontrol.launch_dependents (PDL) needs sm_90");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// griddepcontrol.wait;  (sm_90)
// Orders everything after it behind the completion (and memory flush) of the prerequisite grids.
template <int D = 0>
static inline __device__ void wait() {
  static_assert(ptx::arch_at_least<D>(90), "griddepcontrol.wait (PDL) needs sm_90");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Spin for `ns` nanoseconds of %globaltimer (stands for work of a known duration): cuadv/timer.cuh's.
using cuadv::timer::spin_ns;

}  // namespace cuadv::pdl
