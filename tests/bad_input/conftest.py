"""The bad-input corpus: every invalid call a user can make, caught before the GPU sees it.

Each test here is marked ``bad_input`` (``pytest -m bad_input --collect-only -q`` counts them). After every
GPU test of the corpus, ``_context_still_usable`` runs a small kernel and checks its answer: a bad call must
leave the CUDA context usable.
"""

import numpy as np
import pytest

_PROBE_SRC = r"""
extern "C" __global__ void probe_add(int* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += i;
}
"""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/bad_input/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.bad_input)


@pytest.fixture(autouse=True)
def _context_still_usable(request):
    yield
    if "gpu" not in request.keywords:
        return
    cp = pytest.importorskip("cupy")
    from cuadv import LaunchConfig, compile_source, launch

    kernel = compile_source(_PROBE_SRC, name="bad_input_probe").kernel("probe_add")
    x = cp.ones(1000, dtype=cp.int32)
    launch(kernel, LaunchConfig(grid=4, block=256), x, np.int32(x.size))
    cp.cuda.Stream.null.synchronize()
    assert (x.get() == 1 + np.arange(1000, dtype=np.int32)).all(), "the CUDA context is unusable after a bad call"
