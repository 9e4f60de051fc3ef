"""Occupancy queries through the driver: blocks per SM, largest cluster, active clusters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._cuda import check, driver

if TYPE_CHECKING:
    from .launch import Dim3, Kernel


def _occupancy_config(block: "Dim3 | int", shared_mem: int, cluster: "Dim3 | None", grid_blocks: int):
    from .launch import as_dim3

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


def max_active_blocks_per_sm(kernel: "Kernel", block: "Dim3 | int", shared_mem: int = 0) -> int:
    from .launch import as_dim3

    threads = as_dim3(block)[0] * as_dim3(block)[1] * as_dim3(block)[2]
    kernel.ensure_dynamic_shared(shared_mem)
    return int(check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.function, threads, shared_mem),
                     "cuOccupancyMaxActiveBlocksPerMultiprocessor"))


def max_cluster_size(kernel: "Kernel", block: "Dim3 | int", shared_mem: int = 0, non_portable: bool = False) -> int:
    """Largest cluster size the kernel can be launched with (portable sizes only unless non_portable)."""
    kernel.set_non_portable_cluster(non_portable)
    kernel.ensure_dynamic_shared(shared_mem)
    cfg = _occupancy_config(block, shared_mem, None, 128)
    return int(check(driver().cuOccupancyMaxPotentialClusterSize(kernel.function, cfg),
                     "cuOccupancyMaxPotentialClusterSize"))


def max_active_clusters(kernel: "Kernel", block: "Dim3 | int", cluster: "Dim3 | int", shared_mem: int = 0) -> int:
    """How many clusters of this shape can be co-resident on the whole GPU."""
    from .launch import as_dim3

    c = as_dim3(cluster)
    kernel.set_non_portable_cluster(c[0] * c[1] * c[2] > 8)
    kernel.ensure_dynamic_shared(shared_mem)
    cfg = _occupancy_config(block, shared_mem, c, c[0] * 1024)
    return int(check(driver().cuOccupancyMaxActiveClusters(kernel.function, cfg), "cuOccupancyMaxActiveClusters"))
