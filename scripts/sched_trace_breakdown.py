"""Where each scheduling policy spends a launch, from its block traces: vecscale v := a v (256 MiB and 1 GiB, the
scheduling and vecscale labs' default tile) and the SpMV lab's split-row tiles (power-law and R-MAT, 4M rows),
under fixed_work, fixed_blocks, atomic_counter, steal and steal Q=inf.

    PYTHONPATH=src python3 scripts/sched_trace_breakdown.py > sched_traces.log
    PYTHONPATH=src python3 scripts/sched_trace_breakdown.py --fit > sched_fit.log

Per case and policy: the median CUDA-event time of 20 launches (each behind a queued spin, so no host time is in
it) and, from the median of 3 traced launches, what that time is made of (microseconds; a tile's start and end
are what the block's thread 0 records around the body, so they are warp 0's view of it):
  span     first tile start to last tile end (%globaltimer in the kernel)
  outside  event time - span: launch, the work before the first tile (steal's first claim) and after the last
           (exits); atomic_counter's memset is in it
  work     sum of tile durations / slots (the resident blocks of that policy's kernel)
  fill     when the block that fills the last slot started its first tile (blocks in order of first start)
  gap      median time between one tile's end and the next tile's start in the same block (loop policies)
  tile     median tile duration of the tiles that start in the middle 60% of the span
  sm       spread of the SMs' last tile ends (max - min): how long some SMs sat idle at the end
  blocks   blocks that ran a tile

With --fit: vecscale from 64 MiB to 4 GiB (32 MiB stays in the 60 MB L2 between launches, so it is left out) under
each policy, at the default tile (768 threads x 2 float4, 2 blocks/SM) and at 256 threads x 8 float4 with 5 and 4
blocks/SM (the default until 2026-12-02 18:13, and the comparison of its two store orders), a line time = fixed +
bytes / rate fitted to the medians (least squares): 'fixed' is what a launch costs whatever its size (launch, first
claims, exits, the memset of atomic_counter, the last wave's tail), 'rate' the streaming rate once running; and each
kernel's order of 16-byte loads (L) and stores (S) in its SASS, where cuobjdump is found.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

from cuadv.device import current_device
from cuadv.labs.spmv import MEAN, SEED
from cuadv.labs.spmv_support import checked_case, spmv_kernel
from cuadv.labs.vecscale import DEFAULT_SHAPE, Shape, tiles_for, vecscale_kernel
from cuadv.timing import time_gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # for sass_tools

POLICIES = [("fixed_work", "fixed_work", None), ("fixed_blocks", "fixed_blocks", None),
            ("atomic_counter", "atomic_counter", None), ("steal", "steal", None), ("steal Q=inf", "steal", math.inf)]


def breakdown(trace, slots: int) -> dict[str, float]:
    r = trace.records[trace.written]
    t0 = int(r["start_ns"].min())
    s = (r["start_ns"] - t0).astype(np.float64) / 1e3
    e = (r["end_ns"] - t0).astype(np.float64) / 1e3
    span = float(e.max())
    by_block = np.lexsort((s, r["block"]))
    blk, ss, ee = r["block"][by_block], s[by_block], e[by_block]
    first = np.concatenate(([True], blk[1:] != blk[:-1]))  # each block's first tile
    first_starts = np.sort(ss[first])
    same = ~first[1:]
    gaps = (ss[1:] - ee[:-1])[same]
    mid = (s >= 0.2 * span) & (s <= 0.8 * span)
    sm_end = np.array([e[r["smid"] == sm].max() for sm in np.unique(r["smid"])])
    return {"span": span, "work": float((e - s).sum()) / slots,
            "fill": float(first_starts[min(slots, first_starts.size) - 1]),
            "gap": float(np.median(gaps)) if gaps.size else math.nan,
            "tile": float(np.median((e - s)[mid])) if mid.any() else math.nan,
            "sm": float(sm_end.max() - sm_end.min()), "blocks": int(first.sum()), "tick": _tick(r)}


def _tick(r) -> float:
    """The %globaltimer step seen in the records (ns): the smallest positive difference of start times."""
    d = np.diff(np.unique(r["start_ns"]))
    return float(d[d > 0].min()) if (d > 0).any() else math.nan


def report(case: str, calls: dict) -> None:
    """calls: label -> (launch(trace) function, slots)."""
    print(f"\n== {case}", flush=True)
    print(f"{'policy':16s} {'event us':>9s} {'span':>8s} {'outside':>8s} {'work':>8s} {'fill':>7s} "
          f"{'gap':>6s} {'tile':>7s} {'sm':>6s} {'blocks':>7s}  tick ns", flush=True)
    for label, (run, slots) in calls.items():
        event_us = 1e3 * time_gpu(lambda: run(False), repeats=20).median_ms
        traces = [run(True) for _ in range(3)]
        cp.cuda.runtime.deviceSynchronize()
        stats = sorted((breakdown(t, slots) for t in traces), key=lambda d: d["span"])[1]
        print(f"{label:16s} {event_us:9.1f} {stats['span']:8.1f} {event_us - stats['span']:8.1f} {stats['work']:8.1f} "
              f"{stats['fill']:7.1f} {stats['gap']:6.2f} {stats['tile']:7.2f} {stats['sm']:6.1f} {stats['blocks']:7d}"
              f"  {stats['tick']:.0f}   ({slots} slots)", flush=True)


def vecscale(n: int) -> None:
    data = cp.random.standard_normal(n, dtype=cp.float32)
    calls = {}
    for label, policy, q in POLICIES:
        k = vecscale_kernel(policy, q)
        calls[label] = ((lambda trace, k=k: k(tiles_for(n), data, n, np.float32(1.0), 0, trace=trace)),
                        k.resident_units(policy))
        for _ in range(3):  # steal learns its grid
            k(tiles_for(n), data, n, np.float32(1.0), 0)
    report(f"vecscale v := a v, {4 * n >> 20} MiB, {tiles_for(n)} tiles", calls)


def spmv(kind: str) -> None:
    dev, ref, tol = checked_case(kind, 1 << 22, MEAN, SEED)
    calls = {}
    for label, policy, q in POLICIES:
        k = spmv_kernel(quantum_us=q, name="spmv_q" if q else "spmv")
        for _ in range(3):
            dev.run(k, "split", policy)
        if (np.abs(cp.asnumpy(dev.y) - ref) > tol).any():
            sys.exit(f"{kind}, {label}: a row is wrong")
        calls[label] = ((lambda trace, k=k, policy=policy: dev.run(k, "split", policy, trace=trace)),
                        k.resident_units(policy))
    report(f"SpMV {kind}, split rows, {dev.tilings['split'][0].count} tiles", calls)


def load_store_order(k, policy: str) -> str:
    """The kernel's 16-byte global loads (L) and stores (S) in SASS order, from its cubin (cuobjdump), or '?'."""
    try:
        from sass_tools import sass_instructions  # tests/sass_tools.py (on sys.path below)

        with tempfile.TemporaryDirectory() as tmp:
            code = sass_instructions(k.compile(current_device().caps.arch, policy).cubin, Path(tmp))[k.name]
        return "".join("L" if "LDG.E.128" in op else "S" for op in code if "LDG.E.128" in op or "STG.E.128" in op)[:20]
    except Exception as exc:  # no cuobjdump: the timings stand without it
        return f"? ({type(exc).__name__})"


