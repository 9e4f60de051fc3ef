"""Where the time of one histogram launch goes, block by block: a copy of histogram.cu with stamps added to
block_histogram (a text patch made here, not shipped) records per block %globaltimer at entry and exit and clock64
at entry, after zeroing the counters, after the stream (every warp done) and after the flush, plus the SM ("entry":
of block_histogram, which in the 16-bit TMA kernel thread 0 reaches after issuing the ring's first copies). The
plan 'auto' takes for each case runs at 1 GiB; printed per case: the launch's event time, the blocks' entry spread,
the medians and extremes of each phase (cycles converted at the clock the stamps themselves measure), and the
blocks' exits (first, median, last) after the first entry.

    PYTHONPATH=src python3 scripts/hist_phase_trace.py [--bins=B,...]
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np

CASES = (("int32", 256), ("int32", 4096), ("int32", 65536), ("uint8", 256))
FIELDS = 7  # per block: globaltimer in, clock in, clock zeroed, clock streamed, clock flushed, globaltimer out, SM

PATCHES = (
    ("  const u32 words = cuadv_hist::counter_words<Packed>(bins, 0, log2r);\n"
     "  for (u32 w = threadIdx.x; w < words; w += blockDim.x) counters[w] = 0;\n  __syncthreads();",
     "  unsigned long long* trace = reinterpret_cast<unsigned long long*>(out + ((bins + 1u) & ~1u))"
     " + 7u * blockIdx.x;\n"
     "  const unsigned long long g_in = ptx::globaltimer_ns(), c_in = clock64();\n"
     "  const u32 words = cuadv_hist::counter_words<Packed>(bins, 0, log2r);\n"
     "  for (u32 w = threadIdx.x; w < words; w += blockDim.x) counters[w] = 0;\n  __syncthreads();\n"
     "  const unsigned long long c_zeroed = clock64();"),
    ("    stream(sink);\n  }\n\n"
     "  __syncthreads();  // every increment of this block is complete before the counters are read\n",
     "    stream(sink);\n  }\n\n"
     "  __syncthreads();  // every increment of this block is complete before the counters are read\n"
     "  const unsigned long long c_streamed = clock64();\n"),
)
END = ("\n}\n\n// Needs (bins + 1) * R * 4 B of dynamic shared memory",
       "\n  __syncthreads();\n  if (threadIdx.x == 0) {\n"
       "    trace[0] = g_in; trace[1] = c_in; trace[2] = c_zeroed; trace[3] = c_streamed; trace[4] = clock64();\n"
       "    trace[5] = ptx::globaltimer_ns(); trace[6] = ptx::smid();\n  }\n}\n\n"
       "// Needs (bins + 1) * R * 4 B of dynamic shared memory")


def traced_source(source: str) -> str:
    for old, new in PATCHES + (END,):
        if source.count(old) != 1:
            raise SystemExit(f"the patch anchor is not in histogram.cu exactly once: {old[:60]!r}")
        source = source.replace(old, new)
    return source


def main(only: tuple[int, ...]) -> None:
    import cupy as cp

    from cuadv.compiler import compile_source, kernel_source
    from cuadv.device import current_device
    from cuadv.histograms.launcher import engine
    from cuadv.kernel import max_active_blocks_per_sm
    from cuadv.launching import launch
    from cuadv.timing import time_gpu

    caps = current_device().caps
    eng = engine()
    source = traced_source(kernel_source("histogram.cu"))
    nbytes = 1 << 30
    for dtype, bins in CASES:
        if only and bins not in only:
            continue
        plan = eng.plan(bins, dtype)
        itemsize = np.dtype(dtype).itemsize
        n = nbytes // itemsize
        _, config = eng.launch_config(plan, n)
        kernel = compile_source(source, name="histogram_traced", arch=caps.arch,
                                name_expressions=[plan.kernel_expr]).kernel(plan.kernel_expr)
        x = cp.random.randint(0, bins, size=n, dtype=cp.int32).astype(dtype)
        # The stamps cost registers: where the traced kernel fits fewer blocks per SM than the shipped one, its grid
        # is cut to what is resident at once (else the surplus blocks run as a second wave).
        resident = max_active_blocks_per_sm(kernel, plan.threads, plan.shared_bytes) * caps.sm_count
        if resident < config.grid[0]:
            print(f"  (traced kernel: {resident} blocks resident, the shipped one's grid {config.grid[0]})", flush=True)
            config = replace(config, grid=resident)
        grid = config.grid[0]
        base = (bins + 1) & ~1
        out = cp.zeros(base + 2 * FIELDS * grid, dtype=cp.uint32)
        args = plan.kernel_args(x.data.ptr, n, out.data.ptr)

        def call(out=out, kernel=kernel, config=config, args=args, bins=bins):
            out[:bins].fill(0)
            launch(kernel, config, *args)

        event_ms = time_gpu(call, repeats=15).median_ms
        call()
        cp.cuda.Device().synchronize()
        want = cp.bincount(x.astype(cp.int32), minlength=bins)
        exact = bool((out[:bins].astype(cp.int64) == want).all())
        t = cp.asnumpy(out[base:].view(cp.uint64)).reshape(grid, FIELDS).astype(np.int64)
        g_in, c_in, c_zero, c_stream, c_flush, g_out = (t[:, i] for i in range(6))
        ghz = np.median((c_flush - c_in) / (g_out - g_in))  # cycles per ns over each block's life
        us = lambda cycles: cycles / ghz / 1e3  # noqa: E731
        span = (g_out.max() - g_in.min()) / 1e3
        print(f"{dtype} {bins} bins, {plan.label}, grid {grid}, {'exact' if exact else 'WRONG'}: event "
              f"{1e3 * event_ms:.1f} us, traced span {span:.1f} us, SM clock {ghz:.2f} GHz", flush=True)
        print(f"  entry spread {(g_in.max() - g_in.min()) / 1e3:.2f} us; zeroing median "
              f"{us(np.median(c_zero - c_in)):.2f} max {us((c_zero - c_in).max()):.2f} us; stream median "
              f"{us(np.median(c_stream - c_zero)):.1f} min {us((c_stream - c_zero).min()):.1f} max "
              f"{us((c_stream - c_zero).max()):.1f} us; flush median {us(np.median(c_flush - c_stream)):.2f} max "
              f"{us((c_flush - c_stream).max()):.2f} us", flush=True)
        print(f"  exits: first {(g_out.min() - g_in.min()) / 1e3:.1f} us, median "
              f"{(np.median(g_out) - g_in.min()) / 1e3:.1f} us, last {(g_out.max() - g_in.min()) / 1e3:.1f} us "
              "after the first entry", flush=True)
        del x, out


if __name__ == "__main__":
    main(tuple(int(b) for a in sys.argv[1:] if a.startswith("--bins=") for b in a[len("--bins="):].split(",")))
