"""Why steal's loop trails one block per tile on SpMV even where the tiles cost the same: the time each tile takes
with its block's wait for its slowest warp included (a __syncthreads() appended to the body, so thread 0's trace
record ends when the tile's last warp is done), and the time between tiles, from one traced launch per variant.

    PYTHONPATH=src python3 scripts/spmv_gap_probe.py [WORD ...] > spmv_gap_probe.log

WORD: only the variants whose label contains one of them ("steal", "fixed_work", ...).

Per variant: the launch's span (first start to last end), the blocks that ran tiles in it (under steal, at most the
grid it learned) and tiles per block, the tiles' summed time, the mean number of tiles in flight per SM over the span
(summed time / (span x SMs)) against the blocks per SM and over its middle 80%, how long after the launch's first
tile the SMs start (mean) and before its last they end, the median and mean tile time, and (the loops: steal,
atomic_counter, fixed_blocks) the time from the end of a block's tile to the start of its next.
"""

from __future__ import annotations

import math
import sys

import cupy as cp
import numpy as np

from cuadv.labs.spmv import MATRICES, MEAN, SEED
from cuadv.labs.spmv_support import BATCHES, checked_case
from spmv_probes import body_kernel, warmed_and_checked


def handoffs(records: np.ndarray) -> np.ndarray:
    """ns from the end of each tile to the start of the same block's next tile (none under fixed_work)."""
    order = np.lexsort((records["start_ns"], records["block"]))
    r = records[order]
    same = r["block"][1:] == r["block"][:-1]
    return (r["start_ns"][1:].astype(np.int64) - r["end_ns"][:-1].astype(np.int64))[same]


def head_tail_middle(records: np.ndarray, sm_count: int) -> tuple[float, float, float]:
    """Mean over SMs of the time from the launch's first start to the SM's first, and from the SM's last end to the
    launch's last (ns); and the mean tiles in flight per SM over the middle 80% of the span."""
    start, end, sm = records["start_ns"].astype(np.int64), records["end_ns"].astype(np.int64), records["smid"]
    t0, t1 = start.min(), end.max()
    firsts = np.array([start[sm == i].min() for i in range(sm_count) if (sm == i).any()])
    lasts = np.array([end[sm == i].max() for i in range(sm_count) if (sm == i).any()])
    lo, hi = t0 + (t1 - t0) // 10, t1 - (t1 - t0) // 10
    inside = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0, None).sum()
    return float((firsts - t0).mean()), float((t1 - lasts).mean()), float(inside / (hi - lo) / sm_count)


def main() -> None:
    lab_batches = BATCHES["dynamic"]  # the lab's: dynamic under steal, static under fixed_work
    lab = body_kernel(lab_batches, "gap_lab", barrier=True)  # any policy at launch
    variants = {
        "fixed_work, static batches": (lab, "fixed_work"),
        "fixed_work, dynamic batches": (body_kernel("true", "gap_dyn", barrier=True), "fixed_work"),
        "steal, dynamic batches": (lab, "steal"),
        "steal, dynamic batches, no slice": (body_kernel(lab_batches, "gap_inf", barrier=True, quantum_us=math.inf),
                                             "steal"),
        "atomic_counter, dynamic batches": (lab, "atomic_counter"),
        "fixed_blocks, static batches": (lab, "fixed_blocks"),
    }
    only = sys.argv[1:]  # labels containing any of these words (default: every variant)
    variants = {label: v for label, v in variants.items() if not only or any(w in label for w in only)}
    sm_count = cp.cuda.Device().attributes["MultiProcessorCount"]
    for kind in MATRICES:
        dev, ref, tol = checked_case(kind, 1 << 22, MEAN, SEED)
        for label, (k, policy) in variants.items():
            warmed_and_checked(dev, lambda k=k, policy=policy, dev=dev: dev.run(k, "split", policy), ref, tol,
                               f"{kind}, {label}")
            spans = []
            for _ in range(3):
                r = dev.run(k, "split", policy, trace=True).records
                start, end = r["start_ns"].astype(np.int64), r["end_ns"].astype(np.int64)
                span = end.max() - start.min()
                tile = end - start
                spans.append((span, tile.sum(), np.median(tile), tile.mean(), handoffs(r),
                              head_tail_middle(r, sm_count)))
            span, busy, med, mean = (float(np.median([s[i] for s in spans])) for i in range(4))
            fit = k.resident_units(policy) // sm_count
            gaps, (head, tail, middle) = spans[-1][4], spans[-1][5]
            ran = np.unique(r["block"])  # the last traced launch's blocks that ran a tile (steal: at most its grid)
            blocks_text = (f"  blocks with tiles {ran.size} (highest index {ran.max()}),"
                           f" {r.size / ran.size:5.2f} tiles each")
            gap_text = (f"  between a block's tiles: median {np.median(gaps):6.0f} ns mean {gaps.mean():6.0f} ns"
                        f" p90 {np.percentile(gaps, 90):6.0f} ns over {gaps.size} hand-offs" if gaps.size else "")
            in_flight = busy / span / sm_count
            print(f"{kind:10s} {label:34s} span {span / 1e3:7.1f} us  tiles in flight per SM {in_flight:5.2f}"
                  f" of {fit} ({middle:4.2f} in its middle 80%)  SMs start {head / 1e3:4.1f} us after the first, end"
                  f" {tail / 1e3:4.1f} us before the last  tile median {med / 1e3:5.2f} us mean {mean / 1e3:5.2f} us"
                  f"  summed {busy / 1e6:8.2f} ms" + blocks_text + gap_text, flush=True)
        del dev
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