def fit() -> None:
    sizes = [1 << p for p in range(24, 31)]  # 64 MiB to 4 GiB of float32
    data = cp.empty(sizes[-1], dtype=cp.float32)
    data[:] = 1.0
    for shape in (DEFAULT_SHAPE, Shape(8, 1, 5, threads=256), Shape(8, 1, 4, threads=256)):
        print(f"\n== vecscale, {shape.label}")
        head = " ".join(f"{4 * n >> 20:>7d}M" for n in sizes)
        print(f"{'policy':16s} {head}   fixed us   GB/s   loads (L), stores (S)")
        for label, policy, q in POLICIES:
            k = vecscale_kernel(policy, q, shape=shape)
            times = []
            for n in sizes:
                t = tiles_for(n, shape)
                for _ in range(3):  # steal learns its grid per size: time the size it has learned
                    k(t, data, n, np.float32(1.0), 0)
                times.append(1e3 * time_gpu(lambda: k(t, data, n, np.float32(1.0), 0), repeats=15).median_ms)
            slope, fixed = np.polyfit(8.0 * np.array(sizes), times, 1)  # us per byte moved (read + write)
            print(f"{label:16s} " + " ".join(f"{t:8.1f}" for t in times) + f"   {fixed:8.2f} {1e-3 / slope:7.0f}   "
                  + load_store_order(k, policy), flush=True)


def main() -> None:
    if "--fit" in sys.argv[1:]:
        fit()
        return
    for n in (1 << 26, 1 << 28):
        vecscale(n)
    for kind in ("power-law", "R-MAT"):
        spmv(kind)


if __name__ == "__main__":
    main()
