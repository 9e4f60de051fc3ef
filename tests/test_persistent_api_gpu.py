"""cuadv.persistent on the GPU: every task runs exactly once per launch for n in {0, 1, 7, 100003} and 1 or 16
tasks per ticket, back to back and replayed in a CUDA graph (the counters reset themselves); a real op
against NumPy; stream=None inside a non-blocking CuPy stream and a torch side stream."""

import numpy as np
import pytest

from cuadv.graphs import Graph
from cuadv.persistent import PersistentKernel, prepare_persistent

pytestmark = pytest.mark.gpu

BUMP = PersistentKernel(params="unsigned int* counts", task="if (lane == 0) atomicAdd(counts + task, 1u);",
                        name="persistent_api_bump")
# The same for int32 tensors (torch has no uint32 arithmetic): launch checks the array's dtype against the pointer's.
BUMP_INT = PersistentKernel(params="int* counts", task="if (lane == 0) atomicAdd(counts + task, 1);",
                            name="persistent_api_bump_int")


@pytest.mark.parametrize("per_ticket", [1, 16])
@pytest.mark.parametrize("n", [0, 1, 7, 100_003])
def test_every_task_exactly_once_and_replayed_in_a_graph(cp, n, per_ticket):
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        counts = cp.zeros(max(n, 1), cp.uint32)
    BUMP(n, counts, tasks_per_ticket=per_ticket, stream=s)
    BUMP(n, counts, tasks_per_ticket=per_ticket, stream=s)  # back to back: no reset in between
    run = prepare_persistent(BUMP, n, counts, tasks_per_ticket=per_ticket)
    assert 1 <= run.grid <= BUMP.resident_blocks()
    with Graph.capture(s, lambda: run(stream=s)) as graph:
        for _ in range(3):
            graph.launch(s)
        s.synchronize()
    got = cp.asnumpy(counts)[:n]
    assert np.array_equal(got, np.full(n, 5, np.uint32)), (int((got < 5).sum()), int((got > 5).sum()))
    if n == 0:
        assert cp.asnumpy(counts)[0] == 0


def test_grid_is_the_kernels_resident_grid(cp):
    from cuadv import current_device
    from cuadv.kernel import max_active_blocks_per_sm

    caps = current_device().caps
    per_sm = max_active_blocks_per_sm(BUMP.kernel(), 128)
    assert BUMP.resident_blocks() == per_sm * caps.sm_count
    counts = cp.zeros(10**6, cp.uint32)
    assert BUMP.prepare(10**6, counts).grid == per_sm * caps.sm_count


def test_a_real_op_against_numpy(cp):
    affine = PersistentKernel(
        params="const float* x, float* y, unsigned long long n, float a",
        prologue="const float b = 1.0f;",
        task="const unsigned long long i = task * 32 + lane; if (i < n) y[i] = __fadd_rn(__fmul_rn(x[i], a), b);",
        block=256, name="persistent_api_affine")
    n = 1_000_003
    x0 = np.random.default_rng(5).standard_normal(n, dtype=np.float32)
    with cp.cuda.Stream(non_blocking=True):
        x, y = cp.asarray(x0), cp.zeros(n, cp.float32)
        affine(-(-n // 32), x, y, np.uint64(n), np.float32(3.0), tasks_per_ticket=16)
        got = cp.asnumpy(y)
    assert np.array_equal(got, x0 * np.float32(3.0) + np.float32(1.0))


def test_stream_none_follows_a_non_blocking_cupy_stream(cp):
    n = 50_000
    with cp.cuda.Stream(non_blocking=True) as s:
        counts = cp.zeros(n, cp.uint32)  # on s
        BUMP(n, counts, tasks_per_ticket=16)  # stream=None: CuPy's current stream, s
        counts += 1  # after the queue on s
        s.synchronize()
        assert (cp.asnumpy(counts) == 2).all()


def test_stream_none_follows_a_torch_side_stream():
    torch = pytest.importorskip("torch")
    n = 50_000
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        counts = torch.zeros(n, dtype=torch.int32, device="cuda")
        BUMP_INT(n, counts)  # stream=None: torch's current stream (side)
        counts += 1
    side.synchronize()
    assert (counts.cpu().numpy() == 2).all()


def test_wrong_argument_type_raises_before_launch(cp):
    import cuadv

    counts = cp.zeros(4, cp.uint32)
    with pytest.raises(cuadv.KernelArgumentError, match="persistent_api_bump: .*host memory"):
        BUMP(4, np.zeros(4, np.uint32))
    cp.cuda.Device().synchronize()
    assert not cp.asnumpy(counts).any()
