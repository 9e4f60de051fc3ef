"""What the GPU can do: one dataclass of capabilities, read from the driver and the occupancy API."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property

from ._cuda import check, device_ordinal, driver, driver_version, init_driver, nvrtc_version
from .arch import arch_for
from .errors import CuadvError
from .features import require
from .kernel import Kernel, max_cluster_size

# An empty kernel in PTX, which the driver compiles for whatever GPU it runs on (sm_90 PTX runs on any
# later GPU), so reading the capabilities needs no NVRTC.
_PROBE_PTX = """.version 7.8
.target sm_90
.address_size 64
.visible .entry cuadv_cluster_probe() { ret; }
"""
_PROBE_BLOCK = 128


@dataclass(frozen=True)
class DeviceCaps:
    """Capabilities of one GPU, as the driver reports them (sizes in bytes)."""

    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    arch: str
    sm_count: int
    l2_cache_bytes: int
    persisting_l2_max_bytes: int
    access_policy_max_window_bytes: int
    shared_mem_per_block_optin: int
    shared_mem_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    cluster_launch: bool
    max_cluster_size_portable: int
    max_cluster_size_nonportable: int
    cooperative_launch: bool
    stream_priority_low: int
    stream_priority_high: int
    mem_sync_domain_count: int
    tma: bool
    pdl: bool
    clc: bool
    driver_version: int
    nvrtc_version: tuple[int, int]

    @property
    def cc(self) -> float:
        return self.compute_capability[0] + self.compute_capability[1] / 10

    def cc_string(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    def require(self, feature: str) -> None:
        """Raise UnsupportedFeatureError (naming what it needs and the fallback) unless this GPU has
        ``feature``, a key of ``cuadv.features.FEATURES``."""
        require(feature, self.as_dict())

    def as_dict(self) -> dict:
        """The capabilities by name: a new dict each call (callers may change it), copied from one made once, as
        launches check features through it (``dataclasses.asdict`` recurses through every field, every call)."""
        made = self.__dict__.get("_as_dict")
        if made is None:
            made = asdict(self)
            object.__setattr__(self, "_as_dict", made)  # frozen: set once, not a field (equality and hash unchanged)
        return dict(made)


class Device:
    """One GPU: its cuda.core device (made current on first use) and its capabilities."""

    def __init__(self, ordinal: int = 0):
        count = init_driver()
        if not 0 <= ordinal < count:
            raise CuadvError(f"device ordinal {ordinal} is out of range (the driver reports {count} devices)")
        self.ordinal = ordinal
        from cuda.core import Device as CoreDevice

        self.core = CoreDevice(ordinal)
        self.core.set_current()

    def activate(self) -> "Device":
        self.core.set_current()
        return self

    def attribute(self, name: str) -> int:
        drv = driver()
        attr = getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(check(drv.cuDeviceGetAttribute(attr, self.ordinal), f"cuDeviceGetAttribute({name})"))

    @cached_property
    def caps(self) -> DeviceCaps:
        p = self.core.properties  # cuda.core's device attributes, read once each
        cc = (int(p.compute_capability_major), int(p.compute_capability_minor))
        low, high = check(driver().cuCtxGetStreamPriorityRange(), "cuCtxGetStreamPriorityRange")
        cluster = bool(p.cluster_launch)
        portable, nonportable = self._largest_clusters() if cluster else (0, 0)
        return DeviceCaps(
            ordinal=self.ordinal,
            name=self.core.name,
            compute_capability=cc,
            arch=arch_for(cc),
            sm_count=int(p.multiprocessor_count),
            l2_cache_bytes=int(p.l2_cache_size),
            persisting_l2_max_bytes=int(p.max_persisting_l2_cache_size),
            access_policy_max_window_bytes=int(p.max_access_policy_window_size),
            shared_mem_per_block_optin=int(p.max_shared_memory_per_block_optin),
            shared_mem_per_sm=int(p.max_shared_memory_per_multiprocessor),
            max_threads_per_sm=int(p.max_threads_per_multiprocessor),
            max_blocks_per_sm=int(p.max_blocks_per_multiprocessor),
            cluster_launch=cluster,
            max_cluster_size_portable=portable,
            max_cluster_size_nonportable=nonportable,
            cooperative_launch=bool(p.cooperative_launch),
            stream_priority_low=int(low),
            stream_priority_high=int(high),
            mem_sync_domain_count=int(p.mem_sync_domain_count),
            tma=cc >= (9, 0) and bool(p.tensor_map_access_supported),
            pdl=cc >= (9, 0),
            clc=cc >= (10, 0),
            driver_version=driver_version(),
            nvrtc_version=nvrtc_version(),
        )

    def _largest_clusters(self) -> tuple[int, int]:
        """Largest cluster of a trivial kernel, portable and non-portable, from the occupancy API."""
        from cuda.core import ObjectCode

        code = ObjectCode.from_ptx(_PROBE_PTX.encode())  # bytes: cuda.core reads a str as a file name
        kernel = Kernel(code.get_kernel("cuadv_cluster_probe"), "cuadv_cluster_probe")
        portable = max_cluster_size(kernel, block=_PROBE_BLOCK, non_portable=False)
        nonportable = max_cluster_size(kernel, block=_PROBE_BLOCK, non_portable=True)
        return portable, nonportable


_current: Device | None = None


def current_device() -> Device:
    """The device cuadv works on: ordinal from CUADV_DEVICE, else 0. Raises NoGpuError without a GPU."""
    global _current
    if _current is None:
        _current = Device(device_ordinal())
    return _current.activate()

