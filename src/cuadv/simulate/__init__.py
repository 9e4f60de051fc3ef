"""A discrete-event model of the GPU block scheduler: predicts the work-stealing trade-off without a GPU.

What it shows: the trade-off table of the CUDA Programming Guide 4.12 (Work Stealing with Cluster
Launch Control) (overhead / preemption / load balance) for fixed work per block, a fixed number of
blocks, Cluster Launch Control and software stealing with a time quantum, as numbers for a workload
you give, plus a per-SM timeline of who ran which tile when.
Compute capability needed: none (pure Python and NumPy); ``tests/test_simulate_gpu.py`` compares a
prediction with a measured block trace on a GPU.
Key insight: every policy pays for something different: fixed_work a prologue per tile, fixed_blocks
a long tail (it cannot rebalance and never yields), steal a ticket per tile and, when its quantum is
shorter than the prologue, a prologue per tile again. The quantum is a time budget that trades
preemption latency against prologue cost, and the model shows where that balance lies.
Run: ``cuadv simulate --workload pareto:1.5 --tiles 42240 --sms 132 --slots 8 --prologue-us 5
--quantum-us 50 --out sim`` (``--help`` lists the costs of the model).

Modules, each with one job (the model itself is described in ``model``):

- ``model``: the machine, a kernel launch, the event loop (``simulate``), its records and the ideal bound.
- ``workloads``: per-tile durations by name or from a file.
- ``tradeoff``: the policy variants, the preemption scenario, ``study`` and that table's verdicts.
- ``tables``: a study's tables and per-SM timeline PNGs.
- ``result``: the simulator's LabResult for a run's report.
- ``cli``: ``cuadv simulate`` (``register``, ``cmd_simulate``).
- ``gpu``: the TileKernel that runs the same workload on a GPU, to compare a prediction with a trace.

Outputs: each kernel's makespan, the ideal bound max(total work / slots, longest tile), blocks
launched, prologues run and claims made, and one record per tile (SM, slot, block, tile, start, end).
"""

from .cli import cmd_simulate, register
from .gpu import SPIN_BODY, SPIN_PARAMS, SPIN_PROLOGUE, spin_kernel
from .model import (NEVER, POLICIES, RECORD_DTYPE, KernelOutcome, KernelSpec, Machine, SimResult, SimTrace,
                    SimulationError, ideal_ns, simulate)
from .result import REPORT_WORKLOAD, simulator_result
from .tables import parameters_table, seed_table, sweep_table, tradeoff_table, workload_table, write_timelines
from .tradeoff import (BALANCE_YES, JITTER, OVERHEAD_YES, PREEMPT_YES, Preemption, Study, TradeoffRow, Variant,
                       high_priority_kernel, preemption, preemption_workload, run_variant, standard_variants, study,
                       verdicts)
from .workloads import PERIODIC_FACTOR, STANDARD_WORKLOADS, make_workload

__all__ = [
    "BALANCE_YES", "JITTER", "KernelOutcome", "KernelSpec", "Machine", "NEVER", "OVERHEAD_YES", "PERIODIC_FACTOR",
    "POLICIES", "PREEMPT_YES", "Preemption", "RECORD_DTYPE", "REPORT_WORKLOAD", "SPIN_BODY", "SPIN_PARAMS",
    "SPIN_PROLOGUE", "STANDARD_WORKLOADS", "SimResult", "SimTrace", "SimulationError", "Study", "TradeoffRow",
    "Variant", "cmd_simulate", "high_priority_kernel", "ideal_ns", "make_workload", "parameters_table", "preemption",
    "preemption_workload", "register", "run_variant", "seed_table", "simulate", "simulator_result", "spin_kernel",
    "standard_variants", "study", "sweep_table", "tradeoff_table", "verdicts", "workload_table", "write_timelines",
]
