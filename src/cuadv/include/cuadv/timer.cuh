// cuadv/timer.cuh: the one clock cuadv's device code reads, %globaltimer.
//
// %globaltimer counts nanoseconds on the same clock on every SM (it advances in steps of about a
// microsecond on current GPUs), so stamps from different blocks and kernels can be compared and a
// spin of N ns lasts N ns whatever the SM clock. clock64() counts one SM's cycles and is neither.
// Reading it orders nothing: a stamp is not a fence.
#pragma once

#include "cuadv/ptx.cuh"

namespace cuadv {
namespace timer {

// Nanoseconds of %globaltimer.  (sm_50)
static inline __device__ unsigned long long now_ns() { return ptx::globaltimer_ns(); }

// Spin for `ns` nanoseconds (work of a known duration in benchmarks and tests); 0 reads no clock.
static inline __device__ void spin_ns(unsigned long long ns) {
  if (ns == 0) return;
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < ns) {
  }
}

}  // namespace timer
}  // namespace cuadv
