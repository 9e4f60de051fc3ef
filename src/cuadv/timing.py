"""Timing with CUDA events: warm-up, repeats, median / min / max; the copy and read-only bandwidth ceilings.
Every host wait here is bounded (``cuadv.waiting``): a timed call that never ends raises GpuTimeoutError."""

from __future__ import annotations

import numbers
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from ._cuda import check, driver, init_driver
from . import nvtx
from .interop import stream_handle
from .memory import free
from .waiting import wait, wait_device


@dataclass(frozen=True)
class Timing:
    """Milliseconds of one timed region over several repeats."""

    median_ms: float
    min_ms: float
    max_ms: float
    samples: tuple[float, ...] = field(repr=False)

    @property
    def median_s(self) -> float:
        return self.median_ms * 1e-3

    def rate(self, amount: float) -> float:
        """amount per second at the median time (for example bytes -> bytes/s)."""
        return amount / self.median_s

    def as_dict(self) -> dict:
        return {"median_ms": self.median_ms, "min_ms": self.min_ms, "max_ms": self.max_ms, "repeats": len(self.samples)}


class EventPair:
    """Two timing events recorded on one stream."""

    def __init__(self):
        drv = driver()
        flags = drv.CUevent_flags.CU_EVENT_DEFAULT
        self.start = check(drv.cuEventCreate(flags), "cuEventCreate")
        self.stop = check(drv.cuEventCreate(flags), "cuEventCreate")

    def record_start(self, stream: Any = None) -> None:
        check(driver().cuEventRecord(self.start, stream_handle(stream)), "cuEventRecord")

    def record_stop(self, stream: Any = None) -> None:
        check(driver().cuEventRecord(self.stop, stream_handle(stream)), "cuEventRecord")

    def elapsed_ms(self, *, what: str | None = None, timeout_s: float | None = None) -> float:
        """Milliseconds between the two events, once the stop event has happened (at most the timeout;
        ``what``: the timed work, named if it times out)."""
        wait(self.stop, timeout_s=timeout_s, what=what or "the timed region")
        return float(check(driver().cuEventElapsedTime(self.start, self.stop), "cuEventElapsedTime"))

    def __del__(self):
        try:
            drv = driver()
            drv.cuEventDestroy(self.start)
            drv.cuEventDestroy(self.stop)
        except Exception:
            pass


def synchronize(stream: Any = None, *, what: str | None = None, timeout_s: float | None = None) -> None:
    """Wait for the work queued on ``stream`` (None: the current stream), at most the timeout
    (``cuadv.waiting``); ``what``: that work, named if it times out."""
    wait(stream, timeout_s=timeout_s, what=what)


def synchronize_device(*, what: str | None = None, timeout_s: float | None = None) -> None:
    """Wait for every stream of the context (as ``cudaDeviceSynchronize``), at most the timeout."""
    wait_device(timeout_s=timeout_s, what=what)


_QUEUE_AHEAD_SOURCE = r"""
// Spins for `ns` nanoseconds on one thread. Enqueued before a timed region, it keeps the GPU busy
// while the host records the start event and launches, so host launch time is not measured.
#include <cuadv/timer.cuh>
extern "C" __global__ void cuadv_queue_ahead(unsigned long long ns) { cuadv::timer::spin_ns(ns); }
"""
_queue_ahead_kernel = None


def queue_ahead(microseconds: float, stream: int) -> None:
    """Enqueue a one-thread spin of ``microseconds`` on ``stream``."""
    global _queue_ahead_kernel
    from .compiler import compile_source
    from .launching import LaunchConfig, launch

    if _queue_ahead_kernel is None:
        _queue_ahead_kernel = compile_source(_QUEUE_AHEAD_SOURCE, name="cuadv_queue_ahead").kernel("cuadv_queue_ahead")
    launch(_queue_ahead_kernel, LaunchConfig(grid=1, block=32), int(microseconds * 1000), stream=stream)


