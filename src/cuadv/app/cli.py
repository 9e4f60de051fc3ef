"""The cuadv command: caps, build, run, bench (and check, simulate where present)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from ..errors import CuadvError, NoGpuError
from ..report.console import print_table
from ..report.results import Table

DEFAULT_ARCHS = ["sm_90a", "sm_100a"]


def cmd_caps(args, console: Console) -> int:
    from ..device import current_device

    caps = current_device().caps
    occupancy = _occupancy_table(caps) if getattr(args, "occupancy", False) else None
    features = _features_table(caps.as_dict())
    if args.json:
        data = caps.as_dict()
        data["features"] = {key: why for key, _, why in features.rows}
        if occupancy is not None:
            data["cluster_occupancy"] = {"columns": occupancy.columns, "rows": occupancy.rows}
        print(json.dumps(data, indent=2))
    else:
        print_table(console, Table(f"{caps.name} (device {caps.ordinal})", ["capability", "value"],
                                    [[k, str(v)] for k, v in caps.as_dict().items()]))
        print_table(console, features)
        if occupancy is not None:
            print_table(console, occupancy)
    return 0


def _features_table(caps: dict) -> Table:
    """Each feature of the registry: present here, or why not and what cuadv does instead."""
    from ..features import FEATURES, why_not

    rows = [[f.key, f.name, why_not(f.key, caps) or "yes"] for f in FEATURES]
    return Table("Features", ["key", "feature", "available here"], rows,
                 note="where a feature is missing, cuadv raises before launch naming it and uses the fallback shown")


def _occupancy_table(caps) -> Table:
    """Largest cluster and active clusters of the DSM histogram kernel (`cuadv caps --occupancy`)."""
    if not caps.cluster_launch:
        return Table("Cluster occupancy", ["query", "value"],
                     [["thread block clusters", f"not supported (compute capability {caps.cc_string()} < 9.0)"]])
    from ..histograms import occupancy_table

    t = occupancy_table()
    return Table(t.title, t.columns, t.rows, note=t.note)


def cmd_build(args, console: Console) -> int:
    from .buildcheck import build_all

    archs = args.arch or DEFAULT_ARCHS
    with console.status("compiling") as status:
        rows = build_all(archs, progress=lambda m: status.update(f"compiling {m}"), jobs=args.jobs)
    failed = [r for r in rows if r.error]
    table = Table(f"kernels compiled for {', '.join(archs)}",
                  ["lab", "target", "kernel", "registers", "static smem B", "stack B", "spill st/ld B"],
                  [[r.lab, r.arch, r.kernel, r.resources.registers, r.resources.static_shared_bytes,
                    r.resources.stack_bytes, f"{r.resources.spill_store_bytes}/{r.resources.spill_load_bytes}"]
                   for r in rows if not r.error])
    print_table(console, table)
    for r in failed:
        console.print(f"[red]{r.lab} for {r.arch} failed to compile[/]\n{r.error}")
    if args.json:
        Path(args.json).write_text(json.dumps([{"lab": r.lab, "arch": r.arch, "kernel": r.kernel, "error": r.error,
                                                "resources": r.resources.__dict__ if r.resources else None}
                                               for r in rows], indent=2))
    return 1 if failed else 0


def _select_labs(names):
    from ..labs import all_labs, lab_by_name

    return [lab_by_name(n) for n in names] if names else all_labs()


def cmd_run(args, console: Console, gpu_free: bool = True) -> int:
    from ..report.writer import Report, write_report
    from .runner import gpu_or_reason, run_labs

    out = Path(args.out)
    labs = _select_labs(args.only)
    command = "cuadv " + " ".join(sys.argv[1:])
    reason = gpu_or_reason()
    if reason is not None and not gpu_free:
        raise NoGpuError(reason)
    if reason is None:
        report = run_labs(labs, out, args.quick, console, command=command, peer=getattr(args, "peer", False))
    else:
        console.print(f"{reason}: running what needs no GPU (build check, simulator)")
        report = Report(caps=None, results=[], command=command)
        report.skipped += [(f"lab {lab.name}", reason) for lab in labs]
    if gpu_free:
        report.results += _gpu_free_results(console, out)
    _add_selection_matrix(report)  # without a GPU its rows say which lab would have measured each and why not
    for r in report.results:
        for t in r.tables:
            print_table(console, t)
    paths = write_report(report, out)
    console.print("report: " + ", ".join(str(p) for p in paths))
    failed = [r.lab for r in report.results if r.status == "failed"]
    if failed:
        console.print(f"[red]failed: {', '.join(failed)}[/]")
    return 1 if failed else 0


def _gpu_free_results(console: Console, out: Path | None = None):
    """Build check for sm_90a and sm_100a and the scheduling simulator: these need no GPU."""
    from .buildcheck import build_all
    from ..report.results import LabResult

    rows = build_all(DEFAULT_ARCHS)
    failed = [r for r in rows if r.error]
    result = LabResult("build", "Build check: every kernel for sm_90a and sm_100a",
                       status="failed" if failed else "ok",
                       reason="; ".join(f"{r.lab} for {r.arch}" for r in failed))
    result.tables.append(Table("kernels", ["lab", "target", "kernel", "registers", "spill st/ld B"],
                               [[r.lab, r.arch, r.kernel, r.resources.registers,
                                 f"{r.resources.spill_store_bytes}/{r.resources.spill_load_bytes}"]
                                for r in rows if not r.error]))
    results = [result]
    from ..simulate import simulator_result

    results.append(simulator_result(out))
    return results


def _add_selection_matrix(report) -> None:
    from ..report.selection import selection_matrix

    report.extra_tables.append(selection_matrix(report))


def cmd_bench(args, console: Console) -> int:
    if args.peer and args.lab not in PEER_LABS:
        raise CuadvError(f"--peer applies to lab {', '.join(PEER_LABS)} only, not {args.lab!r}")
    args.only = [args.lab]
    return cmd_run(args, console, gpu_free=False)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cuadv", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    caps = sub.add_parser("caps", help="print what this GPU can do")
    caps.add_argument("--json", action="store_true", help="print JSON instead of a table")
    caps.add_argument("--occupancy", action="store_true",
                      help="also query cluster occupancy (largest cluster, active clusters per size and shared memory)")
    build = sub.add_parser("build", help="compile every kernel for the given targets (no GPU needed)")
    build.add_argument("--arch", action="append", help="target such as sm_90a (repeatable; default sm_90a and sm_100a)")
    build.add_argument("--json", metavar="FILE", help="also write the resource report as JSON")
    build.add_argument("--jobs", type=int, default=1, help="compile labs in this many processes (default 1)")
    run = sub.add_parser("run", help="run every lab, validate, measure and write the report")
    run.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    run.add_argument("--out", default="cuadv-report", help="output directory (default: cuadv-report)")
    run.add_argument("--only", action="append", metavar="LAB", help="run only this lab (repeatable)")
    bench = sub.add_parser("bench", help="run one lab and print its tables")
    bench.add_argument("lab", help="lab name (see `cuadv run --help`)")
    bench.add_argument("--quick", action="store_true")
    bench.add_argument("--out", default="cuadv-report")
    bench.add_argument("--peer", action="store_true",
                       help="domains: also run the writer into a second GPU's memory over peer access (needs 2 GPUs)")
    from .. import simulate
    from . import sanitize

    sanitize.register(sub)  # cuadv check
    simulate.register(sub)  # cuadv simulate
    return p



PEER_LABS = ("domains",)
COMMANDS = {"caps": cmd_caps, "build": cmd_build, "run": cmd_run, "bench": cmd_bench}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    handler = COMMANDS.get(args.command) or getattr(args, "handler", None)
    try:
        return handler(args, console)
    except NoGpuError as exc:
        print(f"cuadv: {exc}", file=sys.stderr)
        return 2
    except CuadvError as exc:
        print(f"cuadv: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
