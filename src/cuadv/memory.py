"""Small device allocations that cuadv itself needs (scheduler counters, traces, flags)."""

from __future__ import annotations

import numpy as np

from ._cuda import check, driver


class DeviceBuffer:
    """A cuMemAlloc'd buffer, freed with the object. Exposes __cuda_array_interface__ as bytes."""

    def __init__(self, nbytes: int, fill: int | None = 0):
        from .device import current_device

        current_device()
        self.nbytes = max(int(nbytes), 1)
        self.ptr = int(check(driver().cuMemAlloc(self.nbytes), f"cuMemAlloc({self.nbytes})"))
        if fill is not None:
            self.fill(fill)

    def fill(self, byte: int, stream: int | None = None) -> None:
        """Set every byte; on ``stream`` (ordered with the work there), or when None on the legacy
        default stream, which blocking streams wait for but non-blocking ones do not (synchronize
        before such a stream reads the buffer)."""
        if stream is None:
            check(driver().cuMemsetD8(self.ptr, byte & 0xFF, self.nbytes), "cuMemsetD8")
        else:
            check(driver().cuMemsetD8Async(self.ptr, byte & 0xFF, self.nbytes, stream), "cuMemsetD8Async")

    def to_host(self, dtype=np.uint8, stream: int = 0) -> np.ndarray:
        drv = driver()
        out = np.empty(self.nbytes // np.dtype(dtype).itemsize, dtype=dtype)
        check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize")
        check(drv.cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes), "cuMemcpyDtoH")
        return out

    def from_host(self, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        if array.nbytes > self.nbytes:
            raise ValueError(f"{array.nbytes} B do not fit a {self.nbytes} B buffer")
        check(driver().cuMemcpyHtoD(self.ptr, array.ctypes.data, array.nbytes), "cuMemcpyHtoD")

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}

    def __del__(self):
        try:
            driver().cuMemFree(self.ptr)
        except Exception:
            pass
