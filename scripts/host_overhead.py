"""Host time per call of cuadv's public ops on small inputs, one-shot and prepared, beside the CuPy call that does
the same work, and a cProfile of the slowest one-shot calls: where a user's Python time goes.

    PYTHONPATH=src python3 scripts/host_overhead.py [--calls 500] [--top 18]

Each op runs on a 256 x 256 float32 (TMA) or 65,536 elements (the rest), so the GPU work is a few microseconds and
the wall time per call is the host's. Every batch of calls is followed by a synchronize, outside the timed loop's
per-call figure only in that the queue never fills (calls < 1000).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from typing import Any, Callable

import cupy as cp
import numpy as np

import cuadv
import cuadv.tma as tma


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(20):
        fn()
    cp.cuda.Device().synchronize()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        cp.cuda.Device().synchronize()
        best = min(best, elapsed)
    return best / calls * 1e6


def cases() -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cuadv call, the CuPy call doing the same work)."""
    rng = np.random.default_rng(0)
    square = cp.asarray(rng.standard_normal((256, 256), dtype=np.float32))
    copy_out = tma.empty_pitched((256, 256), np.float32)
    t_out = tma.empty_pitched((256, 256), np.float32)
    labels = cp.asarray(rng.integers(0, 256, 65_536, dtype=np.int32))
    values = cp.asarray(rng.random(65_536, dtype=np.float32))
    ints = cp.asarray(rng.integers(0, 100, 65_536, dtype=np.int32))
    counts = cp.empty(256, dtype=cp.int64)
    copier = tma.prepare_copy(square, copy_out)
    transposer = tma.prepare_transpose(square, t_out)
    hist = cuadv.prepare_histogram(values, bins=256, range=(0.0, 1.0))
    binc = cuadv.prepare_bincount(labels, minlength=256)
    bsum = cuadv.prepare_block_sum(ints, total=True)
    return [
        ("tma.copy", lambda: tma.copy(square, copy_out), lambda: cp.copyto(copy_out, square)),
        ("prepare_copy()", lambda: copier(), lambda: cp.copyto(copy_out, square)),
        ("tma.transpose", lambda: tma.transpose(square, t_out), lambda: cp.copyto(t_out, square.T)),
        ("prepare_transpose()", lambda: transposer(), lambda: cp.copyto(t_out, square.T)),
        ("histogram float32 256", lambda: cuadv.histogram(values, bins=256, range=(0.0, 1.0)),
         lambda: cp.histogram(values, bins=256, range=(0.0, 1.0))),
        ("prepare_histogram()", lambda: hist(values), lambda: cp.histogram(values, bins=256, range=(0.0, 1.0))),
        ("bincount int32", lambda: cuadv.bincount(labels, minlength=256),
         lambda: cp.bincount(labels, minlength=256)),
        ("bincount out=", lambda: cuadv.bincount(labels, minlength=256, out=counts),
         lambda: cp.bincount(labels, minlength=256)),
        ("prepare_bincount()", lambda: binc(labels), lambda: cp.bincount(labels, minlength=256)),
        ("block_sum total", lambda: cuadv.block_sum(ints, total=True), lambda: ints.sum()),
        ("prepare_block_sum()", lambda: bsum(ints), lambda: ints.sum()),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--top", type=int, default=18)
    args = parser.parse_args()
    rows = []
    all_cases = cases()
    for name, ours, peer in all_cases:
        rows.append((name, per_call_us(ours, args.calls), per_call_us(peer, args.calls)))
    print(f"{'op':26s} {'cuadv us/call':>14s} {'CuPy us/call':>13s} {'ratio':>7s}")
    for name, a, b in rows:
        print(f"{name:26s} {a:14.1f} {b:13.1f} {a / b:7.2f}")
    for name, ours, _ in all_cases:
        if name.endswith("()"):
            continue
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(200):
            ours()
        profile.disable()
        cp.cuda.Device().synchronize()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.top)
        print(f"\n== cProfile, 200 calls of {name} (sorted by own time)")
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:6000])


if __name__ == "__main__":
    main()
