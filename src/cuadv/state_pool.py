"""Per-launch counters in device memory for kernels that coordinate their blocks (work stealing, ticket
claims, persistent queues): one slot per stream, a fresh one per graph capture."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from ._cuda import check, driver, new_nonblocking_stream
from .errors import LaunchConfigError
from .interop import capturing as is_capturing, relaxed_capture_mode, stream_key
from .memory import DeviceBuffer
from .waiting import event_done, wait

STATE_BYTES = 32  # two cuadv::ws::StealState (16 bytes each): steal's stream launches alternate between them
MAX_CHUNKS = 256  # chunks of `slots` slots each: with the default, 65,536 slots (2 MiB) at most


def _new_event():
    drv = driver()
    return check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")


def _destroy_stream(stream: int) -> None:
    drv = driver()
    check(drv.cuStreamDestroy(drv.CUstream(stream)), "cuStreamDestroy")


def _record(event, stream: int) -> None:
    drv = driver()
    check(drv.cuEventRecord(event, drv.CUstream(stream)), "cuEventRecord")


class StatePool:
    """Per-launch scheduler counters: one slot per stream (launches on one stream run in order, and
    steal's alternate between the slot's two states, each launch clearing the other for the next:
    ``phase``), and a fresh slot for every graph capture, so a graph replay never shares counters
    with a stream it may overlap. Replays of one graph all carry what was captured, so captured
    launches reset their counter by counting exits instead. Slots start at zero, and every protocol
    leaves its slot ready for the next launch; a kernel that keeps its own self-resetting counter in a
    slot (the stencil's ticket) takes its own pool, so no two protocols share a word.

    A slot is keyed by the stream's id (``interop.stream_key``), not its handle: a stream created with a
    destroyed one's handle while the old one's work still runs gets a slot of its own. Launches made
    through ``use`` record an event after them, so once the pool has ``slots`` slots a new stream takes the
    slot least recently used whose launches have all finished (its phase goes with it) rather than a new one;
    only when every slot is busy or held by a capture does the pool grow by another ``slots``."""

    def __init__(self, user: str, slots: int = 256):
        self.user = user  # what the counters are for, named when the slots run out
        self._chunk = slots
        self._buffers: list[DeviceBuffer] = []
        self._taken = 0  # slots handed out of the buffers so far
        self.last_new = 0  # address of the slot handed out last for the first time (tests read a capture's)
        self._by_stream: OrderedDict[tuple[int, int], int] = OrderedDict()  # least recently used first
        self._events: dict[int, object] = {}  # slot -> event recorded after its latest launch through use()
        self._pending: dict[int, int] = {}  # slot -> launches between use() and their event
        self._lock = threading.Lock()
        self._phases: dict[int, int] = {}  # a stream slot's next phase (phase())
        self._phase_locks: dict[int, threading.Lock] = {}  # one per slot: launches on other streams do not wait

    @property
    def taken(self) -> int:
        """Slots handed out so far, each to a stream or a capture (reclaimed ones counted once)."""
        return self._taken

    def slot_for(self, stream: int) -> tuple[int, bool]:
        """The state's address for a launch on ``stream``, and whether that launch is being captured."""
        with self._lock:
            return self._slot(stream)

    @contextmanager
    def use(self, stream: int) -> Iterator[tuple[int, bool]]:
        """``slot_for`` around a launch enqueued in the ``with`` block: an event recorded after it tells when the
        slot may go to another stream. Until then (or if the block raises) the slot is never reclaimed."""
        with self._lock:
            address, captured = self._slot(stream)
            self._pending[address] = self._pending.get(address, 0) + 1
            event = None if captured else self._events.get(address)
            if event is None and not captured:
                event = self._events[address] = _new_event()
        try:
            yield address, captured
            if event is not None:
                _record(event, stream)
        finally:
            with self._lock:
                self._pending[address] -= 1

    def _slot(self, stream: int) -> tuple[int, bool]:
        capturing = is_capturing(stream)
        key = None if capturing else stream_key(stream)
        if key is not None and key in self._by_stream:
            self._by_stream.move_to_end(key)
            return self._by_stream[key], False
        address = None if capturing or self._taken < self._chunk * len(self._buffers) else self._finished_slot()
        if address is None:
            address = self._new_slot()
        if key is not None:
            self._by_stream[key] = address
        return address, capturing

    def _finished_slot(self) -> int | None:
        """The least recently used stream slot whose launches have all finished, taken from its stream."""
        for key, address in self._by_stream.items():
            event = self._events.get(address)
            if not self._pending.get(address) and event is not None and event_done(event):
                del self._by_stream[key]
                return address
        return None

    def _new_slot(self) -> int:
        if self._taken == self._chunk * len(self._buffers):
            if len(self._buffers) == MAX_CHUNKS:
                raise LaunchConfigError(
                    f"more than {self._chunk * MAX_CHUNKS} streams with launches in flight and graph captures use "
                    f"{self.user} in this process, which keeps a counter for each captured launch for the life of "
                    "the process; capture fewer launches (replay a graph instead of capturing it again)")
            self._buffers.append(self._zeroed_chunk())
        address = self._buffers[-1].ptr + (self._taken % self._chunk) * STATE_BYTES
        self._taken += 1
        self.last_new = address
        return address

    def _zeroed_chunk(self) -> DeviceBuffer:
        """Another chunk of slots, zero before any launch may use one, non-blocking streams' included. Made in
        relaxed capture mode and zeroed on a stream of its own, whichever stream of the process is being captured
        (the first slot a captured launch takes, or one past every chunk's): a capture in the global mode
        (torch.cuda.graph's) is invalidated by this thread's cuMemAlloc, and a memset on the legacy stream would
        wait for a blocking capturing stream."""
        with relaxed_capture_mode():
            buffer = DeviceBuffer(self._chunk * STATE_BYTES, fill=None)
            stream = new_nonblocking_stream()
            try:
                buffer.fill(0, stream=stream)
                wait(stream, what=f"the zeroing of the {self.user} counters")
            finally:
                _destroy_stream(stream)
        return buffer

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
