"""Launching kernels with every launch option, checked before anything reaches the GPU.

``LaunchConfig`` is a frozen value (hashable, comparable) whose constructor does the pure checks.
``prepare(kernel, config)`` does the device checks (cluster size, shared memory, co-residency,
priority range, ...) once and returns a ``Launcher``: the native ``CUlaunchConfig`` with its launch
attributes, and an argument buffer with a packing plan per tuple of argument types, both kept with
the kernel. Calling the launcher packs the arguments and makes one ``cuLaunchKernelEx`` call; that
is what ``launch`` does too, so a configuration is checked once however often it is launched.
``backend="core"`` launches through cuda.core instead (a cross-check; plain configurations only).
The driver path is the default because cuda.core's LaunchConfig has no priority, memory sync domain
or access-policy window, and one path for every configuration keeps the checks and the host cost alike.

Example::

    run = prepare(kernel, LaunchConfig(grid=1, block=32))  # checked here, before anything reaches the GPU
    for i in range(n):
        run(params, np.uint32(i), stream=stream)          # a few struct writes and one driver call
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ._cuda import check, driver
from .args import ArgumentPacker, PackedArguments
from .device import DeviceCaps, current_device
from .dims import (MAX_BLOCK, MAX_CLUSTER_SIZE, MAX_GRID, MAX_THREADS_PER_BLOCK, PORTABLE_CLUSTER_SIZE, Dim3, as_dim3,
                   is_int, volume)
from .errors import LaunchConfigError
from .features import require
from .interop import stream_handle
from .kernel import Kernel, max_active_blocks_per_sm, max_active_clusters, max_cluster_size

@dataclass(frozen=True)
class AccessPolicyWindow:
    """An L2 access-policy window: accesses to [base, base+num_bytes) hit as ``hit`` with probability
    ``hit_ratio``, the rest as ``miss``."""

    base_ptr: int
    num_bytes: int
    hit_ratio: float = 1.0
    hit: str = "persisting"
    miss: str = "streaming"

    def __post_init__(self):
        for field_name in ("base_ptr", "num_bytes"):
            value = getattr(self, field_name)
            if not is_int(value) or value < 0:
                raise LaunchConfigError(f"access-policy window {field_name} must be an int >= 0, got {value!r}")
        if isinstance(self.hit_ratio, (bool, np.bool_)) or not isinstance(self.hit_ratio, (int, float, np.number)) \
                or not 0.0 <= self.hit_ratio <= 1.0:
            raise LaunchConfigError(f"hit_ratio must be in [0, 1] (a float: the fraction of the window that hits as "
                                    f"{self.hit!r}), got {self.hit_ratio!r}")
        if self.hit not in ACCESS_PROPERTIES:
            raise LaunchConfigError(f"access property hit must be normal, streaming or persisting, got {self.hit!r}")
        if self.miss not in ("normal", "streaming"):
            raise LaunchConfigError(f"access property miss must be normal or streaming (CUDA Driver API, "
                                    f"CUaccessPolicyWindow.missProp), got {self.miss!r}")

    def to_driver(self):
        drv = driver()
        w = drv.CUaccessPolicyWindow()
        w.base_ptr = self.base_ptr
        w.num_bytes = self.num_bytes
        w.hitRatio = self.hit_ratio
        w.hitProp = getattr(drv.CUaccessProperty, f"CU_ACCESS_PROPERTY_{self.hit.upper()}")
        w.missProp = getattr(drv.CUaccessProperty, f"CU_ACCESS_PROPERTY_{self.miss.upper()}")
        return w


ACCESS_PROPERTIES = ("normal", "streaming", "persisting")
MEM_SYNC_DOMAINS = {"default": 0, "remote": 1}


@dataclass(frozen=True)
class LaunchConfig:
    """Every launch option in one value. ``grid`` counts blocks (as in CUDA C++), also with clusters."""

    grid: Dim3 | int | Sequence[int]
    block: Dim3 | int | Sequence[int]
    cluster: Dim3 | int | Sequence[int] | None = None
    shared_mem: int = 0
    cooperative: bool = False
    pdl: bool = False
    priority: int | None = None
    mem_sync_domain: str | None = None
    access_policy: AccessPolicyWindow | None = None

    def __post_init__(self):
        grid, block = as_dim3(self.grid, "grid"), as_dim3(self.block, "block")
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "block", block)
        for axis, (g, limit) in enumerate(zip(grid, MAX_GRID)):
            if not 1 <= g <= limit:
                raise LaunchConfigError(f"grid dimension {'xyz'[axis]} = {g} is outside [1, {limit}]")
        if volume(block) > MAX_THREADS_PER_BLOCK:
            raise LaunchConfigError(
                f"block of {volume(block)} threads exceeds the limit of {MAX_THREADS_PER_BLOCK} threads per block")
        for axis, (b, limit) in enumerate(zip(block, MAX_BLOCK)):
            if not 1 <= b <= limit:
                raise LaunchConfigError(f"block dimension {'xyz'[axis]} = {b} is outside [1, {limit}]")
        if self.cluster is not None:
            cluster = as_dim3(self.cluster, "cluster")
            object.__setattr__(self, "cluster", cluster)
            if min(cluster) < 1:
                raise LaunchConfigError(f"cluster dimensions must be >= 1, got {cluster}")
            if volume(cluster) > MAX_CLUSTER_SIZE:
                raise LaunchConfigError(
                    f"cluster of {volume(cluster)} blocks exceeds the largest cluster size {MAX_CLUSTER_SIZE}")
            for axis in range(3):
                if grid[axis] % cluster[axis]:
                    raise LaunchConfigError(
                        f"cluster dimension {'xyz'[axis]} = {cluster[axis]} does not divide grid dimension "
                        f"{'xyz'[axis]} = {grid[axis]}")
        self._check_options()

    def _check_options(self) -> None:
        if not is_int(self.shared_mem):
            raise LaunchConfigError(f"shared_mem must be an int number of bytes, got {self.shared_mem!r}")
        object.__setattr__(self, "shared_mem", int(self.shared_mem))
        if self.shared_mem < 0:
            raise LaunchConfigError(f"dynamic shared memory must be >= 0 bytes, got {self.shared_mem}")
        for flag in ("cooperative", "pdl"):
            if not isinstance(getattr(self, flag), (bool, np.bool_)):
                raise LaunchConfigError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
            object.__setattr__(self, flag, bool(getattr(self, flag)))
        object.__setattr__(self, "priority", checked_priority(self.priority))
        if self.mem_sync_domain is not None and (not isinstance(self.mem_sync_domain, str)
                                                 or self.mem_sync_domain not in MEM_SYNC_DOMAINS):
            raise LaunchConfigError(f"memory sync domain must be 'default' or 'remote', got {self.mem_sync_domain!r}")
        if self.access_policy is not None and not isinstance(self.access_policy, AccessPolicyWindow):
            raise LaunchConfigError(f"access_policy must be an AccessPolicyWindow (or None), got "
                                    f"{type(self.access_policy).__name__}")

    @property
    def cluster_size(self) -> int:
        return volume(self.cluster) if self.cluster else 1

    @property
    def grid_blocks(self) -> int:
        return volume(self.grid)

    def needs_driver_attributes(self) -> bool:
        """True when cuda.core's LaunchConfig cannot express this configuration."""
        return self.priority is not None or self.mem_sync_domain is not None or self.access_policy is not None


