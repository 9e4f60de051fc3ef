"""Does initcheck see TMA stores? Copy a fully written float32 array one of three ways into memory nothing wrote
before (CuPy's pool off, so every allocation is fresh; the output is allocated first), then read the output with
CuPy and check every value: TMA stores (7 x 16, rows of whole 16-byte units, so a caller's dst keeps TMA), thread
stores (7 x 13 into 16-column rows: rows that end inside a 16-byte unit) or CuPy (7 x 16).

    compute-sanitizer --tool initcheck --report-api-errors no python3 scripts/initcheck_tma_probe.py tma
    (or threads, or cupy)
"""

import sys

import cupy as cp
import numpy as np

import cuadv

cp.cuda.set_allocator(None)  # plain cudaMalloc: no block handed back from earlier, initialised work
case = sys.argv[1]
rows, cols = (7, 13) if case == "threads" else (7, 16)
y = cp.empty((rows, 16), cp.float32)[:, :cols]
x = cuadv.tma.empty_pitched((rows, cols), np.float32)
want = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
x[...] = cp.asarray(want)
if case == "cupy":
    y[...] = x
else:
    op = cuadv.tma.prepare_copy(x, y)
    assert op.method == ("threads" if case == "threads" else "tma"), op.method
    op()
cp.cuda.Device().synchronize()
print(case, bool((cp.asnumpy(y) == want).all()))
