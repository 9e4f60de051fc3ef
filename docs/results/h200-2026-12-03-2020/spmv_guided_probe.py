"""PROBE: tile lists whose windows shrink toward the end (guided), against fixed windows, steal and fixed_work."""
import os, sys
import cupy as cp
import numpy as np
sys.path.insert(0, "scripts")
import cuadv.labs.spmv_support as sup
from cuadv.labs.spmv import MATRICES, MEAN, SEED
from spmv_probes import print_against_cusparse, warmed_and_checked

VARIANTS = {
    "g2048": dict(group=2048),
    "guided 2048-8192": dict(group=2048, guided=(8192, 792, False)),
    "guided 2048-16384": dict(group=2048, guided=(16384, 792, False)),
    "guided 2048-8192 scaled": dict(group=2048, guided=(8192, 792, True)),
    "guided 2048-16384 scaled": dict(group=2048, guided=(16384, 792, True)),
    "guided 2048-16384 x4": dict(group=2048, guided=(16384, 1584, False)),
}
real = sup.build_tiles
kinds = sys.argv[1:] or list(MATRICES)
kernels = {v: sup.spmv_kernel(name=f"spmv_{i}") for i, v in enumerate(VARIANTS)}
for kind in kinds:
    m = sup.generate(kind, 1 << 22, MEAN, SEED)
    x = np.random.default_rng(SEED + 1).uniform(-1, 1, m.n_cols).astype(np.float32)
    ref, abs_sum, _ = sup.reference(m, x)
    tol = sup.tolerance(m.lengths, abs_sum)
    calls, devs = {}, {}
    for v, kw in VARIANTS.items():
        def patched(offsets, split, group, slice_nnz, kw=kw, **rest):
            kw = dict(kw); g = kw.pop("group"); sl = kw.pop("slice_nnz", 4 * g)
            return real(offsets, split, g, sl, **kw, **rest)
        sup.build_tiles = patched
        dev = devs[v] = sup.DeviceCsr(m, x)
        sup.build_tiles = real
        t = dev.tilings["split"][0]
        print(f"{kind} {v}: {t.count} tiles", flush=True)
        for policy in os.environ.get("POLICIES", "steal fixed_work").split():
            run = lambda k=kernels[v], dev=dev, policy=policy: dev.run(k, "split", policy)
            warmed_and_checked(dev, run, ref, tol, f"{kind} {v} {policy}")
            calls[f"{v}, {policy}"] = run
    print_against_cusparse(kind, devs["g2048"], calls, 3, width=40)
    del devs, calls
    cp.get_default_memory_pool().free_all_blocks()
