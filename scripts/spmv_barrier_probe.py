"""What a block-wide barrier at every tile boundary, and the code ptxas makes of the body in each policy's kernel,
cost the spmv lab's tile loop: the lab's body (split rows, the register short-row body, 6 blocks per SM) under
fixed_work, fixed_blocks and steal, as it is, with a __syncthreads() after it, and as a call of one out-of-line
function (compiled once, the same code under every policy), on the lab's three matrices (4M rows, seed 18),
against cuSPARSE.

    PYTHONPATH=src python3 scripts/spmv_barrier_probe.py > spmv_barrier_probe.log

fixed_blocks loops over its tiles with no claim and no barrier, so the barrier is all that differs between its
two rows: the cost of making a block's warps start each tile together, which steal's one-barrier hand-off and the
atomic counter's publish pay on every tile. fixed_work ends each tile with its block anyway (the barrier adds no
wait there), so a change in its time is one in ptxas's code of the body. If the out-of-line body closes the gap
between steal and fixed_work, what steal loses is ptxas's code of the body inside its loop. Every result is
checked against SciPy in float64 first; one line per variant, fastest first (median of 5 interleaved rounds of 10
CUDA-event timings) with its ratio to cuSPARSE.
"""

from __future__ import annotations

import cupy as cp

from cuadv import TileKernel
from cuadv.compiler import kernel_source
from cuadv.labs.spmv import MATRICES, MEAN, SEED
from cuadv.labs.spmv_support import BODY, MIN_BLOCKS, PARAMS, STAGE, THREADS, checked_case
from spmv_probes import BARRIER, print_against_cusparse, warmed_and_checked

POLICIES = ("fixed_work", "fixed_blocks", "steal")
# The body as a call of one out-of-line function: ptxas compiles it once, the same code under every policy.
OUT_OF_LINE = f"""
static __device__ __noinline__ void spmv_probe_tile({PARAMS.replace("__restrict__ ", "")},
                                                    unsigned long long index) {{
  cuadv_spmv::run_tile<{THREADS}, cuadv_spmv::ShortRows::kRegisters, {STAGE}>(index, tiles, splits, offsets, cols, vals,
                                                                          x, y, partials, counts);
}}
"""
CALL = "      spmv_probe_tile(tiles, splits, offsets, cols, vals, x, y, partials, counts, tile.index);\n"
VARIANTS = {"": "plain", ", barrier after each tile": "barrier", ", body out of line": "call"}


def kernel(variant: str) -> TileKernel:
    body = BODY.format(threads=THREADS, short="kRegisters", stage=STAGE, dynamic="false")  # static batches
    preamble = kernel_source("spmv.cuh")
    if variant == "barrier":
        body += BARRIER
    elif variant == "call":
        body, preamble = CALL, preamble + OUT_OF_LINE
    return TileKernel(PARAMS, body, preamble=preamble, block=THREADS, min_blocks_per_sm=MIN_BLOCKS,
                      name=f"spmv_probe_{variant}")


def probe(kind: str, kernels: dict[str, TileKernel]) -> None:
    dev, ref, tol = checked_case(kind, 1 << 22, MEAN, SEED)
    calls = {}
    for suffix, k in kernels.items():
        for policy in POLICIES:
            call = calls[policy + suffix] = lambda k=k, policy=policy: dev.run(k, "split", policy)
            warmed_and_checked(dev, call, ref, tol, f"{kind}, {policy}{suffix}")
    print_against_cusparse(kind, dev, calls, 5)


def main() -> None:
    kernels = {suffix: kernel(variant) for suffix, variant in VARIANTS.items()}
    for kind in MATRICES:
        probe(kind, kernels)
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
