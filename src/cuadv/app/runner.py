"""Run labs on the current GPU (or, without one, what needs none) and collect a Report."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from .. import nvtx
from ..errors import NoGpuError
from ..report.console import progress_bar
from ..report.writer import Report
from ..report.results import LabResult


def run_labs(labs, out_dir: Path, quick: bool, console: Console, command: str = "", peer: bool = False,
             timeout_s: float | None = None) -> Report:
    """``timeout_s``: the longest any one wait for the GPU may take (default ``CUADV_TIMEOUT_S``, else 60 s);
    a lab whose wait outlasts it fails with GpuTimeoutError naming the lab and its step (``cuadv.waiting``)."""
    from ..device import current_device
    from .. import waiting
    from ..timing import copy_ceiling

    device = current_device()
    caps = device.caps
    console.print(Text(caps.name, style="bold"), f"(compute capability {caps.cc_string()}, {caps.sm_count} SMs)")
    report = Report(caps=caps.as_dict(), results=[], command=command, environment=collect_environment(caps.as_dict()))
    try:  # every lab divides by it; without it they are skipped, and what needs no GPU still runs
        with waiting.scope(timeout_s=timeout_s, activity="the copy ceiling (a device-to-device copy of 2 GiB)"):
            ceiling = copy_ceiling()
    except Exception as exc:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        console.print(f"copy ceiling: failed ({detail})", markup=False)
        report.skipped += [(f"lab {lab.name}", f"the copy ceiling, which every lab divides by, failed: {detail}")
                           for lab in labs]
        return report
    console.print(f"copy ceiling: {ceiling.tb_per_s:.2f} TB/s (device-to-device, read + write)")
    report.ceiling_tb_s = ceiling.tb_per_s
    from ..labs.base import RunContext
    busy_after = None  # the lab whose GPU wait timed out: the context is unusable until that work ends
    # The bar goes to stderr (shown only on a terminal): lab i of n, and the lab's current step.
    with progress_bar(console, TextColumn("[bold]{task.fields[lab]}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                      TextColumn("{task.description}"), transient=False) as bar:
        task = bar.add_task("", total=len(labs), lab="")
        for i, lab in enumerate(labs, 1):
            bar.update(task, lab=f"lab {i} of {len(labs)}: {lab.name}", description="")
            if busy_after is not None:  # each would time out in turn and be blamed for the other lab's work
                report.results.append(LabResult(lab.name, lab.title, status="skipped",
                                                reason=f"the GPU is still busy with the work of lab {busy_after}, "
                                                       "whose wait timed out"))
                bar.advance(task)
                continue
            steps = nvtx.Steps()  # each progress message opens a range in Nsight Systems, ending the last one

            started = time.perf_counter()
            with nvtx.annotate(f"cuadv lab {lab.name}"), \
                    waiting.scope(timeout_s=timeout_s, activity=f"lab {lab.name}") as waits:

                def progress(msg: str, t=task, steps=steps, waits=waits) -> None:
                    bar.update(t, description=msg)
                    steps.step(f"{lab.name}: {msg}")
                    waits.activity = f"lab {lab.name}: {msg}"  # named by a wait that times out

                ctx = RunContext(out_dir=out_dir, quick=quick, caps=caps, ceiling=ceiling, progress=progress, peer=peer)
                try:
                    result = run_one(lab, ctx)
                finally:
                    steps.close()
            report.results.append(result)
            if waiting.timed_out():
                busy_after = lab.name
            # A line per lab on stdout, also where no terminal shows the bar (logs, CI).
            console.print(f"{lab.name}: {result.status} in {time.perf_counter() - started:.1f} s"
                          + (f" ({result.reason})" if result.reason else ""), markup=False)
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


# ------------------------------------------------------------------------------------ environment

# Distributions whose version the report shows (None: not installed). CuPy ships under several names.
_PACKAGES = {"cuda-core": ("cuda-core",), "cuda-bindings": ("cuda-bindings",),
             "nvrtc wheel": ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu13", "nvidia-cuda-nvrtc-cu12"),
             "cupy": ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x"), "torch": ("torch",),
             "numpy": ("numpy",)}
_SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem")
_ACCELERATORS = {1: "cub", 2: "cutensor", 3: "cutensornet"}  # cupy._core's ACCELERATOR_* numbers


def collect_environment(caps: dict | None = None, ordinal: int = 0) -> dict:
    """What ran this report: GPU, driver and clocks (nvidia-smi), Python, package versions, NVRTC,
    and whether CuPy has CUB. Best effort: every part that cannot be read says why; never raises."""
    env: dict = {"gpu": (caps or {}).get("name"), "driver_version": None, "cuda_driver_api": None, "clocks": None,
                 "nvidia_smi": None, "python": platform.python_version(), "platform": platform.platform(),
                 "nvrtc": None, "packages": {name: _version(dists) for name, dists in _PACKAGES.items()},
                 "cupy_cub": None}
    if caps and caps.get("driver_version"):
        v = int(caps["driver_version"])
        env["cuda_driver_api"] = f"{v // 1000}.{v % 1000 // 10}"
    for key, part in (("nvrtc", _nvrtc), ("cupy_cub", _cupy_cub)):
        try:
            env[key] = part(caps)
        except Exception as exc:  # best effort: say what failed, never fail the run
            env[key] = f"unavailable ({type(exc).__name__}: {exc})"
    smi = _nvidia_smi(ordinal)
    if isinstance(smi, str):
        env["nvidia_smi"] = smi
    else:
        env["nvidia_smi"] = "ok"
        env["gpu"] = env["gpu"] or smi.get("name")
        env["driver_version"] = smi.get("driver_version")
        env["clocks"] = {k: smi[f] for k, f in (("sm MHz", "clocks.sm"), ("memory MHz", "clocks.mem"),
                                                ("max sm MHz", "clocks.max.sm"), ("max memory MHz", "clocks.max.mem"))
                         if smi.get(f)}
    return env


def _version(dists: tuple[str, ...]) -> str | None:
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _nvrtc(caps: dict | None) -> str:
    if caps and caps.get("nvrtc_version"):
        major, minor = caps["nvrtc_version"]
    else:
        from .._cuda import nvrtc_version

        major, minor = nvrtc_version()
    return f"{major}.{minor}"


def _cupy_cub(caps: dict | None) -> dict | str:
    """Whether CuPy was built with CUB (cupy.cuda.cub imports) and which accelerators it uses."""
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed"
    from cupy import _core  # private, but where CuPy keeps its accelerator lists (CUPY_ACCELERATORS)

    def names(get) -> list[str]:
        return [_ACCELERATORS.get(a, str(a)) for a in get()]

    built = importlib.util.find_spec("cupy.cuda.cub") is not None  # the CUB extension module was built
    return {"built with CUB": built, "routine accelerators": names(_core.get_routine_accelerators),
            "reduction accelerators": names(_core.get_reduction_accelerators)}


def _nvidia_smi(ordinal: int) -> dict | str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "not found on PATH"
    try:
        out = subprocess.run([exe, f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits",
                              "-i", str(ordinal)], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"failed ({type(exc).__name__}: {exc})"
    if out.returncode != 0:
        return f"failed (exit {out.returncode}: {(out.stderr or out.stdout).strip()[:200]})"
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")] if out.stdout.strip() else []
    if len(values) != len(_SMI_FIELDS):
        return f"unexpected output: {out.stdout.strip()[:200]!r}"
    return {f: v for f, v in zip(_SMI_FIELDS, values) if v and not v.startswith("[")}
