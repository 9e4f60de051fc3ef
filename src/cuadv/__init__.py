"""cuadv: Hopper and Blackwell kernel-execution features, usable, verified and measured from Python.

Public API:
    Device, current_device, DeviceCaps        what the GPU can do
    compile_source, CompiledModule             NVRTC with cuadv/CCCL/cudart headers and a disk cache
    LaunchConfig, AccessPolicyWindow, launch   every launch option, checked before launch
    prepare, Launcher                          a launch checked once, then repeated at low host cost
    time_gpu, copy_ceiling                     CUDA-event timing and the bandwidth ceiling
    TileKernel                                 one tile body under fixed_work / fixed_blocks / clc / steal
"""

from .compiler import CompiledModule, compile_source
from .device import Device, DeviceCaps, current_device
from .errors import (CompileError, CuadvError, KernelArgumentError, LaunchConfigError, NoGpuError,
                     UnsupportedFeatureError, ValidationError)
from .launch import AccessPolicyWindow, Kernel, LaunchConfig, Launcher, launch, prepare
from .timing import Timing, copy_ceiling, time_gpu
from .work_stealing import Schedule, TileKernel, TileOrder, Trace

__version__ = "0.1.0"

__all__ = [
    "AccessPolicyWindow", "CompileError", "CompiledModule", "CuadvError", "Device", "DeviceCaps", "Kernel",
    "KernelArgumentError", "LaunchConfig", "LaunchConfigError", "Launcher", "NoGpuError", "Schedule", "TileKernel", "Timing",
    "TileOrder", "Trace", "UnsupportedFeatureError", "ValidationError", "compile_source", "copy_ceiling", "current_device",
    "launch", "prepare", "time_gpu",
]
