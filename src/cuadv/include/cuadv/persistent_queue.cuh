// cuadv/persistent_queue.cuh - a persistent kernel over a task queue: one global ticket counter,
// `per_ticket` tasks per ticket, an exit protocol that loses and duplicates nothing, and counters that
// reset themselves so back-to-back launches and CUDA graph replays need no host reset. Any SM.
//
// The protocol of lm_persistent in the launch lab (src/cuadv/labs/launch_many.cu), with 64-bit task
// indices and the parameters in one struct:
//
//   grid  = SMs x resident blocks (every block runs at once; nothing waits for a free SM)
//   worker = one warp; lane 0 takes a ticket with one fetch-and-add, the warp runs its tasks
//   exit  = a worker leaves when the queue is exhausted; the last block to leave zeroes the state
//
// Contract:
//   - The block size is a multiple of 32 (whole warps: the ticket is broadcast with a full-mask shuffle).
//   - The task body is run by the 32 threads of one warp while other warps of the block run other
//     tasks: no __syncthreads() in it (__syncwarp() is fine). A `return` in it ends that task only.
//   - Every thread of the block reaches the exit protocol: code before run_queue must not return.
//   - Tasks run in no particular order and concurrently; nothing orders one task's writes before
//     another's reads. Ordering with the next kernel in the stream is the kernel boundary's.
//   - One launch at a time per QueueState: launches that could overlap (two streams, two graphs)
//     need their own state (cuadv's Python side gives each stream and each capture its own).
#pragma once

namespace cuadv::persistent {

// Zero before the first launch; the last block to leave sets it back to zero.
struct QueueState {
  unsigned long long next;    // next ticket: the first task of the next batch
  unsigned long long exited;  // blocks that have left
};

// The kernel parameter (mirrored by cuadv.persistent.Queue).
struct Queue {
  QueueState* state;          // this launch's counters
  unsigned long long n;       // tasks 0 .. n - 1 (at most 2^62: tickets and the overshoot fit 64 bits)
  unsigned int per_ticket;    // tasks per ticket, >= 1 (1: one atomic per task on one address, the hot spot)
  unsigned int reserved;
};
static_assert(sizeof(Queue) == 24, "cuadv.persistent.Queue.LAYOUT mirrors this struct");

// Runs task(t) for every t in [0, n) exactly once over the whole grid, then the exit protocol.
template <class Task>
static __device__ __forceinline__ void run_queue(const Queue& q, Task&& task) {
  const unsigned int lane = threadIdx.x & 31u;
  while (true) {
    unsigned long long first = q.n;
    // A plain read first: once the queue is exhausted `next` stays >= n until the reset (which comes
    // after every block has left), so a worker that sees it skips the atomic.
    if (lane == 0 && *reinterpret_cast<volatile unsigned long long*>(&q.state->next) < q.n) {
      first = atomicAdd(&q.state->next, static_cast<unsigned long long>(q.per_ticket));
    }
    first = __shfl_sync(0xffffffffu, first, 0);  // the whole warp works on lane 0's ticket
    if (first >= q.n) break;                     // exhausted, or a ticket past the end
    const unsigned long long end = first + q.per_ticket < q.n ? first + q.per_ticket : q.n;
    for (unsigned long long t = first; t < end; ++t) task(t);
  }
  // Every task below n was handed out exactly once: tickets come from one fetch-and-add.
  __syncthreads();  // every warp of the block has taken its last ticket
  if (threadIdx.x == 0) {
    __threadfence();  // the block's last tickets are ordered before it counts itself out
    const unsigned long long before = atomicAdd(&q.state->exited, 1ull);
    if (before + 1 == static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z) {
      __threadfence();  // every block's tickets are ordered before the reset
      q.state->next = 0;
      q.state->exited = 0;
    }
  }
}

}  // namespace cuadv::persistent
