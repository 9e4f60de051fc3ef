"""The SpMV tile body at 5, 6 and 8 blocks per SM (its __launch_bounds__ register cap: 48, 40 and 32 registers),
both short-row bodies, both tile lists, steal and fixed_work, against cuSPARSE, on the lab's three matrices
(4M rows, 8 non-zeros per row on average, seed 18). Every result is checked against SciPy in float64 first.

    python3 scripts/spmv_occupancy_sweep.py > spmv_occupancy.log

One line per variant, fastest first: its median time (3 interleaved rounds of 10 CUDA-event timings) and its
ratio to cuSPARSE's prepared SpMV measured in the same rounds.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from cuadv.labs.base import interleaved_rounds
from cuadv.labs.spmv import MATRICES, MEAN, SEED
from cuadv.labs.spmv_support import checked_case, peers, spmv_kernel
from cuadv.timing import time_gpu

BLOCKS_PER_SM = (5, 6, 8)


def main() -> None:
    # One TileKernel per tile list, so steal's learned grid comes from launches over the same tiles (as in the lab).
    kernels = {(mb, short, tiling): spmv_kernel(min_blocks=mb, short_rows=short, name=f"spmv_mb{mb}_{tiling}")
               for mb in BLOCKS_PER_SM for short in ("registers", "staged") for tiling in ("split", "whole")}
    for kind in MATRICES:
        dev, ref, tol = checked_case(kind, 1 << 22, MEAN, SEED)
        calls = {}
        for (mb, short, tiling), k in kernels.items():
            for policy in ("steal", "fixed_work"):
                for _ in range(3):  # steal learns its grid over its first launches
                    dev.run(k, tiling, policy)
                if (np.abs(cp.asnumpy(dev.y) - ref) > tol).any():
                    raise SystemExit(f"{kind}: {mb} blocks/SM, {short}, {tiling}, {policy}: a row is wrong")
                calls[f"{mb} blocks/SM, {short}, {tiling}, {policy}"] = (
                    lambda k=k, tiling=tiling, policy=policy: dev.run(k, tiling, policy))
        for peer_kind, _label, call in peers(dev)[0]:
            if peer_kind == "cusparse":
                call()
                calls["cuSPARSE"] = call
        ms = interleaved_rounds({label: (lambda fn=fn: [time_gpu(fn, repeats=10).median_ms])
                                 for label, fn in calls.items()}, 3)
        base = float(ms["cuSPARSE"])
        for label, t in sorted(ms.items(), key=lambda kv: kv[1]):
            print(f"{kind:10s} {label:44s} {float(t) * 1e3:8.1f} us  x cuSPARSE {base / float(t):.3f}", flush=True)
        del dev
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
