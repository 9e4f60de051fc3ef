"""PROBE: does time_gpu's 150 us spin hide a TileKernel launch's host time? R-MAT (and power-law), steal and
fixed_work and cuSPARSE timed with 150, 500 and 1000 us queued ahead, and each call's host time measured."""
import sys, time
import numpy as np
sys.path.insert(0, "scripts")
import cuadv.labs.spmv_support as sup
from cuadv.labs.spmv import MEAN, SEED
from cuadv.timing import time_gpu
from spmv_probes import warmed_and_checked

for kind in sys.argv[1:] or ["R-MAT"]:
    dev, ref, tol = sup.checked_case(kind, 1 << 22, MEAN, SEED)
    k = sup.spmv_kernel()
    calls = {p: (lambda p=p: dev.run(k, "split", p)) for p in ("steal", "fixed_work")}
    for p, fn in calls.items():
        warmed_and_checked(dev, fn, ref, tol, p)
    calls["cuSPARSE"] = next(f for pk, _l, f in sup.peers(dev)[0] if pk == "cusparse")
    calls["cuSPARSE"]()
    for label, fn in calls.items():
        import cupy as cp
        cp.cuda.Device().synchronize()
        host = []
        for _ in range(20):
            t0 = time.perf_counter(); fn(); host.append(time.perf_counter() - t0)
        cp.cuda.Device().synchronize()
        print(f"{kind} {label:10s} host us per call: median {1e6 * np.median(host):.1f} max {1e6 * max(host):.1f}", flush=True)
    for rnd in range(2):
        for q in (150.0, 500.0, 1000.0):
            ms = {label: time_gpu(fn, repeats=10, queue_ahead_us=q).median_ms for label, fn in calls.items()}
            base = ms["cuSPARSE"]
            print(f"{kind} queue {q:6.0f} us: " + "  ".join(f"{l} {1e3 * t:.1f} us ({base / t:.3f}x)" for l, t in ms.items()), flush=True)
