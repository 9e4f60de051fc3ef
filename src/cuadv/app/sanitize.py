"""`cuadv check`: every lab's kernels at a small size under compute-sanitizer.

Each lab's ``smoke()`` launches all of its kernels once at a small size and validates the results;
this module runs it in a subprocess under each sanitizer tool (memcheck, racecheck, synccheck,
initcheck) and summarises the hazards. Exit status 1 on any hazard or failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
_SUMMARY = re.compile(r"(ERROR|RACECHECK) SUMMARY: (\d+) (errors|hazards)")


@dataclass
class CheckOutcome:
    lab: str
    tool: str
    status: str  # clean | hazards | failed
    hazards: int
    log: str


def find_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        return find_nvidia_binary_utility("compute-sanitizer")
    except Exception:
        return None


def run_check(lab: str, tool: str, sanitizer: str, timeout: int = 900) -> CheckOutcome:
    src_dir = Path(__file__).resolve().parents[2]  # src/, which holds the cuadv package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src_dir),
                                                       os.environ.get("PYTHONPATH", "")]),
               CUADV_SANITIZER_TOOL=tool)  # a lab's smoke() skips what this tool cannot check
    # API errors are not reported: cuda-bindings probes driver entry points that may not exist
    # (cuGetProcAddress errors at import); cuadv checks every driver call's status itself.
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", "99", "--print-limit", "20", "--report-api-errors", "no"]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "hazard"]
    cmd += [sys.executable, "-m", "cuadv.app.sanitize", "--smoke", lab]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return CheckOutcome(lab, tool, "failed", 0, f"timed out after {timeout} s")
    log = proc.stdout + proc.stderr
    hazards = sum(int(m.group(2)) for m in _SUMMARY.finditer(log))
    if "Device not supported" in log or "Unable to find injection library" in log:
        return CheckOutcome(lab, tool, "failed", 0, "compute-sanitizer refused the device:\n" + log[-2000:])
    if proc.returncode == 0 and hazards == 0:
        return CheckOutcome(lab, tool, "clean", 0, log)
    status = "hazards" if hazards or proc.returncode == 99 else "failed"
    return CheckOutcome(lab, tool, status, hazards, log)


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
    from ..report.console import print_table

    sanitizer = find_sanitizer()
    if sanitizer is None:
        console.print("cuadv check: compute-sanitizer not found (it ships with the CUDA toolkit); nothing checked")
        return 2
    reason = gpu_or_reason()
    if reason:
        console.print(f"cuadv check: {reason}")
        return 2
    from ..device import current_device

    caps = current_device().caps
    labs = [lab for lab in all_labs() if hasattr(lab, "smoke") and (not args.lab or lab.name in args.lab)
            and lab.supported(caps) is None]
    tools = args.tool or list(TOOLS)
    jobs = [(lab.name, tool) for lab in labs for tool in tools]
    # Sanitizer runs are mostly host-side instrumentation: several at once share the GPU well.
    with console.status(f"compute-sanitizer: {len(jobs)} runs, {args.jobs} at a time"):
        with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
            outcomes = list(pool.map(lambda job: run_check(job[0], job[1], sanitizer, args.timeout), jobs))
    rows = [[o.lab, o.tool, o.status, o.hazards] for o in outcomes]
    print_table(console, Table(f"compute-sanitizer over every lab's kernels ({caps.name})",
                                ["lab", "tool", "result", "hazards/errors"], rows))
    if args.log:
        Path(args.log).write_text("\n\n".join(f"===== {o.lab} / {o.tool}: {o.status}\n{o.log}" for o in outcomes))
    bad = [o for o in outcomes if o.status != "clean"]
    for o in bad:
        console.print(f"[red]{o.lab} / {o.tool}: {o.status}[/]\n{o.log[-3000:]}")
    return 1 if bad else 0


def register(sub) -> None:
    p = sub.add_parser("check", help="run every lab's kernels under compute-sanitizer")
    p.add_argument("--tool", action="append", choices=TOOLS, help="sanitizer tool (repeatable; default all four)")
    p.add_argument("--lab", action="append", help="only this lab (repeatable)")
    p.add_argument("--log", metavar="FILE", help="write the full sanitizer output here")
    p.add_argument("--jobs", type=int, default=4, help="sanitizer processes at once (default 4)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per sanitizer run (default 600)")
    p.set_defaults(handler=cmd_check)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--smoke":
        sys.exit(smoke_main(sys.argv[2]))
    print("usage: python -m cuadv.app.sanitize --smoke LAB", file=sys.stderr)
    sys.exit(2)
