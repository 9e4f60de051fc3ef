// domains.cu - memory synchronization domains. Needs sm_90 (the launch attribute).
//
// A fence waits for memory operations to become visible at its scope; on Hopper the hardware
// tracks outstanding writes per domain, so a fence in one domain need not wait for the write
// traffic of kernels in another. The experiment: a fence-heavy kernel runs while a write-heavy
// kernel streams writes in another stream, both in the default domain or the writer in the
// "remote" domain. The writer's destination is any device pointer (a peer GPU's memory for a
// multi-GPU variant); the fence kernel is unchanged.
//
//   dom_writer  streams uint4 writes over dst until `stop` is set or `timeout_ns` passes; counts
//               its running blocks in `active` so the fence kernel can see the overlap.
//   dom_fence   each thread writes its slot and fences, `iterations` times; per-block start/end
//               timestamps; the last block to finish sets `stop`.
#include "cuadv/timer.cuh"

struct WriterParams {
  uint4* dst;                       // buffer written over and over
  unsigned long long n_vec;         // uint4 elements in dst
  unsigned int* active;             // writer blocks currently running
  const unsigned int* stop;         // set by the fence kernel when it is done
  unsigned long long timeout_ns;    // stop after this long in any case (no overlap possible, sanitizer runs)
  unsigned long long* passes;       // completed passes over dst, summed over blocks (for bytes written)
};

struct FenceParams {
  unsigned int* slots;              // one word per thread of the grid
  unsigned int iterations;          // write + fence per thread
  int scope;                        // 0: no fence (control), 1: .gpu (__threadfence), 2: .sys (__threadfence_system)
  unsigned int* active;             // the writer's running-block count (read only here)
  unsigned int* stop;               // set when the last fence block is done
  unsigned int* blocks_done;        // fence blocks finished
  unsigned long long* times;        // per block: [2b] loop start, [2b+1] loop end (%globaltimer ns)
  unsigned int* overlap;            // per block: bit 0 writer running at loop start, bit 1 at loop end
  unsigned long long gate_ns;       // wait up to this long for the writer to start (0: do not wait)
};

using cuadv::timer::now_ns;

static __device__ __forceinline__ unsigned int load_volatile(const unsigned int* p) {
  return *reinterpret_cast<const volatile unsigned int*>(p);
}

extern "C" __global__ void dom_writer(const WriterParams p) {
  __shared__ unsigned int quit;
  if (threadIdx.x == 0) {
    atomicAdd(p.active, 1u);
    quit = 0;
  }
  __syncthreads();  // quit is initialised before anyone reads it
  const unsigned long long t0 = now_ns();
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  const unsigned long long first = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  unsigned int pass = 0;
  while (true) {
    for (unsigned long long j = first; j < p.n_vec; j += stride) {
      p.dst[j] = make_uint4(pass, static_cast<unsigned int>(j), blockIdx.x, threadIdx.x);
    }
    ++pass;
    __syncthreads();  // the block decides together whether to go on (thread 0 reads the stop flag)
    if (threadIdx.x == 0 && (load_volatile(p.stop) != 0 || now_ns() - t0 >= p.timeout_ns)) quit = 1;
    __syncthreads();  // every thread sees thread 0's decision
    if (quit) break;
  }
  if (threadIdx.x == 0) {
    atomicAdd(p.passes, static_cast<unsigned long long>(pass));
    __threadfence();  // the block's writes are ordered before it stops counting as active
    atomicSub(p.active, 1u);
  }
}

extern "C" __global__ void dom_fence(const FenceParams p) {
  unsigned long long start = 0;  // thread 0's loop start
  if (threadIdx.x == 0) {
    const unsigned long long g0 = now_ns();
    while (p.gate_ns != 0 && load_volatile(p.active) == 0 && now_ns() - g0 < p.gate_ns) {
    }
    p.overlap[blockIdx.x] = load_volatile(p.active) != 0 ? 1u : 0u;
    start = now_ns();
  }
  __syncthreads();  // the block starts its fence loop together, after the gate
  unsigned int* slot = p.slots + blockIdx.x * blockDim.x + threadIdx.x;
  for (unsigned int k = 0; k < p.iterations; ++k) {
    *reinterpret_cast<volatile unsigned int*>(slot) = k;
    if (p.scope == 1) {
      __threadfence();  // .gpu fence: the write above is visible GPU-wide before any later access
    } else if (p.scope == 2) {
      __threadfence_system();  // .sys fence: the write above is visible to the host and peers first
    }
  }
  __syncthreads();  // every thread's loop is done before the end timestamp
  if (threadIdx.x == 0) {
    p.times[2 * blockIdx.x] = start;
    p.times[2 * blockIdx.x + 1] = now_ns();
    p.overlap[blockIdx.x] |= load_volatile(p.active) != 0 ? 2u : 0u;
    __threadfence();  // the timestamps are written before the block counts as done
    if (atomicAdd(p.blocks_done, 1u) + 1 == gridDim.x) atomicExch(p.stop, 1u);  // the writer may stop
  }
}
