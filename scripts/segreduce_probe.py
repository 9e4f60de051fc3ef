"""The segmented sum's own times, without its peers: the segreduce lab's kernel under fixed_work, steal and
fixed_blocks on split segments of each kind, with the guided windows narrowed for the blocks per SM the kernel keeps
resident, or for those given. Every variant's sums are checked against float64 sums before it is timed. Run it on
each source tree of an A/B (scripts/tree_ab.sh), or with another block size (--threads, --min-blocks: the kernel's
__launch_bounds__, the tiles built for that block; default: the lab's); the rounds alternate the variants.

    PYTHONPATH=src python3 scripts/segreduce_probe.py                 2**22 segments of mean 32, 2 rounds
    PYTHONPATH=src python3 scripts/segreduce_probe.py --segments-log2 19 --kinds uniform
    PYTHONPATH=src python3 scripts/segreduce_probe.py --threads 256 --min-blocks 8 --windows-per-sm 6 8
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segments-log2", type=int, default=22)
    ap.add_argument("--kinds", nargs="+", default=None, help="power-law, R-MAT, uniform (default: all)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None, help="threads per block (default: the lab's, THREADS)")
    ap.add_argument("--min-blocks", type=int, default=None,
                    help="blocks per SM to compile for (default: 2048 / threads, the whole SM, as the lab's "
                         "MIN_BLOCKS)")
    ap.add_argument("--windows-per-sm", type=int, nargs="+", default=None,
                    help="blocks per SM the guided windows narrow for, one DeviceCsr each (default: --min-blocks)")
    args = ap.parse_args()

    import cupy as cp

    from cuadv.device import current_device
    from cuadv.labs.segreduce import MEAN, SEED, THREADS, segment_tiles, segsum_kernel
    from cuadv.labs.segreduce_support import KINDS, generate_segments, reference, segment_bytes
    from cuadv.labs.spmv_support import check, to_host, tolerance
    from cuadv.timing import read_ceiling, time_gpu

    sms = current_device().caps.sm_count
    ceiling = read_ceiling().tb_per_s * 1e12
    threads = args.threads or THREADS
    min_blocks = args.min_blocks or max(1, 2048 // threads)  # the whole SM's threads, as the lab's MIN_BLOCKS
    kernel = segsum_kernel(threads, min_blocks)
    windows = args.windows_per_sm or (min_blocks,)
    print(f"{current_device().caps.name}, read-only ceiling {ceiling / 1e12:.2f} TB/s; {threads} threads per block, "
          f"compiled for {kernel.min_blocks_per_sm} blocks per SM", flush=True)
    for kind in args.kinds or KINDS:
        m = generate_segments(kind, 1 << args.segments_log2, MEAN, SEED)
        ref, magnitude = reference(m)
        tol = tolerance(m.lengths, magnitude)
        devs = {per_sm: segment_tiles(m, slots=sms * per_sm, threads=threads) for per_sm in windows}
        for r in range(args.rounds):
            for per_sm, dev in devs.items():
                for policy in ("fixed_work", "steal", "fixed_blocks"):
                    if r == 0:
                        dev.y.fill(np.nan)
                        dev.run(kernel, "split", policy)
                        check(f"{kind}, windows for {per_sm}, {policy}", to_host(dev.y), ref, tol, lab="probe")
                    ms = time_gpu(lambda: dev.run(kernel, "split", policy), repeats=args.repeats,
                                  queue_ahead_us=500).median_ms
                    pct = 100 * segment_bytes(m) / (ms * 1e-3) / ceiling
                    print(f"{kind:9s} round {r} windows for {per_sm} per SM  {policy:12s} {ms:.4f} ms {pct:5.1f}%",
                          flush=True)
        del devs
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
