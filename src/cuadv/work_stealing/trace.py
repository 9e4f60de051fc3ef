"""What a launch hands out and what it records: the order of the units (``TileOrder``) and the
per-tile record of which SM ran which tile when (``Trace``)."""

from __future__ import annotations

import threading

import numpy as np

from .._cuda import driver, new_nonblocking_stream
from ..device import current_device
from ..dims import Dim3
from ..errors import LaunchConfigError
from ..memory import DeviceBuffer
from ..params import c_struct
from ..waiting import wait

# cuadv::ws::TraceRecord (work_stealing.cuh)
TRACE_DTYPE = c_struct("cuadv::ws::TraceRecord",
                       [("smid", "<u4"), ("block", "<u4"), ("start_ns", "<u8"), ("end_ns", "<u8")], size=24)


class TileOrder:
    """The order in which units of work (tiles, or cluster-shaped groups of tiles) are handed out:
    the i-th unit any policy hands out is ``permutation[i]``. Giving the heaviest tiles first (when
    their cost is known, as in causal attention) lets an online scheduler approach the ideal makespan.
    Checked to be a permutation (so every tile still runs exactly once) and uploaded once."""

    def __init__(self, permutation):
        perm = np.asarray(permutation)
        if perm.ndim != 1 or perm.dtype.kind not in "iu":
            raise LaunchConfigError(f"a tile order is a 1-D integer array, got {perm.dtype} of shape {perm.shape}")
        if perm.size and (perm.min() < 0 or perm.max() >= perm.size or
                          np.bincount(perm.astype(np.int64), minlength=perm.size).max() != 1):
            raise LaunchConfigError(f"a tile order must be a permutation of 0 .. {perm.size - 1}: every unit exactly "
                                    "once")
        if perm.size > 2**32 - 1:
            raise LaunchConfigError(f"a tile order holds at most 2**32 - 1 units, got {perm.size}")
        self.units = int(perm.size)
        self.buffer = DeviceBuffer(max(perm.size, 1) * 4, fill=None)
        self.buffer.from_host(perm.astype(np.uint32))
        # A copy from pageable memory may return before its DMA lands; a launch on a non-blocking stream would not
        # wait for it (CUDA Driver API, API synchronization behavior), so the order is complete before any launch.
        wait(0, what="the upload of a tile order")

    @classmethod
    def heaviest_first(cls, costs) -> "TileOrder":
        """Units sorted by decreasing cost (longest processing time first). Costs must be finite: a NaN would sort
        as the lightest and be handed out last."""
        c = np.asarray(costs, dtype=np.float64)
        if not np.isfinite(c).all():
            bad = np.flatnonzero(~np.isfinite(c))
            raise LaunchConfigError(f"tile costs must be finite numbers; unit {bad[0]} costs {c[bad[0]]} ({bad.size} "
                                    "such units)")
        return cls(np.argsort(-c, kind="stable"))


class Trace:
    """Which SM ran which tile when: one record per tile (``TRACE_DTYPE``), nanoseconds of %globaltimer.

    Returned by a traced launch without waiting for it; ``records`` waits for the launch on first use. ``done``:
    an event recorded after the launch (owned by the Trace), which ``records`` waits for instead of ``stream``, so
    the launch's stream may be destroyed meanwhile. ``captured``: a launch captured into a graph, whose every replay
    rewrites the buffer (kept alive by the launch for the graph's sake): ``records`` waits for ``stream`` (which
    must then still exist) and reads the buffer again each time, so it holds the latest replay that has finished;
    before the first replay it holds nothing defined.
    """

    def __init__(self, policy: str, tiles: Dim3, records: np.ndarray | None = None,
                 buffer: DeviceBuffer | None = None, stream: int = 0, done=None, captured: bool = False):
        self.policy, self.tiles, self.captured = policy, tiles, captured
        self._records, self._buffer, self._stream, self._done = records, buffer, stream, done
        self._reading = threading.Lock()  # one thread copies the records; another finds them copied

    @property
    def records(self) -> np.ndarray:
        with self._reading:
            if self._records is None:  # always, for a captured launch (it never keeps what it read)
                what = f"the traced {self.policy} launch"
                stream = self._stream
                if self._done is not None:
                    wait(self._done, what=what)
                    stream = _copy_stream()  # the launch's may be gone; the legacy stream would wait for every other
                records = self._buffer.to_host(np.uint8, stream=stream, what=what).view(TRACE_DTYPE)
                if self.captured:
                    return records  # a later replay rewrites the buffer: read it again next time
                self._records, self._buffer = records, None
                self._destroy_event()
            return self._records

    def _destroy_event(self) -> None:
        done, self._done = self._done, None
        if done is not None:
            driver().cuEventDestroy(done)

    def __del__(self):
        try:
            self._destroy_event()
        except Exception:  # at interpreter exit the driver may be gone
            pass

    @property
    def written(self) -> np.ndarray:
        return _written(self.records)

    @property
    def start_ns(self) -> int:
        r = self.records  # one read: a captured launch's are read again on each access
        w = _written(r)
        return int(r["start_ns"][w].min()) if w.any() else 0

    @property
    def makespan_ns(self) -> int:
        r = self.records
        w = _written(r)
        return int(r["end_ns"][w].max() - r["start_ns"][w].min()) if w.any() else 0

    def plot(self, path, title: str | None = None, sm_count: int | None = None, highlight=(), shade_sms=(),
             window_us=None) -> None:
        """The per-SM timeline (``timeline.plot_sm_timeline``): ``highlight`` time spans, ``shade_sms`` SM rows,
        ``window_us`` the time axis (the same for timelines that are compared: ``timeline.common_window``)."""
        from .timeline import plot_sm_timeline

        plot_sm_timeline(self, path, title=title or f"{self.policy}: tiles per SM over time", sm_count=sm_count,
                         highlight=highlight, shade_sms=shade_sms, window_us=window_us)

    def to_chrome_trace(self, path=None, name: str | None = None) -> dict:
        """This trace as a Chrome / Perfetto trace (one track per SM and resident slot, one slice per
        tile), written as JSON to ``path`` when given; open it in https://ui.perfetto.dev. To put
        kernels that ran together on one time base, use ``cuadv.work_stealing.to_chrome_trace``."""
        from .perfetto import to_chrome_trace

        return to_chrome_trace([self], path, names=None if name is None else [name])


_copy_lock = threading.Lock()
_copy_handle: int | None = None


def _written(records: np.ndarray) -> np.ndarray:
    """The records a tile wrote (the launch poisons every one with all ones first)."""
    return records["end_ns"] != np.iinfo(np.uint64).max


def _copy_stream() -> int:
    """A non-blocking stream of this process that finished traces are copied to the host on (made once)."""
    global _copy_handle
    current_device()  # the context the launches ran in, current in this thread: the stream and the copy are its
    with _copy_lock:
        if _copy_handle is None:
            _copy_handle = new_nonblocking_stream()
        return _copy_handle