def checked_priority(priority: Any) -> int | None:
    """A launch priority as an int (None: the stream's); LaunchConfigError for anything else (a bool, a float)."""
    if priority is None:
        return None
    if not is_int(priority):
        raise LaunchConfigError(f"priority must be an int (or None), got {priority!r}")
    return int(priority)


def check_shared_memory(kernel: Kernel, shared_mem: int, caps: DeviceCaps) -> None:
    """Dynamic plus static shared memory against the GPU's opt-in limit per block, before the kernel's
    dynamic limit is raised to it (the driver would refuse that with no word of the limit)."""
    total = shared_mem + kernel.static_shared_bytes
    if total > caps.shared_mem_per_block_optin:
        raise LaunchConfigError(
            f"shared_mem = {shared_mem} B dynamic + {kernel.static_shared_bytes} B static shared memory exceeds "
            f"the per-block limit of {caps.shared_mem_per_block_optin} B (the opt-in maximum of compute capability "
            f"{caps.cc_string()}, CUDA Programming Guide: Technical Specifications per Compute Capability)")


def check_block(kernel: Kernel, block: Dim3 | int | Sequence[int], shared_mem: int, caps: DeviceCaps) -> None:
    """What the compiled kernel allows one block: its thread limit and the shared memory per block. Run before
    any occupancy query, which would raise the kernel's dynamic shared-memory limit first (a driver error
    that names no limit) or answer 0 blocks for a block the kernel cannot run at all."""
    threads = volume(as_dim3(block))
    if threads > kernel.max_threads_per_block:
        raise LaunchConfigError(
            f"block of {threads} threads exceeds this kernel's limit of {kernel.max_threads_per_block} "
            "(set by its registers or __launch_bounds__)")
    check_shared_memory(kernel, shared_mem, caps)


