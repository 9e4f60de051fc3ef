"""Small device allocations that cuadv itself needs (scheduler counters, traces, flags)."""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ._cuda import check, driver
from .waiting import timed_out, wait


_KEPT_FOR_GRAPHS: list = []  # what captured CUDA graphs read or write on every replay: never freed


def keep_for_graphs(*held) -> None:
    """Keeps ``held`` (device buffers, objects owning them; None skipped) for the life of the process. A launch
    captured into a CUDA graph replays with their addresses however long the caller keeps the graph, and a
    cuMemFree while a global-mode capture is open would invalidate it."""
    _KEPT_FOR_GRAPHS.extend(h for h in held if h is not None)


def free(ptr: int) -> None:
    """cuMemFree, skipped once a GPU wait of this process has timed out: freeing synchronizes, so it could wait
    for the timed-out work for ever (the memory then goes with the process). Its status is not checked: it
    fails only in a context a kernel fault already broke, and that fault is the error to report."""
    if not timed_out():
        driver().cuMemFree(ptr)


def copy_to_host(ptr: int, nbytes: int, dtype, stream: int, what: str | None = None) -> np.ndarray:
    """``nbytes`` of device memory at ``ptr`` as a host array of ``dtype``, after the work queued on ``stream``: a
    bounded wait for the stream (``cuadv.waiting``; ``what``: the work that writes the memory, named if it times
    out), then the copy on that stream. (A copy to pageable memory would wait for its stream without a bound, and
    a synchronous one, on the legacy stream, for every blocking stream too.)"""
    out = np.empty(nbytes // np.dtype(dtype).itemsize, dtype=dtype)
    wait(stream, what=what)
    check(driver().cuMemcpyDtoHAsync(out.ctypes.data, ptr, out.nbytes, stream), "cuMemcpyDtoHAsync")
    try:
        wait(stream, what=f"the copy to the host after {what}" if what else None)
    except BaseException:  # a timeout or Ctrl-C: the copy may land yet, so its memory is kept, never handed back to
        _LANDING.append(out)  # Python's allocator
        raise
    return out


_LANDING: list[np.ndarray] = []  # host arrays of copies whose end a wait did not see: kept for the process


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

    def to_host(self, dtype=np.uint8, stream: int = 0, *, what: str | None = None) -> np.ndarray:
        """The bytes as ``dtype``, after the work queued on ``stream`` (a bounded wait: ``cuadv.waiting``;
        ``what``: the work that writes the buffer, named if it times out)."""
        return copy_to_host(self.ptr, self.nbytes, dtype, stream, what)

    def from_host(self, array: np.ndarray) -> None:
        """Copy ``array`` (pageable host memory) to the start of the buffer, on the legacy default stream. Such a
        copy first synchronizes that stream, without a bound: a bounded wait for the work queued on it comes first
        (``cuadv.waiting``), so such work that never ends raises GpuTimeoutError here rather than hanging (work on
        blocking streams, which the legacy stream also waits for, is not covered). The copy may return before its
        DMA lands: wait for the legacy stream before a non-blocking stream reads the buffer."""
        array = np.ascontiguousarray(array)
        if array.nbytes > self.nbytes:
            raise ValueError(f"{array.nbytes} B do not fit a {self.nbytes} B buffer")
        wait(0, what="the work ahead of a copy to the GPU on the legacy default stream")
        check(driver().cuMemcpyHtoD(self.ptr, array.ctypes.data, array.nbytes), "cuMemcpyHtoD")

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}

    def __del__(self):
        try:
            free(self.ptr)
        except Exception:
            pass


class HostWords:
    """Page-locked host memory mapped into the device: 8-byte words a kernel writes with plain
    stores and the host reads at any time, with no copy and no synchronisation (hints a launch
    leaves for the next one). Handed out one word at a time; pages are kept for the process."""

    WORDS_PER_PAGE = 512

    def __init__(self):
        self._pages: list[tuple[np.ndarray, int]] = []  # host view, device address
        self._used = self.WORDS_PER_PAGE
        self._lock = threading.Lock()

    def take(self) -> tuple[np.ndarray, int]:
        """A zeroed word: a one-element host view of it, and the address kernels write to."""
        with self._lock:
            if self._used == self.WORDS_PER_PAGE:
                self._pages.append(self._new_page())
                self._used = 0
            page, device_ptr = self._pages[-1]
            view, address = page[self._used:self._used + 1], device_ptr + 8 * self._used
            self._used += 1
        return view, address

    def _new_page(self) -> tuple[np.ndarray, int]:
        from .device import current_device

        current_device()
        drv = driver()
        flags = drv.CU_MEMHOSTALLOC_DEVICEMAP | drv.CU_MEMHOSTALLOC_PORTABLE
        nbytes = self.WORDS_PER_PAGE * 8
        ptr = int(check(drv.cuMemHostAlloc(nbytes, flags), f"cuMemHostAlloc({nbytes})"))
        page = np.ctypeslib.as_array((ctypes.c_uint64 * self.WORDS_PER_PAGE).from_address(ptr))
        page[:] = 0
        return page, int(check(drv.cuMemHostGetDevicePointer(ptr, 0), "cuMemHostGetDevicePointer"))
