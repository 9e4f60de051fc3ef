"""cuadv.pdl on the GPU: a chain of dependent kernels gives the NumPy result in a stream and as a CUDA graph,
with and without PDL; a captured PDL chain has a programmatic edge per boundary; stream=None follows a
non-blocking CuPy stream and a torch side stream, ordered with the work around it."""

import numpy as np
import pytest

import cuadv
from cuadv.pdl import launch_chain, prepare_chain

pytestmark = pytest.mark.gpu

THREADS = 256
SOURCE = r"""
#include <cuadv/pdl.cuh>
extern "C" __global__ void affine_step(const float* src, float* dst, unsigned int n, float a, float b) {
  const float scale = a;             // independent setup: needs nothing from the previous kernel
  cuadv::pdl::wait();                // src (the previous link's dst) is complete and visible
  cuadv::pdl::launch_dependents();   // the next link may be scheduled now
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    dst[i] = __fadd_rn(__fmul_rn(src[i], scale), b);
  }
}
"""


@pytest.fixture(scope="module")
def kernel():
    caps = cuadv.current_device().caps
    if caps.compute_capability < (9, 0):
        pytest.skip("PDL needs compute capability 9.0")
    return cuadv.compile_source(SOURCE, name="pdl_api_test", arch=caps.arch).kernel("affine_step")


def _coeffs(k):
    rng = np.random.default_rng(k)
    return rng.uniform(0.5, 1.5, k).astype(np.float32), rng.uniform(-1, 1, k).astype(np.float32)


def reference(x, a, b):
    for ai, bi in zip(a, b):
        x = x * ai + bi
    return x


def _steps(kernel, bufs, n, a, b, grid):
    cfg = cuadv.LaunchConfig(grid=grid, block=THREADS)
    return [(kernel, cfg, (bufs[i % 2], bufs[(i + 1) % 2], np.uint32(n), a[i], b[i])) for i in range(len(a))]


@pytest.mark.parametrize("graph", [False, True], ids=["stream", "graph"])
@pytest.mark.parametrize("pdl", [True, False, "auto"], ids=["pdl", "no_pdl", "auto"])
@pytest.mark.parametrize("n, k", [(1, 1), (4099, 2), (132 * 256 * 2 + 7, 9)])
def test_chain_gives_the_numpy_result(cp, kernel, graph, pdl, n, k):
    x0 = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
    a, b = _coeffs(k)
    with cp.cuda.Stream(non_blocking=True) as s:
        bufs = [cp.asarray(x0), cp.zeros(n, cp.float32)]
        launch_chain(_steps(kernel, bufs, n, a, b, grid=min(132, -(-n // THREADS))), pdl=pdl, graph=graph, stream=s)
        got = cp.asnumpy(bufs[k % 2])
    assert np.array_equal(got, reference(x0, a, b))


@pytest.mark.parametrize("pdl", [True, False])
def test_prepared_graph_replays_and_has_programmatic_edges(cp, kernel, pdl):
    n, k = 10_000, 16
    x0 = np.arange(n, dtype=np.float32) % 7
    a, b = np.ones(k, np.float32), np.ones(k, np.float32)  # each link adds 1: replays accumulate exactly
    with cp.cuda.Stream(non_blocking=True):
        bufs = [cp.asarray(x0), cp.zeros(n, cp.float32)]
        with prepare_chain(_steps(kernel, bufs, n, a, b, grid=64), pdl=pdl, graph=True) as chain:
            edges = chain.edge_types()
            assert chain.pdl is pdl and len(chain) == k
            for _ in range(3):
                chain()  # stream=None: CuPy's current stream
            got = cp.asnumpy(bufs[0])
    assert np.array_equal(got, x0 + 3 * k)
    if edges is not None:
        assert edges["programmatic"] == (k - 1 if pdl else 0)
        assert edges["programmatic"] + edges["default"] == k - 1


def test_prepared_stream_chain_follows_the_current_stream(cp, kernel):
    n, k = 5_000, 6
    a, b = np.full(k, 2, np.float32), np.zeros(k, np.float32)  # x * 2**k
    x0 = np.arange(n, dtype=np.float32)
    chain = None
    for _ in range(2):
        with cp.cuda.Stream(non_blocking=True):  # a new stream each time; the chain follows it
            bufs = [cp.asarray(x0), cp.empty(n, cp.float32)] if chain is None else bufs
            if chain is None:
                chain = prepare_chain(_steps(kernel, bufs, n, a, b, grid=32))
            else:
                bufs[0].set(x0)
            chain()
            bufs[0] += 1  # ordered after the chain on the same stream (k is even: the result is in bufs[0])
            got = cp.asnumpy(bufs[0])
        assert np.array_equal(got, x0 * 2**k + 1)


def test_chain_inside_a_torch_side_stream(kernel):
    torch = pytest.importorskip("torch")
    n, k = 70_001, 4
    a, b = _coeffs(k)
    x0 = np.random.default_rng(3).standard_normal(n, dtype=np.float32)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        bufs = [torch.from_numpy(x0).cuda(), torch.zeros(n, dtype=torch.float32, device="cuda")]
        launch_chain(_steps(kernel, bufs, n, a, b, grid=132))  # stream=None: torch's current stream (side)
        out = bufs[k % 2] * 1.0  # torch work after the chain on the same stream
    side.synchronize()
    assert np.array_equal(out.cpu().numpy(), reference(x0, a, b))


def test_bad_argument_in_a_later_link_launches_nothing(cp, kernel):
    n = 1000
    with cp.cuda.Stream(non_blocking=True) as s:
        bufs = [cp.ones(n, cp.float32), cp.zeros(n, cp.float32)]
        a, b = _coeffs(2)
        steps = _steps(kernel, bufs, n, a, b, grid=4)
        steps[1] = (kernel, steps[1][1], steps[1][2][:4])
        with pytest.raises(cuadv.KernelArgumentError, match=r"step 1 \(affine_step\): the kernel takes 5 arguments"):
            launch_chain(steps, stream=s)
        s.synchronize()
        assert not cp.asnumpy(bufs[1]).any()  # link 0 never ran
