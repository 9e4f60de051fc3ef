"""How many blocks an SM really holds while the spmv lab's tile body runs: per SM, the most tiles whose block-trace
intervals (thread 0's, before and after the body; each inside its block's life) overlap, and the share of SM
time with more of them than the occupancy calculator's blocks per SM. Three ways to run the same body (split
rows, register body, 40 registers): fixed_work (one block per tile; its warps leave as each finishes), fixed_work
with a __syncthreads() after the tile (its warps leave together) and steal (a loop over tiles, one barrier per
tile), at 256 threads (6 blocks per SM) and 128 threads (12 per SM), on the lab's three matrices (4M rows, seed
18), each checked against SciPy in float64 first and timed against cuSPARSE.

    PYTHONPATH=src python3 scripts/spmv_residency_probe.py > spmv_residency_probe.log

More tiles in flight on an SM than its blocks fit can only mean that the SM started blocks on the registers and
warp slots of warps that had already left, while a warp of each earlier block was still in its tile.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from cuadv import TileKernel
from cuadv.labs.spmv import MATRICES, MEAN, SEED
from cuadv.labs.spmv_support import WIDEST_NNZ, build_tiles, checked_case, spmv_kernel
from spmv_probes import BARRIER, print_against_cusparse, warmed_and_checked

SIZES = {256: 6, 128: 12}  # threads per block: blocks per SM (40 registers either way)


def levels(records: np.ndarray, sm_count: int) -> tuple[int, np.ndarray]:
    """The most tiles in flight on one SM, and SM time (ns, summed over SMs) spent at each count of them."""
    time_at = np.zeros(1, np.int64)
    most = 0
    for sm in range(sm_count):
        r = records[records["smid"] == sm]
        times = np.concatenate([r["start_ns"], r["end_ns"]]).astype(np.int64)
        steps = np.concatenate([np.ones(r.size, np.int64), -np.ones(r.size, np.int64)])
        order = np.lexsort((steps, times))  # at equal times an end comes before a start
        level = np.cumsum(steps[order])
        spent = np.diff(times[order], append=times[order][-1:])
        most = max(most, int(level.max(initial=0)))
        if level.size:
            time_at = np.pad(time_at, (0, max(0, int(level.max()) + 1 - time_at.size)))
            np.add.at(time_at, level, spent)
    return most, time_at


def main() -> None:
    kernels = {}
    for threads, per_sm in SIZES.items():
        lab = spmv_kernel(name=f"residency_{threads}", threads=threads, min_blocks=per_sm)
        waits = TileKernel(lab.params, lab.body + BARRIER, lab.prologue, block=threads, preamble=lab.preamble,
                           name=f"residency_{threads}_barrier", min_blocks_per_sm=per_sm)
        kernels[threads] = {"fixed_work": (lab, "fixed_work"), "fixed_work, barrier after each tile":
                            (waits, "fixed_work"), "steal": (lab, "steal")}
    sm_count = cp.cuda.Device().attributes["MultiProcessorCount"]
    for kind in MATRICES:
        dev, ref, tol = checked_case(kind, 1 << 22, MEAN, SEED)
        # the same arrays, with tiles whose lane widths and windows the host's model chose for each block size
        for threads, per_sm in SIZES.items():
            dev.add_tiling(f"split {threads}", build_tiles(dev.host.offsets, True, threads=threads, widest=WIDEST_NNZ,
                                                            slots=sm_count * per_sm))
        calls = {}
        for threads, variants in kernels.items():
            for name, (k, policy) in variants.items():
                label = f"{name}, {threads} threads"

                def call(k=k, policy=policy, dev=dev, tiles=f"split {threads}", **launch):
                    return dev.run(k, tiles, policy, **launch)
                warmed_and_checked(dev, call, ref, tol, f"{kind}, {label}")
                trace = call(trace=True)
                most, time_at = levels(trace.records, sm_count)
                fit = k.resident_units(policy) // sm_count
                over = 100 * time_at[fit + 1:].sum() / time_at.sum()
                print(f"{kind:10s} {label:46s} blocks per SM {fit}: most tiles in flight {most}, "
                      f"time above {fit}: {over:5.1f}%", flush=True)
                calls[label] = call
        print_against_cusparse(kind, dev, calls, 3)
        del dev
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
