"""A loaded kernel and its occupancy: the attributes launch checks need, read once.

Read-only attributes, parameter sizes and blocks per SM come from cuda.core (``Kernel.attributes``,
``Kernel.arguments_info``, ``Kernel.occupancy``). Writable attributes (dynamic shared-memory limit,
non-portable clusters) and the cluster occupancy queries go through the driver: cuda.core's
attribute view is read-only, and its cluster queries take a cuda.core launch configuration and a
stream where these need only the block shape and the cluster.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import Any

from ._cuda import check, driver
from .dims import STATIC_SHARED_LIMIT, Dim3, as_dim3, volume
from .memo import BoundedMemo
from .signature import Signature, declared_signature

MAX_LAUNCHERS = 1024  # configurations remembered per kernel (and per TileKernel)


class Kernel:
    """A loaded kernel: the cuda.core Kernel plus the attributes the launch checks need."""

    def __init__(self, core_kernel, name: str, module=None):
        self.core = core_kernel
        self.name = name
        self.module = module
        self._dynamic_shared_limit: int | None = None  # the driver's default until raised: 48 KB less the static
        self._non_portable: bool | None = None
        self._raising = threading.Lock()  # the dynamic shared-memory limit only ever rises
        self._launchers = BoundedMemo(MAX_LAUNCHERS)  # LaunchConfig -> Launcher: configurations that passed the checks
        self._last: tuple[Any, Any] = (None, None)  # the last (LaunchConfig, Launcher) asked for

    @property
    def handle(self):
        return self.core.handle

    @cached_property
    def function(self):
        """The CUfunction of this kernel in the current context (for occupancy and attribute calls)."""
        return check(driver().cuKernelGetFunction(self.handle), "cuKernelGetFunction")

    def attribute(self, name: str) -> int:
        drv = driver()
        attr = getattr(drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(check(drv.cuFuncGetAttribute(attr, self.function), f"cuFuncGetAttribute({name})"))

    def set_attribute(self, name: str, value: int) -> None:
        drv = driver()
        attr = getattr(drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        check(drv.cuFuncSetAttribute(self.function, attr, value), f"cuFuncSetAttribute({name}={value})")

    @cached_property
    def param_sizes(self) -> tuple[int, ...]:
        return tuple(int(info.size) for info in self.core.arguments_info)

    @cached_property
    def signature(self) -> Signature | None:
        """The parameters the compiled source declares for this kernel (None where it cannot be read, or
        disagrees with ``param_sizes``): arguments are checked against it."""
        source = getattr(self.module, "source", "")
        found = declared_signature(source, self.name) if source else None
        return found if found is not None and found.fits(self.param_sizes) else None

    @cached_property
    def static_shared_bytes(self) -> int:
        return int(self.core.attributes.shared_size_bytes)

    @cached_property
    def max_threads_per_block(self) -> int:
        return int(self.core.attributes.max_threads_per_block)

    @cached_property
    def compile_time_cluster(self) -> Dim3 | None:
        a = self.core.attributes
        dims = (int(a.required_cluster_width), int(a.required_cluster_height), int(a.required_cluster_depth))
        return dims if dims[0] > 0 else None  # type: ignore[return-value]

    def ensure_dynamic_shared(self, nbytes: int) -> None:
        """Raise the kernel's dynamic shared-memory limit when a launch asks for more than it allows: by default
        48 KB less the kernel's static shared memory (a block past 48 KB in all needs the opt-in)."""
        if nbytes <= 0:
            return
        with self._raising:  # two threads raising it at once must not leave the smaller of their values
            if self._dynamic_shared_limit is None:
                self._dynamic_shared_limit = STATIC_SHARED_LIMIT - self.static_shared_bytes
            if nbytes > self._dynamic_shared_limit:
                self.set_attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES", nbytes)
                self._dynamic_shared_limit = nbytes

    def set_non_portable_cluster(self, allowed: bool) -> None:
        if self._non_portable != allowed:
            self.set_attribute("NON_PORTABLE_CLUSTER_SIZE_ALLOWED", int(allowed))
            self._non_portable = allowed

    def __repr__(self) -> str:
        return f"Kernel({self.name!r})"


def _occupancy_config(block: Dim3 | int, shared_mem: int, cluster: Dim3 | None, grid_blocks: int):
    drv = driver()
    b = as_dim3(block)
    cfg = drv.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid_blocks, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = b
    cfg.sharedMemBytes = shared_mem
    if cluster is not None:
        c = as_dim3(cluster)
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = c
        cfg.gridDimX = max(grid_blocks // c[0], 1) * c[0]
        cfg.gridDimY, cfg.gridDimZ = c[1], c[2]
        cfg.attrs = [attr]
        cfg.numAttrs = 1
    return cfg


def max_active_blocks_per_sm(kernel: Kernel, block: Dim3 | int, shared_mem: int = 0) -> int:
    kernel.ensure_dynamic_shared(shared_mem)
    return int(kernel.core.occupancy.max_active_blocks_per_multiprocessor(volume(as_dim3(block)), shared_mem))


def max_cluster_size(kernel: Kernel, block: Dim3 | int, shared_mem: int = 0, non_portable: bool = False) -> int:
    """Largest cluster size the kernel can be launched with (portable sizes only unless non_portable)."""
    kernel.set_non_portable_cluster(non_portable)
    kernel.ensure_dynamic_shared(shared_mem)
    cfg = _occupancy_config(block, shared_mem, None, 128)
    return int(check(driver().cuOccupancyMaxPotentialClusterSize(kernel.function, cfg),
                     "cuOccupancyMaxPotentialClusterSize"))


def max_active_clusters(kernel: Kernel, block: Dim3 | int, cluster: Dim3 | int, shared_mem: int = 0) -> int:
    """How many clusters of this shape can be co-resident on the whole GPU."""
    c = as_dim3(cluster)
    kernel.set_non_portable_cluster(volume(c) > 8)
    kernel.ensure_dynamic_shared(shared_mem)
    cfg = _occupancy_config(block, shared_mem, c, c[0] * 1024)
    return int(check(driver().cuOccupancyMaxActiveClusters(kernel.function, cfg), "cuOccupancyMaxActiveClusters"))
