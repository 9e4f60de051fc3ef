"""The discrete-event model of the GPU block scheduler: the machine, a kernel launch, the event loop
and its records (``simulate``), and the ideal bound.

The model (it mirrors ``include/cuadv/work_stealing.cuh`` and ``cuadv.work_stealing``):


- The GPU has ``sms`` SMs with ``slots_per_sm`` block slots each (the kernel's occupancy).
- The hardware block scheduler gives a free slot to the highest-priority launched kernel that has
  blocks not yet started (CUDA convention: a lower number is a higher priority; FIFO by launch time
  within a priority), and a kernel's blocks start in index order. Free slots are handed out
  breadth-first over the SMs.
- Every block holds its slot ``launch_ns`` before its code runs (launch and teardown together).
- ``fixed_work``: one block per tile; prologue, then the tile.
- ``fixed_blocks``: min(slots, tiles) blocks; block b runs one prologue, then tiles b, b+G, b+2G, ...
- ``steal``: one block per tile (``TileKernel(min_tiles=1)``; by default later launches learn a
  smaller grid, which the model does not follow); a block first claims a ticket from the launch's counter
  (``claim_ns``) and exits at once (``exit_ns``) if none is left; else it runs the prologue and
  then loops: claim the next ticket, run the current tile. Once ``quantum_ns`` has passed since the
  block started, the next claim fails on purpose: the block finishes its current tile and exits
  (``exit_ns``), and the slot goes to whichever kernel the hardware picks. Tickets are taken in
  the order blocks ask for them.
- ``clc``: one block per tile; a block starts on its own tile, runs the prologue, then loops: ask to
  cancel a block that has not started (the answer takes ``cancel_ns`` and overlaps the current
  tile), run the current tile, take over the cancelled block's tile. A cancellation fails when no
  block of the kernel is left or when a higher-priority kernel has blocks waiting; then the block
  exits after its tile, and cancelled blocks never launch.

Outputs: each kernel's makespan, the ideal bound max(total work / slots, longest tile), blocks
launched, prologues run and claims made, and one record per tile (SM, slot, block, tile, start, end).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import CuadvError

POLICIES = ("fixed_work", "fixed_blocks", "steal", "clc")
RECORD_DTYPE = np.dtype([("smid", "<u4"), ("slot", "<u4"), ("kernel", "<u4"), ("block", "<u4"), ("tile", "<u8"),
                         ("start_ns", "<f8"), ("end_ns", "<f8")])
NEVER = math.inf  # a quantum that never expires


class SimulationError(CuadvError, ValueError):
    """A model parameter or workload outside what the simulator accepts."""


# ---------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Machine:
    """The GPU as the block scheduler sees it, and the costs of the scheduling mechanisms (ns)."""

    sms: int = 132
    slots_per_sm: int = 8
    launch_ns: float = 500.0  # a block holds its slot this long before its code runs (launch + teardown)
    claim_ns: float = 300.0  # steal: one ticket (a global atomic round trip) before the tile it precedes
    cancel_ns: float = 500.0  # clc: the try_cancel answer's latency; overlaps the tile issued after it
    exit_ns: float = 200.0  # steal: from a block's failed claim to its slot being free (block teardown)

    def __post_init__(self):
        for name in ("sms", "slots_per_sm"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise SimulationError(f"{name} must be a positive integer, got {value!r}")
        for name in ("launch_ns", "claim_ns", "cancel_ns", "exit_ns"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float, np.number)) and math.isfinite(value) and value >= 0):
                raise SimulationError(f"{name} must be a finite number >= 0, got {value!r}")

    @property
    def slots(self) -> int:
        return int(self.sms) * int(self.slots_per_sm)


@dataclass
class KernelSpec:
    """One kernel launch: a tile grid with per-tile durations (ns) under one policy."""

    durations_ns: np.ndarray
    policy: str
    prologue_ns: float = 0.0
    priority: int = 0  # CUDA convention: lower is higher priority (stream priorities 0 .. -5 on the H200)
    launch_at_ns: float = 0.0
    quantum_ns: float = NEVER  # steal only: stop claiming this long after the block started
    name: str = ""

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise SimulationError(f"policy must be one of {', '.join(POLICIES)}; got {self.policy!r}")
        d = np.asarray(self.durations_ns, dtype=np.float64)
        if d.ndim != 1:
            raise SimulationError(f"durations must be one number per tile (1-D), got shape {d.shape}")
        if len(d) and not (np.isfinite(d).all() and d.min() >= 0):
            raise SimulationError("tile durations must be finite and >= 0")
        self.durations_ns = d
        for name in ("prologue_ns", "launch_at_ns"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise SimulationError(f"{name} must be a finite number >= 0, got {value!r}")
        if not (self.quantum_ns > 0):
            raise SimulationError(f"quantum_ns must be > 0 (math.inf: never yield), got {self.quantum_ns!r}")
        if self.quantum_ns != NEVER and self.policy != "steal":
            raise SimulationError(f"a quantum applies to policy 'steal' only, not {self.policy!r}")
        self.name = self.name or self.policy


@dataclass
class KernelOutcome:
    """What happened to one kernel (times in ns from the start of the simulation)."""

    name: str
    policy: str
    launch_at_ns: float
    end_ns: float  # the last of its blocks freed its slot
    tiles: int
    blocks_launched: int
    prologues: int
    claims: int  # steal: tickets asked for; clc: cancellations asked for
    first_tile_ns: float = math.nan
    last_tile_ns: float = math.nan

    @property
    def makespan_ns(self) -> float:
        """Launch to the last block's exit."""
        return self.end_ns - self.launch_at_ns

    @property
    def tile_span_ns(self) -> float:
        """First tile's start to last tile's end: what a block trace on the GPU measures."""
        return self.last_tile_ns - self.first_tile_ns if self.tiles else 0.0


