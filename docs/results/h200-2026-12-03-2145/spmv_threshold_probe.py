"""PROBE: the long-row threshold with every variant on the same device arrays (one DeviceCsr; only the tile lists
and kernels differ), so that where the arrays lie in memory cannot tell the variants apart; the order of the
variants is reversed in the second pass."""
import sys
import cupy as cp
import numpy as np
sys.path.insert(0, "scripts")
import cuadv.labs.spmv_support as sup
from cuadv.labs.spmv import MEAN, SEED
from spmv_probes import print_against_cusparse, warmed_and_checked

LONG = [512, 768, 1024]
kinds = sys.argv[1:] or ["R-MAT", "power-law"]
kernels = {v: sup.spmv_kernel(name=f"spmv_t{v}") for v in LONG}
for kind in kinds:
    m = sup.generate(kind, 1 << 22, MEAN, SEED)
    x = np.random.default_rng(SEED + 1).uniform(-1, 1, m.n_cols).astype(np.float32)
    ref, abs_sum, _ = sup.reference(m, x)
    tol = sup.tolerance(m.lengths, abs_sum)
    dev = sup.DeviceCsr(m, x)
    for v in LONG:
        t = sup.build_tiles(m.offsets, True, widest=sup.WIDEST_NNZ, slots=792, long_nnz=v)
        dev.tilings[f"long{v}"] = (t, cp.asarray(t.tiles), cp.asarray(t.splits.reshape(-1)),
                                   cp.zeros(max(t.count, 1), cp.float32), cp.zeros(max(t.splits.shape[0], 1), cp.uint32))
        dev._short_extent[f"long{v}"] = t.short_extent()
        print(f"{kind} long {v}: {t.count} tiles {t.kinds()}", flush=True)
    for order in (LONG, LONG[::-1]):
        calls = {}
        for v in order:
            for policy in ("steal", "fixed_work"):
                run = lambda k=kernels[v], v=v, policy=policy: dev.run(k, f"long{v}", policy)
                warmed_and_checked(dev, run, ref, tol, f"{kind} {v} {policy}")
                calls[f"long {v}, {policy}"] = run
        print_against_cusparse(kind, dev, calls, 3, width=30)
    del dev
    cp.get_default_memory_pool().free_all_blocks()
