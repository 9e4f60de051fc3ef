"""Bounded host waits for GPU work.

Every wait of cuadv's host for the GPU (timing, readbacks, the labs, ``cuadv check``'s runs) goes
through here and lasts at most a timeout: a kernel that never ends (a deadlock, a spin on a flag
nobody sets) raises ``GpuTimeoutError`` naming what was waited for, instead of hanging the process.
A stream or an event is polled (``cuStreamQuery`` / ``cuEventQuery``): without sleeping for the first
20 ms (a wait that short ends within microseconds of the work, as a synchronize would), then with
sleeps from 50 us up to 2 ms between polls (a longer wait overshoots by at most that). The spin is
that long because a sleep overshoots: with 1 ms of it, a one-shot ``cuadv.histogram`` whose skew sample
waited behind 1 ms of queued work woke up to 0.2 ms after its data was ready (H200, 2026-12-02). The driver has
no query for a whole context, so ``wait_device`` runs ``cuCtxSynchronize`` on a helper thread and gives
up on it after the timeout.

The timeout: the ``timeout_s`` argument, else the enclosing ``scope(timeout_s=...)`` (the lab
runner's), else ``CUADV_TIMEOUT_S`` (seconds; ``inf``: no limit), else 60 s.

After a timeout the GPU is still running that work, and what synchronizes (freeing device memory,
the CUDA teardown at exit) would wait for it for ever. So once a wait has timed out, cuadv frees no
more device memory of its own (``timed_out``; the memory goes with the process), and at exit checks
whether the GPU is idle by then (for up to 5 s); where it is not, it ends the process at once with
status 1, skipping that teardown. (The check runs ``cuCtxSynchronize`` on a thread for each context
that timed out; where Python refuses a new thread in an exit handler, 3.12.0 to 3.12.2, it reads the
watch thread the timeout started instead, one per context.)
"""

from __future__ import annotations

import atexit
import math
import numbers
import os
import sys
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ._cuda import check, driver, init_driver
from .dims import is_int
from .errors import GpuTimeoutError, UnsupportedFeatureError
from .interop import capturing, stream_handle

__all__ = ["DEFAULT_TIMEOUT_S", "TIMEOUT_ENV", "WaitScope", "event_done", "resolve_timeout", "scope", "timed_out",
           "wait", "wait_device", "wait_until"]

TIMEOUT_ENV = "CUADV_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0
SPIN_S = 20e-3  # polls without sleeping (only yielding the GIL) for this long first
FIRST_PAUSE_S = 50e-6  # then the first sleep between polls; each next one doubles ...
LONGEST_PAUSE_S = 2e-3  # ... up to this: what a finished wait may overshoot by
EXIT_GRACE_S = 5.0  # at exit after a timeout: how long the GPU may take to go idle before the process ends at once
EXIT_STATUS = 1


@dataclass
class WaitScope:
    """What the waits inside a ``scope`` use: a default timeout and what the process is doing (named in
    a timeout's message; the runner updates ``activity`` with each step of a lab)."""

    timeout_s: float | None = None
    activity: str | None = None


_scope: ContextVar[WaitScope | None] = ContextVar("cuadv_wait_scope", default=None)


@contextmanager
def scope(*, timeout_s: float | None = None, activity: str | None = None) -> Iterator[WaitScope]:
    """Within the block, waits default to ``timeout_s`` and their errors name ``activity``."""
    current = WaitScope(None if timeout_s is None else _checked(timeout_s, "timeout_s"), activity)
    token = _scope.set(current)
    try:
        yield current
    finally:
        _scope.reset(token)


def resolve_timeout(timeout_s: float | None = None) -> float:
    """The timeout a wait uses: ``timeout_s``, else the scope's, else ``CUADV_TIMEOUT_S``, else 60 s."""
    if timeout_s is not None:
        return _checked(timeout_s, "timeout_s")
    current = _scope.get()
    if current is not None and current.timeout_s is not None:
        return current.timeout_s
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    return _checked(value, TIMEOUT_ENV, raw)


def _checked(value: Any, name: str, shown: Any = None) -> float:
    # Any real number (NumPy's integers and float32 too, which are no int or float), not bool.
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} must be a number of seconds > 0 (inf: no limit), got "
                         f"{value if shown is None else shown!r}")
    return float(value)


