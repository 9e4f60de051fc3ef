"""Where steal's SpMV gap to fixed_work lies: the lab's body (split rows, register body, 256 threads, 40 registers)
under one block per tile and under steal's loop, each with the tile's batches of rows shared out statically (warp w
takes batches w, w + 8, ...) or claimed by the warps from a counter in shared memory (dynamic), and with or without a
__syncthreads() after each tile (fixed_work only; steal's loop has its own). Every variant is checked against SciPy
in float64, then timed against cuSPARSE in interleaved rounds, on the lab's three matrices (4M rows, seed 18).

    PYTHONPATH=src python3 scripts/spmv_batches_probe.py [WORD ...] > spmv_batches_probe.log

WORD: only the variants whose label contains one of them ("steal", "fixed_work, static", ...).

fixed_work with dynamic batches zeroes the block's counter in its prologue (once per tile, as each block runs one),
and the tile's last claim resets it, as under steal.
"""

from __future__ import annotations

import sys

import cupy as cp

from cuadv.labs.spmv import MATRICES, MEAN, SEED
from cuadv.labs.spmv_support import checked_case, spmv_kernel
from spmv_probes import body_kernel, print_against_cusparse, warmed_and_checked


def main() -> None:
    variants = {
        "fixed_work, static batches": (body_kernel("false", "batches_fw_false_0"), "fixed_work"),
        "fixed_work, static batches, barrier": (body_kernel("false", "batches_fw_false_1", barrier=True), "fixed_work"),
        "fixed_work, dynamic batches": (body_kernel("true", "batches_fw_true_0"), "fixed_work"),
        "fixed_work, dynamic batches, barrier": (body_kernel("true", "batches_fw_true_1", barrier=True), "fixed_work"),
        "steal, dynamic batches (the lab)": (spmv_kernel(name="batches_steal_dyn"), "steal"),
        "steal, static batches": (spmv_kernel(name="batches_steal_static", batches="static"), "steal"),
    }
    only = sys.argv[1:]  # labels containing any of these words (default: every variant)
    variants = {label: v for label, v in variants.items() if not only or any(w in label for w in only)}
    for kind in MATRICES:
        dev, ref, tol = checked_case(kind, 1 << 22, MEAN, SEED)
        calls = {}
        for label, (k, policy) in variants.items():
            def call(k=k, policy=policy, dev=dev):
                return dev.run(k, "split", policy)
            warmed_and_checked(dev, call, ref, tol, f"{kind}, {label}")
            calls[label] = call
        print_against_cusparse(kind, dev, calls, 5, width=40)
        del dev
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
