"""What a block-wide barrier at every tile boundary costs the spmv lab's tile loop: the lab's body (split rows, the
register short-row body, 5 blocks per SM) under fixed_work, fixed_blocks and steal, each with and without a
__syncthreads() after the body, on the lab's three matrices (4M rows, seed 18), against cuSPARSE.

    PYTHONPATH=src python3 scripts/spmv_barrier_probe.py > spmv_barrier_probe.log

fixed_blocks loops over its tiles with no claim and no barrier, so the barrier is all that differs between its
two rows: the cost of making a block's warps start each tile together, which steal's one-barrier hand-off and the
atomic counter's publish pay on every tile. fixed_work ends each tile with its block anyway (a barrier there
changes nothing), so its two rows are the control. Every result is checked against SciPy in float64 first; one line
per variant, fastest first (median of 5 interleaved rounds of 10 CUDA-event timings) with its ratio to cuSPARSE.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from cuadv import TileKernel
from cuadv.compiler import kernel_source
from cuadv.labs.base import interleaved_rounds
from cuadv.labs.spmv import MATRICES, MEAN, SEED
from cuadv.labs.spmv_support import BODY, MIN_BLOCKS, PARAMS, STAGE, THREADS, checked_case, peers
from cuadv.timing import time_gpu

POLICIES = ("fixed_work", "fixed_blocks", "steal")
BARRIER = "      __syncthreads();  // every warp has finished this tile before any starts the next\n"


def kernel(barrier: bool) -> TileKernel:
    body = BODY.format(threads=THREADS, short="kRegisters", stage=STAGE) + (BARRIER if barrier else "")
    return TileKernel(PARAMS, body, preamble=kernel_source("spmv.cuh"), block=THREADS, min_blocks_per_sm=MIN_BLOCKS,
                      name=f"spmv_probe_{'barrier' if barrier else 'plain'}")


def probe(kind: str, kernels: dict[bool, TileKernel]) -> None:
    dev, ref, tol = checked_case(kind, 1 << 22, MEAN, SEED)
    calls = {}
    for barrier, k in kernels.items():
        for policy in POLICIES:
            for _ in range(3):  # steal learns its grid over its first launches
                dev.run(k, "split", policy)
            if (np.abs(cp.asnumpy(dev.y) - ref) > tol).any():
                raise SystemExit(f"{kind}, {policy}, barrier {barrier}: a row is wrong")
            label = f"{policy}{', barrier after each tile' if barrier else ''}"
            calls[label] = lambda k=k, policy=policy: dev.run(k, "split", policy)
    calls["cuSPARSE"] = next(call for peer_kind, _label, call in peers(dev)[0] if peer_kind == "cusparse")
    calls["cuSPARSE"]()  # its first call sets it up
    ms = interleaved_rounds({label: (lambda fn=fn: [time_gpu(fn, repeats=10).median_ms])
                             for label, fn in calls.items()}, 5)
    base = float(ms["cuSPARSE"])
    for label, t in sorted(ms.items(), key=lambda kv: kv[1]):
        print(f"{kind:10s} {label:42s} {float(t) * 1e3:8.1f} us  x cuSPARSE {base / float(t):.3f}", flush=True)


def main() -> None:
    kernels = {barrier: kernel(barrier) for barrier in (False, True)}
    for kind in MATRICES:
        probe(kind, kernels)
        cp.get_default_memory_pool().free_all_blocks()

if __name__ == "__main__":
    main()
