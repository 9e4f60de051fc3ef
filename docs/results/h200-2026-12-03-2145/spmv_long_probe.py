"""PROBE: the long-row threshold (rows up to long_nnz non-zeros in short-row tiles) under steal and fixed_work, on
guided lists; one traced launch per variant."""
import sys
import cupy as cp
import numpy as np
sys.path.insert(0, "scripts")
import cuadv.labs.spmv_support as sup
from cuadv.labs.spmv import MEAN, SEED
from spmv_probes import print_against_cusparse, warmed_and_checked
from sched_trace_breakdown import breakdown

VARIANTS = {"lab (768)": {}, "long 512": dict(long_nnz=512), "long 640": dict(long_nnz=640),
            "long 1024": dict(long_nnz=1024)}
real = sup.build_tiles
kinds = sys.argv[1:] or ["R-MAT", "power-law"]
kernels = {v: sup.spmv_kernel(name=f"spmv_{i}") for i, v in enumerate(VARIANTS)}
for kind in kinds:
    m = sup.generate(kind, 1 << 22, MEAN, SEED)
    x = np.random.default_rng(SEED + 1).uniform(-1, 1, m.n_cols).astype(np.float32)
    ref, abs_sum, _ = sup.reference(m, x)
    tol = sup.tolerance(m.lengths, abs_sum)
    calls, devs = {}, {}
    for v, kw in VARIANTS.items():
        def patched(offsets, split, group, slice_nnz, kw=kw, **rest):
            kw = dict(kw); slice_nnz = kw.pop("slice_nnz", slice_nnz)
            return real(offsets, split, group, slice_nnz, **{**rest, **kw})
        sup.build_tiles = patched
        dev = devs[v] = sup.DeviceCsr(m, x)
        sup.build_tiles = real
        t = dev.tilings["split"][0]
        print(f"{kind} {v}: {t.count} tiles {t.kinds()}", flush=True)
        for policy in ("steal", "fixed_work"):
            run = lambda k=kernels[v], dev=dev, policy=policy: dev.run(k, "split", policy)
            warmed_and_checked(dev, run, ref, tol, f"{kind} {v} {policy}")
            calls[f"{v}, {policy}"] = run
    for rnd in range(2):
        print_against_cusparse(kind, devs["lab (768)"], calls, 3, width=40)
    print(f"{'traced':30s} {'span':>8s} {'work':>8s} {'fill':>7s} {'gap':>6s} {'tile':>7s} {'sm':>6s} {'blocks':>7s}")
    for v in VARIANTS:
        for policy, k in (("steal", kernels[v]), ("fixed_work", kernels[v])):
            slots = k.resident_units("steal" if "steal" in policy else policy)
            stats = sorted((breakdown(devs[v].run(k, "split", policy.split()[0], trace=True), slots) for _ in range(3)),
                           key=lambda d: d["span"])[1]
            print(f"{kind[:6]} {v[:14]:14s} {policy:11s} {stats['span']:8.1f} {stats['work']:8.1f} {stats['fill']:7.1f} "
                  f"{stats['gap']:6.2f} {stats['tile']:7.2f} {stats['sm']:6.1f} {stats['blocks']:7d}", flush=True)
    del devs, calls
    cp.get_default_memory_pool().free_all_blocks()
