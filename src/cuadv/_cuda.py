"""Thin checked access to the CUDA driver and NVRTC through cuda.bindings."""

from __future__ import annotations

import os
from functools import cache
from typing import Any

from .errors import CudaDriverError, NoGpuError


def driver():
    from cuda.bindings import driver as drv

    return drv


def nvrtc():
    from cuda.bindings import nvrtc as rtc

    return rtc


def ready_driver():
    """The driver after cuInit, for a public function whose first CUDA call is a driver call: without a usable GPU
    it raises NoGpuError (init_driver), not the loader's error from that call."""
    init_driver()
    return driver()


def new_nonblocking_stream() -> int:
    """A stream of the current context that does not wait for the legacy default stream (cuStreamCreate), as its
    raw handle; the caller destroys it or keeps it for the process."""
    drv = driver()
    return int(check(drv.cuStreamCreate(int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate"))


def check(result: tuple | Any, call: str = "CUDA driver call") -> Any:
    """Unpack a cuda.bindings return tuple, raising CudaDriverError on failure."""
    if not isinstance(result, tuple):
        result = (result,)
    status, *values = result
    if int(status) != 0:
        drv = driver()
        name = str(status)
        try:
            err, text = drv.cuGetErrorString(status)
            if int(err) == 0 and text:
                name = f"{status.name}: {text.decode()}"
        except Exception:  # the driver may be gone; the enum name is enough
            pass
        raise CudaDriverError(f"{call} failed: {name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@cache
def init_driver() -> int:
    """Initialise the driver once; return the device count. Raises NoGpuError with one clear line."""
    try:
        drv = driver()
        status, = drv.cuInit(0)
    except Exception as exc:  # library missing: no driver installed
        raise NoGpuError(f"no CUDA GPU: the NVIDIA driver library could not be loaded ({type(exc).__name__})") from None
    if int(status) != 0:
        raise NoGpuError(f"no CUDA GPU: cuInit returned {status.name}")
    status, count = drv.cuDeviceGetCount()
    if int(status) != 0 or count == 0:
        raise NoGpuError("no CUDA GPU: the driver reports 0 devices")
    return count


def gpu_available() -> bool:
    try:
        init_driver()
    except NoGpuError:
        return False
    return True


def nvrtc_version() -> tuple[int, int]:
    major, minor = check(nvrtc().nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


@cache
def library_identity(name: str) -> str:
    """Which file the NVIDIA library ``name`` ("nvrtc", "nvJitLink") is in this process: its path, size and
    modification time ('' where it cannot be found). A compile cache keyed on major.minor alone would keep what an
    older patch release of the compiler made."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        path = load_nvidia_dynamic_lib(name).abs_path
        st = os.stat(path)
    except Exception:  # not installed, loaded from elsewhere, or an older cuda-pathfinder
        return ""
    return f"{path} {st.st_size} {st.st_mtime_ns}"


def driver_version() -> int:
    return int(check(driver().cuDriverGetVersion(), "cuDriverGetVersion"))


def device_ordinal() -> int:
    """The ordinal ``CUADV_DEVICE`` names (unset or empty: 0); ValueError naming the variable for anything that is
    no integer (before any driver call)."""
    raw = os.environ.get("CUADV_DEVICE", "").strip()
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"CUADV_DEVICE must be a device ordinal (an integer: 0, 1, ...), got {raw!r}") from None