def check_config(kernel: Kernel, config: LaunchConfig) -> int:
    """Device checks: everything that depends on the GPU and on the compiled kernel. Returns the ordinal of
    the GPU checked against (the launch's)."""
    device = current_device()
    caps = device.caps
    features = caps.as_dict()
    check_block(kernel, config.block, config.shared_mem, caps)
    threads = volume(config.block)  # type: ignore[arg-type]
    total_shared = config.shared_mem + kernel.static_shared_bytes
    kernel.ensure_dynamic_shared(config.shared_mem)
    fixed = kernel.compile_time_cluster
    if config.cluster is not None and fixed is not None:
        raise LaunchConfigError(
            f"kernel {kernel.name} declares __cluster_dims__{fixed}; give no run-time cluster (got {config.cluster})")
    cluster = config.cluster or fixed
    if cluster is not None:
        require("cluster_launch", features, name="thread block clusters", fallback="launch without a cluster")
        for axis in range(3):
            if config.grid[axis] % cluster[axis]:  # type: ignore[index]
                raise LaunchConfigError(
                    f"cluster dimension {'xyz'[axis]} = {cluster[axis]} does not divide grid dimension "
                    f"{'xyz'[axis]} = {config.grid[axis]}")  # type: ignore[index]
        size = volume(cluster)
        largest = max_cluster_size(kernel, config.block, config.shared_mem, non_portable=size > PORTABLE_CLUSTER_SIZE)
        if size > largest:
            raise LaunchConfigError(
                f"cluster of {size} blocks exceeds the largest cluster this kernel can use here ({largest} blocks, "
                f"{'non-portable' if size > PORTABLE_CLUSTER_SIZE else 'portable'} limit, "
                f"{threads} threads and {total_shared} B shared memory per block)")
    if config.cooperative:
        require("cooperative_launch", features, name="cooperative launch",
                fallback="split the kernel at the grid sync into two launches")
        if cluster is not None:
            limit = max_active_clusters(kernel, config.block, cluster, config.shared_mem) * volume(cluster)
        else:
            limit = max_active_blocks_per_sm(kernel, config.block, config.shared_mem) * caps.sm_count
        if config.grid_blocks > limit:
            raise LaunchConfigError(
                f"cooperative grid of {config.grid_blocks} blocks exceeds the co-resident maximum {limit} "
                f"({caps.sm_count} SMs, {threads} threads and {total_shared} B shared memory per block)")
    if config.pdl:
        require("pdl", features, name="programmatic dependent launch",
                fallback="launch without pdl (plain stream order)")
    if config.priority is not None:
        lo, hi = caps.stream_priority_low, caps.stream_priority_high
        if not min(lo, hi) <= config.priority <= max(lo, hi):
            raise LaunchConfigError(
                f"priority {config.priority} is outside the device's range [{hi} (high), {lo} (low)]")
    if config.mem_sync_domain is not None:
        require("mem_sync_domains", features, name="memory sync domains", fallback="launch in the default domain")
    if config.access_policy is not None:
        require("l2_persistence", features, name="L2 access-policy window", fallback="launch without the window")
        if config.access_policy.num_bytes > caps.access_policy_max_window_bytes:
            raise LaunchConfigError(
                f"access-policy window of {config.access_policy.num_bytes} B exceeds the maximum window "
                f"{caps.access_policy_max_window_bytes} B")
    return device.ordinal


