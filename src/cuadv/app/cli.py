"""The cuadv command: caps, build, run, bench, check, simulate and cache."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console

from ..arch import parse_arch
from ..errors import CuadvError, NoGpuError
from ..arg_types import output_file, output_folder_problem, positive_int
from .exit_codes import EXIT_CODES, EXIT_FAILED, EXIT_NO_GPU, EXIT_NOTHING_RAN, EXIT_OK, EXIT_USAGE
from ..report.console import make_console, print_table, progress_bar
from ..report.results import Table

DEFAULT_ARCHS = ["sm_90a", "sm_100a"]


def cmd_caps(args, console: Console) -> int:
    from ..device import current_device

    try:
        caps = current_device().caps
    except NoGpuError as exc:
        if not args.json:
            raise
        print(json.dumps({"gpu": None, "reason": str(exc)}, indent=2))  # stdout: JSON only
        print(f"cuadv: {exc}", file=sys.stderr)
        return EXIT_NO_GPU
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
    return EXIT_OK


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
    from ..histograms.occupancy import occupancy_table

    t = occupancy_table()
    return Table(t.title, t.columns, t.rows, note=t.note)


def cmd_build(args, console: Console) -> int:
    from ..compiler import check_target

    archs = args.arch or DEFAULT_ARCHS
    for arch in archs:
        try:
            check_target(arch)
        except ValueError as exc:  # a target this NVRTC does not compile for: a usage error, before any build
            print(f"cuadv build: {exc}", file=sys.stderr)
            return EXIT_USAGE
    rows = _build(console, archs, args.jobs)
    failed = [r for r in rows if r.error]
    table = Table(f"kernels compiled for {', '.join(archs)}",
                  ["lab", "target", "kernel", "registers", "static smem B", "stack B", "spill st/ld B"],
                  [[r.lab, r.arch, r.kernel, r.resources.registers, r.resources.static_shared_bytes,
                    r.resources.stack_bytes, f"{r.resources.spill_store_bytes}/{r.resources.spill_load_bytes}"]
                   for r in rows if not r.error])
    print_table(console, table)
    for warning in _compile_warnings(rows):
        print(f"cuadv build: {warning}", file=sys.stderr)
    for r in failed:
        print(f"cuadv build: {r.lab} for {r.arch} failed to compile\n{r.error}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps([{"lab": r.lab, "arch": r.arch, "kernel": r.kernel, "error": r.error,
                                                "warnings": list(r.warnings),
                                                "resources": r.resources.__dict__ if r.resources else None}
                                               for r in rows], indent=2))
    return EXIT_FAILED if failed else EXIT_OK


def _compile_warnings(rows) -> list[str]:
    """Each compile warning of the build rows once per lab and target (every kernel of a module carries them all)."""
    return [f"{lab} for {arch}: {w}" for lab, arch, w in dict.fromkeys((r.lab, r.arch, w) for r in rows
                                                                         for w in r.warnings)]


def _build(console: Console, archs: list[str], jobs: int = 1, labs=None):
    """build_all (of ``labs``, default every lab) with a progress bar on stderr: labs compiled of total and kernels
    so far, per target."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from ..labs import all_labs
    from .buildcheck import build_all

    labs = labs or all_labs()
    with progress_bar(console, TextColumn("[bold]{task.fields[arch]}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("labs, {task.fields[kernels]} kernels"), TimeElapsedColumn(),
                      TextColumn("{task.description}")) as bar:
        tasks = {arch: bar.add_task("", total=len(labs), arch=arch, kernels=0) for arch in archs}

        def started(message: str) -> None:  # "LAB for ARCH" (one process), or a line for all targets (--jobs)
            for arch, task in tasks.items():
                if message.endswith(f" for {arch}") or not any(message.endswith(f" for {a}") for a in tasks):
                    bar.update(task, description=message)

        def done(lab: str, arch: str, rows) -> None:
            kernels = bar.tasks[tasks[arch]].fields["kernels"] + sum(1 for r in rows if not r.error)
            bar.update(tasks[arch], advance=1, kernels=kernels)

        return build_all(archs, labs, progress=started, jobs=jobs, done=done)


def _seconds(text: str) -> float:
    """--timeout by the rule every wait applies (cuadv.waiting), checked before anything runs."""
    from ..waiting import resolve_timeout

    try:
        return resolve_timeout(float(text))
    except ValueError:  # not a number, or not > 0
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 (inf: no limit), got {text!r}") from None


def _timeout_option(parser) -> None:
    parser.add_argument("--timeout", type=_seconds, metavar="SECONDS", default=None,
                        help="the longest any one wait for the GPU may take before the lab fails naming its step "
                             "(default: CUADV_TIMEOUT_S, else 60)")


def _select_labs(names):
    from ..labs import all_labs, lab_by_name

    return [lab_by_name(n) for n in dict.fromkeys(names)] if names else all_labs()  # a name given twice runs once


def cmd_run(args, console: Console, gpu_free: bool = True) -> int:
    from ..report.writer import Report, write_report
    from .runner import collect_environment, gpu_or_reason, run_labs

    out = Path(args.out)
    problem = output_folder_problem(args.out)  # before minutes of labs and builds, not when writing the report
    if problem:
        print(f"cuadv {getattr(args, 'command', 'run')}: --out {args.out!r}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    labs = _select_labs(args.only)
    command = "cuadv " + " ".join(sys.argv[1:])
    reason = gpu_or_reason()
    if reason is not None and (not gpu_free or getattr(args, "require_gpu", False)):
        raise NoGpuError(reason)
    if reason is None:
        report = run_labs(labs, out, args.quick, console, command=command, peer=getattr(args, "peer", False),
                          timeout_s=args.timeout)
        nothing_ran = bool(labs) and all(r.status == "skipped" for r in report.results)
    else:
        simulator = _with_simulator(labs if args.only else None)
        console.print(f"{reason}: running what needs no GPU (build check{', simulator' if simulator else ''})",
                      markup=False)
        report = Report(caps=None, results=[], command=command, environment=collect_environment(None))
        report.skipped += [(f"lab {lab.name}", reason) for lab in labs]
        nothing_ran = False  # the GPU-free parts run (--require-gpu makes this exit EXIT_NO_GPU above)
    if gpu_free:
        report.results += _gpu_free_results(console, out, labs if args.only else None)
    _add_selection_matrix(report)  # without a GPU its rows say which lab would have measured each and why not
    for r in report.results:
        for t in r.tables:
            print_table(console, t)
    paths = write_report(report, out)
    console.print("report: " + ", ".join(str(p) for p in paths), markup=False)
    if getattr(args, "json", False):
        print(json.dumps(report.as_dict(), indent=2, default=str))  # stdout: JSON only (the rest went to stderr)
    failed = [r.lab for r in report.results if r.status == "failed"]
    if failed:
        command = getattr(args, "command", "run")  # run, or bench (one lab through this function)
        print(f"cuadv {command}: failed: {', '.join(failed)} (each lab's reason is in the report)", file=sys.stderr)
        return EXIT_FAILED
    if nothing_ran:
        print("cuadv: nothing ran: every selected lab was skipped on this GPU", file=sys.stderr)
        return EXIT_NOTHING_RAN
    return EXIT_OK


def _with_simulator(labs) -> bool:
    """Whether the GPU-free work includes the scheduling simulator: for every lab (None), or with the scheduling lab."""
    return labs is None or any(lab.name == "scheduling" for lab in labs)


def _gpu_free_results(console: Console, out: Path | None = None, labs=None):
    """Build check for sm_90a and sm_100a and the scheduling simulator: these need no GPU. ``labs``: those of
    --only (their kernels only; the simulator only with the scheduling lab), else every lab."""
    from ..report.results import LabResult

    # A line for logs (the bar shows only on a terminal): on a cold cache this compiles every lab's kernels for
    # both targets, in parallel processes, which takes minutes; cached after that.
    jobs = max(1, min(8, os.cpu_count() or 1))
    which = "every lab's kernels" if labs is None else f"the kernels of {', '.join(lab.name for lab in labs)}"
    console.print(f"build check: {which} for {' and '.join(DEFAULT_ARCHS)} ({jobs} processes; "
                  "minutes on a cold compile cache, seconds after)")
    rows = _build(console, DEFAULT_ARCHS, jobs, labs)
    failed = [r for r in rows if r.error]
    result = LabResult("build", f"Build check: {'every kernel' if labs is None else which} for sm_90a and sm_100a",
                       status="failed" if failed else "ok",
                       reason="; ".join(f"{r.lab} for {r.arch}" for r in failed))
    result.tables.append(Table("kernels", ["lab", "target", "kernel", "registers", "spill st/ld B"],
                               [[r.lab, r.arch, r.kernel, r.resources.registers,
                                 f"{r.resources.spill_store_bytes}/{r.resources.spill_load_bytes}"]
                                for r in rows if not r.error]))
    result.notes += [f"compile warning: {w}" for w in _compile_warnings(rows)]
    results = [result]
    if _with_simulator(labs):
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


def cmd_cache(args, console: Console) -> int:
    from .. import cache

    try:
        cache.max_bytes()
    except ValueError as exc:  # a mistyped CUADV_CACHE_MAX_BYTES
        print(f"cuadv cache: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.clear:
        where = cache.usage().path
        removed = cache.clear()
        if args.json:
            print(json.dumps({"path": _path_or_none(where), "removed": removed}, indent=2))
        else:
            console.print(f"removed {removed} entries from {_where(where)}", markup=False)
        return EXIT_OK
    u = cache.usage()
    if args.json:
        print(json.dumps({"path": _path_or_none(u.path), "entries": u.entries, "bytes": u.bytes,
                          "limit_bytes": u.limit_bytes}, indent=2))
    else:
        print_table(console, Table("compile cache", ["what", "value"], [
            ["where", _where(u.path)], ["entries", u.entries], ["size", _size(u.bytes)],
            ["limit", _size(u.limit_bytes) if u.limit_bytes else "none"]],
            note="CUADV_CACHE_DIR moves the cache, CUADV_CACHE=0 disables it, CUADV_CACHE_MAX_BYTES bounds it; "
                 "`cuadv cache --clear` empties it"))
    return EXIT_OK


def _path_or_none(path) -> str | None:
    return None if path is None else str(path)


def _where(path) -> str:
    return "disabled (CUADV_CACHE=0)" if path is None else str(path)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit} ({n:,} bytes)"
    return f"{n} bytes"


# --- the parser: every command has a description and an example (epilog) ---------------------------

_EXIT_TEXT = "exit codes:\n" + "\n".join(f"  {code}  {what}" for code, what in EXIT_CODES.items())

_TOP_EPILOG = f"""examples:
  cuadv caps                      what this GPU can do, feature by feature
  cuadv build --arch sm_90a       compile every kernel for Hopper (no GPU needed)
  cuadv run --quick               every lab at small sizes, report in cuadv-report/
  cuadv bench histogram           one lab, its tables printed
  cuadv run --require-gpu         in CI: exit {EXIT_NO_GPU} where no GPU is present

{_EXIT_TEXT}
"""

_LABS_PLACEHOLDER = "@LABS@"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of descriptions and examples; fills in the lab list only when help is shown
    (importing every lab costs about half a second, which no other command line should pay)."""

    def _format_text(self, text: str) -> str:
        if _LABS_PLACEHOLDER in text:
            text = text.replace(_LABS_PLACEHOLDER, _labs_listing())
        return super()._format_text(text)


def _labs_listing() -> str:
    from ..labs import all_labs

    labs = all_labs()
    width = max(len(lab.name) for lab in labs)
    return "\n".join(f"  {lab.name:<{width}}  {lab.title}" for lab in labs)


def _command(sub, name: str, help: str, description: str, example: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=description, epilog=f"example:\n{example}",
                          formatter_class=_HelpFormatter)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    p = argparse.ArgumentParser(prog="cuadv", description=__doc__, epilog=_TOP_EPILOG,
                                formatter_class=_HelpFormatter)
    p.add_argument("--version", action="version", version=f"cuadv {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    caps = _command(sub, "caps", "print what this GPU can do",
                    "Print what this GPU can do (compute capability, SMs, L2, shared memory, clusters, cooperative "
                    "launch, TMA, PDL, CLC, ...)\nand, for each feature cuadv uses, whether it is available here or "
                    f"what it needs and the fallback. Without a GPU: exit {EXIT_NO_GPU} (with --json, "
                    '{"gpu": null, "reason": ...} on stdout).',
                    "  cuadv caps --json --occupancy > caps.json")
    caps.add_argument("--json", action="store_true", help="print JSON instead of a table")
    caps.add_argument("--occupancy", action="store_true",
                      help="also query cluster occupancy (largest cluster, active clusters per size and shared memory)")
    build = _command(sub, "build", "compile every kernel for the given targets (no GPU needed)",
                     "Compile every kernel cuadv ships for the given targets with NVRTC (no GPU needed) and print "
                     "registers,\nshared memory, stack and spills per kernel. Compiled modules land in the compile "
                     "cache (`cuadv cache`).",
                     "  cuadv build --arch sm_90a --arch sm_100a --jobs 8 --json build.json")
    build.add_argument("--arch", action="append", type=_target,
                       help="target such as sm_90a (repeatable; default sm_90a and sm_100a)")
    build.add_argument("--json", metavar="FILE", type=output_file, help="also write the resource report as JSON")
    build.add_argument("--jobs", type=positive_int, default=1, help="compile labs in this many processes (default 1)")
    run = _command(sub, "run", "run every lab, validate, measure and write the report",
                   "Run every lab (or those given with --only): validate, measure, and write results.json, "
                   "report.md and index.html.\nWithout a GPU it says so and runs what needs none (the build check "
                   f"and the simulator), unless --require-gpu\n(exit {EXIT_NO_GPU}). With a GPU, exit "
                   f"{EXIT_NOTHING_RAN} if every selected lab was skipped.",
                   "  cuadv run --quick --only histogram --only tma --out report/")
    run.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    run.add_argument("--out", default="cuadv-report", help="output directory (default: cuadv-report)")
    run.add_argument("--only", action="append", metavar="LAB", help="run only this lab (repeatable)")
    run.add_argument("--json", action="store_true",
                     help="print the results (results.json) on stdout; tables and messages go to stderr")
    run.add_argument("--require-gpu", action="store_true",
                     help=f"exit {EXIT_NO_GPU} without a GPU instead of running only what needs none (for CI)")
    _timeout_option(run)
    bench = _command(sub, "bench", "run one lab and print its tables",
                     "Run one lab on this GPU, print its tables and write its report. Without a GPU: exit "
                     f"{EXIT_NO_GPU}; if the lab\nis skipped on this GPU: exit {EXIT_NOTHING_RAN}.\n\n"
                     f"labs:\n{_LABS_PLACEHOLDER}",
                     "  cuadv bench scheduling --quick\n  cuadv bench domains --peer     (2 GPUs)")
    bench.add_argument("lab", help="lab name (listed above)")
    bench.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    bench.add_argument("--out", default="cuadv-report", help="output directory (default: cuadv-report)")
    bench.add_argument("--json", action="store_true",
                       help="print the results (results.json) on stdout; tables and messages go to stderr")
    bench.add_argument("--peer", action="store_true",
                       help="domains: also run the writer into a second GPU's memory over peer access (needs 2 GPUs)")
    _timeout_option(bench)
    cache = _command(sub, "cache", "show where the compile cache is and its size, or clear it",
                     "Show the compile cache: where it is, its entries, its size and its size limit; --clear "
                     "removes every entry.\nCUADV_CACHE_DIR moves it, CUADV_CACHE=0 disables it.",
                     "  cuadv cache --json\n  cuadv cache --clear")
    cache.add_argument("--clear", action="store_true", help="remove every entry")
    cache.add_argument("--json", action="store_true", help="print JSON instead of a table")
    from .. import simulate
    from . import sanitize

    sanitize.register(sub)  # cuadv check
    simulate.register(sub)  # cuadv simulate
    for parser in sub.choices.values():
        parser.formatter_class = _HelpFormatter
        parser.set_defaults(usage_parser=parser)  # main: an unknown option shows this command's usage
    return p


def _target(text: str) -> str:
    """A compile target's form, sm_XY[a|f] (argparse type: a usage error, exit 2); whether NVRTC compiles for it is
    cmd_build's check, which may load NVRTC."""
    try:
        major, minor = parse_arch(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    # NVRTC takes architecture-specific targets (a) from sm_90 on and family-specific ones (f) from sm_100 on;
    # its own "invalid --nv_arch" would otherwise come from every lab's compile, after the whole build.
    suffix, first = text[-1], {"a": 90, "f": 100}.get(text[-1])
    if first is not None and major * 10 + minor < first:
        raise argparse.ArgumentTypeError(f"target {text!r}: the '{suffix}' suffix exists from sm_{first} on "
                                         f"(use sm_{major}{minor})")
    return text


PEER_LABS = ("domains",)
COMMANDS = {"caps": cmd_caps, "build": cmd_build, "run": cmd_run, "bench": cmd_bench, "cache": cmd_cache}


def main(argv: list[str] | None = None) -> int:
    """Run one cuadv command; returns its exit code (EXIT_CODES), also for --help, --version and usage errors."""
    parser = build_parser()
    try:
        # argparse leaves options no subcommand knows to the top-level parser, whose usage lists only the commands
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            args.usage_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:  # argparse: --help / --version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)
    # --json (a flag; build's --json names a file): stdout carries the JSON alone, the console goes to stderr.
    console = make_console(stderr=True) if getattr(args, "json", None) is True else make_console()
    handler = COMMANDS.get(args.command) or getattr(args, "handler", None)
    try:
        return handler(args, console)
    except NoGpuError as exc:
        print(f"cuadv: {exc}", file=sys.stderr)
        return EXIT_NO_GPU
    except CuadvError as exc:
        print(f"cuadv: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:  # a report, log or JSON file that cannot be written (disk full, no permission, ...)
        print(f"cuadv {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
