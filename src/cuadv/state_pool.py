"""Per-launch counters in device memory for kernels that coordinate their blocks (work stealing, ticket
claims, persistent queues): one slot per stream, a fresh one per graph capture."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import LaunchConfigError
from .interop import capturing as is_capturing
from .memory import DeviceBuffer
from .waiting import wait

STATE_BYTES = 32  # two cuadv::ws::StealState (16 bytes each): steal's stream launches alternate between them
PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD: one handle for a different default stream in each thread


class StatePool:
    """Per-launch scheduler counters: one slot per stream (launches on one stream run in order, and
    steal's alternate between the slot's two states, each launch clearing the other for the next:
    ``phase``), and a fresh slot for every graph capture, so a graph replay never shares counters
    with a stream it may overlap. Replays of one graph all carry what was captured, so captured
    launches reset their counter by counting exits instead. Slots start at zero; a kernel that
    keeps its own self-resetting counter in a slot (the stencil's ticket) takes its own pool, so no
    two protocols share a word. A slot is keyed by the stream's handle, and for the per-thread
    default stream (handle 2, a different stream in each thread) by the thread too; a handle reused
    by a new stream while the old one's work still runs would share the old one's."""

    def __init__(self, user: str, slots: int = 256):
        self.user = user  # what the counters are for, named when the slots run out
        self._buffer: DeviceBuffer | None = None
        self._slots = slots
        self._by_stream: dict[int | tuple[int, int], int] = {}
        self._next = 0
        self._lock = threading.Lock()
        self._phases: dict[int, int] = {}  # a stream slot's next phase (phase())
        self._phase_locks: dict[int, threading.Lock] = {}  # one per slot: launches on other streams do not wait

    def slot_for(self, stream: int) -> tuple[int, bool]:
        """The state's address for a launch on ``stream``, and whether that launch is being captured."""
        with self._lock:
            capturing = is_capturing(stream)
            if self._buffer is None:
                self._buffer = DeviceBuffer(self._slots * STATE_BYTES, fill=0)
                if not capturing:  # the zeros land before a launch on any stream, non-blocking ones included
                    wait(0, what=f"the zeroing of the {self.user} counters")
            key = (stream, threading.get_ident()) if stream == PER_THREAD_STREAM else stream
            if not capturing and key in self._by_stream:
                return self._by_stream[key], False
            if self._next >= self._slots:
                raise LaunchConfigError(f"more than {self._slots} streams and graph captures use {self.user} in this "
                                        "process, which keeps one counter per stream and per captured launch for "
                                        "the life of the process; capture fewer launches (replay a graph instead "
                                        "of capturing it again)")
            address = self._buffer.ptr + self._next * STATE_BYTES
            self._next += 1
            if not capturing:
                self._by_stream[key] = address
            return address, capturing

    @contextmanager
    def phase(self, address: int) -> Iterator[int]:
        """The phase (0 or 1) of the next launch on a stream's slot, for kernels whose launches on one
        stream alternate between two counters, each clearing the one its predecessor used for its
        successor. Held while that launch is enqueued, and advanced only once it is: a launch that
        raised never ran, so it cleared nothing and the phase it had is the next one's."""
        with self._lock:
            lock = self._phase_locks.setdefault(address, threading.Lock())
        with lock:
            current = self._phases.get(address, 0)
            yield current
            self._phases[address] = current ^ 1