def _driver_attributes(config: LaunchConfig) -> list:
    drv = driver()
    ids = drv.CUlaunchAttributeID
    attrs = []

    def add(attr_id):
        a = drv.CUlaunchAttribute()
        a.id = attr_id
        attrs.append(a)
        return a.value

    if config.cluster is not None:
        v = add(ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
        v.clusterDim.x, v.clusterDim.y, v.clusterDim.z = config.cluster
    if config.cooperative:
        add(ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE).cooperative = 1
    if config.pdl:
        add(ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION).programmaticStreamSerializationAllowed = 1
    if config.priority is not None:
        add(ids.CU_LAUNCH_ATTRIBUTE_PRIORITY).priority = config.priority
    if config.mem_sync_domain is not None:
        add(ids.CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN).memSyncDomain = getattr(
            drv.CUlaunchMemSyncDomain, f"CU_LAUNCH_MEM_SYNC_DOMAIN_{config.mem_sync_domain.upper()}")
    if config.access_policy is not None:
        add(ids.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW).accessPolicyWindow = config.access_policy.to_driver()
    return attrs


def native_config(config: LaunchConfig, stream: int = 0):
    """The driver's CUlaunchConfig for ``config`` (grid in blocks, every option as a launch attribute)."""
    drv = driver()
    cfg = drv.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = config.grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = config.block
    cfg.sharedMemBytes = config.shared_mem
    cfg.hStream = drv.CUstream(stream)
    attrs = _driver_attributes(config)
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    return cfg


def _launch_driver(kernel: Kernel, config: LaunchConfig, packed: PackedArguments, stream: int) -> None:
    check(driver().cuLaunchKernelEx(native_config(config, stream), kernel.handle, packed.address, 0),
          f"cuLaunchKernelEx({kernel.name})")


def _launch_core(kernel: Kernel, config: LaunchConfig, scalars: list, stream: int) -> None:
    from cuda.core import LaunchConfig as CoreConfig, launch as core_launch

    grid = config.grid
    if config.cluster is not None:  # cuda.core counts clusters in grid when cluster is given
        grid = tuple(g // c for g, c in zip(config.grid, config.cluster))  # type: ignore[arg-type]
    core_cfg = CoreConfig(grid=grid, cluster=config.cluster, block=config.block, shmem_size=config.shared_mem,
                          is_cooperative=config.cooperative, programmatic_stream_serialization=config.pdl)
    core_launch(_core_stream(stream), core_cfg, kernel.core, *scalars)


_core_streams: dict[int, Any] = {}


def _core_stream(handle: int):
    from cuda.core import Stream

    s = _core_streams.get(handle)
    if s is None:
        if handle == 0:
            from cuda.core import LEGACY_DEFAULT_STREAM as s  # noqa: N811
        else:
            s = Stream.from_handle(handle)
        _core_streams[handle] = s
    return s


class Launcher:
    """A kernel with one checked configuration, launched again and again: ``prepare`` makes it.

    Made once per (kernel, configuration): the device checks have passed, the native launch
    configuration with its attributes is built, and the argument buffer is allocated. A call packs
    the arguments (a plan per tuple of argument types, see ``ArgumentPacker``), points the native
    configuration at the stream (only when its handle changes) and makes one ``cuLaunchKernelEx``
    call. It keeps no stream object alive.

    Calls from several threads are safe: a call that finds the buffer in use packs its own
    arguments from scratch, as ``launch`` did before the cache.
    """

    __slots__ = ("kernel", "config", "packer", "_native", "_handle", "_address", "_pack", "_driver_launch",
                 "_non_portable", "_stream_handle", "_acquire", "_release")

    def __init__(self, kernel: Kernel, config: LaunchConfig):
        device = check_config(kernel, config)  # raises before anything reaches the GPU
        self.kernel, self.config = kernel, config
        self.packer = ArgumentPacker(kernel.param_sizes, kernel.signature, device)
        self._native = native_config(config)
        self._handle = kernel.handle
        self._address = self.packer.address
        self._pack = self.packer.pack
        self._driver_launch = driver().cuLaunchKernelEx
        self._non_portable = config.cluster_size > PORTABLE_CLUSTER_SIZE
        self._stream_handle = 0
        busy = threading.Lock()  # held while the shared buffer is packed and read by the driver
        self._acquire, self._release = busy.acquire, busy.release

    def __call__(self, *args: Any, stream: Any = None, before: Callable[[], Any] | None = None) -> None:
        if not self._acquire(False):  # another thread (or a re-entrant call) is using the buffer
            self._launch_uncached(args, stream, before)
            return
        try:
            self._pack(args)
            handle = stream_handle(stream, *args)  # None: the current stream of the arguments' library
            if before is not None:  # the caller's work ahead of the kernel, once the arguments passed their checks
                before()
            if handle != self._stream_handle:  # the native configuration starts on stream 0
                self._native.hStream = driver().CUstream(handle)
                self._stream_handle = handle
            if self._non_portable:
                # An occupancy query for a portable size may have cleared the attribute since the check.
                self.kernel.set_non_portable_cluster(True)
            status, = self._driver_launch(self._native, self._handle, self._address, 0)
        finally:
            self._release()
        if status:
            check((status,), f"cuLaunchKernelEx({self.kernel.name})")

    def _launch_uncached(self, args: Sequence[Any], stream: Any, before: Callable[[], Any] | None = None) -> None:
        packer = self.packer
        packed = PackedArguments(args, packer.sizes, packer.declared, packer.device)
        handle = stream_handle(stream, *args)
        if before is not None:
            before()
        if self._non_portable:
            self.kernel.set_non_portable_cluster(True)
        _launch_driver(self.kernel, self.config, packed, handle)

    def __repr__(self) -> str:
        return f"Launcher({self.kernel.name!r}, {self.config!r})"


def prepare(kernel: Kernel, config: LaunchConfig) -> Launcher:
    """Run the device checks for a configuration once, without launching, and return its launcher
    (kept with the kernel: the same configuration, or an equal one, gets the same launcher). Use it
    before a stream capture, for a kernel that may only run inside a graph, or to launch many times."""
    _check_kernel_and_config(kernel, config)
    launchers = kernel._launchers  # many one-off configurations: the oldest forgotten (and checked again if met)
    launcher = launchers.get(config)
    if launcher is None:
        with _preparing:
            launcher = launchers.get(config)
            if launcher is None:
                launcher = launchers.put(config, Launcher(kernel, config))
    kernel._last = (config, launcher)
    return launcher


# Held while a configuration is checked and its launcher stored: threads preparing at once then do not
# interleave the kernel's attribute settings (the checks set them).
_preparing = threading.RLock()


BACKENDS = ("auto", "driver", "core")


def launch(kernel: Kernel, config: LaunchConfig, *args: Any, stream: Any = None, backend: str = "auto") -> None:
    """Check ``config`` against the GPU and the kernel (once per configuration), pack ``args`` to the
    kernel's parameters, launch on ``stream``.

    backend: "auto" or "driver" (``cuLaunchKernelEx`` through the configuration's cached launcher),
    or "core" (cuda.core's launch; plain configurations and scalar arguments only).
    """
    if backend == "core":
        _launch_through_core(kernel, config, args, stream)
        return
    if backend not in BACKENDS:
        raise LaunchConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if not isinstance(kernel, Kernel):
        _check_kernel_and_config(kernel, config)
    last_config, launcher = kernel._last
    if last_config is not config:  # the same config object as last time skips even the dictionary
        launcher = prepare(kernel, config)
    launcher(*args, stream=stream)  # type: ignore[misc]


def _check_kernel_and_config(kernel: Any, config: Any) -> None:
    if not isinstance(kernel, Kernel):
        hint = "call a TileKernel or PersistentKernel itself" if hasattr(kernel, "compile") and hasattr(
            kernel, "params") else "module.kernel(name) gives one"
        raise TypeError(f"kernel must be a cuadv Kernel ({hint}), got {type(kernel).__name__}")
    if not isinstance(config, LaunchConfig):
        raise TypeError(f"config must be a cuadv LaunchConfig (LaunchConfig(grid=..., block=...)), got "
                        f"{type(config).__name__}")


def _launch_through_core(kernel: Kernel, config: LaunchConfig, args: Sequence[Any], stream: Any) -> None:
    packer = prepare(kernel, config).packer
    packed = PackedArguments(args, kernel.param_sizes, packer.declared, packer.device)
    scalars = packed.as_scalars()
    if config.needs_driver_attributes() or scalars is None:
        raise LaunchConfigError("backend='core' cannot express priority, memory sync domain, access-policy "
                                "window or struct arguments; use backend='driver'")
    if config.cluster_size > PORTABLE_CLUSTER_SIZE:
        kernel.set_non_portable_cluster(True)
    _launch_core(kernel, config, scalars, stream_handle(stream, *args))
