"""Pure launch-configuration checks: each names the limit it breaks and the value."""

import pytest

from cuadv.errors import LaunchConfigError
from cuadv.launching import AccessPolicyWindow, LaunchConfig


def test_grid_counts_blocks_and_normalises():
    c = LaunchConfig(grid=(8, 2), block=128, cluster=2)
    assert c.grid == (8, 2, 1) and c.block == (128, 1, 1) and c.cluster == (2, 1, 1)
    assert c.cluster_size == 2 and c.grid_blocks == 16
    assert hash(c) == hash(LaunchConfig(grid=(8, 2, 1), block=(128, 1, 1), cluster=(2, 1, 1)))


@pytest.mark.parametrize("kwargs, message", [
    (dict(grid=1, block=1025), "1025 threads exceeds the limit of 1024"),
    (dict(grid=1, block=(32, 32, 2)), "2048 threads exceeds the limit of 1024"),
    (dict(grid=1, block=(1, 1, 65)), "block dimension z = 65 is outside"),
    (dict(grid=0, block=32), "grid dimension x = 0 is outside"),
    (dict(grid=(1, 65536), block=32), "grid dimension y = 65536 is outside"),
    (dict(grid=10, block=32, cluster=4), "cluster dimension x = 4 does not divide grid dimension x = 10"),
    (dict(grid=(34, 1, 1), block=32, cluster=17), "17 blocks exceeds the largest cluster size 16"),
    (dict(grid=2, block=32, shared_mem=-1), "dynamic shared memory must be >= 0"),
    (dict(grid=2, block=32, mem_sync_domain="far"), "'default' or 'remote'"),
])
def test_invalid_configurations_raise(kwargs, message):
    with pytest.raises(LaunchConfigError, match=message):
        LaunchConfig(**kwargs)


def test_access_policy_window_checks():
    w = AccessPolicyWindow(base_ptr=0x1000, num_bytes=1 << 20, hit_ratio=0.5)
    assert w.hit == "persisting" and w.miss == "streaming"
    with pytest.raises(LaunchConfigError, match=r"hit_ratio must be in \[0, 1\]"):
        AccessPolicyWindow(base_ptr=0, num_bytes=1, hit_ratio=1.5)
    with pytest.raises(LaunchConfigError, match="access property"):
        AccessPolicyWindow(base_ptr=0, num_bytes=1, hit="sticky")


def test_driver_attributes_needed_only_for_extras():
    assert not LaunchConfig(grid=1, block=1, cooperative=True, pdl=True, cluster=1).needs_driver_attributes()
    assert LaunchConfig(grid=1, block=1, priority=-1).needs_driver_attributes()
    assert LaunchConfig(grid=1, block=1, mem_sync_domain="remote").needs_driver_attributes()


# -- prepared launchers without a GPU: the device checks and the driver call are stand-ins ---------
import ctypes  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402

from cuadv.args import PackedArguments  # noqa: E402
from cuadv.errors import KernelArgumentError  # noqa: E402
from cuadv.kernel import MAX_LAUNCHERS, Kernel  # noqa: E402
from cuadv.launching import Launcher, launch, prepare  # noqa: E402
from cuadv.memo import BoundedMemo  # noqa: E402

import cuadv.launching as launch_module  # noqa: E402


class FakeArray:
    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (4,), "typestr": "<f4", "version": 3}


class Driver:
    """Records what cuLaunchKernelEx would have been given: grid, block, stream, parameter bytes."""

    def __init__(self, sizes):
        self.sizes, self.calls = sizes, []

    def __call__(self, cfg, handle, params, extra):
        slots = (ctypes.c_void_p * len(self.sizes)).from_address(params)
        blobs = [ctypes.string_at(slots[i], s) for i, s in enumerate(self.sizes)]
        self.calls.append(((cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ),
                           int(cfg.hStream), cfg.numAttrs, blobs))
        return (0,)


@pytest.fixture
def fake_kernel(monkeypatch):
    checks = []

    def check_config(kernel, config):
        checks.append(config)
        if config.shared_mem == 12345:
            raise LaunchConfigError("12345 B dynamic shared memory exceeds the stand-in limit")

    monkeypatch.setattr(launch_module, "check_config", check_config)
    kernel = Kernel(SimpleNamespace(handle=0xABC), "fake")
    kernel.__dict__["param_sizes"] = (8, 4, 24)  # what cuKernelGetParamInfo would say
    return kernel, checks


