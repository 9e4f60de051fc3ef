import cupy as cp
from cuadv.timing import time_gpu, read_ceiling
from cuadv.labs.segreduce_support import generate_segments, segment_bytes
from cuadv.labs.spmv_support import DeviceCsr, spmv_kernel
rc = read_ceiling().tb_per_s
ks = {s: spmv_kernel(name="segreduce", short_rows=s, gather=False) for s in ("registers", "staged")}
for kind in ("power-law", "R-MAT", "uniform"):
    m = generate_segments(kind, 1 << 22, 32, 19)
    dev = DeviceCsr(m, None)
    for r in range(2):
        for s, k in ks.items():
            for p in ("fixed_work", "steal"):
                ms = time_gpu(lambda: dev.run(k, "split_fixed", p), repeats=10, queue_ahead_us=500).median_ms
                print(f"{kind:9s} r{r} {s:9s} {p:10s} {ms:.4f} ms {100*segment_bytes(m)/(ms*1e-3)/(rc*1e12):.1f}% of {rc:.2f} TB/s", flush=True)
    del dev; cp.get_default_memory_pool().free_all_blocks()
