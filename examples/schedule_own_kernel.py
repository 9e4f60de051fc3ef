"""Work stealing in a kernel of your own: ``cuadv::ws::Scheduler<Auto>`` driven by a ``cuadv.Schedule``.

``cuadv.TileKernel`` writes the kernel around your tile body and does the host side for you. When the
kernel is yours (its own parameters, headers and launch), the device header ``<cuadv/work_stealing.cuh>``
gives the same scheduler, and this example does by hand what TileKernel does on the host:

- the policy ``Auto`` takes on this GPU (``cuadv.work_stealing.policy_for_arch``) and the grid it needs:
  the blocks that fit at once for ``steal`` (``cuadv.persistent.resident_grid``), one block per tile for
  ``clc`` and ``fixed_work``;
- the scheduler's counters: a ``StatePool`` of your kernel's own gives each stream a pair of states, and
  ``pool.use(stream)`` around each launch records when the pair is free again;
- back-to-back launches on one stream alternate between the pair's two states (``pool.phase``), each
  clearing the other's for the next, so no memset is needed; a launch captured into a CUDA graph counts
  its blocks' exits instead (``count_exits=True``), so every replay leaves its counter at zero.

The kernel sums ragged rows (one tile per row, rows of 1 to 4,000 elements) and counts how often each row
ran: after one launch, two more on the stream and two replays of a captured graph, every row must have run
exactly five times and every sum must equal NumPy's. Needs compute capability 9.0 for ``steal`` (on older
GPUs Auto is ``fixed_work``, which this example runs too); Blackwell's ``clc`` has not been run by cuadv.

    PYTHONPATH=src python examples/schedule_own_kernel.py [rows]
"""

from __future__ import annotations

import sys
from contextlib import nullcontext

import numpy as np

import cuadv
from cuadv.persistent import resident_grid
from cuadv.timing import read_ceiling
from cuadv.work_stealing import Schedule, StatePool, policy_for_arch

BLOCK = 256
SOURCE = r"""
#include <cuadv/groups.cuh>
#include <cuadv/work_stealing.cuh>
namespace cg = cooperative_groups;

// One tile per row: the block sums row t.index (blockDim.x * 4 B of dynamic shared memory for block_sum)
// and counts that it ran it.
extern "C" __global__ void __launch_bounds__(256) row_sums(const __grid_constant__ cuadv::ws::Schedule s,
                                                           const float* x, const unsigned long long* offsets,
                                                           float* sums, unsigned int* runs) {
  cuadv::ws::Scheduler<cuadv::ws::Auto> sched(s);
  if (!sched.begin()) return;  // steal: the tiles were gone before this block started
  sched.for_each([&](const cuadv::ws::Tile& t) {
    const unsigned long long begin = offsets[t.index], end = offsets[t.index + 1];
    float v = 0.0f;
    for (unsigned long long i = begin + threadIdx.x; i < end; i += blockDim.x) v += x[i];
    v = cuadv::groups::block_sum(cg::this_thread_block(), v);
    if (threadIdx.x == 0) {
      sums[t.index] = v;
      runs[t.index] += 1;  // a plain add: each tile runs on one block, once per launch
    }
  });
}
"""


def build(arch: str | None = None) -> cuadv.CompiledModule:
    return cuadv.compile_source(SOURCE, name="schedule_own_kernel", arch=arch)


def ragged(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows of 1 to 4,000 small integers (their float32 sums are exact in any order)."""
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(1, 4001, rows))]).astype(np.uint64)
    return rng.integers(0, 9, int(offsets[-1])).astype(np.float32), offsets


def main(rows: int = 20_000) -> None:
    import cupy as cp

    caps = cuadv.current_device().caps
    module = build()  # for this GPU: Auto is the policy below
    policy = policy_for_arch("auto", caps.arch)
    kernel = module.kernel("row_sums")
    smem = BLOCK * 4
    grid = min(rows, resident_grid(kernel, BLOCK, smem)) if policy == "steal" else rows
    config = cuadv.LaunchConfig(grid=grid, block=BLOCK, shared_mem=smem)
    launcher = cuadv.prepare(kernel, config)  # checked once
    pool = StatePool("the row_sums example")  # counters of this kernel only

    x_host, offsets_host = ragged(rows)
    want = np.add.reduceat(x_host.astype(np.float64), offsets_host[:-1].astype(np.int64)).astype(np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        x, offsets = cp.asarray(x_host), cp.asarray(offsets_host)
        sums, runs = cp.zeros(rows, cp.float32), cp.zeros(rows, cp.uint32)
    handle = stream.ptr  # the pool takes the stream's handle (the launcher takes any stream object too)

    def enqueue() -> None:
        """One launch on the stream, with its counter state; the same code captured or not."""
        with pool.use(handle) as (state, captured):
            with nullcontext(0) if captured else pool.phase(state) as phase:
                schedule = Schedule(tiles=rows, cluster=1, state_ptr=state, phase=phase, count_exits=captured)
                launcher(schedule, x, offsets, sums, runs, stream=handle)

    for _ in range(3):  # back to back: phases 0, 1, 0, no memset between them
        enqueue()
    stream.begin_capture()
    enqueue()  # captured: counts exits, with a state pair of its own
    graph = stream.end_capture()
    for _ in range(2):
        graph.launch(stream)
    stream.synchronize()

    assert np.array_equal(cp.asnumpy(runs), np.full(rows, 5, np.uint32)), "a row ran more or less than 5 times"
    assert np.array_equal(cp.asnumpy(sums), want), "a row's sum differs from NumPy"
    print(f"policy {policy} ({grid} blocks for {rows:,} ragged rows): 3 stream launches and 2 graph replays, "
          "every row run exactly 5 times, every sum equal to NumPy's")

    timing = cuadv.time_gpu(enqueue, stream=stream, repeats=20)
    nbytes = x.nbytes + offsets.nbytes
    print(f"one launch: {timing.median_ms * 1e3:.1f} us, {timing.rate(nbytes) / 1e9:.0f} GB/s read, "
          f"{read_ceiling().fraction(timing.rate(nbytes)):.0%} of the read-only ceiling")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