def _driver(launcher: Launcher) -> Driver:
    driver = Driver(launcher.kernel.param_sizes)
    launcher._driver_launch = driver
    return driver


class Stream:
    def __init__(self, handle):
        self.ptr = handle


def test_prepare_checks_once_and_returns_one_launcher_per_configuration(fake_kernel):
    kernel, checks = fake_kernel
    cfg = LaunchConfig(grid=(4, 2), block=64, pdl=True)
    run = prepare(kernel, cfg)
    assert checks == [cfg]
    assert prepare(kernel, cfg) is run and prepare(kernel, LaunchConfig(grid=(4, 2, 1), block=(64,), pdl=True)) is run
    assert checks == [cfg]  # an equal configuration is not checked again
    other = prepare(kernel, LaunchConfig(grid=1, block=32))
    assert other is not run and len(checks) == 2


def test_a_kernel_remembers_at_most_max_launchers_configurations_and_forgets_the_oldest(fake_kernel):
    kernel, checks = fake_kernel
    assert kernel._launchers.limit == MAX_LAUNCHERS
    kernel._launchers = BoundedMemo(3)  # MAX_LAUNCHERS (1024) configurations, scaled down
    configs = [LaunchConfig(grid=g, block=32) for g in range(1, 5)]
    first = [prepare(kernel, c) for c in configs[:3]]
    prepare(kernel, configs[3])  # a fourth: the first is forgotten
    assert len(kernel._launchers) == 3 and kernel._launchers.get(configs[0]) is None
    assert prepare(kernel, configs[1]) is first[1] and len(checks) == 4
    again = prepare(kernel, configs[0])  # checked again and made anew
    assert again is not first[0] and len(checks) == 5 and again.config == configs[0]


def test_a_failing_check_caches_nothing_and_raises_every_time(fake_kernel):
    kernel, checks = fake_kernel
    bad = LaunchConfig(grid=1, block=32, shared_mem=12345)
    for _ in range(2):
        with pytest.raises(LaunchConfigError, match="12345 B dynamic shared memory"):
            launch(kernel, bad, FakeArray(1), 2, b"x" * 24)
    assert checks == [bad, bad] and kernel._launchers.get(bad) is None and len(kernel._launchers) == 0


def test_launcher_passes_the_uncached_bytes_the_config_and_the_stream(fake_kernel):
    kernel, _ = fake_kernel
    cfg = LaunchConfig(grid=(3, 2, 1), block=(32, 4), cluster=(1, 2), priority=-1)
    run = prepare(kernel, cfg)
    driver = _driver(run)
    s1, s2 = Stream(0x51), Stream(0x52)
    calls = [((FakeArray(0x100), 5, b"a" * 24), s1), ((FakeArray(0x200), np.uint32(6), bytes(24)), s1),
             ((FakeArray(0x300), -7, bytearray(b"b" * 24)), s2), ((FakeArray(0x400), 8, b"c" * 24), None),
             ((FakeArray(0x500), 9, b"d" * 24), 0x53)]
    for args, stream in calls:
        run(*args, stream=stream)
    want_streams = [0x51, 0x51, 0x52, 0, 0x53]
    assert [c[2] for c in driver.calls] == want_streams
    assert all(c[0] == (3, 2, 1) and c[1] == (32, 4, 1) and c[3] == 2 for c in driver.calls)  # cluster + priority
    assert [c[4] for c in driver.calls] == [PackedArguments(a, kernel.param_sizes).blobs for a, _ in calls]


