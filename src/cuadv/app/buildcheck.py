"""Compile every kernel cuadv ships for given targets (no GPU needed) and report resources."""

from __future__ import annotations

from dataclasses import dataclass

from ..compiler import CompiledModule, KernelResources


@dataclass
class BuildRow:
    lab: str
    arch: str
    kernel: str
    resources: KernelResources | None
    error: str = ""


def build_all(archs: list[str], labs=None, progress=lambda message: None, jobs: int = 1) -> list[BuildRow]:
    """Compile every lab's kernels for every target; ``jobs`` > 1 compiles labs in parallel processes
    (each result lands in the shared disk cache, so later runs and processes load instead of compile)."""
    from ..labs import all_labs

    work = [(lab.name, arch) for lab in (labs or all_labs()) for arch in archs]
    if jobs > 1 and len(work) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            chunks = list(pool.map(_build_one_by_name, work))
        return [row for chunk in chunks for row in chunk]
    lab_objects = {lab.name: lab for lab in (labs or all_labs())}
    rows: list[BuildRow] = []
    for name, arch in work:
        progress(f"{name} for {arch}")
        rows += _build_one(lab_objects[name], arch)
    return rows


def _build_one_by_name(job: tuple[str, str]) -> list[BuildRow]:
    from ..labs import lab_by_name

    name, arch = job
    return _build_one(lab_by_name(name), arch)


def _build_one(lab, arch: str) -> list[BuildRow]:
    try:
        modules: list[CompiledModule] = lab.build(arch)
    except Exception as exc:  # a compile error, or a lab that does not import
        return [BuildRow(lab.name, arch, "-", None, error=str(exc))]
    return [BuildRow(lab.name, arch, _demangled(module, name), res)
            for module in modules for name, res in sorted(module.resources.items())]


def _demangled(module: CompiledModule, lowered: str) -> str:
    for expr, low in module.lowered_names.items():
        if low == lowered:
            return expr
    return lowered
