// launch_many.cu - the same N small tasks under five launch mechanisms (dynamic
// parallelism vs host launches, CUDA graphs, a persistent kernel with a work queue, device graph
// launch). A task is run by one warp; its only observable effect is counts[i] += 1, so a task that
// runs twice or never shows. task_ns > 0 gives every task that much %globaltimer work.
//
// The file is compiled in three parts (CUADV_LM_PART):
//   0  host-launched kernels: one task per launch (lm_task) and the persistent queue (lm_persistent)
//   1  dynamic parallelism: a parent grid that launches one child grid per task (relocatable device
//      code, linked with cudadevrt)
//   2  device graph launch: a one-node graph that runs task `cursor` and tail-launches itself until
//      the tasks are done (relocatable, linked with cudadevrt)
// Parts 1 and 2 are separate modules because a kernel of a device graph may not use dynamic parallelism.
#include "cuadv/timer.cuh"

#ifndef CUADV_LM_PART
#define CUADV_LM_PART 0
#endif

struct TaskParams {
  unsigned int* counts;           // counts[i] += 1 each time task i runs
  unsigned int n;                 // tasks
  unsigned int pad;
  unsigned long long task_ns;     // work per task (0: empty task)
};

// One task, run by the 32 threads of a warp (lane 0 records it).
static __device__ __forceinline__ void run_task(const TaskParams& p, unsigned int i) {
  cuadv::timer::spin_ns(p.task_ns);
  if ((threadIdx.x & 31) == 0) atomicAdd(p.counts + i, 1u);
}

#if CUADV_LM_PART == 0

// One task per launch: launched with one block of 32 threads.
extern "C" __global__ void lm_task(TaskParams p, unsigned int i) { run_task(p, i); }

// The same task with plain parameters, for launchers that pass no structs (the CuPy peer).
extern "C" __global__ void lm_task_args(unsigned int* counts, unsigned int n, unsigned long long task_ns,
                                        unsigned int i) {
  run_task(TaskParams{counts, n, 0u, task_ns}, i);
}

// State of one persistent-queue launch. Zero before the first launch; the last block to leave
// sets it back to zero, so back-to-back launches and graph replays on one stream need no reset.
struct QueueState {
  unsigned long long next;    // next ticket: the first task of the next chunk
  unsigned long long exited;  // blocks that have left
};

// Persistent kernel: a grid of (SMs x resident blocks); every warp is a worker that takes `chunk`
// tasks per atomic ticket until the tickets pass n. chunk = 1 is the plain queue (one atomic per
// task on one address: the hot spot); a larger chunk divides the atomics by chunk.
// Exit protocol: a worker leaves when it sees the queue exhausted (a plain read of `next` >= n,
// which stays true until the reset, so the atomic is skipped) or takes a ticket past the end.
// Every task below n is handed out exactly once because tickets come from one fetch-and-add.
extern "C" __global__ void lm_persistent(TaskParams p, QueueState* q, unsigned int chunk) {
  const unsigned int lane = threadIdx.x & 31;
  while (true) {
    unsigned long long first = p.n;
    if (lane == 0 && *reinterpret_cast<volatile unsigned long long*>(&q->next) < p.n) {
      first = atomicAdd(&q->next, static_cast<unsigned long long>(chunk));
    }
    first = __shfl_sync(0xffffffffu, first, 0);  // the whole warp works on lane 0's ticket
    if (first >= p.n) break;
    const unsigned long long end = first + chunk < p.n ? first + chunk : p.n;
    for (unsigned long long t = first; t < end; ++t) run_task(p, static_cast<unsigned int>(t));
  }
  __syncthreads();  // every warp of the block has taken its last ticket
  if (threadIdx.x == 0) {
    __threadfence();  // the block's last tickets are ordered before it counts itself out
    const unsigned long long before = atomicAdd(&q->exited, 1ull);
    if (before + 1 == gridDim.x) {
      __threadfence();  // every block's tickets are ordered before the reset
      q->next = 0;
      q->exited = 0;
    }
  }
}

#elif CUADV_LM_PART == 1

// Dynamic parallelism: one child grid (one warp) per task.
extern "C" __global__ void lm_dp_child(TaskParams p, unsigned int i) { run_task(p, i); }

// Thread i of the parent launches the child for task i into the fire-and-forget stream (no
// ordering between the children). The parent grid completes only after all its children.
// error[0] keeps the first launch error (cudaErrorLaunchPendingCountExceeded if the pending-launch
// limit is below the number of children in flight).
extern "C" __global__ void lm_dp_parent(TaskParams p, int* error) {
  const unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  if (i >= p.n) return;
  lm_dp_child<<<1, 32, 0, cudaStreamFireAndForget>>>(p, static_cast<unsigned int>(i));
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) atomicCAS(error, 0, static_cast<int>(e));
}

#elif CUADV_LM_PART == 2

struct GraphTaskState {
  unsigned int cursor;  // the task the next launch of the task graph runs; 0 between runs
  int error;            // first device-side cudaGraphLaunch error (0: none)
};

// The single kernel node of the task graph (instantiated for device launch), launched as one warp.
// Runs task `cursor`, then tail-launches its own graph for the next task: a tail launch starts
// after this graph (and anything it launched) completes, so the tasks run one after another, one
// graph launch each. Only thread 0 reads and writes the cursor; the warp gets the task index from
// it by shuffle, so no barrier is needed (and none is reached by part of the block).
extern "C" __global__ void lm_graph_task(TaskParams p, GraphTaskState* s) {
  unsigned int i = 0;
  if (threadIdx.x == 0) i = s->cursor;
  i = __shfl_sync(0xffffffffu, i, 0);  // the whole warp runs thread 0's task
  if (i < p.n) run_task(p, i);
  if (threadIdx.x == 0) {
    if (i + 1 < p.n) {
      s->cursor = i + 1;
      const cudaError_t e = cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
      if (e != cudaSuccess) {
        s->error = static_cast<int>(e);
        s->cursor = 0;
      }
    } else {
      s->cursor = 0;  // the last task: ready for the next run
    }
  }
}

// Kernel of the host graph that starts a run: device graphs are launched from inside a graph.
extern "C" __global__ void lm_graph_launcher(cudaGraphExec_t task_graph, unsigned int n, GraphTaskState* s) {
  if (threadIdx.x != 0 || n == 0) return;
  const cudaError_t e = cudaGraphLaunch(task_graph, cudaStreamGraphTailLaunch);
  if (e != cudaSuccess) s->error = static_cast<int>(e);
}

#else
#error "CUADV_LM_PART must be 0 (host-launched), 1 (dynamic parallelism) or 2 (device graph launch)"
#endif
