"""`cuadv check`: every lab's kernels at a small size under compute-sanitizer.

Each lab's ``smoke()`` launches all of its kernels once at a small size and validates the results;
this module runs it in a subprocess under each sanitizer tool (memcheck, racecheck, synccheck,
initcheck) and summarises the hazards. Exit status 1 on any hazard or failure.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
# "ERROR SUMMARY: 1 error", "RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)": one finding is singular
_SUMMARY = re.compile(r"(ERROR|RACECHECK) SUMMARY: (\d+) (errors?|hazards?)\b")


@dataclass
class CheckOutcome:
    lab: str
    tool: str
    status: str  # clean | hazards | failed
    hazards: int
    log: str


SANITIZER_WHEEL = "nvidia-cuda-sanitizer-api"
SANITIZER_MISSING = ("compute-sanitizer not found: pip install 'cuadv[sanitize]' "
                     f"(the {SANITIZER_WHEEL} wheel) or install the CUDA toolkit")
# Inside the wheel (verified on 13.0.48 and 13.5.25): 13.0 ships the executable as
# nvidia/cu13/bin/compute-sanitizer; 13.5 makes that a shell script that execs
# nvidia/cu13/compute-sanitizer/compute-sanitizer, the executable beside its libraries.
_WHEEL_PATHS = ("nvidia/cu13/bin/compute-sanitizer", "nvidia/cu13/compute-sanitizer/compute-sanitizer")


def find_sanitizer() -> str | None:
    """compute-sanitizer from the nvidia-cuda-sanitizer-api wheel, else PATH, else the CUDA toolkit
    (CUDA_HOME / CUDA_PATH), else wherever cuda.pathfinder finds one (conda, other wheel layouts)."""
    for lookup in (_sanitizer_in_wheel, _sanitizer_on_path, _sanitizer_in_toolkit, _sanitizer_by_pathfinder):
        found = lookup()
        if found:
            return str(found)
    return None


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _sanitizer_in_wheel() -> str | None:
    from importlib import metadata

    try:
        dist = metadata.distribution(SANITIZER_WHEEL)
    except metadata.PackageNotFoundError:
        return None
    suffix = ".exe" if sys.platform == "win32" else ""
    for rel in _WHEEL_PATHS:
        path = Path(dist.locate_file(rel + suffix))
        if _executable(path):
            return str(path)
    return None


def _sanitizer_on_path() -> str | None:
    return shutil.which("compute-sanitizer")


def _sanitizer_in_toolkit() -> str | None:
    suffix = ".exe" if sys.platform == "win32" else ""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if not root:
            continue
        for rel in ("bin/compute-sanitizer", "compute-sanitizer/compute-sanitizer"):
            path = Path(root) / (rel + suffix)
            if _executable(path):
                return str(path)
    return None


def _sanitizer_by_pathfinder() -> str | None:
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        return find_nvidia_binary_utility("compute-sanitizer")
    except Exception:  # older cuda-pathfinder: no binary-utility lookup, or no compute-sanitizer in it
        return None


def run_check(lab: str, tool: str, sanitizer: str, timeout: int = 900) -> CheckOutcome:
    src_dir = Path(__file__).resolve().parents[2]  # src/, which holds the cuadv package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src_dir),
                                                       os.environ.get("PYTHONPATH", "")]),
               CUADV_SANITIZER_TOOL=tool)  # a lab's smoke() skips what this tool cannot check
    # Kernels run many times slower under a sanitizer: the child's GPU waits get most of the run's bound, so that
    # its own GpuTimeoutError (naming the step) comes before the run is killed. A shorter CUADV_TIMEOUT_S of the
    # user's stays; one that cannot be read stays too, for the child to reject with its own message (a blank one
    # is unset to the child, as here).
    bound = max(1, int(timeout * 0.9))
    raw = env.get("CUADV_TIMEOUT_S", "").strip()
    try:
        users = float(raw) if raw else math.inf
    except ValueError:
        users = math.nan  # not above the bound: passed on
    if users > bound:
        env["CUADV_TIMEOUT_S"] = str(bound)
    # API errors are not reported: cuda-bindings probes driver entry points that may not exist
    # (cuGetProcAddress errors at import); cuadv checks every driver call's status itself.
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", "99", "--print-limit", "20", "--report-api-errors", "no"]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "hazard"]
    cmd += [sys.executable, "-m", "cuadv.app.sanitize", "--smoke", lab]
    # A session of its own: on a timeout the whole group goes (compute-sanitizer and the Python process it runs),
    # and what they printed until then is kept.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return CheckOutcome(lab, tool, "failed", 0, f"timed out after {timeout} s; its output until then:\n"
                            + ((out or "") + (err or ""))[-4000:])
    log = out + err
    hazards = sum(int(m.group(2)) for m in _SUMMARY.finditer(log))
    if "Device not supported" in log or "Unable to find injection library" in log:
        return CheckOutcome(lab, tool, "failed", 0, "compute-sanitizer refused the device:\n" + log[-2000:])
    if proc.returncode == 0 and hazards == 0:
        return CheckOutcome(lab, tool, "clean", 0, log)
    status = "hazards" if hazards or proc.returncode == 99 else "failed"
    return CheckOutcome(lab, tool, status, hazards, log)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s process group (it was started in a session of its own), else ``proc`` alone."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (AttributeError, ProcessLookupError, PermissionError):  # no killpg (Windows), or already gone
        proc.kill()


def smoke_main(lab_name: str) -> int:
    from ..labs import lab_by_name

    lab = lab_by_name(lab_name)
    lab.smoke()
    from ..timing import synchronize

    synchronize()
    print(f"smoke {lab_name}: ok")
    return 0


def cmd_check(args, console) -> int:
    from ..labs import all_labs
    from ..report.results import Table
    from .runner import gpu_or_reason
    from ..report.console import print_table, progress_bar
    from .exit_codes import EXIT_FAILED, EXIT_NO_GPU, EXIT_NOTHING_RAN, EXIT_OK

    reason = gpu_or_reason()  # no GPU is exit 3 whatever else is missing
    if reason:
        print(f"cuadv check: {reason}", file=sys.stderr)
        return EXIT_NO_GPU
    sanitizer = find_sanitizer()
    if sanitizer is None:
        print(f"cuadv check: {SANITIZER_MISSING}; nothing checked", file=sys.stderr)
        return EXIT_NOTHING_RAN
    from ..device import current_device

    caps = current_device().caps
    if args.lab:  # a name that is no lab fails as bench's and run --only's do (exit 1), not as "nothing to check"
        from ..labs import lab_by_name

        for name in args.lab:
            lab_by_name(name)
    labs = [lab for lab in all_labs() if hasattr(lab, "smoke") and (not args.lab or lab.name in args.lab)
            and lab.supported(caps) is None]
    tools = list(dict.fromkeys(args.tool)) if args.tool else list(TOOLS)  # a tool named twice runs once
    jobs = [(lab.name, tool) for lab in labs for tool in tools]
    if not jobs:
        print("cuadv check: no lab to check on this GPU; nothing checked", file=sys.stderr)
        return EXIT_NOTHING_RAN
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    # Sanitizer runs are mostly host-side instrumentation: several at once share the GPU well.
    # The bar (stderr, terminals only) counts runs done of total.
    with progress_bar(console, TextColumn("compute-sanitizer"), BarColumn(), MofNCompleteColumn(),
                      TextColumn(f"runs, {args.jobs} at a time"), TimeElapsedColumn(),
                      TextColumn("{task.description}")) as bar:
        task = bar.add_task("", total=len(jobs))
        with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
            futures = [pool.submit(run_check, lab, tool, sanitizer, args.timeout) for lab, tool in jobs]
            for future in as_completed(futures):
                o = future.result()
                bar.update(task, advance=1, description=f"{o.lab} / {o.tool}: {o.status}")
        outcomes = [future.result() for future in futures]
    rows = [[o.lab, o.tool, o.status, o.hazards] for o in outcomes]
    print_table(console, Table(f"compute-sanitizer over every lab's kernels ({caps.name})",
                                ["lab", "tool", "result", "hazards/errors"], rows))
    if args.log:
        Path(args.log).write_text("\n\n".join(f"===== {o.lab} / {o.tool}: {o.status}\n{o.log}" for o in outcomes))
    bad = [o for o in outcomes if o.status != "clean"]
    for o in bad:  # the last of each failing run's log, on stderr beside the other errors
        print(f"cuadv check: {o.lab} / {o.tool}: {o.status}\n{o.log[-3000:]}", file=sys.stderr)
    if getattr(args, "json", False):
        import json

        print(json.dumps([{"lab": o.lab, "tool": o.tool, "status": o.status, "hazards": o.hazards} for o in outcomes],
                         indent=2))  # stdout: JSON only
    return EXIT_FAILED if bad else EXIT_OK


def register(sub) -> None:
    import argparse

    from ..arg_types import output_file, positive_int

    p = sub.add_parser("check", help="run every lab's kernels under compute-sanitizer",
                       description="Run every lab's kernels once at a small size under compute-sanitizer "
                                   "(memcheck, racecheck, synccheck, initcheck)\nand summarise the hazards. Needs "
                                   "a GPU (exit 3 without one) and compute-sanitizer (exit 4 without it:\nnothing "
                                   "checked); exit 1 on any hazard or failure.",
                       epilog="example:\n  cuadv check --lab histogram --tool racecheck --log check.log",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tool", action="append", choices=TOOLS, help="sanitizer tool (repeatable; default all four)")
    p.add_argument("--lab", action="append", help="only this lab (repeatable)")
    p.add_argument("--log", metavar="FILE", type=output_file, help="write the full sanitizer output here")
    p.add_argument("--jobs", type=positive_int, default=4, help="sanitizer processes at once (default 4)")
    p.add_argument("--timeout", type=positive_int, default=600, metavar="SECONDS",
                   help="seconds per sanitizer run (default 600)")
    p.add_argument("--json", action="store_true", help="print each run's result as JSON on stdout (the rest on stderr)")
    p.set_defaults(handler=cmd_check)

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--smoke":
        sys.exit(smoke_main(sys.argv[2]))
    print("usage: python -m cuadv.app.sanitize --smoke LAB", file=sys.stderr)
    sys.exit(2)
