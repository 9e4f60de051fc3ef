"""cuadv.persistent without a GPU: the generated kernel compiles for sm_90a and sm_100a around the queue
protocol, the parameter mirror matches the header, and bad input raises before anything is launched."""

import re

import numpy as np
import pytest

import cuadv.persistent as ps
from cuadv.compiler import kernel_source
from cuadv.errors import KernelArgumentError, LaunchConfigError

BUMP = dict(params="unsigned int* counts", task="if (lane == 0) atomicAdd(counts + task, 1u);")


def _entry_ptx(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:end if end > 0 else len(ptx)]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_generated_kernel_compiles(arch):
    kernel = ps.PersistentKernel(**BUMP, name="bump")
    module = kernel.compile(arch)
    res = module.resources_for("bump")
    assert res.spill_store_bytes == 0 and res.stack_bytes == 0
    ptx = _entry_ptx(module.ptx, "bump")
    assert re.search(r"atom(\.relaxed\.gpu)?\.global\.add\.u64", ptx)  # the ticket
    assert "shfl.sync" in ptx  # lane 0's ticket broadcast to the warp
    assert "bar.sync" in ptx or "barrier.sync" in ptx  # the block's exit barrier
    assert ptx.count("membar.gl") >= 2  # the two __threadfence() of the exit protocol
    assert kernel.compile(arch) is module  # one build per target


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_prologue_preamble_and_several_parameters(arch):
    kernel = ps.PersistentKernel(
        params="const float* x, float* y, unsigned long long n, Pair<int, int> p",
        preamble="template <class A, class B> struct Pair { A a; B b; };\n"
                 "static __device__ float twice(float v) { return 2.0f * v; }",
        prologue="const float bias = 1.0f;",
        task="for (unsigned long long i = task * 32 + lane; i < (task + 1) * 32 && i < n; i += 32) "
             "y[i] = twice(x[i]) + bias + p.a;",
        block=256, name="saxpyish", min_blocks_per_sm=2)
    assert kernel.n_params == 4
    assert "__launch_bounds__(256, 2)" in kernel.source()
    assert kernel.compile(arch).resources_for("saxpyish").spill_store_bytes == 0


def test_queue_mirror_matches_the_header():
    assert ps.QUEUE_LAYOUT.itemsize == 24
    blob = ps.Queue(0x1234_5678_9ABC, 100_003, 16).kernel_param_bytes()
    rec = np.frombuffer(blob, ps.QUEUE_LAYOUT)[0]
    assert len(blob) == 24 and rec["state"] == 0x1234_5678_9ABC and rec["n"] == 100_003
    assert rec["per_ticket"] == 16 and rec["reserved"] == 0
    header = kernel_source("persistent_queue.cuh")
    assert "static_assert(sizeof(Queue) == 24" in header


def test_header_documents_every_barrier_and_fence():
    for line in kernel_source("persistent_queue.cuh").splitlines():
        if "__syncthreads()" in line or "__threadfence()" in line:
            assert "//" in line, line


@pytest.mark.parametrize("n, match, exc", [
    (-1, r"task count -1 is outside \[0, 4611686018427387904\]", LaunchConfigError),
    (2**62 + 1, "task count 4611686018427387905 is outside", LaunchConfigError),
    (3.0, "the task count \\(n_tasks\\) must be an int, got float", TypeError),
    (True, "must be an int, got bool", TypeError),
])
def test_task_count_rule(n, match, exc):
    with pytest.raises(exc, match=match):
        ps.check_task_count(n)


def test_task_count_rule_accepts_the_range():
    assert ps.check_task_count(0) == 0 and ps.check_task_count(np.int64(7)) == 7
    assert ps.check_task_count(ps.MAX_TASKS) == 2**62
    assert ps.check_task_count(2**32 - 1, limit=2**32 - 1) == 2**32 - 1
    with pytest.raises(LaunchConfigError, match=r"task count 4294967296 is outside \[0, 4294967295\]"):
        ps.check_task_count(2**32, limit=2**32 - 1)


@pytest.mark.parametrize("k, match, exc", [
    (0, r"tasks per ticket must be in \[1, 2147483648\], got 0", LaunchConfigError),
    (2**31 + 1, "got 2147483649", LaunchConfigError),
    (1.5, "tasks_per_ticket must be an int", TypeError),
])
def test_tasks_per_ticket_rule(k, match, exc):
    with pytest.raises(exc, match=match):
        ps.check_tasks_per_ticket(k)


@pytest.fixture
def no_gpu(monkeypatch):
    """Any attempt to load the kernel (the step before a launch) fails the test."""
    def refuse(self):
        raise AssertionError("the launch reached the GPU although its input is bad")

    monkeypatch.setattr(ps.PersistentKernel, "kernel", refuse)


@pytest.mark.parametrize("call, exc, match", [
    (lambda k: k(-1, 0), LaunchConfigError, "task count -1 is outside"),
    (lambda k: k(2**62 + 1, 0), LaunchConfigError, "is outside"),
    (lambda k: k(10, 0, tasks_per_ticket=0), LaunchConfigError, "tasks per ticket must be in"),
    (lambda k: k(10), KernelArgumentError, r"bump takes 1 argument after n_tasks \(unsigned int\* counts\), got 0"),
    (lambda k: k(10, 0, 0), KernelArgumentError, "takes 1 argument after n_tasks .* got 2"),
    (lambda k: k.prepare(10, 0, 0, tasks_per_ticket=16), KernelArgumentError, "got 2"),
    (lambda k: ps.prepare_persistent(k, -5, 0), LaunchConfigError, "task count -5"),
])
def test_bad_input_raises_before_launch(no_gpu, call, exc, match):
    with pytest.raises(exc, match=match):
        call(ps.PersistentKernel(**BUMP, name="bump"))


@pytest.mark.parametrize("kwargs, match", [
    (dict(block=100), "block must be a multiple of 32"),
    (dict(block=0), "block must be a multiple of 32"),
    (dict(block=2048), "block must be a multiple of 32"),
    (dict(min_blocks_per_sm=0), "min_blocks_per_sm must be an int >= 1"),
    (dict(shared_mem=-1), "shared_mem must be an int >= 0"),
])
def test_bad_kernel_options(kwargs, match):
    with pytest.raises(LaunchConfigError, match=match):
        ps.PersistentKernel(**BUMP, **kwargs)
    with pytest.raises(ValueError, match="C identifier"):
        ps.PersistentKernel(**BUMP, name="not a name")
    with pytest.raises(TypeError, match="PersistentKernel"):
        ps.prepare_persistent("kernel", 1)


def test_grid_is_the_resident_grid_capped_by_the_tickets():
    assert ps.grid_for(1056, 128, 0, 1) == 1 and ps.grid_for(1056, 128, 1, 1) == 1
    assert ps.grid_for(1056, 128, 7, 1) == 2  # 7 tickets, 4 warps per block
    assert ps.grid_for(1056, 128, 100_003, 1) == 1056
    assert ps.grid_for(1056, 128, 100_003, 16) == 1056  # 6251 tickets still fill 1056 blocks of 4 warps
    assert ps.grid_for(1056, 128, 64, 16) == 1  # 4 tickets: one block of 4 warps


def test_count_params():
    assert ps.count_params("") == 0 and ps.count_params("int a") == 1
    assert ps.count_params("Pair<int, int> p, float (*f)(int, int), int a[2]") == 3
