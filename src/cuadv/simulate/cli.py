"""``cuadv simulate``: its arguments, and printing and writing a study's tables and timelines."""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

from ..arg_types import whole_number
from ..work_stealing.policies import DEFAULT_QUANTUM_US
from .model import POLICIES, Machine, SimulationError
from .tables import parameters_table, seed_table, sweep_table, tradeoff_table, workload_table, write_timelines
from .tradeoff import DEFAULT_TILE_US, DEFAULT_TILES, study
from .workloads import is_workload_file


def cmd_simulate(args, console) -> int:
    from ..report.console import print_table
    from ..report.results import json_cells

    policies = POLICIES if not args.policy or "all" in args.policy else tuple(dict.fromkeys(args.policy))
    try:
        quantum = float(args.quantum_us)  # "inf" parses to math.inf
    except ValueError:
        print(f"cuadv simulate: --quantum-us must be a number of microseconds or inf, got {args.quantum_us!r}",
              file=sys.stderr)
        return 2  # a usage error
    if args.tiles is not None and is_workload_file(args.workload) and Path(args.workload).is_file():
        # a file's values are the tiles: a count given beside it would be ignored without a word
        print(f"cuadv simulate: --tiles does not apply to a workload file ({args.workload}): its values are the "
              "tiles, each its duration in microseconds", file=sys.stderr)
        return 2  # a usage error
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"cuadv simulate: --out {args.out} is a file, not a directory", file=sys.stderr)
        return 2  # a usage error, before the simulation
    try:
        machine = Machine(args.sms, args.slots, args.launch_ns, args.claim_ns, args.cancel_ns, args.exit_ns)
        with console.status("simulating") as status:
            s = study(machine, args.workload, DEFAULT_TILES if args.tiles is None else args.tiles, args.tile_us,
                      args.prologue_us, args.heavy_prologue_us, quantum, policies,
                      sweep_quanta_us=args.sweep or (), seed=args.seed,
                      progress=StudyProgress(status if console.is_terminal else None))
    except SimulationError as exc:
        print(f"cuadv simulate: {exc}", file=sys.stderr)
        return 2  # the workload or machine given cannot be simulated: a usage error
    tables = [parameters_table(s), workload_table(s), tradeoff_table(s), seed_table(s)]
    if s.sweep:
        tables.append(sweep_table(s))
    for t in tables:
        print_table(console, t)
    data = json.dumps(json_cells([asdict(t) for t in tables]), indent=2, default=str)
    if args.out:
        out = Path(args.out)
        names = write_timelines(s, out)
        (out / "simulate.json").write_text(data)
        console.print(f"timelines and tables: {', '.join(str(out / n) for n in names)}, {out / 'simulate.json'}",
                      markup=False)
    if args.json:
        print(data)  # stdout: JSON only (the tables and messages above went to stderr)
    return 0


class StudyProgress:
    """Where a study stands: the spinner's text on a terminal; elsewhere (a log, a pipe) a line on stderr at most
    every ``every_s`` seconds, so that a long study (millions of tiles: minutes) shows it is alive and a short one
    prints nothing."""

    def __init__(self, status=None, every_s: float = 10.0, clock=time.monotonic) -> None:
        self.status, self.every_s, self.clock = status, every_s, clock
        self.start = self.last = clock()

    def __call__(self, what: str, done: int, total: int) -> None:
        text = f"simulating: {what} ({done} of {total} simulations done)"
        if self.status is not None:
            self.status.update(text)
            return
        now = self.clock()
        if done < total and now - self.last >= self.every_s:
            self.last = now
            print(f"cuadv {text}, {now - self.start:.0f} s", file=sys.stderr, flush=True)


def _sweep_quantum(text: str) -> float:
    """--sweep: a quantum in microseconds > 0, or inf (argparse type: a usage error, exit 2)."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of microseconds > 0 or inf, got {text!r}")
    return value


def register(sub) -> None:
    import argparse

    p = sub.add_parser("simulate", help="predict the work-stealing trade-off with a model of the block scheduler "
                                        "(no GPU needed)",
                       description="Predict the work-stealing trade-off without a GPU: a discrete-event model of the "
                                   "block scheduler\n(SMs x resident block slots, launch, claim, cancel and exit "
                                   "costs) runs a workload of tiles under each\nscheduling policy (fixed_work, "
                                   "fixed_blocks, clc, steal) and prints the trade-off table; it also writes\n"
                                   "per-SM timelines (PNG) and simulate.json into --out (default cuadv-simulate; "
                                   "--out '' writes nothing).",
                       epilog="example:\n  cuadv simulate --workload periodic:64:8 --tiles 100000 --sweep 20 "
                              "--sweep 100 --sweep inf --out sim/",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="pareto:1.5",
                   help="uniform | pareto[:alpha] | triangular | periodic[:period[:factor]] | FILE.npy/.txt/.csv "
                        "of per-tile microseconds, one tile per value (default pareto:1.5)")
    p.add_argument("--tiles", type=int, default=None,
                   help=f"number of tiles (default {DEFAULT_TILES}; not with a workload file)")
    p.add_argument("--tile-us", type=float, default=DEFAULT_TILE_US,
                   help=f"tile duration, microseconds (default {DEFAULT_TILE_US:g}): the mean of uniform, pareto and "
                        "triangular, the base tile of periodic and of the trade-off scenarios; a file's durations are "
                        "its own")
    p.add_argument("--sms", type=int, default=132, help="SMs (default 132, an H200)")
    p.add_argument("--slots", type=int, default=8, help="resident blocks per SM, the kernel's occupancy (default 8)")
    p.add_argument("--prologue-us", type=float, default=5.0, help="prologue per running block (default 5)")
    p.add_argument("--heavy-prologue-us", type=float, default=100.0,
                   help="the prologue of the overhead scenario (default 100)")
    p.add_argument("--quantum-us", default=f"{DEFAULT_QUANTUM_US:g}",
                   help=f"steal quantum in microseconds, or inf (default {DEFAULT_QUANTUM_US:g}, as TileKernel's)")
    p.add_argument("--policy", action="append", choices=POLICIES + ("all",),
                   help="policy to simulate (repeatable; default all)")
    p.add_argument("--sweep", type=_sweep_quantum, action="append", metavar="QUANTUM_US",
                   help="add a row to the quantum sweep table (repeatable; inf allowed)")
    p.add_argument("--launch-ns", type=float, default=Machine.launch_ns,
                   help="block launch + teardown cost (default %(default)g ns)")
    p.add_argument("--claim-ns", type=float, default=Machine.claim_ns,
                   help="steal: cost of one ticket (default %(default)g ns)")
    p.add_argument("--cancel-ns", type=float, default=Machine.cancel_ns,
                   help="clc: latency of a cancel answer (default %(default)g ns)")
    p.add_argument("--exit-ns", type=float, default=Machine.exit_ns,
                   help="steal: from a failed claim to the slot being free (default %(default)g ns)")
    p.add_argument("--seed", type=whole_number(0), default=0,
                   help="seed of the random workloads (pareto, the trade-off table's standard ones, the preemption "
                        "scenario's jitter)")
    p.add_argument("--out", default="cuadv-simulate", help="directory for timeline PNGs and simulate.json "
                                                           "('' to write nothing)")
    p.add_argument("--json", action="store_true", help="print the tables as JSON on stdout (everything else on stderr)")
    p.set_defaults(handler=cmd_simulate)