def wait_until(done: Callable[[], bool], what: str, timeout_s: float | None = None, *,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], Any] = time.sleep) -> None:
    """Poll ``done()`` until it is true; GpuTimeoutError naming ``what`` once the timeout has passed."""
    limit = resolve_timeout(timeout_s)
    start = clock()
    deadline, spin_until = start + limit, start + SPIN_S
    pause = FIRST_PAUSE_S
    while not done():
        now = clock()
        if now >= deadline:
            current = _scope.get()
            raise GpuTimeoutError(what, limit, current.activity if current else None)
        if now < spin_until:
            sleep(0)  # lets other threads run
            continue
        sleep(min(pause, deadline - now))
        pause = min(2 * pause, LONGEST_PAUSE_S)


def wait(target: Any = None, *, timeout_s: float | None = None, what: str | None = None) -> None:
    """Wait for the work queued so far on a stream (anything ``stream_handle`` takes; None: the current
    stream) or until an event (a ``CUevent``, a cuda.core, CuPy or torch Event) has happened, at most the timeout.
    A torch Event never recorded has nothing to wait for (as its ``synchronize``)."""
    drv = driver()
    event = _event(target)
    if event is _NEVER_RECORDED:
        return
    if event is not None:
        done = _ready(lambda: drv.cuEventQuery(event), "cuEventQuery")
        what = what or "a CUDA event"
    else:
        handle = stream_handle(target)
        stream = drv.CUstream(handle)
        done = _ready(lambda: drv.cuStreamQuery(stream), "cuStreamQuery")
        what = what or f"the GPU work on stream {handle:#x}"
    init_driver()  # no GPU: NoGpuError here, after the argument's checks, not the loader's error in the query
    if event is None and capturing(handle):  # a query of a capturing stream fails and invalidates its capture
        raise UnsupportedFeatureError(f"waiting for {what}", "a stream that runs its work, which a host wait needs",
                                      f"stream {handle:#x} being captured into a CUDA graph",
                                      "wait for the graph's replay instead, or make this call before or after "
                                      "the capture")
    _guarded(lambda: wait_until(done, what, timeout_s))


def wait_device(*, timeout_s: float | None = None, what: str | None = None) -> None:
    """Wait for all work of the current CUDA context (every stream), at most the timeout."""
    init_driver()
    _guarded(lambda: _synchronize_context(_current_context(), what or "all GPU work of this process", timeout_s))


_NEVER_RECORDED = object()  # _event's answer for a torch Event that holds no CUDA event yet


def _event(target: Any) -> Any:
    """The CUevent of a CUevent, a cuda.core Event (``handle``), a CuPy Event (``ptr``) or a torch Event
    (``torch.cuda.Event``'s ``cuda_event``, the device-generic ``torch.Event``'s ``event_id``; 0 until its first
    record: ``_NEVER_RECORDED``); None for anything else (a stream). TypeError for another class named Event (a
    threading.Event) and for a torch.Event of another device than CUDA, which name no CUDA event."""
    drv = driver()
    if isinstance(target, drv.CUevent):
        return target
    if type(target).__name__ == "Event":
        for attr in ("handle", "ptr", "cuda_event", "event_id"):
            handle = getattr(target, attr, None)
            if handle is not None:
                device = getattr(getattr(target, "device", None), "type", "cuda")
                if attr == "event_id" and device != "cuda":
                    raise TypeError(f"cannot wait for a {type(target).__module__}.Event of device {device!r}: it "
                                    "names no CUDA event; make it with device='cuda'")
                if attr in ("cuda_event", "event_id") and not int(handle):
                    return _NEVER_RECORDED
                return drv.CUevent(int(handle))
        raise TypeError(f"cannot wait for a {type(target).__module__}.Event: it names no CUDA event; pass a CUevent, "
                        "a cuda.core, CuPy or torch Event, or a stream")
    return None


def event_done(event: Any) -> bool:
    """Whether the work before ``event``'s latest record has finished, without waiting (a failed kernel's error
    raises here). ``event``: what ``wait`` takes as an event (a ``CUevent``, a cuda.core, CuPy or torch Event) or an
    event handle as an int; a torch Event never recorded is done (as its ``query``)."""
    handle = driver().CUevent(event) if is_int(event) else _event(event)
    if handle is _NEVER_RECORDED:
        return True
    if handle is None:
        raise TypeError(f"event_done takes a CUevent, a cuda.core, CuPy or torch Event or an event handle, got "
                        f"{type(event).__name__} {event!r}")
    return _ready(lambda: driver().cuEventQuery(handle), "cuEventQuery")()


def _ready(query: Callable[[], tuple], call: str) -> Callable[[], bool]:
    not_ready = driver().CUresult.CUDA_ERROR_NOT_READY

    def done() -> bool:
        result = query()
        if result[0] == not_ready:
            return False
        check(result, call)  # a failed kernel's error surfaces here, as from a synchronize
        return True
    return done


