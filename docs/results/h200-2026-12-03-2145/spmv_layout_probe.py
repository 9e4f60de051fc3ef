"""PROBE: does where the arrays lie move the time? Three copies of the same matrix and x (three DeviceCsr, the lab's
tile lists), each run by its own kernel objects (identical source), plus a second set of kernel objects on copy A;
cuSPARSE on each copy. All in the same interleaved rounds, twice."""
import sys
import cupy as cp
import numpy as np
sys.path.insert(0, "scripts")
import cuadv.labs.spmv_support as sup
from cuadv.labs.base import interleaved_rounds
from cuadv.labs.spmv import MEAN, SEED
from cuadv.timing import time_gpu
from spmv_probes import warmed_and_checked

kinds = sys.argv[1:] or ["R-MAT", "power-law"]
for kind in kinds:
    m = sup.generate(kind, 1 << 22, MEAN, SEED)
    x = np.random.default_rng(SEED + 1).uniform(-1, 1, m.n_cols).astype(np.float32)
    ref, abs_sum, _ = sup.reference(m, x)
    tol = sup.tolerance(m.lengths, abs_sum)
    devs = {c: sup.DeviceCsr(m, x) for c in "ABC"}
    calls = {}
    for c, kc in (("A", "A"), ("A", "A2"), ("B", "B"), ("C", "C")):
        k = sup.spmv_kernel(name=f"spmv_{kc}")
        dev = devs[c]
        for policy in ("steal", "fixed_work"):
            run = lambda k=k, dev=dev, policy=policy: dev.run(k, "split", policy)
            warmed_and_checked(dev, run, ref, tol, f"{kind} {c} {policy}")
            calls[f"copy {c}, kernel {kc}, {policy}"] = run
    for c, dev in devs.items():
        fn = next(f for pk, _l, f in sup.peers(dev)[0] if pk == "cusparse")
        fn()
        calls[f"copy {c}, cuSPARSE"] = fn
    for _ in range(2):
        ms = interleaved_rounds({label: (lambda fn=fn: [time_gpu(fn, repeats=10).median_ms])
                                 for label, fn in calls.items()}, 3)
        base = float(ms["copy A, cuSPARSE"])
        for label, t in sorted(ms.items(), key=lambda kv: kv[1]):
            print(f"{kind:10s} {label:34s} {float(t) * 1e3:8.1f} us  x cuSPARSE on A {base / float(t):.3f}", flush=True)
    for c, dev in devs.items():
        print(kind, c, {n: hex(a.data.ptr) for n, a in (("x", dev.x), ("cols", dev.cols), ("vals", dev.vals), ("offsets", dev.offsets))})
    del devs, calls
    cp.get_default_memory_pool().free_all_blocks()
