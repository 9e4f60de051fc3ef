"""Does initcheck see TMA stores? Copy a fully written pitched 7 x 13 float32 array one of three ways (TMA stores,
thread stores, CuPy) into memory nothing wrote before (CuPy's pool off, so every allocation is fresh; the output is
allocated first), then read the output with CuPy and check every value.

    compute-sanitizer --tool initcheck --report-api-errors no python3 scripts/initcheck_tma_probe.py tma
    (or threads, or cupy)
"""

import sys

import cupy as cp
import numpy as np

import cuadv

cp.cuda.set_allocator(None)  # plain cudaMalloc: no block handed back from earlier, initialised work
case = sys.argv[1]
if case == "threads":
    y = cp.empty((7, 16), cp.float32)[:, :13]  # rows end inside a 16-byte unit: thread stores
else:
    y = cuadv.tma.empty_pitched((7, 13), np.float32)
x = cuadv.tma.empty_pitched((7, 13), np.float32)
x[...] = cp.arange(91, dtype=cp.float32).reshape(7, 13)
if case == "cupy":
    y[...] = x
else:
    op = cuadv.tma.prepare_copy(x, y)
    assert op.method == ("threads" if case == "threads" else "tma"), op.method
    op()
cp.cuda.Device().synchronize()
print(case, bool((cp.asnumpy(y) == np.arange(91).reshape(7, 13)).all()))
