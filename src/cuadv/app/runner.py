"""Run labs on the current GPU (or, without one, what needs none) and collect a Report."""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

from ..errors import NoGpuError
from ..report.console import progress_bar
from ..report.writer import Report
from ..report.results import LabResult


def run_labs(labs, out_dir: Path, quick: bool, console: Console, command: str = "", peer: bool = False) -> Report:
    from ..device import current_device
    from ..timing import copy_ceiling

    device = current_device()
    caps = device.caps
    console.print(f"[bold]{caps.name}[/] (compute capability {caps.cc_string()}, {caps.sm_count} SMs)")
    ceiling = copy_ceiling()
    console.print(f"copy ceiling: {ceiling.tb_per_s:.2f} TB/s (device-to-device, read + write)")
    from ..labs.base import RunContext

    report = Report(caps=caps.as_dict(), results=[], ceiling_tb_s=ceiling.tb_per_s, command=command)
    # The bar goes to stderr (shown only on a terminal): lab i of n, and the lab's current step.
    with progress_bar(console, TextColumn("[bold]{task.fields[lab]}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                      TextColumn("{task.description}"), transient=False) as bar:
        task = bar.add_task("", total=len(labs), lab="")
        for i, lab in enumerate(labs, 1):
            bar.update(task, lab=f"lab {i} of {len(labs)}: {lab.name}", description="")
            ctx = RunContext(out_dir=out_dir, quick=quick, caps=caps, ceiling=ceiling,
                             progress=lambda msg, t=task: bar.update(t, description=msg), peer=peer)
            started = time.perf_counter()
            result = run_one(lab, ctx)
            report.results.append(result)
            # A line per lab on stdout, also where no terminal shows the bar (logs, CI).
            console.print(f"{lab.name}: {result.status} in {time.perf_counter() - started:.1f} s"
                          + (f" ({result.reason})" if result.reason else ""))
            bar.advance(task)
    return report


def run_one(lab, ctx) -> LabResult:
    reason = lab.supported(ctx.caps)
    if reason:
        return LabResult(lab.name, lab.title, status="skipped", reason=reason)
    try:
        return lab.run(ctx)
    except Exception as exc:  # one failing lab must not hide the others; the report says what failed
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        print(traceback.format_exc(), file=sys.stderr)
        return LabResult(lab.name, lab.title, status="failed", reason=detail)


def gpu_or_reason() -> str | None:
    """None when a GPU is usable, else the one-line reason."""
    from ..device import current_device

    try:
        current_device()
    except NoGpuError as exc:
        return str(exc)
    return None