def test_launch_reuses_the_launcher_and_checks_arguments_each_call(fake_kernel):
    kernel, checks = fake_kernel
    cfg = LaunchConfig(grid=1, block=32)
    driver = _driver(prepare(kernel, cfg))
    for i in range(3):
        launch(kernel, cfg, FakeArray(i), np.uint32(i), bytes(24), stream=Stream(0x60))
        launch(kernel, LaunchConfig(grid=1, block=32), FakeArray(i), i, bytes(24))  # an equal, new config object
    assert len(checks) == 1 and len(driver.calls) == 6
    with pytest.raises(KernelArgumentError, match="4-byte parameter but got 8 bytes"):
        launch(kernel, cfg, FakeArray(1), np.uint64(1), bytes(24))
    with pytest.raises(KernelArgumentError, match="24-byte parameter but got 23 bytes"):
        launch(kernel, cfg, FakeArray(1), 1, bytes(23))
    with pytest.raises(LaunchConfigError, match="backend must be one of auto, driver, core"):
        launch(kernel, cfg, FakeArray(1), 1, bytes(24), backend="cuda")
    assert len(driver.calls) == 6  # nothing reached the driver


def test_a_busy_launcher_packs_from_scratch(fake_kernel, monkeypatch):
    kernel, _ = fake_kernel
    run = prepare(kernel, LaunchConfig(grid=1, block=32))
    driver = _driver(run)
    uncached = []
    monkeypatch.setattr(launch_module, "_launch_driver",
                        lambda k, c, packed, stream: uncached.append((packed.blobs, stream)))
    run(FakeArray(1), 1, bytes(24))
    assert run._acquire(False)  # as if another thread were packing
    try:
        run(FakeArray(2), 2, b"z" * 24, stream=Stream(0x70))
    finally:
        run._release()
    assert len(driver.calls) == 1
    assert uncached == [(PackedArguments((FakeArray(2), 2, b"z" * 24), kernel.param_sizes).blobs, 0x70)]


def test_the_launch_module_does_not_shadow_the_function():
    """``cuadv.launch`` is the function and ``import cuadv.launching as m`` gets the module: the
    module's name differs from the function's, so neither form of import returns the other."""
    import importlib

    import cuadv
    import cuadv.launching as module

    assert callable(cuadv.launch) and cuadv.launch is module.launch
    assert module.LaunchConfig is cuadv.LaunchConfig and module.prepare is cuadv.prepare
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("cuadv.launch")


def test_dynamic_shared_memory_past_48_kb_less_the_static_opts_in(monkeypatch):
    """The driver lets a kernel take 48 KB of shared memory in all without the opt-in: with 16 KB static, 32 KB
    dynamic needs none and 40 KB does (a launch of 40 KB failed in the driver, naming no limit, when only requests
    above 48 KB opted in); a raised limit is set once, and a launch without dynamic shared memory reads nothing."""
    calls = []
    kernel = Kernel(SimpleNamespace(handle=0xABC), "k")
    monkeypatch.setattr(kernel, "set_attribute", lambda name, value: calls.append((name, value)))
    kernel.ensure_dynamic_shared(0)
    assert "static_shared_bytes" not in kernel.__dict__  # no attribute query for a launch without dynamic memory
    kernel.__dict__["static_shared_bytes"] = 16 * 1024
    kernel.ensure_dynamic_shared(32 * 1024)
    assert calls == []
    kernel.ensure_dynamic_shared(40 * 1024)
    kernel.ensure_dynamic_shared(36 * 1024)
    assert calls == [("MAX_DYNAMIC_SHARED_SIZE_BYTES", 40 * 1024)]


def test_the_dynamic_shared_memory_limit_only_rises_when_threads_raise_it_at_once(monkeypatch):
    """Two threads asking for 200 KB and 100 KB at once: the kernel's limit ends at 200 KB (the one who checked
    last could set 100 KB over the other's 200 KB, and a prepared 200 KB launch then failed)."""
    import sys
    import threading

    kernel = Kernel(SimpleNamespace(handle=0xABC), "k")
    kernel.__dict__["static_shared_bytes"] = 0
    limit = []

    def set_attribute(name, value):
        import time

        time.sleep(0.01)  # a driver call: other threads run meanwhile
        limit.append(value)

    monkeypatch.setattr(kernel, "set_attribute", set_attribute)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(20):
            kernel._dynamic_shared_limit, limit[:] = None, []
            threads = [threading.Thread(target=kernel.ensure_dynamic_shared, args=(n,)) for n in (200_000, 100_000)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert limit[-1] == 200_000 and kernel._dynamic_shared_limit == 200_000
    finally:
        sys.setswitchinterval(interval)
