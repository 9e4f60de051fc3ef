"""cuadv.persistent: each mistake in a PersistentKernel's definition or its launch (source that is no str, a name that
is no C identifier, options of the wrong type, a task count or tasks per ticket out of range) raises, naming the
argument, the value and the rule, before anything is compiled or launched. The cases of
tests/test_persistent_api_cpu.py are not repeated here."""

import numpy as np
import pytest

import cuadv.persistent as ps
from cuadv.errors import LaunchConfigError

from .runtime_fakes import HOPPER, DeviceArray, FakeDevice, RefusingKernel, fake_gpu  # noqa: F401 (a fixture)

BUMP = dict(params="unsigned int* counts", task="if (lane == 0) atomicAdd(counts + task, 1u);")


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    def refuse(self):
        raise AssertionError("reached the GPU before the arguments were checked")

    monkeypatch.setattr(ps.PersistentKernel, "kernel", refuse)
    monkeypatch.setattr(ps.PersistentKernel, "compile", refuse)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(params=None), TypeError, "params must be C\\+\\+ source as a str, got NoneType None"),
    (dict(task=b"return;"), TypeError, "task must be C\\+\\+ source as a str, got bytes"),
    (dict(prologue=None), TypeError, "prologue must be C\\+\\+ source as a str, got NoneType"),
    (dict(preamble=5), TypeError, "preamble must be C\\+\\+ source as a str, got int 5"),
    (dict(name=5), ValueError, "name must be a C identifier, got 5"),
    (dict(name=""), ValueError, "name must be a C identifier, got ''"),
    (dict(block=True), LaunchConfigError, "block must be a multiple of 32 threads from 32 to 1024 .*got True"),
    (dict(block=64.0), LaunchConfigError, "block must be a multiple of 32 .*got 64.0"),
    (dict(min_blocks_per_sm=True), LaunchConfigError, "min_blocks_per_sm must be an int >= 1, got True"),
    (dict(shared_mem=1.5), LaunchConfigError, "shared_mem must be an int >= 0 bytes, got 1.5"),
])
def test_definition_mistakes(kwargs, error, text):
    with pytest.raises(error, match=text):
        ps.PersistentKernel(**{**BUMP, **kwargs})


@pytest.mark.parametrize("n_tasks, kwargs, error, text", [
    ("10", {}, TypeError, r"the task count \(n_tasks\) must be an int, got str '10'"),
    (np.float64(3), {}, TypeError, "must be an int, got float64"),
    (None, {}, TypeError, "must be an int, got NoneType"),
    (10, dict(tasks_per_ticket=True), TypeError, "tasks_per_ticket must be an int, got bool True"),
    (10, dict(tasks_per_ticket=-1), LaunchConfigError, r"tasks per ticket must be in \[1, 2147483648\], got -1"),
])
def test_launch_mistakes(n_tasks, kwargs, error, text):
    kernel = ps.PersistentKernel(**BUMP)
    for call in (kernel, kernel.prepare, lambda *a, **k: ps.prepare_persistent(kernel, *a, **k)):
        with pytest.raises(error, match=text):
            call(n_tasks, 0, **kwargs)


def test_prepare_persistent_needs_a_persistent_kernel():
    with pytest.raises(TypeError, match="kernel must be a PersistentKernel, got NoneType"):
        ps.prepare_persistent(None, 10)


def test_shared_memory_over_the_gpu_limit_names_it_before_the_driver_is_asked(monkeypatch, fake_gpu):
    """The resident grid's occupancy query would raise the kernel's shared-memory limit first: the driver refuses
    (RefusingKernel) without naming the limit. cuadv's check comes first and names it."""
    import cuadv.device as device

    fake_gpu(HOPPER)
    monkeypatch.setattr(device, "current_device", lambda: FakeDevice(HOPPER))
    kernel = RefusingKernel("cuadv_persistent", sizes=(24, 8))
    monkeypatch.setattr(ps.PersistentKernel, "kernel", lambda self: kernel)
    bump = ps.PersistentKernel(**BUMP, shared_mem=300_000)
    with pytest.raises(LaunchConfigError, match="shared_mem = 300000 B dynamic .* exceeds the per-block limit of "
                                                "232448 B"):
        bump.prepare(10, DeviceArray("uint32"))


def test_numpy_integers_are_ints_for_every_option():
    bump = ps.PersistentKernel(**BUMP, block=np.int32(64), min_blocks_per_sm=np.int32(2), shared_mem=np.int64(0))
    assert (bump.block, bump.min_blocks_per_sm, bump.shared_mem) == (64, 2, 0)
    assert type(bump.min_blocks_per_sm) is int and type(bump.shared_mem) is int
