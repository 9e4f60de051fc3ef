"""The simulator's part of a run's report: the simulated trade-off as a LabResult (no GPU needed)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..report.results import LabResult
from .model import Machine, SimulationError
from .tables import (_slug, parameters_table, seed_table, sweep_table, tradeoff_table, workload_table,
                     write_timelines)
from .tradeoff import Study, _us, standard_variants, study, verdicts

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
    s = study(machine, workload=REPORT_WORKLOAD, sweep_quanta_us=(5.0, 50.0, 200.0, math.inf))
    result.tables += [parameters_table(s), seed_table(s), tradeoff_table(s), workload_table(s), sweep_table(s)]
    names = write_timelines(s, out_dir,
                            labels=[v.label for v in standard_variants(s.quantum_ns, ("fixed_work", "fixed_blocks"))]
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
