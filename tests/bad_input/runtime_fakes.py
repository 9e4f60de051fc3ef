"""Stand-ins for the GPU, so the runtime's checks run on a CPU: capabilities of an A100 (8.0), an H200 (9.0)
and a B200 (10.0); a kernel whose attributes the test sets; device arrays described by the CUDA Array
Interface; and a driver whose launch call fails the test if a bad call ever reaches it."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import cuadv.launching as launch_module
from cuadv.device import DeviceCaps
from cuadv.kernel import Kernel

HOPPER = DeviceCaps(
    ordinal=0, name="NVIDIA H200 (stand-in)", compute_capability=(9, 0), arch="sm_90a", sm_count=132,
    l2_cache_bytes=50 * 2**20, persisting_l2_max_bytes=37_748_736, access_policy_max_window_bytes=134_213_632,
    shared_mem_per_block_optin=232_448, shared_mem_per_sm=233_472, max_threads_per_sm=2048, max_blocks_per_sm=32,
    cluster_launch=True, max_cluster_size_portable=8, max_cluster_size_nonportable=16, cooperative_launch=True,
    stream_priority_low=0, stream_priority_high=-5, mem_sync_domain_count=4, tma=True, pdl=True, clc=False,
    driver_version=13000, nvrtc_version=(13, 0))
AMPERE = replace(HOPPER, name="NVIDIA A100 (stand-in)", compute_capability=(8, 0), arch="sm_80", sm_count=108,
                 shared_mem_per_block_optin=166_912, shared_mem_per_sm=167_936, cluster_launch=False,
                 max_cluster_size_portable=0, max_cluster_size_nonportable=0, mem_sync_domain_count=1, tma=False,
                 pdl=False)
BLACKWELL = replace(HOPPER, name="NVIDIA B200 (stand-in)", compute_capability=(10, 0), arch="sm_100a", sm_count=148,
                    clc=True)


class FakeDevice:
    """What ``current_device()`` returns: an ordinal and capabilities."""

    def __init__(self, caps: DeviceCaps, ordinal: int = 0):
        self.caps, self.ordinal = caps, ordinal

    def activate(self) -> "FakeDevice":
        return self


class FakeKernel(Kernel):
    """A loaded kernel as the launch checks see it; ``source`` gives it a declared signature."""

    def __init__(self, name: str = "k", sizes=(8, 4), source: str = "", static_shared: int = 0,
                 max_threads: int = 1024, compile_time_cluster=None):
        super().__init__(SimpleNamespace(handle=0), name, SimpleNamespace(source=source) if source else None)
        self.__dict__.update(param_sizes=tuple(sizes), static_shared_bytes=static_shared,
                             max_threads_per_block=max_threads, compile_time_cluster=compile_time_cluster)
        self.dynamic_shared_requests: list[int] = []

    def ensure_dynamic_shared(self, nbytes: int) -> None:
        self.dynamic_shared_requests.append(nbytes)

    def set_non_portable_cluster(self, allowed: bool) -> None:
        pass


class RefusingKernel(FakeKernel):
    """A kernel whose dynamic shared-memory limit the driver refuses to raise, as cuFuncSetAttribute does above
    the GPU's opt-in maximum: a check that runs too late shows as this error instead of cuadv's."""

    def ensure_dynamic_shared(self, nbytes: int) -> None:
        from cuadv.errors import CudaDriverError

        raise CudaDriverError(f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes}) failed: "
                              "CUDA_ERROR_INVALID_VALUE")


class DeviceArray:
    """A device array through the CUDA Array Interface, on GPU ``device`` (as DLPack names it)."""

    def __init__(self, dtype="float32", shape=(1024,), strides=None, ptr=0x7F00_0000_0000, device=0, typestr=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": tuple(shape),
                                         "typestr": typestr or np.dtype(dtype).str,
                                         "strides": strides, "version": 3}
        self.device = device

    def __dlpack_device__(self):
        return (2, self.device)  # kDLCUDA


class HostDLPack:
    """A host array that speaks DLPack only (as a CPU torch tensor does)."""

    def __init__(self):
        self.array = np.zeros(16, np.float32)

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class _NoLaunchDriver:
    """The real bindings, except that a launch fails the test: nothing may reach the GPU."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def cuLaunchKernelEx(self, *args):
        raise AssertionError("a bad call reached cuLaunchKernelEx")


@pytest.fixture
def fake_gpu(monkeypatch):
    """``fake_gpu(caps)`` makes ``caps`` the current device's for the launch checks and TileKernel, answers the
    occupancy queries with fixed numbers (8 portable / 16 non-portable cluster blocks, 2 blocks per SM, 4
    co-resident clusters) and refuses any launch."""
    from cuadv.work_stealing import tile_kernel

    real = launch_module.driver()
    monkeypatch.setattr(launch_module, "driver", lambda: _NoLaunchDriver(real))
    occupancy = SimpleNamespace(portable=8, non_portable=16, blocks_per_sm=2, clusters=4)
    monkeypatch.setattr(launch_module, "max_cluster_size",
                        lambda kernel, block, shared_mem=0, non_portable=False:
                        occupancy.non_portable if non_portable else occupancy.portable)
    monkeypatch.setattr(launch_module, "max_active_blocks_per_sm",
                        lambda kernel, block, shared_mem=0: occupancy.blocks_per_sm)
    monkeypatch.setattr(launch_module, "max_active_clusters",
                        lambda kernel, block, cluster, shared_mem=0: occupancy.clusters)

    def use(caps: DeviceCaps = HOPPER, ordinal: int = 0) -> SimpleNamespace:
        device = FakeDevice(caps, ordinal)
        for module in (launch_module, tile_kernel):
            monkeypatch.setattr(module, "current_device", lambda: device)
        return occupancy

    return use
