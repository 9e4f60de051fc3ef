import cupy as cp
from cuadv.labs.segreduce_support import generate_segments
from cuadv.labs.spmv_support import DeviceCsr
from cuadv.labs.segreduce import segsum_kernel
m = generate_segments("uniform", 1 << 21, 32, 19)
dev = DeviceCsr(m, None)
k = segsum_kernel()
for _ in range(2):
    dev.run(k, "split", "fixed_work")
cp.cuda.runtime.deviceSynchronize()
print("ok", m.nnz)
