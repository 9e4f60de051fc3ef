"""Does the SM's L1 / shared-memory split cost the histogram launches time? The `shared` histogram kernels ask for
up to 227 KB of shared memory per SM; the kernels around them in a timed call (time_gpu's spin ahead of the start
event, the widening pass after a count) ask for none, and a kernel whose carveout differs from what an SM is set
to cannot start there until the SM is reconfigured (CUDA Programming Guide, "Shared Memory" of compute capability
9.0: the carveout is a per-kernel preference). Alternated rounds, in one process: `default` (as the lab runs), and
`max-shared` (the spin kernel and the widening passes prefer the largest shared-memory carveout, so no SM changes
its split between them and a histogram; the read-only kernel keeps its default). Prints per round the read-only
ceiling and, per case, the one-shot and prepared medians and their % of that round's ceiling.

    PYTHONPATH=src python3 scripts/hist_carveout_probe.py [--rounds=2]
"""

from __future__ import annotations

import sys

CASES = (("int32", 256), ("int32", 65536), ("uint8", 256))
NBYTES = 1 << 30


def main(rounds: int) -> None:
    import cupy as cp

    import cuadv
    from cuadv import timing
    from cuadv.arch import arch_for
    from cuadv.device import current_device
    from cuadv.histograms.api import binning_module

    caps = current_device().caps
    arch = arch_for(caps.compute_capability)
    rng = cp.random.default_rng(7)
    data = {}
    for dtype, bins in CASES:
        n = NBYTES // (4 if dtype == "int32" else 1)
        data[dtype, bins] = rng.integers(0, bins, n, dtype=cp.int32).astype(dtype)
    # Compile everything once (the spin, the read-only kernel, each plan and its widening pass).
    timing.read_ceiling(NBYTES)
    prepared = {}
    for (dtype, bins), x in data.items():
        cuadv.histogram(x, bins=bins, range=(0, bins))
        prepared[dtype, bins] = cuadv.prepare_histogram(x, bins=bins, range=(0, bins))
    cp.cuda.Device().synchronize()
    kernels = [timing._queue_ahead_kernel, binning_module(arch).kernel("hist_widen<float>"),
               binning_module(arch).kernel("hist_widen<double>")]

    def set_carveout(value: int) -> None:
        for k in kernels:
            k.set_attribute("PREFERRED_SHARED_MEMORY_CARVEOUT", value)

    for r in range(rounds):
        for mode, value in (("default", -1), ("max-shared", 100)):
            set_carveout(value)
            timing._read_ceiling = None  # measured again under this mode
            ceiling = timing.read_ceiling(NBYTES)
            print(f"round {r + 1} {mode:<10} read-only ceiling {ceiling.bytes_per_s / 1e9:.0f} GB/s "
                  f"({ceiling.timing.median_ms * 1e3:.1f} us)", flush=True)
            for (dtype, bins), x in data.items():
                one = timing.time_gpu(lambda x=x, b=bins: cuadv.histogram(x, bins=b, range=(0, b)), repeats=25)
                prep = timing.time_gpu(prepared[dtype, bins], repeats=25)
                pct = [100 * ceiling.timing.median_ms / t.median_ms for t in (one, prep)]
                print(f"  {dtype}:{bins:<6} one-shot {one.median_ms * 1e3:7.1f} us ({pct[0]:5.1f}%)   "
                      f"prepared {prep.median_ms * 1e3:7.1f} us ({pct[1]:5.1f}%)", flush=True)
    set_carveout(-1)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a.startswith("--rounds=")]
    main(int(args[0].split("=", 1)[1]) if args else 2)
