"""NVTX ranges, so Nsight Systems shows cuadv's lab steps and timed launches on its timeline.

The first backend found is used: the ``nvtx`` package, else the NVTX bindings of CuPy or torch when
that library is already imported (cuadv never imports one just for this); none: the calls do nothing.
Without a profiler attached an NVTX push/pop costs well under a microsecond.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator

DOMAIN = "cuadv"


def _backend() -> tuple[Callable[[str], None], Callable[[], None]] | None:
    try:
        import nvtx  # the NVTX Python package (pip install nvtx)

        return (lambda m: nvtx.push_range(m, domain=DOMAIN)), (lambda: nvtx.pop_range(domain=DOMAIN))
    except Exception:
        pass
    if "cupy" in sys.modules:
        try:
            from cupy.cuda import nvtx as cupy_nvtx

            if getattr(cupy_nvtx, "available", True):
                return cupy_nvtx.RangePush, cupy_nvtx.RangePop
        except Exception:
            pass
    if "torch" in sys.modules:
        try:
            import torch

            if torch.cuda.is_available():
                return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
        except Exception:
            pass
    return None


_found: tuple[Callable[[str], None], Callable[[], None]] | None = None
_looked = False


def _calls():
    global _found, _looked
    if not _looked or (_found is None and ("cupy" in sys.modules or "torch" in sys.modules)):
        _found, _looked = _backend(), True  # look again once CuPy or torch has been imported
    return _found


def push(message: str) -> None:
    calls = _calls()
    if calls:
        calls[0](message)


def pop() -> None:
    calls = _calls()
    if calls:
        calls[1]()


@contextmanager
def annotate(message: str) -> Iterator[None]:
    """An NVTX range around a block of host code (and so around the GPU work it enqueues, in Nsight Systems)."""
    push(message)
    try:
        yield
    finally:
        pop()


class Steps:
    """Consecutive ranges: each ``step(message)`` ends the previous one (a lab's progress messages)."""

    def __init__(self) -> None:
        self.open = False

    def step(self, message: str) -> None:
        self.close()
        push(message)
        self.open = True

    def close(self) -> None:
        if self.open:
            pop()
            self.open = False