@dataclass
class SimTrace:
    """Per-tile records in the shape ``work_stealing.timeline.plot_sm_timeline`` (and ``work_stealing.Trace``) uses."""

    records: np.ndarray
    policy: str
    sm_count: int

    @property
    def written(self) -> np.ndarray:
        return np.ones(len(self.records), dtype=bool)

    @property
    def makespan_ns(self) -> float:
        r = self.records
        return float(r["end_ns"].max() - r["start_ns"].min()) if len(r) else 0.0

    def plot(self, path, title: str | None = None, highlight: Sequence[tuple[float, float, str]] = ()) -> None:
        from ..work_stealing.timeline import plot_sm_timeline

        plot_sm_timeline(self, path, title=title or f"{self.policy} (simulated): tiles per SM over time",
                         sm_count=self.sm_count, highlight=highlight)


@dataclass
class SimResult:
    machine: Machine
    kernels: list[KernelOutcome]
    records: np.ndarray  # RECORD_DTYPE, one per tile of every kernel

    def trace(self, kernel: int | None = None) -> SimTrace:
        """The records of one kernel (all kernels when None) as a plottable trace."""
        rec = self.records if kernel is None else self.records[self.records["kernel"] == kernel]
        policy = "+".join(k.name for k in self.kernels) if kernel is None else self.kernels[kernel].name
        return SimTrace(rec, policy, self.machine.sms)


def ideal_ns(durations_ns: np.ndarray, slots: int) -> float:
    """The makespan no scheduler can beat: max(total work / slots, longest tile)."""
    d = np.asarray(durations_ns, dtype=np.float64)
    return float(max(d.sum() / slots, d.max())) if len(d) else 0.0


