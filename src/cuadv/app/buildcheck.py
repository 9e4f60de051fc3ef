"""Compile every kernel cuadv ships for given targets (no GPU needed) and report resources."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..compiler import CompiledModule, KernelResources
from ..errors import CompileError


@dataclass
class BuildRow:
    lab: str
    arch: str
    kernel: str
    resources: KernelResources | None
    error: str = ""
    warnings: tuple[str, ...] = ()  # the module's NVRTC and ptxas warnings (each kernel of a module carries them all)


def build_all(archs: list[str], labs=None, progress=lambda message: None, jobs: int = 1,
              done=lambda lab, arch, rows: None) -> list[BuildRow]:
    """Compile every lab's kernels for every target; ``jobs`` > 1 compiles labs in parallel processes
    (each result lands in the shared disk cache, so later runs and processes load instead of compile).
    ``progress(message)`` is called as a lab starts compiling, ``done(lab, arch, rows)`` as it ends
    (in completion order); the rows returned are in lab order either way."""
    from ..labs import all_labs

    registered = {type(lab): lab.name for lab in all_labs()}
    labs = labs or all_labs()
    work = [(lab.name, arch) for lab in labs for arch in archs]
    # The workers find the labs again by name (a lab object does not travel to a spawned process): only labs of the
    # registry's own classes may go there; any other (a lab made or configured by the caller) builds here.
    by_name = all(registered.get(type(lab)) == lab.name for lab in labs)
    if jobs > 1 and len(work) > 1 and by_name:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # Spawned, not forked: `cuadv run` builds after its labs, with a CUDA context and threads alive, which
        # a forked child must not inherit.
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_build_one_by_name, job): job for job in work}
            progress(f"{len(work)} lab builds, {jobs} at a time")
            for future in as_completed(futures):
                done(*futures[future], future.result())
            chunks = [future.result() for future in futures]  # dicts keep insertion (lab) order
        return [row for chunk in chunks for row in chunk]
    lab_objects = {lab.name: lab for lab in labs}
    rows: list[BuildRow] = []
    for name, arch in work:
        progress(f"{name} for {arch}")
        chunk = _build_one(lab_objects[name], arch)
        done(name, arch, chunk)
        rows += chunk
    return rows


def _build_one_by_name(job: tuple[str, str]) -> list[BuildRow]:
    from ..labs import lab_by_name

    name, arch = job
    try:
        lab = lab_by_name(name)
    except Exception as exc:  # as a lab that fails to build: a row, not the whole build check
        return [BuildRow(name, arch, "-", None, error=str(exc))]
    return _build_one(lab, arch)


def _build_one(lab, arch: str) -> list[BuildRow]:
    try:
        modules: list[CompiledModule] = lab.build(arch)
    except CompileError as exc:  # the log's errors: the numbered source of the whole file would flood the table
        return [BuildRow(lab.name, arch, "-", None, error=compile_error_summary(exc))]
    except Exception as exc:  # a lab that does not import, or refuses the target
        return [BuildRow(lab.name, arch, "-", None, error=str(exc))]
    return [BuildRow(lab.name, arch, _demangled(module, name), res, warnings=compile_warnings(module.log))
            for module in modules for name, res in sorted(module.resources.items())]


def compile_warnings(log: str) -> tuple[str, ...]:
    """The warning lines of a compile log: NVRTC's "FILE(LINE): warning #177-D: ..." and ptxas's "ptxas warning :
    ...", not the source lines NVRTC echoes under them (indented, and free to say "warning:") nor its remark on how
    to suppress them."""
    return tuple(line.strip() for line in log.splitlines()
                 if re.match(r"\S.*\(\d+\): warning\b|ptxas warning\s*:", line))


def compile_error_summary(exc: CompileError, most: int = 4) -> str:
    """One line of a CompileError for a table: the module and NVRTC's first error lines (compile_source raises the
    whole log with the source; CUADV_DUMP_SOURCE=1 writes the source to a file)."""
    lines = [line.strip() for line in exc.log.splitlines() if re.search(r": (catastrophic )?error", line)]
    shown = "; ".join(lines[:most]) or (exc.log.strip().splitlines() or ["no log"])[-1]
    more = f" (+{len(lines) - most} more)" if len(lines) > most else ""
    return (f"NVRTC could not compile {exc.name!r}: {shown}{more} (the whole log: compile_source raises it; "
            "CUADV_DUMP_SOURCE=1 also writes the source to a file)")


def _demangled(module: CompiledModule, lowered: str) -> str:
    for expr, low in module.lowered_names.items():
        if low == lowered:
            return expr
    return lowered
