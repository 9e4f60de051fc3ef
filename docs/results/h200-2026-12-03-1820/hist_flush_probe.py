"""What the end of a one-block-per-SM histogram costs: `auto`'s shared-memory plan (hist_block_tma) launched as it
is, and launched as clusters of 2 and 4 blocks whose blocks first sum their counters through distributed shared
memory, so that each bin costs one global atomic per cluster instead of one per block at the flush. Each result is
checked against NumPy and timed against the read-only ceiling measured in the same run.

    PYTHONPATH=src python3 scripts/hist_flush_probe.py [MiB] [--bins=B,...]

Prints one line per (bins, cluster size): grid, median ms (p10-p90), % of the read-only ceiling, and x the
cluster-less launch.
"""

from __future__ import annotations

import sys

import numpy as np

BINS = (4096, 16384, 33000, 65536)


def main(mib: int = 1024, only: tuple[int, ...] = ()) -> None:
    import cupy as cp

    from cuadv.histograms.launcher import engine
    from cuadv.kernel import max_active_clusters
    from cuadv.launch import LaunchConfig, launch
    from cuadv.timing import read_ceiling, time_gpu

    nbytes = mib << 20
    read_gbps = read_ceiling(nbytes).bytes_per_s / 1e9
    print(f"read-only ceiling over {mib} MiB: {read_gbps:.0f} GB/s")
    eng = engine()
    rng = np.random.default_rng(11)
    for bins in only or BINS:
        n = nbytes // 4 + 13
        host = rng.integers(-1, bins + 1, size=n, dtype=np.int32)
        want = np.bincount(host[(host >= 0) & (host < bins)], minlength=bins)
        x = cp.asarray(host)
        out = cp.zeros(bins, dtype=cp.uint32)
        plan = eng.plan(bins, "int32")
        kernel, config = eng.launch_config(plan, n)
        base_ms = None
        for csize in (1, 2, 4):
            if csize == 1:
                cfg = config
            else:
                fit = max_active_clusters(kernel, plan.threads, csize, plan.shared_bytes) * csize
                grid = min(config.grid[0], fit) // csize * csize
                if grid < csize:
                    print(f"{bins:>6} cluster {csize}: does not fit", flush=True)
                    continue
                cfg = LaunchConfig(grid=grid, block=plan.threads, cluster=csize, shared_mem=plan.shared_bytes)
            args = plan.kernel_args(x.data.ptr, n, out.data.ptr)

            def call():
                out.fill(0)
                launch(kernel, cfg, *args)

            call()
            got = cp.asnumpy(out).astype(np.int64)
            verdict = "exact" if np.array_equal(got, want) else f"WRONG: {np.count_nonzero(got != want)} bins differ"
            t = time_gpu(call, repeats=30)
            p10, p90 = np.percentile(np.array(t.samples), [10, 90])
            base_ms = base_ms or t.median_ms
            gbps = nbytes / t.median_s / 1e9
            print(f"{bins:>6} {plan.label:<40} cluster {csize} grid {cfg.grid[0]:>4} {t.median_ms:.4f} ms "
                  f"({p10:.4f}-{p90:.4f}) {100 * gbps / read_gbps:5.1f}% read x{base_ms / t.median_ms:.3f} {verdict}",
                  flush=True)
        del x


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = tuple(int(b) for a in sys.argv[1:] if a.startswith("--bins=") for b in a[len("--bins="):].split(","))
    main(*(int(v) for v in args[:1]), only=only)
