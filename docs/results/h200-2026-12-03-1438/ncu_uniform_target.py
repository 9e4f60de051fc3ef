"""ncu target: uniform split rows, fixed_work (static batches) and steal (the lab's kernel), one profiled launch each."""
import cupy as cp, numpy as np
from cuadv.labs.spmv import MEAN, SEED
from cuadv.labs.spmv_support import checked_case, spmv_kernel
dev, ref, tol = checked_case("uniform", 1 << 22, MEAN, SEED)
k = spmv_kernel(name="prof")
for policy in ("fixed_work", "steal"):
    for _ in range(3):
        dev.run(k, "split", policy)
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.start()
    dev.run(k, "split", policy)
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()
    assert not (np.abs(cp.asnumpy(dev.y) - ref) > tol).any()
