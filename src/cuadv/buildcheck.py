"""Compile every kernel cuadv ships for given targets (no GPU needed) and report resources."""

from __future__ import annotations

from dataclasses import dataclass

from .compiler import CompiledModule, KernelResources


@dataclass
class BuildRow:
    lab: str
    arch: str
    kernel: str
    resources: KernelResources | None
    error: str = ""


def build_all(archs: list[str], labs=None, progress=lambda message: None) -> list[BuildRow]:
    from .labs import all_labs

    rows: list[BuildRow] = []
    for lab in labs or all_labs():
        for arch in archs:
            progress(f"{lab.name} for {arch}")
            try:
                modules: list[CompiledModule] = lab.build(arch)
            except Exception as exc:  # a compile error, or a lab that does not import
                rows.append(BuildRow(lab.name, arch, "-", None, error=str(exc)))
                continue
            for module in modules:
                for name, res in sorted(module.resources.items()):
                    rows.append(BuildRow(lab.name, arch, _demangled(module, name), res))
    return rows


def _demangled(module: CompiledModule, lowered: str) -> str:
    for expr, low in module.lowered_names.items():
        if low == lowered:
            return expr
    return lowered
