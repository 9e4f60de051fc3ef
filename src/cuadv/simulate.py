"""A discrete-event model of the GPU block scheduler: predicts the work-stealing trade-off without a GPU.

What it shows: the seed's trade-off table (overhead / preemption / load balance) for fixed work per
block, a fixed number of blocks, Cluster Launch Control and software stealing with a time quantum,
as numbers for a workload you give, plus a per-SM timeline of who ran which tile when.
Compute capability needed: none (pure Python and NumPy); ``tests/test_simulate_gpu.py`` compares a
prediction with a measured block trace on a GPU.
Key insight: every policy pays for something different: fixed_work a prologue per tile, fixed_blocks
a long tail (it cannot rebalance and never yields), steal a ticket per tile and, when its quantum is
shorter than the prologue, a prologue per tile again. The quantum is a time budget that trades
preemption latency against prologue cost, and the model shows where that balance lies.
Run: ``cuadv simulate --workload pareto:1.5 --tiles 42240 --sms 132 --slots 8 --prologue-us 5
--quantum-us 50 --out sim`` (``--help`` lists the costs of the model).

The model (it mirrors ``kernels/cuadv/work_stealing.cuh`` and ``work_stealing.py``):

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
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .errors import CuadvError
from .report.results import LabResult, Table

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
        from .work_stealing.timeline import plot_sm_timeline

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


# ------------------------------------------------------------------------------------------ workloads

STANDARD_WORKLOADS = ("uniform", "pareto:1.5", "triangular", "periodic")
PERIODIC_FACTOR = 120.0


def make_workload(spec: str, tiles: int, tile_ns: float, machine: Machine, seed: int = 0) -> np.ndarray:
    """Per-tile durations (ns) for a workload name, or from a file of durations in microseconds.

    ``uniform``: every tile ``tile_ns``. ``pareto[:alpha]``: Pareto(alpha) with mean ``tile_ns``
    (alpha > 1, default 1.5). ``triangular``: tile i costs in proportion to i + 1 (mean ``tile_ns``),
    like the rows of a triangular matrix. ``periodic[:period[:factor]]``: every period-th tile (default
    the machine's slot count) costs factor (default 120) times ``tile_ns``. A path ending in .npy or
    .txt/.csv: one duration per tile in microseconds (``tiles`` is then the file's length).
    """
    if not isinstance(tiles, (int, np.integer)) or tiles < 0:
        raise SimulationError(f"tiles must be an integer >= 0, got {tiles!r}")
    if not (math.isfinite(tile_ns) and tile_ns >= 0):
        raise SimulationError(f"the tile duration must be a finite number >= 0, got {tile_ns!r}")
    name, *params = spec.split(":")
    try:
        values = [float(p) for p in params]
    except ValueError:
        values = None
    if name == "uniform" and not params:
        return np.full(tiles, float(tile_ns))
    if name == "pareto" and values is not None and len(values) <= 1:
        alpha = values[0] if values else 1.5
        if not alpha > 1:
            raise SimulationError(f"pareto needs alpha > 1 for a finite mean, got {alpha}")
        scale = tile_ns * (alpha - 1) / alpha  # the minimum; the mean of Pareto(alpha, scale) is tile_ns
        return scale * (np.random.default_rng(seed).pareto(alpha, tiles) + 1.0)
    if name == "triangular" and not params:
        return 2.0 * tile_ns * np.arange(1, tiles + 1, dtype=np.float64) / (tiles + 1)
    if name == "periodic" and values is not None and len(values) <= 2:
        period = int(values[0]) if values else machine.slots
        factor = values[1] if len(values) > 1 else PERIODIC_FACTOR
        if period < 1 or not factor >= 0:
            raise SimulationError(f"periodic needs a period >= 1 and a factor >= 0, got {period} and {factor}")
        d = np.full(tiles, float(tile_ns))
        d[::period] *= factor
        return d
    path = Path(spec)
    if path.suffix in (".npy", ".txt", ".csv") or path.exists():
        return _durations_from_file(path)
    raise SimulationError(f"unknown workload {spec!r}: use uniform, pareto[:alpha], triangular, "
                          "periodic[:period[:factor]], or a .npy/.txt file of durations in microseconds")


def _durations_from_file(path: Path) -> np.ndarray:
    if not path.is_file():
        raise SimulationError(f"workload file {path} does not exist")
    try:
        us = np.load(path) if path.suffix == ".npy" else np.loadtxt(path, delimiter="," if path.suffix == ".csv" else None)
    except Exception as exc:
        raise SimulationError(f"cannot read durations from {path}: {exc}") from exc
    us = np.asarray(us, dtype=np.float64).reshape(-1)
    if len(us) == 0 or not np.isfinite(us).all() or us.min() < 0:
        raise SimulationError(f"{path} must hold at least one finite duration >= 0 (microseconds per tile)")
    return us * 1e3


# ------------------------------------------------------------------------------------ the trade-off


@dataclass(frozen=True)
class Variant:
    """A column of the trade-off table: a policy and, for steal, its quantum."""

    label: str
    policy: str
    quantum_ns: float = NEVER


def standard_variants(quantum_ns: float, policies: Sequence[str] = POLICIES) -> list[Variant]:
    out = []
    for p in policies:
        if p == "steal":
            if quantum_ns != NEVER:
                out.append(Variant(f"steal Q={_us(quantum_ns)}", "steal", quantum_ns))
            out.append(Variant("steal Q=inf", "steal", NEVER))
        else:
            out.append(Variant(p, p))
    return out


def _us(ns: float) -> str:
    return "inf" if ns == NEVER else f"{ns / 1e3:g}us"


def run_variant(machine: Machine, durations_ns: np.ndarray, variant: Variant, prologue_ns: float) -> SimResult:
    return simulate(machine, KernelSpec(durations_ns, variant.policy, prologue_ns, quantum_ns=variant.quantum_ns,
                                        name=variant.label))


@dataclass
class Preemption:
    """A high-priority kernel launched while a low-priority one runs (times in ns)."""

    launch_at_ns: float
    latency_ns: float  # its launch to its last block's exit
    alone_ns: float  # its makespan on an idle GPU
    result: SimResult  # the run, up to the high-priority kernel's end (in full when asked)

    @property
    def slowdown(self) -> float:
        return self.latency_ns / self.alone_ns if self.alone_ns else math.nan


JITTER = 0.1  # the preemption scenario's tiles vary +-10%, so blocks do not end in lock-step waves


def high_priority_kernel(machine: Machine, tile_ns: float, launch_at_ns: float = 0.0) -> KernelSpec:
    """One wave of fixed-work blocks at a higher priority: the kernel that must get in."""
    return KernelSpec(np.full(machine.slots, float(tile_ns)), "fixed_work", priority=-1, launch_at_ns=launch_at_ns,
                      name="high priority")


def preemption_workload(tiles: int, tile_ns: float, seed: int = 0) -> np.ndarray:
    """The low-priority kernel of the preemption scenario: tiles of ``tile_ns`` +-10%."""
    return tile_ns * np.random.default_rng(seed).uniform(1 - JITTER, 1 + JITTER, tiles)


def preemption(machine: Machine, low_durations_ns: np.ndarray, variant: Variant, prologue_ns: float,
               high_tile_ns: float, full: bool = False) -> Preemption:
    """Launch the high-priority kernel half-way through the low-priority kernel's ideal makespan.

    Stops when the high-priority kernel has finished unless ``full`` (for a timeline).
    """
    at = ideal_ns(low_durations_ns, machine.slots) / 2
    alone = simulate(machine, high_priority_kernel(machine, high_tile_ns)).kernels[0].makespan_ns
    low = KernelSpec(low_durations_ns, variant.policy, prologue_ns, quantum_ns=variant.quantum_ns, name=variant.label)
    result = simulate(machine, [low, high_priority_kernel(machine, high_tile_ns, at)], stop_after=None if full else 1)
    return Preemption(at, result.kernels[1].end_ns - at, alone, result)


@dataclass
class TradeoffRow:
    variant: Variant
    heavy_prologue: float  # makespan / ideal, uniform tiles with the heavy prologue
    balance: dict[str, float]  # workload -> makespan / ideal
    preempt: Preemption
    prologues_heavy: int


@dataclass
class Study:
    """Everything ``cuadv simulate`` and the report show, computed once."""

    machine: Machine
    tiles: int
    tile_ns: float
    prologue_ns: float
    heavy_prologue_ns: float
    quantum_ns: float
    workload: str
    durations_ns: np.ndarray
    runs: dict[str, SimResult]  # variant label -> the given workload
    rows: list[TradeoffRow]
    sweep: list[tuple[float, float, Preemption]] = field(default_factory=list)  # (quantum, heavy ratio, preemption)
    seconds: float = 0.0


def study(machine: Machine, workload: str = "pareto:1.5", tiles: int = 42_240, tile_us: float = 20.0,
          prologue_us: float = 5.0, heavy_prologue_us: float = 100.0, quantum_us: float = 50.0,
          policies: Sequence[str] = POLICIES, sweep_quanta_us: Sequence[float] = (), seed: int = 0) -> Study:
    """Simulate the given workload under every variant and the standard trade-off scenarios."""
    t0 = time.perf_counter()
    tile_ns, prologue_ns, heavy_ns = tile_us * 1e3, prologue_us * 1e3, heavy_prologue_us * 1e3
    quantum_ns = NEVER if quantum_us == math.inf else quantum_us * 1e3
    if not quantum_ns > 0:
        raise SimulationError(f"the quantum must be > 0 microseconds (inf: never yield), got {quantum_us}")
    for name, value in (("tile_us", tile_us), ("prologue_us", prologue_us), ("heavy_prologue_us", heavy_prologue_us)):
        if not (math.isfinite(value) and value >= 0):
            raise SimulationError(f"{name} must be a finite number >= 0, got {value!r}")
    durations = make_workload(workload, tiles, tile_ns, machine, seed)
    tiles = len(durations)
    if tiles == 0 or tile_ns == 0:
        raise SimulationError(f"the trade-off needs at least one tile of non-zero duration (got {tiles} tiles of "
                              f"{tile_us} us)")
    variants = standard_variants(quantum_ns, policies)
    runs = {v.label: run_variant(machine, durations, v, prologue_ns) for v in variants}
    uniform = make_workload("uniform", tiles, tile_ns, machine)
    low = preemption_workload(tiles, tile_ns, seed)
    loads = {w: make_workload(w, tiles, tile_ns, machine, seed) for w in STANDARD_WORKLOADS if w != workload}
    rows = []
    for v in variants:
        heavy = run_variant(machine, uniform, v, heavy_ns)
        balance = {workload: _ratio(runs[v.label], durations, machine)}
        balance.update({w: _ratio(run_variant(machine, d, v, prologue_ns), d, machine) for w, d in loads.items()})
        rows.append(TradeoffRow(v, _ratio(heavy, uniform, machine), balance,
                                preemption(machine, low, v, prologue_ns, tile_ns), heavy.kernels[0].prologues))
    sweep = []
    for q_us in sweep_quanta_us:
        v = Variant(f"steal Q={q_us:g}us" if q_us != math.inf else "steal Q=inf", "steal",
                    NEVER if q_us == math.inf else q_us * 1e3)
        heavy = run_variant(machine, uniform, v, heavy_ns)
        sweep.append((v.quantum_ns, _ratio(heavy, uniform, machine), preemption(machine, low, v, prologue_ns, tile_ns)))
    return Study(machine, tiles, tile_ns, prologue_ns, heavy_ns, quantum_ns, workload, durations, runs, rows, sweep,
                 time.perf_counter() - t0)


def _ratio(result: SimResult, durations: np.ndarray, machine: Machine) -> float:
    ideal = ideal_ns(durations, machine.slots)
    return result.kernels[0].makespan_ns / ideal if ideal else math.nan


# What counts as "yes" in the seed's table (relative to the best variant in the same study).
OVERHEAD_YES = 1.25  # heavy-prologue makespan within 25% of the best variant's
BALANCE_YES = 2.0  # on every load-balance workload, makespan within 2x of the best variant's
PREEMPT_YES = 0.25  # the high-priority kernel finishes within a quarter of the low one's remaining time


def verdicts(s: Study) -> dict[str, dict[str, bool]]:
    best_heavy = min(r.heavy_prologue for r in s.rows)
    best_balance = {w: min(r.balance[w] for r in s.rows) for w in s.rows[0].balance}
    out = {}
    for r in s.rows:
        remaining = r.preempt.launch_at_ns  # it launches half-way, so about half the low kernel's run is left
        out[r.variant.label] = {
            "overhead": r.heavy_prologue <= OVERHEAD_YES * best_heavy,
            "preemption": r.preempt.latency_ns <= PREEMPT_YES * remaining,
            "balance": all(r.balance[w] <= BALANCE_YES * best_balance[w] for w in best_balance),
        }
    return out


def parameters_table(s: Study) -> Table:
    m = s.machine
    rows = [["SMs x slots per SM", f"{m.sms} x {m.slots_per_sm} = {m.slots}"],
            ["tiles", s.tiles], ["workload", s.workload], ["mean tile (us)", float(s.durations_ns.mean() / 1e3) if s.tiles else 0.0],
            ["longest tile (us)", float(s.durations_ns.max() / 1e3) if s.tiles else 0.0],
            ["prologue (us)", s.prologue_ns / 1e3], ["heavy prologue (us)", s.heavy_prologue_ns / 1e3],
            ["steal quantum (us)", _us(s.quantum_ns).removesuffix("us")],
            ["block launch + teardown (ns)", m.launch_ns], ["steal ticket claim (ns)", m.claim_ns],
            ["clc cancel answer latency (ns)", m.cancel_ns], ["steal exit to free slot (ns)", m.exit_ns],
            ["simulation wall time (s)", s.seconds]]
    return Table("Simulator model parameters", ["parameter", "value"], rows,
                 note="a discrete-event model of the block scheduler (cuadv.simulate); no GPU was used")


def workload_table(s: Study) -> Table:
    ideal = ideal_ns(s.durations_ns, s.machine.slots)
    base = s.runs[next(iter(s.runs))].kernels[0].makespan_ns
    rows = []
    for label, r in s.runs.items():
        k = r.kernels[0]
        rows.append([label, k.makespan_ns / 1e3, ideal / 1e3, k.makespan_ns / ideal if ideal else math.nan,
                     base / k.makespan_ns if k.makespan_ns else math.nan, k.blocks_launched, k.prologues, k.claims])
    return Table(f"Simulated: workload {s.workload}, {s.tiles:,} tiles on {s.machine.sms} SMs x {s.machine.slots_per_sm} slots",
                 ["policy", "makespan us", "ideal us", "makespan / ideal", f"speed-up vs {next(iter(s.runs))}",
                  "blocks launched", "prologues", "claims"], rows,
                 note="SIMULATED, not measured. ideal = max(total work / slots, longest tile); makespan from launch "
                      "to the last block's exit, including block launch, prologue and claim costs")


def tradeoff_table(s: Study) -> Table:
    workloads = list(s.rows[0].balance)
    columns = ["policy", f"heavy prologue ({s.heavy_prologue_ns / 1e3:g} us): makespan / ideal"]
    columns += [f"{w}: makespan / ideal" for w in workloads]
    columns += ["high-priority kernel latency us", "x its time alone"]
    rows = [[r.variant.label, r.heavy_prologue, *[r.balance[w] for w in workloads], r.preempt.latency_ns / 1e3,
             r.preempt.slowdown] for r in s.rows]
    alone = s.rows[0].preempt.alone_ns / 1e3
    return Table("Simulated trade-off: overhead, load balance, preemption", columns, rows,
                 note=f"SIMULATED, not measured. Overhead: uniform {s.tile_ns / 1e3:g} us tiles with a heavy prologue. "
                      f"Load balance: makespan / ideal with a {s.prologue_ns / 1e3:g} us prologue (periodic: every "
                      f"{s.machine.slots}th tile {PERIODIC_FACTOR:g}x heavier). Preemption: a one-wave fixed_work "
                      f"kernel of {s.tile_ns / 1e3:g} us tiles ({alone:.3g} us alone) at higher priority, launched "
                      f"half-way (by the ideal makespan) through {s.tiles:,} tiles of {s.tile_ns / 1e3:g} us "
                      f"+-{JITTER:.0%}; latency = its launch to its end")


def seed_table(s: Study) -> Table:
    v = verdicts(s)
    rows = []
    for r in s.rows:
        ok = v[r.variant.label]
        worst = max(r.balance.values())
        rows.append([r.variant.label, _yes(ok["overhead"], f"{r.heavy_prologue:.2f}x ideal"),
                     _yes(ok["preemption"], f"{r.preempt.latency_ns / 1e3:.3g} us"),
                     _yes(ok["balance"], f"worst {worst:.2f}x ideal")])
    return Table("Simulated: the seed's trade-off table", ["policy", "reduces overhead", "preemption", "load balance"],
                 rows, note=f"SIMULATED. yes = heavy-prologue makespan within {OVERHEAD_YES:g}x the best policy's; "
                            f"high-priority kernel done within {PREEMPT_YES:g} of the low one's remaining run; "
                            f"every workload within {BALANCE_YES:g}x the best policy's makespan")


def _yes(flag: bool, evidence: str) -> str:
    return f"{'yes' if flag else 'no'} ({evidence})"


def sweep_table(s: Study) -> Table:
    rows = [[_us(q).removesuffix("us"), heavy, p.latency_ns / 1e3, p.slowdown] for q, heavy, p in s.sweep]
    return Table("Simulated: the steal quantum trades prologue cost against preemption latency",
                 ["quantum us", f"heavy prologue ({s.heavy_prologue_ns / 1e3:g} us): makespan / ideal",
                  "high-priority kernel latency us", "x its time alone"], rows,
                 note="SIMULATED. The quantum counts from the block's start, prologue included: a quantum shorter than "
                      "the prologue leaves each block one tile, so the prologue is paid per tile as with fixed_work")


def write_timelines(s: Study, out_dir: Path, prefix: str = "sim_timeline", labels: Sequence[str] | None = None) -> list[str]:
    """A per-SM timeline PNG per policy (all, or ``labels``) for the given workload, and one of the
    preemption run of the steal policy with a finite quantum."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = []
    for label, r in s.runs.items():
        if labels is not None and label not in labels:
            continue
        name = f"{prefix}_{_slug(label)}.png"
        r.trace().plot(out_dir / name, title=f"SIMULATED {label}: {s.workload}, {s.tiles:,} tiles "
                                             f"(makespan {r.kernels[0].makespan_ns / 1e3:.4g} us)")
        names.append(name)
    steal = next((r for r in s.rows if r.variant.policy == "steal" and r.variant.quantum_ns != NEVER), None)
    if steal is not None:
        low = preemption_workload(s.tiles, s.tile_ns)
        p = preemption(s.machine, low, steal.variant, s.prologue_ns, s.tile_ns, full=True)
        trace = p.result.trace()
        t0 = float(trace.records["start_ns"].min()) if len(trace.records) else 0.0
        name = f"{prefix}_preemption_{_slug(steal.variant.label)}.png"
        trace.plot(out_dir / name, title=f"SIMULATED {steal.variant.label} with a high-priority kernel launched "
                                         f"mid-run: it waited {p.latency_ns / 1e3:.3g} us",
                   highlight=[((p.launch_at_ns - t0) / 1e3, (p.launch_at_ns + p.latency_ns - t0) / 1e3,
                               "high-priority kernel (launch to finish)")])
        names.append(name)
    return names


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label).strip("_").replace("__", "_")


# ------------------------------------------------------------------------ the model against a GPU

SPIN_PARAMS = "const unsigned long long* duration_ns, unsigned long long prologue_ns"
SPIN_PROLOGUE = r"""
    if (threadIdx.x == 0) {  // the prologue: a known number of nanoseconds, whatever the SM clock
      const unsigned long long t0 = cuadv::ptx::globaltimer_ns();
      while (cuadv::ptx::globaltimer_ns() - t0 < prologue_ns) {}
    }
    __syncthreads();  // the whole block waits for the prologue, as it would for a shared-memory setup
"""
SPIN_BODY = r"""
      if (threadIdx.x == 0) {  // the tile: spin for its duration on %globaltimer
        const unsigned long long t0 = cuadv::ptx::globaltimer_ns();
        const unsigned long long d = duration_ns[tile.index];
        while (cuadv::ptx::globaltimer_ns() - t0 < d) {}
      }
      __syncthreads();  // the tile ends when the whole block is done with it
"""


def spin_kernel(policy: str, quantum_us: float | None = None, block: int = 256):
    """A TileKernel whose tiles spin for per-tile durations read from an array (ns) after a spin
    prologue: the workload the simulator models, to run on a GPU and compare (``trace=True``).
    Steal keeps the full tile grid (min_tiles 1), as the model does."""
    from .work_stealing import TileKernel

    return TileKernel(SPIN_PARAMS, SPIN_BODY, SPIN_PROLOGUE, policy=policy, block=block,
                      quantum_us=quantum_us if policy in ("steal", "auto") else None, name=f"sim_spin_{policy}",
                      min_tiles=1)


# --------------------------------------------------------------------------------- report and CLI


# The report's timelines: every 1056th tile 120x heavier (the brief's third workload) shows the
# tail of fixed_blocks and the claim-ahead pairing of steal and clc at a glance.
REPORT_WORKLOAD = "periodic"


def simulator_result(out_dir: Path | None = None) -> LabResult:
    """The simulated trade-off for the report of a run without a GPU (an H200-like machine; < 10 s)."""
    result = LabResult("simulate", "Scheduling simulator: the work-stealing trade-off, predicted without a GPU")
    temporary = None
    if out_dir is None:
        import tempfile

        out_dir = temporary = Path(tempfile.mkdtemp(prefix="cuadv-sim-"))
    machine = Machine()
    s = study(machine, workload=REPORT_WORKLOAD, tiles=42_240, sweep_quanta_us=(5.0, 50.0, 200.0, math.inf))
    result.tables += [parameters_table(s), seed_table(s), tradeoff_table(s), workload_table(s), sweep_table(s)]
    names = write_timelines(s, out_dir, labels=[v.label for v in standard_variants(s.quantum_ns, ("fixed_work", "fixed_blocks"))]
                            + [f"steal Q={_us(s.quantum_ns)}"])
    # Plot names are relative to the report's directory; without one they point into a temporary folder.
    result.plots += names if temporary is None else [str(out_dir / n) for n in names]
    result.checks.append(f"every one of {s.tiles:,} tiles ran exactly once under every simulated policy")
    _check_each_tile_once(s)
    result.notes.append(f"SIMULATED on a model of an H200 ({machine.sms} SMs x {machine.slots_per_sm} slots), not "
                        "measured: the scheduling lab measures the same table on a GPU; `cuadv simulate --help` "
                        "changes the model and the workload")
    result.notes.append("the model follows work_stealing.cuh, which asks for the next tile before running the "
                        "current one: on the periodic workload the block holding heavy tile 0 also gets heavy tile "
                        f"{machine.slots} (the next ticket round), so steal and clc end at 2x ideal there")
    for label, ok in verdicts(s).items():
        result.figures[f"sim_{_slug(label)}_overhead_yes"] = float(ok["overhead"])
        result.figures[f"sim_{_slug(label)}_preemption_yes"] = float(ok["preemption"])
        result.figures[f"sim_{_slug(label)}_balance_yes"] = float(ok["balance"])
    return result


def _check_each_tile_once(s: Study) -> None:
    for label, r in s.runs.items():
        tiles = np.sort(r.records["tile"])
        if not np.array_equal(tiles, np.arange(s.tiles)):
            raise SimulationError(f"simulator bug: policy {label} did not run every tile exactly once")


def cmd_simulate(args, console) -> int:
    from .report.console import print_table

    policies = POLICIES if not args.policy or "all" in args.policy else tuple(dict.fromkeys(args.policy))
    try:
        quantum = float(args.quantum_us)  # "inf" parses to math.inf
    except ValueError:
        console.print(f"[red]cuadv simulate: --quantum-us must be a number of microseconds or inf, got "
                      f"{args.quantum_us!r}[/]")
        return 2
    try:
        machine = Machine(args.sms, args.slots, args.launch_ns, args.claim_ns, args.cancel_ns, args.exit_ns)
        with console.status("simulating"):
            s = study(machine, args.workload, args.tiles, args.tile_us, args.prologue_us, args.heavy_prologue_us,
                      quantum, policies, sweep_quanta_us=args.sweep or (), seed=args.seed)
    except SimulationError as exc:
        console.print(f"[red]cuadv simulate: {exc}[/]")
        return 2
    tables = [parameters_table(s), workload_table(s), tradeoff_table(s), seed_table(s)]
    if s.sweep:
        tables.append(sweep_table(s))
    for t in tables:
        print_table(console, t)
    if args.out:
        out = Path(args.out)
        names = write_timelines(s, out)
        import json
        from dataclasses import asdict

        (out / "simulate.json").write_text(json.dumps([asdict(t) for t in tables], indent=2, default=str))
        console.print(f"timelines and tables: {', '.join(str(out / n) for n in names)}, {out / 'simulate.json'}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("simulate", help="predict the work-stealing trade-off with a model of the block scheduler "
                                        "(no GPU needed)")
    p.add_argument("--workload", default="pareto:1.5",
                   help="uniform | pareto[:alpha] | triangular | periodic[:period[:factor]] | FILE.npy/.txt of "
                        "per-tile microseconds (default pareto:1.5)")
    p.add_argument("--tiles", type=int, default=42_240, help="number of tiles (default 42240)")
    p.add_argument("--tile-us", type=float, default=20.0, help="mean tile duration, microseconds (default 20)")
    p.add_argument("--sms", type=int, default=132, help="SMs (default 132, an H200)")
    p.add_argument("--slots", type=int, default=8, help="resident blocks per SM, the kernel's occupancy (default 8)")
    p.add_argument("--prologue-us", type=float, default=5.0, help="prologue per running block (default 5)")
    p.add_argument("--heavy-prologue-us", type=float, default=100.0,
                   help="the prologue of the overhead scenario (default 100)")
    p.add_argument("--quantum-us", default="50", help="steal quantum in microseconds, or inf (default 50)")
    p.add_argument("--policy", action="append", choices=POLICIES + ("all",),
                   help="policy to simulate (repeatable; default all)")
    p.add_argument("--sweep", type=float, action="append", metavar="QUANTUM_US",
                   help="add a row to the quantum sweep table (repeatable; inf allowed)")
    p.add_argument("--launch-ns", type=float, default=Machine.launch_ns, help="block launch + teardown cost")
    p.add_argument("--claim-ns", type=float, default=Machine.claim_ns, help="steal: cost of one ticket")
    p.add_argument("--cancel-ns", type=float, default=Machine.cancel_ns, help="clc: latency of a cancel answer")
    p.add_argument("--exit-ns", type=float, default=Machine.exit_ns, help="steal: from a failed claim to the slot being free")
    p.add_argument("--seed", type=int, default=0, help="random seed of the Pareto workload")
    p.add_argument("--out", default="cuadv-simulate", help="directory for timeline PNGs and simulate.json "
                                                           "('' to write nothing)")
    p.set_defaults(handler=cmd_simulate)
