"""Does initcheck see TMA stores? Copy a fully written pitched 7 x 13 float32 array one of three ways (TMA stores,
thread stores, CuPy), then read the output with CuPy and check every value.

    compute-sanitizer --tool initcheck --report-api-errors no python3 scripts/initcheck_tma_probe.py tma
    (or threads, or cupy)
"""

import sys
import cupy as cp
import numpy as np
import cuadv

case = sys.argv[1]
x = cuadv.tma.empty_pitched((7, 13), np.float32)
x[...] = cp.arange(91, dtype=cp.float32).reshape(7, 13)
if case == "tma":
    y = cuadv.tma.copy(x)                               # TMA stores into a new pitched array
elif case == "threads":
    storage = cp.zeros((7, 16), cp.float32); y = storage[:, :13]
    op = cuadv.tma.prepare_copy(x, y); assert op.method == "threads"; op()
else:
    y = cuadv.tma.empty_pitched((7, 13), np.float32); y[...] = x   # CuPy only
cp.cuda.Device().synchronize()
print(case, bool((cp.asnumpy(y) == np.arange(91).reshape(7, 13)).all()))
