"""Float histograms the peer bench does not cover, for A/B runs of trees (scripts/tree_ab.sh): 1 GiB of float32 or
float64 uniform in [0, 1), through `cuadv.prepare_histogram`, with range=(0.0, 1.0) (even edges the GPU computes
where it compares) and range=None (numpy's edges from the data's min and max, read from a table), at several bin
counts. Each result is checked first against numpy.histogram of the same data, counts and edges (not cupy.histogram:
with range=None CuPy computes the edges in float64, numpy in the data's type). Prints the median ms, % of the
read-only ceiling measured in the same process, and the plan.

    PYTHONPATH=src python3 scripts/hist_float_probe.py [dtype:bins:range ...]
        (default: float32 at 4096 and 65536 bins and float64 at 4096, each with range given and None;
         range: "given" (0.0, 1.0), "none", "offset": (130.0, 131.0) over the data plus 130, whose float32 edges
         give the quick estimate a margin of 0.52 bins at 4K bins (under its limit of one bin; numpy's division
         bound it before 2026-12-06's rise from 0.25), or "far": (1000.0, 1001.0) over the data plus 1000, where
         numpy's estimate bins float32 from 1,046 bins on)
"""

from __future__ import annotations

import sys

RANGES = {"given": (0.0, 1.0), "none": None, "offset": (130.0, 131.0), "far": (1000.0, 1001.0)}
DEFAULT = ("float32:4096:given", "float32:4096:none", "float32:65536:given", "float32:65536:none",
           "float64:4096:given", "float64:4096:none")


def main(wanted: tuple[str, ...]) -> None:
    import cupy as cp
    import numpy as np

    import cuadv
    from cuadv.timing import read_ceiling, time_gpu

    read_gbps = read_ceiling().bytes_per_s / 1e9
    print(f"read-only ceiling {read_gbps:.0f} GB/s", flush=True)
    n_bytes = 1 << 30
    for case in wanted:
        dtype, bins, given = case.split(":")
        bins, rng = int(bins), RANGES[given]
        x = cp.random.random(n_bytes // cp.dtype(dtype).itemsize, dtype=dtype)
        if given in ("offset", "far"):
            x += rng[0]  # the data over the range
        prepared = cuadv.prepare_histogram(x, bins=bins, range=rng)
        got, edges = (cp.asnumpy(a) for a in prepared())
        want, want_edges = np.histogram(cp.asnumpy(x), bins=bins, range=rng)
        if not (np.array_equal(edges, want_edges) and np.array_equal(got, want)):
            print(f"{case:<22} differs from numpy.histogram: edges {np.array_equal(edges, want_edges)}, counts in "
                  f"{int(np.count_nonzero(got != want))} bins", flush=True)
            continue
        stream = cp.cuda.get_current_stream().ptr
        ms = time_gpu(prepared, stream=stream, warmup=2, repeats=20).median_ms
        plan = prepared.plan.label if prepared.plan else "?"
        print(f"{case:<22} {ms:.4f} ms {100 * n_bytes / (ms * 1e-3) / 1e9 / read_gbps:5.1f}% read  {plan}",
              flush=True)
        del x, prepared, got, edges, want
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or DEFAULT)
