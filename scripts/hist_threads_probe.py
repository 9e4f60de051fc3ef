"""uint8 at 256 bins: the TMA-fed shared histogram with blocks of 512, 768 or 1,024 threads, so that a deeper ring
of 2-vector chunks still lets two or more blocks share an SM; each result checked against NumPy, each time against
the read-only ceiling measured in the same run.

    PYTHONPATH=src python3 scripts/hist_threads_probe.py [MiB]
"""

from __future__ import annotations

import sys

import numpy as np

RINGS = ((2, 2), (3, 2), (4, 1), (3, 1))


def main(mib: int = 1024) -> None:
    import cupy as cp

    from cuadv.errors import LaunchConfigError
    from cuadv.histograms.launcher import engine
    from cuadv.histograms.plans import HistogramPlan, plan_histogram, tma_ring_bytes
    from cuadv.launching import launch
    from cuadv.timing import read_ceiling, time_gpu

    nbytes = mib << 20
    read_gbps = read_ceiling(nbytes).bytes_per_s / 1e9
    print(f"read-only ceiling over {mib} MiB: {read_gbps:.0f} GB/s")
    eng = engine()
    host = np.random.default_rng(7).integers(0, 256, size=nbytes + 13, dtype=np.uint8)
    want = np.bincount(host, minlength=256)
    x = cp.asarray(host)
    out = cp.zeros(256, dtype=cp.uint32)
    counters = plan_histogram(256, "uint8", "shared")  # 32 lane replicas of the counters, register loads
    for threads in (1024, 768, 512):
        for stages, vectors in RINGS:
            smem = tma_ring_bytes(counters.shared_bytes, stages, vectors, threads)
            plan = HistogramPlan("shared", "uint8", 256, counter_bits=32, replicas=counters.replicas, threads=threads,
                                 shared_bytes=smem, stages=stages, vectors=vectors)
            try:
                kernel, config = eng.launch_config(plan, x.size)
            except LaunchConfigError as e:  # a shape that cannot be resident
                print(f"{threads:>5} threads, ring {stages} x {vectors}: {e}")
                continue
            args = plan.kernel_args(x.data.ptr, x.size, out.data.ptr)

            def call():
                out.fill(0)
                launch(kernel, config, *args)

            call()
            ok = np.array_equal(cp.asnumpy(out), want)
            t = time_gpu(call, repeats=30)
            p10, p90 = np.percentile(np.array(t.samples), [10, 90])
            gbps = nbytes / t.median_s / 1e9
            print(f"{threads:>5} threads, ring {stages} x {vectors}, grid {config.grid[0]:>4}, smem {smem:>6}: "
                  f"{t.median_ms:.4f} ms ({p10:.4f}-{p90:.4f}) {100 * gbps / read_gbps:5.1f}% read "
                  f"{'exact' if ok else 'WRONG'}", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
