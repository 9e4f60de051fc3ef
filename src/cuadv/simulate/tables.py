"""What a study shows: its tables (parameters, workload, trade-off, the trade-off table, the quantum sweep)
and per-SM timeline PNGs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from ..report.results import Table
from .model import NEVER, ideal_ns
from .tradeoff import (BALANCE_YES, JITTER, OVERHEAD_YES, PREEMPT_YES, Study, _us, preemption, preemption_workload,
                       verdicts)
from .workloads import PERIODIC_FACTOR

def parameters_table(s: Study) -> Table:
    m = s.machine
    rows = [["SMs x slots per SM", f"{m.sms} x {m.slots_per_sm} = {m.slots}"],
            ["tiles", s.tiles], ["workload", s.workload], ["seed of the random workloads", s.seed],
            ["mean tile (us)", float(s.durations_ns.mean() / 1e3) if s.tiles else 0.0],
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
    return Table(f"Simulated: workload {s.workload}, {s.tiles:,} tiles on {s.machine.sms} SMs x "
                 f"{s.machine.slots_per_sm} slots",
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
    return Table("Simulated: the trade-off table of the CUDA Programming Guide 4.12",
                 ["policy", "reduces overhead", "preemption", "load balance"],
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


def write_timelines(s: Study, out_dir: Path, prefix: str = "sim_timeline",
                    labels: Sequence[str] | None = None) -> list[str]:
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
        low = preemption_workload(s.tiles, s.tile_ns, s.seed)  # the tables' scenario, so the title agrees with them
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
