"""Many small tasks in one launch: a persistent kernel over a task queue, from Python.

Each task normalises one row of a ragged batch (rows of different lengths, as in a batch of
sequences): 32 threads of a warp sum the row and divide it by the sum. Launching one kernel per row
would cost microseconds per row; the persistent queue runs every row in one launch, paying an atomic
per ticket of ``tasks_per_ticket`` rows.

    PYTHONPATH=src python examples/persistent_queue.py [rows]

Only the public API (``cuadv.persistent.PersistentKernel``). Checks the result against NumPy (the
timed runs reuse the queue's counters with no reset: they reset themselves), and prints the time per row.
"""

from __future__ import annotations

import sys

import numpy as np

import cuadv
from cuadv.persistent import PersistentKernel, prepare_persistent, resident_grid

NORMALISE = PersistentKernel(
    params="const float* x, float* y, const unsigned long long* offsets",
    task=r"""
    const unsigned long long begin = offsets[task], end = offsets[task + 1];
    float sum = 0.0f;
    for (unsigned long long i = begin + lane; i < end; i += 32) sum += x[i];
    for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);  // the warp's total
    for (unsigned long long i = begin + lane; i < end; i += 32) y[i] = x[i] / sum;
    """,
    name="normalise_rows")


def ragged(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 300, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)
    return rng.uniform(0.5, 1.5, int(offsets[-1])).astype(np.float32), offsets


def reference(x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    sums = np.add.reduceat(x.astype(np.float64), offsets[:-1].astype(np.int64))
    return x / np.repeat(sums, np.diff(offsets).astype(np.int64)).astype(np.float32)


def main(rows: int = 100_000) -> None:
    import cupy as cp

    x_host, offsets_host = ragged(rows)
    with cp.cuda.Stream(non_blocking=True) as stream:  # stream=None below: CuPy's current stream, this one
        x, offsets = cp.asarray(x_host), cp.asarray(offsets_host)
        y = cp.zeros_like(x)
        NORMALISE(rows, x, y, offsets, tasks_per_ticket=16)
        if not np.allclose(cp.asnumpy(y), reference(x_host, offsets_host), rtol=1e-5, atol=0):
            sys.exit("wrong result")
        run = prepare_persistent(NORMALISE, rows, x, y, offsets, tasks_per_ticket=16)  # NORMALISE.prepare(...)
        t = cuadv.time_gpu(run, stream=stream, repeats=20)
    # at most every block that fits at once (SMs x the kernel's own blocks per SM), fewer where the tickets
    # would not give each warp one
    resident = resident_grid(NORMALISE.kernel(), NORMALISE.block, NORMALISE.shared_mem)
    assert run.grid <= resident
    print(f"{rows:,} ragged rows in one launch of {run.grid} blocks (at most {resident} fit at once): "
          f"{t.median_ms * 1e3 / rows:.4f} us per row ({t.median_ms:.3f} ms)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
