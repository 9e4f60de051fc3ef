"""Count buffers that one-shot calls leave zeroed, kept per stream for the next one-shot call on it.

A prepared call clears its uint32 counts once: the widening pass (hist_widen) zeroes every count it reads, so
its later calls find zeros. A one-shot call (``cuadv.histogram``, ``cuadv.bincount``) used to allocate its counts
and clear them with a memset on every call, one more launch on the stream. Here the buffer outlives the call:
once its widening pass is enqueued it is all zeros at the end of the work queued on that stream, so the next
one-shot call on the same stream takes it as it is. Only that stream may take it (work on another may run
before the widening pass ends).
"""

from __future__ import annotations

import threading
from typing import Any

from ..interop import stream_key

MAX_BUFFER_BYTES = (4 << 20) + 16  # counts of up to 2**20 + 1 slots and the sample's verdict word
MAX_KEPT_BYTES = 32 << 20  # all buffers kept, over every stream; past it a call frees its buffer as before


class ZeroedCounts:
    """Count buffers (anything with ``ptr`` and ``nbytes``) whose first ``slots`` words are zero at the end of the
    work queued so far on the stream they were given back on, by (stream, slots): the widening pass zeroes exactly
    those, and the word after them (the skew sample's verdict) is not zero, so a buffer is only taken for as many
    slots as it was given back with. Not while the stream is being captured into a graph: a replay may run beside
    later work on that stream. Nothing kept is ever freed here, nor by the buffer itself (api.Scratch: a free would
    have to be enqueued on a stream that may be gone): at MAX_KEPT_BYTES the pool is full, and a call frees its own
    buffer on its stream, as before the pool."""

    def __init__(self) -> None:
        self._kept: dict[tuple[tuple[int, int], int], list[Any]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def eligible(nbytes: int, captured: bool) -> bool:
        """Whether a buffer of ``nbytes`` may be kept here; ``captured``: its call's stream is being captured into a
        CUDA graph (whose widening pass only a replay runs, so the buffer is not left zeroed)."""
        return nbytes <= MAX_BUFFER_BYTES and not captured

    def take(self, slots: int, stream: int) -> Any | None:
        """A buffer of ``slots`` zeroed counts last given back on ``stream``, or None."""
        key = (stream_key(stream), slots)
        with self._lock:
            free = self._kept.get(key)
            if not free:
                return None
            buf = free.pop()
            if not free:
                del self._kept[key]
            self._bytes -= buf.nbytes
            return buf

    def give(self, buf: Any, slots: int, stream: int) -> bool:
        """Keep ``buf``, whose first ``slots`` words' zeroing is the last thing queued for it on ``stream``; False
        (not kept: the caller frees it) where the pool is full."""
        key = (stream_key(stream), slots)
        with self._lock:
            if self._bytes + buf.nbytes > MAX_KEPT_BYTES:
                return False
            self._kept.setdefault(key, []).append(buf)
            self._bytes += buf.nbytes
            return True

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._kept.values())


ZEROED = ZeroedCounts()
