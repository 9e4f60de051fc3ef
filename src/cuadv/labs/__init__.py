"""The labs: one module per mechanism, each with the same verbs.

A lab is an object with ``name`` (the CLI name), ``title``, ``supported(caps) -> str | None``
(None if it can run, else the reason), ``build(arch) -> list[CompiledModule]`` (compile every kernel,
no GPU needed) and ``run(ctx) -> LabResult`` (validate, then measure).
"""

from __future__ import annotations

import importlib

from .base import Lab, RunContext
from .vecscale import VecScaleLab


def all_labs() -> list[Lab]:
    """Every registered lab, in report order. A lab whose module fails to import is reported as failed."""
    labs: list[Lab] = [VecScaleLab()]
    for module_name, class_name, lab_name in _OPTIONAL_LABS:
        labs.append(_load(module_name, class_name, lab_name))
    return labs


def _load(module_name: str, class_name: str, lab_name: str) -> Lab:
    try:
        module = importlib.import_module(f"cuadv.labs.{module_name}")
    except Exception as exc:  # a broken lab (a missing dependency, say) must not take the others down
        return BrokenLab(lab_name, exc)  # under its CLI name: `cuadv bench launch` then shows the import error
    return getattr(module, class_name)()


class BrokenLab:
    """Stands in for a lab whose module does not import; running it reports the error."""

    def __init__(self, name: str, error: Exception):
        self.name, self.title, self.error = name, f"{name} (failed to import)", error

    def supported(self, caps) -> str | None:
        return None

    def build(self, arch: str):
        raise self.error

    def smoke(self) -> None:
        raise self.error

    def run(self, ctx):
        raise self.error


# (module, class, the lab's CLI name) of every lab after vecscale, in report order.
_OPTIONAL_LABS: list[tuple[str, str, str]] = [
    ("scheduling", "SchedulingLab", "scheduling"),    # issue 3: work stealing
    ("spmv", "SpmvLab", "spmv"),                      # issue 18: SpMV through TileKernel vs cuSPARSE
    ("segreduce", "SegReduceLab", "segreduce"),       # issue 18: segmented sum through TileKernel vs CUB
    ("cooperative", "CooperativeLab", "cooperative"),  # issue 4: cooperative groups, grid sync, clusters
    ("histogram", "HistogramLab", "histogram"),       # issue 4: DSM histogram
    ("pipeline", "PipelineLab", "pipeline"),          # issue 5: memcpy_async pipelines
    ("tma", "TmaLab", "tma"),                         # issue 5: TMA tiled copies and multicast
    ("pdl", "PdlLab", "pdl"),                         # issue 6: programmatic dependent launch
    ("launch_many", "LaunchManyLab", "launch"),       # issue 6: many small tasks
    ("l2", "L2Lab", "l2"),                            # issue 6: L2 persistence
    ("domains", "DomainsLab", "domains"),             # issue 6: memory sync domains
]


def lab_by_name(name: str) -> Lab:
    from ..errors import CuadvError

    for lab in all_labs():
        if lab.name == name:
            return lab
    raise CuadvError(f"no lab named {name!r}; labs: {', '.join(l.name for l in all_labs())}")


__all__ = ["Lab", "RunContext", "all_labs", "lab_by_name"]