def _count(value: Any, name: str, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")


def _check_timing(fn: Any, setup: Any, warmup: Any, repeats: Any, queue_ahead_us: Any) -> None:
    """time_gpu's arguments, before anything is enqueued."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable that enqueues the GPU work to time, got {type(fn).__name__} {fn!r}")
    if setup is not None and not callable(setup):
        raise TypeError(f"setup must be None or a callable, got {type(setup).__name__} {setup!r}")
    _count(warmup, "warmup", 0)
    _count(repeats, "repeats (timed runs; the median needs one)", 1)
    if isinstance(queue_ahead_us, bool) or not isinstance(queue_ahead_us, numbers.Real) \
            or not 0 <= queue_ahead_us < float("inf"):
        raise ValueError(f"queue_ahead_us must be a finite number of microseconds >= 0 (0: off), got "
                         f"{queue_ahead_us!r}")


def time_gpu(fn: Callable[[], Any], *, stream: Any = None, warmup: int = 3, repeats: int = 20,
             setup: Callable[[], Any] | None = None, queue_ahead_us: float = 150.0, timeout_s: float | None = None,
             what: str | None = None) -> Timing:
    """Time ``fn`` (which enqueues GPU work on ``stream``) with CUDA events.

    ``setup`` runs before every call outside the timed region (to reset outputs or rotate inputs).
    ``queue_ahead_us``: a spin kernel of this length is enqueued before each start event, so the
    host's time to launch ``fn`` (tens of microseconds from Python) is hidden behind it rather than
    counted in the timing; 0 turns it off (then launch overhead is part of what is measured).
    ``timeout_s``: the longest each wait for the GPU may take (default ``cuadv.waiting``'s, 60 s);
    past it GpuTimeoutError names ``what`` (default: ``fn``'s name, or its repr, which for a prepared
    launcher names the kernel).
    """
    _check_timing(fn, setup, warmup, repeats, queue_ahead_us)
    handle = stream_handle(stream)
    init_driver()  # no GPU: NoGpuError, not the loader's error at the first event
    name = getattr(fn, "__qualname__", None) or repr(fn)
    what = what or f"the timed call {name}"
    label = f"cuadv timed {name}"
    for _ in range(warmup):
        if setup:
            setup()
        fn()
    synchronize(handle, what=f"{what} (warm-up)", timeout_s=timeout_s)
    events = [EventPair() for _ in range(repeats)]
    for ev in events:
        if setup:
            setup()  # enqueued before the start event: outside the timed region
        if queue_ahead_us:
            queue_ahead(queue_ahead_us, handle)
        pop = nvtx.push(label)  # each timed launch is a range in Nsight Systems; its host cost stays outside the events
        try:
            ev.record_start(handle)
            fn()
            ev.record_stop(handle)
        finally:  # a call that raises still closes its range (else every later range nests inside it)
            pop()
    samples = [ev.elapsed_ms(what=what, timeout_s=timeout_s) for ev in events]
    return Timing(statistics.median(samples), min(samples), max(samples), tuple(samples))


class StreamGate:
    """Holds work enqueued on streams until ``release()``: a device-side wait on a 32-bit flag
    (cuStreamWaitValue32), opened by a stream write (cuStreamWriteValue32) that the GPU's front end
    performs without an SM. Work queued behind the gate starts the moment it opens, so a timing
    that starts at the gate measures the GPU alone, not the host's launch time, even while every
    SM is busy (a spin kernel could not run then).

    While work is held, the host must not call what may wait for the whole context: the first
    launch of a kernel (lazy loading may synchronize), freeing device memory, device-wide
    synchronization. Launch each kernel once before gating it."""

    def __init__(self):
        from .memory import DeviceBuffer

        drv = driver()
        self._flag = DeviceBuffer(4, fill=0)
        # The zero lands before any stream (non-blocking ones included) can wait on the flag.
        wait(0, what="the zeroing of a stream gate's flag")
        self._opened = 0
        flags = drv.CUstream_flags.CU_STREAM_NON_BLOCKING
        self._side = check(drv.cuStreamCreate(flags), "cuStreamCreate")

    def hold(self, stream: Any) -> None:
        """Work enqueued on ``stream`` after this waits for the next ``release()``."""
        drv = driver()
        check(drv.cuStreamWaitValue32(stream_handle(stream), self._flag.ptr, self._opened + 1,
                                      drv.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32")

    def release(self) -> None:
        """Open the gate for everything held so far."""
        self._opened += 1
        check(driver().cuStreamWriteValue32(self._side, self._flag.ptr, self._opened, 0), "cuStreamWriteValue32")

    def __del__(self):
        # Open the gate for good before its flag is freed: freeing may wait for the context, which
        # a stream still held on the flag would never let go idle.
        try:
            check(driver().cuStreamWriteValue32(self._side, self._flag.ptr, 0x7FFFFFFF, 0), "cuStreamWriteValue32")
            driver().cuStreamDestroy(self._side)
        except Exception:
            pass


@dataclass(frozen=True)
class Ceiling:
    """A measured bandwidth ceiling in bytes per second: of a device-to-device copy (bytes read plus bytes
    written, ``copy_ceiling``) or of a kernel that only reads (``read_ceiling``)."""

    bytes_per_s: float
    nbytes: int
    timing: Timing

    @property
    def tb_per_s(self) -> float:
        return self.bytes_per_s / 1e12

    def fraction(self, bytes_per_s: float) -> float:
        return bytes_per_s / self.bytes_per_s


CopyCeiling = Ceiling  # bytes read plus bytes written per second by a device-to-device copy
_ceiling: CopyCeiling | None = None


def copy_ceiling(nbytes: int = 1 << 31, repeats: int = 20) -> CopyCeiling:
    """Measure (once per process) a large device-to-device copy; every benchmark divides by it."""
    global _ceiling
    _count(nbytes, "nbytes (bytes copied)", 1)
    _count(repeats, "repeats (timed runs; the median needs one)", 1)
    if _ceiling is not None and _ceiling.nbytes == nbytes:
        return _ceiling
    from .device import current_device

    current_device()
    drv = driver()
    src = check(drv.cuMemAlloc(nbytes), "cuMemAlloc")
    dst = None
    try:
        dst = check(drv.cuMemAlloc(nbytes), "cuMemAlloc")  # may fail (2 GiB more): src is freed below all the same
        check(drv.cuMemsetD8(src, 0x5A, nbytes), "cuMemsetD8")
        stream = 0
        t = time_gpu(lambda: check(drv.cuMemcpyDtoDAsync(dst, src, nbytes, stream), "cuMemcpyDtoDAsync"),
                     stream=stream, warmup=3, repeats=repeats)
    finally:
        free(src)
        if dst is not None:
            free(dst)
    _ceiling = CopyCeiling(bytes_per_s=t.rate(2 * nbytes), nbytes=nbytes, timing=t)
    return _ceiling


_READ_SOURCE = r"""
// Streams n16 16-byte vectors (read-only, four loads in flight per thread) and writes one word per
// block, so the time is that of reading the bytes: the ceiling of a kernel that only reads its input.
extern "C" __global__ void __launch_bounds__(1024) cuadv_read_only(const uint4* __restrict__ in,
                                                                   unsigned long long n16,
                                                                   unsigned int* __restrict__ out) {
  __shared__ unsigned int folded;
  if (threadIdx.x == 0) folded = 0u;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned int acc = 0u;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = __ldg(in + i), b = __ldg(in + i + stride), c = __ldg(in + i + 2 * stride),
                d = __ldg(in + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n16; i += stride) {
    const uint4 a = __ldg(in + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  __syncthreads();  // thread 0's zero of `folded` is visible before any thread folds into it
  atomicXor(&folded, acc);
  __syncthreads();  // every thread's fold is complete before thread 0 reads the word
  if (threadIdx.x == 0) out[blockIdx.x] = folded;
}
"""


ReadCeiling = Ceiling  # bytes read per second by a kernel streaming them with 16-byte loads


_read_ceiling: ReadCeiling | None = None


def read_ceiling(nbytes: int = 1 << 30, repeats: int = 20) -> ReadCeiling:
    """Measure (once per process) the read-only ceiling over ``nbytes`` (a multiple of 16): what a kernel
    that reads its input once (a histogram, a reduction) is divided by."""
    global _read_ceiling
    _count(nbytes, "nbytes (bytes read, a multiple of 16)", 16)
    if nbytes % 16:
        raise ValueError(f"nbytes (bytes read, a multiple of 16) must be a multiple of 16, got {nbytes!r}")
    _count(repeats, "repeats (timed runs; the median needs one)", 1)
    if _read_ceiling is not None and _read_ceiling.nbytes == nbytes:
        return _read_ceiling
    from .compiler import compile_source
    from .device import current_device
    from .launching import LaunchConfig, launch

    caps = current_device().caps
    drv = driver()
    kernel = compile_source(_READ_SOURCE, name="cuadv_read_only").kernel("cuadv_read_only")
    grid = 2 * caps.sm_count  # two 1024-thread blocks per SM: every thread slot of a Hopper SM
    src = check(drv.cuMemAlloc(nbytes), "cuMemAlloc")
    out = None
    try:
        out = check(drv.cuMemAlloc(4 * grid), "cuMemAlloc")
        check(drv.cuMemsetD8(src, 0x5A, nbytes), "cuMemsetD8")
        config = LaunchConfig(grid=grid, block=1024)
        t = time_gpu(lambda: launch(kernel, config, int(src), nbytes // 16, int(out), stream=0), stream=0,
                     warmup=3, repeats=repeats)
    finally:
        free(src)
        if out is not None:
            free(out)
    _read_ceiling = ReadCeiling(bytes_per_s=t.rate(nbytes), nbytes=nbytes, timing=t)
    return _read_ceiling
