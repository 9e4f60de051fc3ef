// sm_holder.cu - another kernel holding K whole SMs while a tile kernel runs (the scheduling lab's shared GPU,
// as a communication kernel takes part of the GPU). Lab-private; needs sm_70 (system-scope atomics).
//
//   sm_holder  K blocks, each launched with the most dynamic shared memory a block may have, so that with
//              the 1 KB the GPU reserves per block no other block (of any kernel) fits on its SM. Each
//              block records its %smid, counts itself resident, and the block that makes the count K tells
//              the host through host-mapped memory. Then it waits for `release` (set by a stream write
//              after the tile kernel), or leaves after `timeout_ns` whatever happens, so nothing can hang.
#include <cuda/atomic>

#include "cuadv/timer.cuh"

struct HolderParams {
  unsigned int* resident;         // blocks running (device memory, zeroed before the launch)
  unsigned int* smids;            // per block: the SM it holds
  unsigned int* release;          // nonzero: leave (zeroed before the launch, set after the tile kernel)
  unsigned long long* all_in;     // host-mapped: set to `generation` once all K blocks run
  unsigned long long generation;  // this launch's value for all_in (the host waits for it)
  unsigned long long timeout_ns;  // leave after this long in any case
  unsigned int* timed_out;        // blocks that left by the timeout, not the release
};
static_assert(sizeof(HolderParams) == 56, "HolderParams is mirrored in cuadv/labs/scheduling_shared.py");

extern "C" __global__ void sm_holder(const __grid_constant__ HolderParams p) {
  extern __shared__ unsigned char held[];  // the SM's shared memory: held, never touched
  if (threadIdx.x != 0) return;  // one thread keeps the block, and with it the SM, alive
  p.smids[blockIdx.x] = cuadv::ptx::smid();
  cuda::atomic_ref<unsigned int, cuda::thread_scope_device> resident(*p.resident);
  // Relaxed: the count only has to reach K; the host learns of it through the store below, nothing else.
  if (resident.fetch_add(1u, cuda::memory_order_relaxed) == gridDim.x - 1) {
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(*p.all_in).store(p.generation,
                                                                                      cuda::memory_order_relaxed);
  }
  cuda::atomic_ref<unsigned int, cuda::thread_scope_system> release(*p.release);  // written by a stream write
  const unsigned long long t0 = cuadv::timer::now_ns();
  while (release.load(cuda::memory_order_relaxed) == 0) {
    if (cuadv::timer::now_ns() - t0 >= p.timeout_ns) {
      atomicAdd(p.timed_out, 1u);
      return;
    }
    __nanosleep(500);
  }
}