def _current_context() -> Any:
    """The CUDA context current on this thread; cuadv's device's where none is (a thread that only used torch)."""
    context = check(driver().cuCtxGetCurrent(), "cuCtxGetCurrent")
    if not int(context):
        from .device import current_device

        current_device()
        context = check(driver().cuCtxGetCurrent(), "cuCtxGetCurrent")
    return context


def _context_sync(context: Any, name: str) -> tuple[threading.Event, list[BaseException]]:
    """cuCtxSynchronize of ``context`` on a daemon thread (there is no query for a whole context): an event set when
    it returns, and its error if it failed. A thread given up on stays blocked in the driver until the work ends
    (a daemon: it never holds up exit)."""
    finished = threading.Event()
    failure: list[BaseException] = []

    def synchronize() -> None:
        try:
            drv = driver()
            check(drv.cuCtxSetCurrent(context), "cuCtxSetCurrent")
            check(drv.cuCtxSynchronize(), "cuCtxSynchronize")
        except BaseException as exc:  # handed to whoever waits
            failure.append(exc)
        finally:
            finished.set()

    threading.Thread(target=synchronize, name=name, daemon=True).start()
    return finished, failure


def _synchronize_context(context: Any, what: str, timeout_s: float | None) -> None:
    """cuCtxSynchronize of ``context``, bounded by the timeout."""
    finished, failure = _context_sync(context, "cuadv-wait-device")
    wait_until(finished.is_set, what, timeout_s)
    if failure:
        raise failure[0]


def timed_out() -> bool:
    """Whether a GPU wait of this process has timed out. The GPU may still run that work, so what would wait
    for it (freeing device memory: ``cuMemFree`` synchronizes) is better skipped, the memory left to the
    process's end, than left to hang."""
    return _timed_out.locked()


_timed_out = threading.Lock()  # taken by the first timeout of the process, never released


def _guarded(run_wait: Callable[[], None]) -> None:
    """Run a GPU wait; after a timeout, watch for its context going idle, and at exit check whether the GPU is (see
    module docs)."""
    try:
        run_wait()
    except GpuTimeoutError:
        first = _timed_out.acquire(blocking=False)  # first of all: from here on cuadv frees no memory
        try:
            _watch_until_idle(_current_context())
        except Exception:  # no thread or no context: the timeout is the error to report (the exit check then ends
            pass           # the process unless it can tell the GPU is idle)
        if first:
            atexit.register(_end_if_still_busy)
        raise


# Per context of a timed-out wait (keyed by its handle): the context and an event set once the work queued before
# the watch began has ended (or the context failed: its teardown does not wait for the work).
_watches: dict[int, tuple[Any, threading.Event]] = {}
_watches_lock = threading.Lock()


def _watch_until_idle(context: Any) -> None:
    """After a timeout: a daemon thread in cuCtxSynchronize, whose end the exit check can read where it may start no
    thread of its own (Python 3.12.0 to 3.12.2 refuse one in an exit handler: CPython issue 113964, fixed in 3.12.3).
    One unfinished watch per context at a time, so a loop of timed-out waits does not pile up blocked threads."""
    key = int(context)
    with _watches_lock:
        if key in _watches and not _watches[key][1].is_set():
            return
        _watches[key] = (context, _context_sync(context, "cuadv-idle-watch")[0])


def _end_if_still_busy() -> None:
    """At exit after a timeout: return where every context of a timed-out wait is idle within the grace (the usual
    teardown follows), else end the process now, before a teardown that would wait for the work for ever. A fresh
    cuCtxSynchronize per context, which sees work queued after the timeouts too; where no thread may start, the
    watches the timeouts started."""
    deadline = time.monotonic() + EXIT_GRACE_S
    with _watches_lock:
        watched = list(_watches.values())
    try:
        done = [_context_sync(context, "cuadv-exit-check")[0] for context, _ in watched]
    except RuntimeError:  # "can't create new thread at interpreter shutdown"
        done = [event for _, event in watched]
    if done and all(event.wait(max(0.0, deadline - time.monotonic())) for event in done):
        return
    sys.stderr.write(f"cuadv: GPU work that timed out is still running {EXIT_GRACE_S:g} s into the exit; ending "
                     f"the process with status {EXIT_STATUS} without the CUDA teardown, which would wait for it\n")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed stream: nothing left to flush
            pass
    os._exit(EXIT_STATUS)
