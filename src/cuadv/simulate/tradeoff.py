"""The trade-off study: the policy variants, the preemption scenario, ``study`` (every variant on every
scenario, computed once) and the verdicts of the CUDA Programming Guide 4.12 trade-off table."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..work_stealing.policies import DEFAULT_QUANTUM_US
from .model import NEVER, POLICIES, KernelSpec, Machine, SimResult, SimulationError, ideal_ns, simulate
from .workloads import STANDARD_WORKLOADS, make_workload

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


DEFAULT_TILES = 42_240  # tiles of a study when none are given (320 per slot of an H200 at 8 blocks per SM)
DEFAULT_TILE_US = 20.0  # the mean tile of a named workload and the base tile of the trade-off scenarios
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
    seed: int = 0  # of the random workloads (the given one, the standard ones, the preemption scenario's)


def study(machine: Machine, workload: str = "pareto:1.5", tiles: int = DEFAULT_TILES, tile_us: float = DEFAULT_TILE_US,
          prologue_us: float = 5.0, heavy_prologue_us: float = 100.0, quantum_us: float = DEFAULT_QUANTUM_US,
          policies: Sequence[str] = POLICIES, sweep_quanta_us: Sequence[float] = (), seed: int = 0,
          progress: Callable[[str, int, int], None] | None = None) -> Study:
    """Simulate the given workload under every variant and the standard trade-off scenarios. ``progress(what, done,
    total)`` is called before each simulation (``done`` of ``total`` finished), and once more at the end."""
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
    uniform = make_workload("uniform", tiles, tile_ns, machine)
    low = preemption_workload(tiles, tile_ns, seed)
    loads = {w: make_workload(w, tiles, tile_ns, machine, seed) for w in STANDARD_WORKLOADS if w != workload}
    # one step per simulation of the given workload, heavy prologue, standard workload and preemption scenario
    total, done = len(variants) * (3 + len(loads)) + 2 * len(sweep_quanta_us), 0

    def step(what: str) -> None:
        nonlocal done
        if progress is not None:
            progress(what, done, total)
        done += 1

    runs = {}
    for v in variants:
        step(f"{v.label}, {workload}")
        runs[v.label] = run_variant(machine, durations, v, prologue_ns)
    rows = []
    for v in variants:
        step(f"{v.label}, uniform tiles with a heavy prologue")
        heavy = run_variant(machine, uniform, v, heavy_ns)
        balance = {workload: _ratio(runs[v.label], durations, machine)}
        for w, d in loads.items():
            step(f"{v.label}, {w}")
            balance[w] = _ratio(run_variant(machine, d, v, prologue_ns), d, machine)
        step(f"{v.label}, preemption")
        rows.append(TradeoffRow(v, _ratio(heavy, uniform, machine), balance,
                                preemption(machine, low, v, prologue_ns, tile_ns), heavy.kernels[0].prologues))
    sweep = []
    for q_us in sweep_quanta_us:
        v = Variant(f"steal Q={q_us:g}us" if q_us != math.inf else "steal Q=inf", "steal",
                    NEVER if q_us == math.inf else q_us * 1e3)
        step(f"quantum sweep, {v.label}, heavy prologue")
        heavy = run_variant(machine, uniform, v, heavy_ns)
        step(f"quantum sweep, {v.label}, preemption")
        sweep.append((v.quantum_ns, _ratio(heavy, uniform, machine), preemption(machine, low, v, prologue_ns, tile_ns)))
    step("done")
    return Study(machine, tiles, tile_ns, prologue_ns, heavy_ns, quantum_ns, workload, durations, runs, rows, sweep,
                 time.perf_counter() - t0, seed)


def _ratio(result: SimResult, durations: np.ndarray, machine: Machine) -> float:
    ideal = ideal_ns(durations, machine.slots)
    return result.kernels[0].makespan_ns / ideal if ideal else math.nan


# What counts as "yes" in that trade-off table (relative to the best variant in the same study).
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
