"""cuadv: Hopper and Blackwell kernel-execution features, usable, verified and measured from Python.

Public API (one module per mechanism; every op has the shape ``op(...)`` and ``prepare_op(...)``, takes
any array with ``__cuda_array_interface__`` or DLPack, returns arrays of the caller's library, and with
``stream=None`` runs on the caller's current stream):

    histogram, bincount (+ prepare_*)          cuadv.histograms: CUB-beating histograms (clusters, DSM)
    TileKernel, TileOrder, Trace, Schedule     cuadv.work_stealing: one tile body under fixed_work /
                                               fixed_blocks / clc (Blackwell) / steal (software CLC) /
                                               atomic_counter (a global counter zeroed before each launch)
    tma                                        tensor maps from any array, 2-D copy and transpose
    pipeline                                   multi-stage async pipeline header, the stencil op
    cooperative                                block_sum, grid-synchronised launch, clusters, DSM header
    pdl                                        chains of kernels with programmatic dependent launch
    persistent                                 PersistentKernel: a persistent kernel over a task queue
    l2, domains                                L2 persistence (l2.persist), memory sync domains
    Device, current_device, DeviceCaps         what the GPU can do (features: why not, fallback)
    compile_source, CompiledModule             NVRTC with cuadv/CCCL/cudart headers and a disk cache
    LaunchConfig, AccessPolicyWindow, launch   every launch option, checked before launch
    prepare, Launcher                          a launch checked once, then repeated at low host cost
    time_gpu, copy_ceiling                     CUDA-event timing and the bandwidth ceiling
    wait, GpuTimeoutError                      every host wait for the GPU bounded (CUADV_TIMEOUT_S)
"""

from . import cooperative, domains, features, l2, pdl, persistent, pipeline, tma
from .compiler import CompiledModule, compile_source
from .cooperative import block_sum, grid_sync_launch, max_cooperative_grid, prepare_block_sum
from .device import Device, DeviceCaps, current_device
from .errors import (CompileError, CuadvError, CudaDriverError, GpuTimeoutError, KernelArgumentError,
                     LaunchConfigError, NoGpuError, UnsupportedFeatureError, ValidationError)
from .histograms import bincount, histogram, prepare_bincount, prepare_histogram
from .kernel import Kernel
from .launching import AccessPolicyWindow, LaunchConfig, Launcher, launch, prepare
from .pdl import launch_chain, prepare_chain
from .persistent import PersistentKernel, prepare_persistent
from .timing import Timing, copy_ceiling, time_gpu
from .waiting import wait
from .work_stealing import Schedule, TileKernel, TileOrder, Trace

__version__ = "0.1.0"

__all__ = [
    "AccessPolicyWindow", "CompileError", "CompiledModule", "CuadvError", "CudaDriverError", "Device", "DeviceCaps",
    "GpuTimeoutError", "Kernel", "KernelArgumentError", "LaunchConfig", "LaunchConfigError", "Launcher",
    "NoGpuError", "PersistentKernel", "Schedule", "TileKernel", "TileOrder", "Timing", "Trace",
    "UnsupportedFeatureError", "ValidationError", "bincount", "block_sum", "compile_source", "cooperative",
    "copy_ceiling", "current_device", "domains", "features", "grid_sync_launch", "histogram", "l2", "launch",
    "launch_chain", "max_cooperative_grid", "pdl", "persistent", "pipeline", "prepare", "prepare_bincount",
    "prepare_block_sum", "prepare_chain", "prepare_histogram", "prepare_persistent", "time_gpu", "tma", "wait",
]
