"""Does the grid steal learns move its time? The lab's R-MAT matrix (4M rows by default, seed 18, split rows in
guided windows, one copy of the arrays), steal with the grid it learns from its slice reports (the lab's default,
whose min_units read 5 to 13 over 60 launches of this matrix on 2026-12-03 23:40) against steal with min_units
fixed (by default at 5, 9, 13 and at the slots' share: the resident grid, each block yielding once it has run its
share, the learned rule until 2026-12-04 where a share is at most two slices) and without a time slice; each
checked against SciPy in float64, then timed against cuSPARSE in interleaved rounds.

    PYTHONPATH=src python3 scripts/spmv_min_units_probe.py [--rows 2**19] [--fixed 5 share] [--rounds 5]
"""

from __future__ import annotations

import argparse
import math

from cuadv.labs.spmv import MEAN, SEED
from cuadv.labs.spmv_support import checked_case, spmv_kernel
from spmv_probes import print_against_cusparse, warmed_and_checked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", type=lambda v: int(eval(v, {})), default=1 << 22)
    ap.add_argument("--fixed", nargs="*", default=["5", "9", "13", "share"], help="min_units values, or 'share'")
    args = ap.parse_args()
    dev, ref, tol = checked_case("R-MAT", args.rows, MEAN, SEED)
    units = dev.tilings["split"][0].count
    learned = spmv_kernel(policy="steal")
    share = -(-units // learned.resident_units("steal"))
    kernels = {"steal, learned grid (the lab's)": learned}
    for fixed in (share if v == "share" else int(v) for v in args.fixed):
        label = f"steal, min_units {fixed}" + (" (the share)" if fixed == share else "")
        kernels[label] = spmv_kernel(policy="steal", min_tiles=fixed)
    kernels["steal, no time slice"] = spmv_kernel(policy="steal", quantum_us=math.inf)
    calls = {label: (lambda k=k: dev.run(k, "split")) for label, k in kernels.items()}
    for label, fn in calls.items():
        warmed_and_checked(dev, fn, ref, tol, label)
    print(f"R-MAT: {units} tiles, {learned.resident_units('steal')} resident blocks, share {share}", flush=True)
    print_against_cusparse("R-MAT", dev, calls, args.rounds)
    for label, k in kernels.items():
        rec = k.last_launch
        print(f"{label:40s} last launch: min_units {rec.min_units}, grid {rec.config.grid[0]}", flush=True)


if __name__ == "__main__":
    main()