class _Kernel:
    """A kernel's scheduler state during a simulation."""

    __slots__ = ("spec", "index", "durations", "grid", "next_block", "counter", "live", "outcome", "code", "key")

    def __init__(self, spec: KernelSpec, index: int, slots: int):
        self.spec, self.index = spec, index
        self.durations = spec.durations_ns.tolist()
        n = len(self.durations)
        self.grid = min(slots, n) if spec.policy == "fixed_blocks" else n
        self.next_block = 0  # blocks below this one have started or were cancelled
        self.counter = 0  # steal: the next ticket
        self.live = 0  # blocks holding a slot
        self.code = POLICIES.index(spec.policy)
        self.key = (spec.priority, spec.launch_at_ns, index)  # the hardware's pick: priority, then FIFO
        self.outcome = KernelOutcome(spec.name, spec.policy, spec.launch_at_ns, spec.launch_at_ns, n, 0, 0, 0)


_LAUNCH, _FREE, _CLAIM = 0, 1, 2
_FIXED_WORK, _FIXED_BLOCKS, _STEAL, _CLC = range(4)


class _Simulation:
    """The event loop. One heap of (time, sequence, kind, payload); kept in one function for speed."""

    def __init__(self, machine: Machine, specs: Sequence[KernelSpec], stop_after: int | None = None):
        self.m = machine
        self.kernels = [_Kernel(s, i, machine.slots) for i, s in enumerate(specs)]
        self.stop_after = stop_after
        self.rec: list[list] = [[] for _ in range(6)]  # slot, kernel, block, tile, start, end

    def run(self) -> SimResult:
        m = self.m
        launch_ns, claim_ns, cancel_ns, exit_ns = m.launch_ns, m.claim_ns, m.cancel_ns, m.exit_ns
        events: list = []
        push, pop, seq = heapq.heappush, heapq.heappop, itertools.count().__next__
        # Slot id = rank * sms + sm: handing out ids in order fills the SMs breadth-first.
        free = deque(range(m.slots))
        waiting: list[_Kernel] = []  # launched kernels with blocks not yet started, in the hardware's order
        r_slot, r_kernel, r_block, r_tile, r_start, r_end = (lst.append for lst in self.rec)
        stop = self.kernels[self.stop_after] if self.stop_after is not None else None
        for k in self.kernels:
            push(events, (k.spec.launch_at_ns, seq(), _LAUNCH, k))
        while events:
            t, _, kind, p = pop(events)
            if kind == _CLAIM:
                k, block, slot, started, current = p
                out = k.outcome
                if k.code == _STEAL:
                    n = len(k.durations)
                    if current is None:  # begin(): the first ticket, before the prologue
                        out.claims += 1
                        ticket = k.counter
                        k.counter += 1
                        if ticket >= n:
                            push(events, (t + claim_ns + exit_ns, seq(), _FREE, (slot, k)))
                        else:
                            out.prologues += 1
                            p[4] = ticket
                            push(events, (t + claim_ns + k.spec.prologue_ns, seq(), _CLAIM, p))
                        continue
                    got, begin = False, t
                    if t - started < k.spec.quantum_ns:  # the quantum has not expired: take a ticket
                        out.claims += 1
                        ticket = k.counter
                        k.counter += 1
                        got, begin = ticket < n, t + claim_ns
                    end = begin + k.durations[current]
                    r_slot(slot), r_kernel(k.index), r_block(block), r_tile(current), r_start(begin), r_end(end)
                    if got:
                        p[4] = ticket
                        push(events, (end, seq(), _CLAIM, p))
                    else:
                        push(events, (end + exit_ns, seq(), _FREE, (slot, k)))
                else:  # clc: cancel a block that has not started, unless a higher priority waits
                    out.claims += 1
                    cancelled = None
                    if k.next_block < k.grid and waiting[0].key[0] >= k.key[0]:
                        cancelled = k.next_block  # it never launches; this block runs its tile instead
                        k.next_block += 1
                        if k.next_block == k.grid:
                            waiting.remove(k)
                    end = t + k.durations[current]
                    r_slot(slot), r_kernel(k.index), r_block(block), r_tile(current), r_start(t), r_end(end)
                    answered = end if end > t + cancel_ns else t + cancel_ns
                    if cancelled is None:
                        push(events, (answered, seq(), _FREE, (slot, k)))
                    else:
                        p[4] = cancelled
                        push(events, (answered, seq(), _CLAIM, p))
                continue
            if kind == _FREE:
                slot, k = p
                k.live -= 1
                if t > k.outcome.end_ns:
                    k.outcome.end_ns = t
                free.append(slot)
                if k is stop and k.live == 0 and k.next_block >= k.grid:
                    break
            else:
                if p.grid:
                    waiting.append(p)
                    waiting.sort(key=lambda w: w.key)
            # The hardware block scheduler: free slots go to the first waiting kernel's next block.
            while free and waiting:
                k = waiting[0]
                block = k.next_block
                k.next_block += 1
                if k.next_block == k.grid:
                    waiting.pop(0)
                slot = free.popleft()
                out = k.outcome
                out.blocks_launched += 1
                k.live += 1
                running = t + launch_ns
                code = k.code
                if code == _FIXED_WORK:
                    out.prologues += 1
                    begin = running + k.spec.prologue_ns
                    end = begin + k.durations[block]
                    r_slot(slot), r_kernel(k.index), r_block(block), r_tile(block), r_start(begin), r_end(end)
                    push(events, (end, seq(), _FREE, (slot, k)))
                elif code == _FIXED_BLOCKS:
                    out.prologues += 1
                    push(events, (self.grid_stride(k, block, slot, running + k.spec.prologue_ns), seq(), _FREE,
                                  (slot, k)))
                elif code == _STEAL:
                    if k.counter >= len(k.durations):  # no ticket left: the first claim fails, the block exits
                        out.claims += 1
                        push(events, (running + claim_ns + exit_ns, seq(), _FREE, (slot, k)))
                    else:  # [kernel, block, slot, started, current tile (None: before the first claim)]
                        push(events, (running, seq(), _CLAIM, [k, block, slot, running, None]))
                else:  # clc: the block starts on its own tile
                    out.prologues += 1
                    push(events, (running + k.spec.prologue_ns, seq(), _CLAIM, [k, block, slot, running, block]))
        return self.result()

    def grid_stride(self, k: _Kernel, block: int, slot: int, begin: float) -> float:
        """fixed_blocks: block b runs tiles b, b+G, ... back to back; returns when it ends."""
        tiles = np.arange(block, len(k.durations), k.grid)
        d = k.spec.durations_ns[tiles]
        ends = begin + np.cumsum(d)
        r = self.rec
        r[0].extend([slot] * len(tiles)), r[1].extend([k.index] * len(tiles)), r[2].extend([block] * len(tiles))
        r[3].extend(tiles.tolist()), r[4].extend((ends - d).tolist()), r[5].extend(ends.tolist())
        return float(ends[-1])

    def result(self) -> SimResult:
        slot, kernel, block, tile, start, end = self.rec
        records = np.zeros(len(slot), dtype=RECORD_DTYPE)
        if len(slot):
            s = np.asarray(slot, dtype=np.int64)
            records["smid"], records["slot"] = s % self.m.sms, s // self.m.sms
            records["kernel"], records["block"], records["tile"] = kernel, block, tile
            records["start_ns"], records["end_ns"] = start, end
        for k in self.kernels:
            mine = records[records["kernel"] == k.index]
            if len(mine):
                k.outcome.first_tile_ns = float(mine["start_ns"].min())
                k.outcome.last_tile_ns = float(mine["end_ns"].max())
        return SimResult(self.m, [k.outcome for k in self.kernels], records)


def simulate(machine: Machine, kernels: KernelSpec | Sequence[KernelSpec], stop_after: int | None = None) -> SimResult:
    """Run the model until every kernel has finished (or, with ``stop_after``, until that kernel has)."""
    specs = [kernels] if isinstance(kernels, KernelSpec) else list(kernels)
    if not specs:
        raise SimulationError("simulate() needs at least one kernel")
    if stop_after is not None and not 0 <= stop_after < len(specs):
        raise SimulationError(f"stop_after must index one of the {len(specs)} kernels, got {stop_after}")
    return _Simulation(machine, specs, stop_after).run()
