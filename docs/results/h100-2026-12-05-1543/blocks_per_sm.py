import cupy as cp
from cuadv.timing import time_gpu, read_ceiling
from cuadv.labs.segreduce_support import generate_segments, segment_bytes, reference
from cuadv.labs.spmv_support import DeviceCsr, spmv_kernel, check, tolerance, to_host
rc = read_ceiling().tb_per_s
ks = {mb: spmv_kernel(name="segreduce", gather=False, min_blocks=mb) for mb in (6, 8)}
for kind in ("uniform", "power-law", "R-MAT"):
    m = generate_segments(kind, 1 << 22, 32, 19)
    ref, mag = reference(m)
    dev = DeviceCsr(m, None)
    for r in range(2):
        for mb, k in ks.items():
            for p in ("fixed_work", "steal", "fixed_blocks"):
                if r == 0:
                    dev.y.fill(cp.nan); dev.run(k, "split", p); check(kind, to_host(dev.y), ref, tolerance(m.lengths, mag), lab="mb")
                ms = time_gpu(lambda: dev.run(k, "split", p), repeats=10, queue_ahead_us=500).median_ms
                print(f"{kind:9s} r{r} mb{mb} {p:12s} {ms:.4f} ms {100*segment_bytes(m)/(ms*1e-3)/(rc*1e12):.1f}%", flush=True)
    del dev; cp.get_default_memory_pool().free_all_blocks()
