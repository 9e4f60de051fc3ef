"""Where steal's SpMV gap to fixed_work lies: the lab's body (split rows, register body, 256 threads, 40 registers)
under one block per tile and under steal's loop, each with the tile's batches of rows shared out statically (warp w
takes batches w, w + 8, ...) or claimed by the warps from a counter in shared memory (dynamic), and with or without a
__syncthreads() after each tile (fixed_work only; steal's loop has its own). Every variant is checked against SciPy
in float64, then timed against cuSPARSE in interleaved rounds, on the lab's three matrices (4M rows, seed 18).

    PYTHONPATH=src python3 scripts/spmv_batches_probe.py > spmv_batches_probe.log

fixed_work with dynamic batches zeroes the block's counter in its prologue (once per tile, as each block runs one),
and the tile's last claim resets it, as under steal.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from cuadv import TileKernel
from cuadv.compiler import kernel_source
from cuadv.labs.base import interleaved_rounds
from cuadv.labs.spmv import MATRICES, MEAN, SEED
from cuadv.labs.spmv_support import (BODY, MIN_BLOCKS, PARAMS, PROLOGUE, STAGE, THREADS, checked_case, peers,
                                     spmv_kernel)
from cuadv.timing import time_gpu
from spmv_residency_probe import BARRIER  # scripts/ is on sys.path when a script there runs


def fixed_work_kernel(dynamic: bool, barrier: bool) -> TileKernel:
    flag = "true" if dynamic else "false"
    body = BODY.format(threads=THREADS, short="kRegisters", stage=STAGE, dynamic=flag) + (BARRIER if barrier else "")
    return TileKernel(PARAMS, body, PROLOGUE.format(dynamic=flag), policy="fixed_work", block=THREADS,
                      preamble=kernel_source("spmv.cuh"), name=f"batches_fw_{flag}_{int(barrier)}",
                      min_blocks_per_sm=MIN_BLOCKS)


def main() -> None:
    variants = {
        "fixed_work, static batches": (fixed_work_kernel(False, False), "fixed_work"),
        "fixed_work, static batches, barrier": (fixed_work_kernel(False, True), "fixed_work"),
        "fixed_work, dynamic batches": (fixed_work_kernel(True, False), "fixed_work"),
        "fixed_work, dynamic batches, barrier": (fixed_work_kernel(True, True), "fixed_work"),
        "steal, dynamic batches (the lab)": (spmv_kernel(name="batches_steal_dyn"), "steal"),
        "steal, static batches": (spmv_kernel(name="batches_steal_static", batches="static"), "steal"),
    }
    for kind in MATRICES:
        dev, ref, tol = checked_case(kind, 1 << 22, MEAN, SEED)
        calls = {}
        for label, (k, policy) in variants.items():
            def call(k=k, policy=policy, dev=dev):
                return dev.run(k, "split", policy)
            for _ in range(3):  # steal learns its grid over its first launches
                dev.y.fill(np.nan)
                call()
            if (np.abs(cp.asnumpy(dev.y) - ref) > tol).any():
                raise SystemExit(f"{kind}, {label}: a row is wrong")
            calls[label] = call
        calls["cuSPARSE"] = next(fn for peer_kind, _label, fn in peers(dev)[0] if peer_kind == "cusparse")
        calls["cuSPARSE"]()  # its first call sets it up
        ms = interleaved_rounds({label: (lambda fn=fn: [time_gpu(fn, repeats=10).median_ms])
                                 for label, fn in calls.items()}, 5)
        base = float(ms["cuSPARSE"])
        for label, t in sorted(ms.items(), key=lambda kv: kv[1]):
            print(f"{kind:10s} {label:40s} {float(t) * 1e3:8.1f} us  x cuSPARSE {base / float(t):.3f}", flush=True)
        del dev
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
