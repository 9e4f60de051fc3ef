// pdl.cu - programmatic dependent launch. Needs sm_90.
//
//   pdl_demo_producer / pdl_demo_consumer_{correct,misplaced}
//       A producer/consumer pair whose race is made deterministic: the producer triggers its
//       dependents first, then holds its writes back until every consumer block has reported that
//       it passed its pre-wait part (or a timeout expires). A consumer that reads before
//       griddepcontrol.wait therefore reads the poisoned buffer for certain whenever the two grids
//       overlapped; the correct consumer reads after the wait and is right in every case. Without
//       the PDL attribute the consumer cannot start early, the producer times out and `observed`
//       stays 0 (the flag protocol that proves no overlap).
//   pdl_chain_step
//       One link of a chain of small kernels: independent setup, wait, dst = src + 1, with the
//       trigger at block exit (implicit), before the setup, or right after the wait. The same kernel
//       runs with and without the PDL attribute, so the time difference of a chain is what PDL
//       saves per kernel boundary; optional stamps measure the boundary's gap.
//   pdl_spin
//       Holds a stream for a while, so a chain of launches can be queued before it starts.
#include <cuda/atomic>

#include "cuadv/pdl.cuh"

struct DemoParams {
  const int* in;                   // producer input
  int* mid;                        // producer output, consumer input (poisoned before every run)
  int* out;                        // consumer output
  unsigned int n;                  // elements
  unsigned int consumer_blocks;    // consumer blocks the producer waits for
  unsigned int* arrivals;          // consumer blocks past their pre-wait part
  unsigned int* observed;          // producer blocks that saw every consumer arrive before writing
  unsigned long long* times;       // [0] latest producer write (atomicMax), [1] earliest consumer start (atomicMin)
  unsigned long long timeout_ns;   // longest time a producer block waits for the arrivals
};

extern "C" __global__ void pdl_demo_producer(const __grid_constant__ DemoParams p) {
  cuadv::pdl::launch_dependents();  // trigger first: the consumer grid may be scheduled from now on
  if (threadIdx.x == 0) {
    cuda::atomic_ref<unsigned int, cuda::thread_scope_device> arrivals(*p.arrivals);
    const unsigned long long t0 = cuadv::ptx::globaltimer_ns();
    unsigned int seen = 0;
    // Acquire: pairs with each consumer block's release, so its pre-wait reads happen before our writes.
    while ((seen = arrivals.load(cuda::memory_order_acquire)) < p.consumer_blocks &&
           cuadv::ptx::globaltimer_ns() - t0 < p.timeout_ns) {
    }
    if (seen >= p.consumer_blocks) atomicAdd(p.observed, 1u);
  }
  __syncthreads();  // the block writes only after thread 0 has seen the arrivals (or timed out)
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += gridDim.x * blockDim.x) {
    p.mid[i] = 3 * p.in[i] + 1;
  }
  __syncthreads();  // every write of the block is issued before the timestamp
  if (threadIdx.x == 0) atomicMax(p.times, cuadv::ptx::globaltimer_ns());
}

// Thread 0 reports that this block has finished its pre-wait part.
static __device__ void arrive(const DemoParams& p) {
  __syncthreads();  // every thread of the block is past its pre-wait part (reads included)
  if (threadIdx.x == 0) {
    cuda::atomic_ref<unsigned int, cuda::thread_scope_device> arrivals(*p.arrivals);
    arrivals.fetch_add(1u, cuda::memory_order_release);  // releases the block's earlier reads
  }
}

static __device__ void stamp_start(const DemoParams& p) {
  if (threadIdx.x == 0) atomicMin(p.times + 1, cuadv::ptx::globaltimer_ns());
}

// WRONG on purpose: reads the producer's output before griddepcontrol.wait.
extern "C" __global__ void pdl_demo_consumer_misplaced(const __grid_constant__ DemoParams p) {
  stamp_start(p);
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int early = i < p.n ? p.mid[i] : 0;  // the race: nothing orders this read after the producer
  arrive(p);
  cuadv::pdl::wait();
  if (i < p.n) p.out[i] = 2 * early;
}

// Right: independent setup first, then the wait, then the dependent read.
extern "C" __global__ void pdl_demo_consumer_correct(const __grid_constant__ DemoParams p) {
  stamp_start(p);
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int scale = 2;  // independent setup: anything that needs no producer output
  arrive(p);
  cuadv::pdl::wait();  // the producer grid has completed and its writes are visible
  if (i < p.n) p.out[i] = scale * p.mid[i];
}

// Where a link calls launch_dependents (mirrored by Mode.trigger in labs/pdl.py).
enum ChainTrigger : int {
  kTriggerAtExit = 0,    // never called: the implicit trigger when each block exits
  kTriggerAtStart = 1,   // before the setup: the next link may be scheduled at once and, since every
                         // link triggers before its wait, every later one too, as far as blocks fit
  kTriggerAfterWait = 2  // after the wait: the next link is scheduled while this one works, and no
                         // link is scheduled before the link two places earlier has completed
};

// One link of a chain. stamps: null, or this link's pair of %globaltimer stamps, [0] the earliest
// block past its wait (atomicMin) and [1] the latest block done (atomicMax), from which the host
// reads the gap at each kernel boundary.
extern "C" __global__ void pdl_chain_step(const float* src, float* dst, unsigned int n, unsigned long long setup_ns,
                                          int trigger, unsigned long long* stamps) {
  if (trigger == kTriggerAtStart) cuadv::pdl::launch_dependents();  // the next link may be scheduled now
  cuadv::pdl::spin_ns(setup_ns);                                    // independent setup: needs nothing from src
  cuadv::pdl::wait();  // src (the previous link's dst) is complete and visible
  if (trigger == kTriggerAfterWait) cuadv::pdl::launch_dependents();  // the next link may be scheduled now
  if (stamps != nullptr && threadIdx.x == 0) atomicMin(&stamps[0], cuadv::ptx::globaltimer_ns());
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    dst[i] = src[i] + 1.0f;
  }
  if (stamps != nullptr) {
    __syncthreads();  // every thread of the block has issued its stores before the stamp
    if (threadIdx.x == 0) atomicMax(&stamps[1], cuadv::ptx::globaltimer_ns());
  }
}

extern "C" __global__ void pdl_spin(unsigned long long ns) {
  if (threadIdx.x == 0) cuadv::pdl::spin_ns(ns);
}
