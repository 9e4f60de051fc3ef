"""How the shared-memory histogram is fed, measured on this GPU: register loads (hist_block) against each TMA
ring (hist_block_tma: 2-6 chunks of 1 vector per thread, 2-3 of 2), for bin counts whose plans are 'shared' (at 64K
bins, which one block holds only with 16-bit counters, also the one-block dsm kernel), each result checked against
NumPy, each time against the read-only ceiling measured in the same run; the plan 'auto' takes is marked.

    PYTHONPATH=src python3 scripts/hist_feed_sweep.py [MiB] [--once] [--bins=B,...]

MiB: input per case (default 1024). --once: one checked call per plan, no timing (for compute-sanitizer).
--bins: only the cases with these bin counts.
Prints one line per (case, feed): median ms (p10-p90), GB/s, % of the read-only ceiling, x the case's first row
(register loads: hist_block, or at 64K bins the one-block dsm kernel).
"""

from __future__ import annotations

import sys

import numpy as np

CASES = (("int32", 256), ("uint8", 256), ("int32", 1024), ("int32", 4096), ("int32", 8192), ("int32", 16384),
         ("int32", 33000), ("int32", 65536))


def main(mib: int = 1024, once: bool = False, only: tuple[int, ...] = ()) -> None:
    import cupy as cp

    from cuadv.errors import LaunchConfigError
    from cuadv.histograms.launcher import engine
    from cuadv.histograms.plans import TMA_RINGS
    from cuadv.launching import launch
    from cuadv.timing import read_ceiling, time_gpu

    nbytes = mib << 20
    read_gbps = None if once else read_ceiling(nbytes).bytes_per_s / 1e9
    if read_gbps:
        print(f"read-only ceiling over {mib} MiB: {read_gbps:.0f} GB/s")
    eng = engine()
    rng = np.random.default_rng(7)
    for dtype, bins in CASES:
        if only and bins not in only:
            continue
        n = nbytes // np.dtype(dtype).itemsize + 13  # a tail after the last whole chunk
        host = rng.integers(-1 if dtype == "int32" else 0, bins + (dtype == "int32"), size=n, dtype=dtype)
        want = np.bincount(host[(host >= 0) & (host < bins)], minlength=bins)
        x = cp.asarray(host)
        out = cp.zeros(bins, dtype=cp.uint32)
        base_ms = None
        plans = []
        for stages, vectors in ((0, None),) + TMA_RINGS:
            try:
                plans.append(eng.plan(bins, dtype, "shared", stages=stages, vectors=vectors))
            except LaunchConfigError:  # 16-bit counters with 1-vector chunks, or no room for the ring
                pass
        if not plans:
            print(f"{dtype} {bins:>6}: no 'shared' plan holds these bins in one block", flush=True)
            continue
        if plans[0].counter_bits == 16:  # the one-block dsm kernel over the same 16-bit counters, for comparison
            plans.insert(0, eng.plan(bins, dtype, "dsm", cluster=1))
        auto = eng.plan(bins, dtype)
        for plan in plans:
            kernel, config = eng.launch_config(plan, n)
            args = plan.kernel_args(x.data.ptr, n, out.data.ptr)

            def call():
                out.fill(0)
                launch(kernel, config, *args)

            call()
            got = cp.asnumpy(out).astype(np.int64)
            ok = np.array_equal(got, want)
            verdict = "exact" if ok else (f"WRONG: {np.count_nonzero(got != want)} bins differ, total {got.sum()} "
                                          f"for {want.sum()}")
            mark = "*" if plan == auto else " "
            head = f"{dtype} {bins:>6} {mark}{plan.label:<50} grid {config.grid[0]:>4} smem {plan.shared_bytes:>6}"
            if once:
                print(f"{head} {verdict}", flush=True)
                continue
            t = time_gpu(call, repeats=30)
            if ok and not np.array_equal(cp.asnumpy(out), want):  # the last timed call's result too
                verdict = "WRONG after the timed calls"
            p10, p90 = np.percentile(np.array(t.samples), [10, 90])
            base_ms = base_ms or t.median_ms
            gbps = nbytes / t.median_s / 1e9
            print(f"{head} {t.median_ms:.4f} ms ({p10:.4f}-{p90:.4f}) {gbps:5.0f} GB/s {100 * gbps / read_gbps:5.1f}% "
                  f"read x{base_ms / t.median_ms:.3f} {verdict}", flush=True)
        del x


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = tuple(int(b) for a in sys.argv[1:] if a.startswith("--bins=") for b in a[len("--bins="):].split(","))
    main(*(int(v) for v in args[:1]), once="--once" in sys.argv, only=only)
