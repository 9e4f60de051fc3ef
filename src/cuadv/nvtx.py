"""NVTX ranges, so Nsight Systems shows cuadv's lab steps and timed launches on its timeline.

The first backend found is used: the ``nvtx`` package, else the NVTX bindings of CuPy or torch when
that library is already imported (cuadv never imports one just for this); none: the calls do nothing.
Without a profiler attached an NVTX push/pop costs well under a microsecond.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator

__all__ = ["annotate", "push", "Steps"]

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
_looked_with: frozenset[str] | None = None  # which of CuPy / torch were imported when the backend was looked up


def _calls():
    """The backend, looked up again only when CuPy or torch has been imported since the last lookup."""
    global _found, _looked_with
    present = frozenset(m for m in ("cupy", "torch") if m in sys.modules)
    if _looked_with is None or (_found is None and present != _looked_with):
        _found, _looked_with = _backend(), present
    return _found


def push(message: str) -> Callable[[], None]:
    """Open a range; returns what closes it (the same backend's pop, even if another one appears meanwhile)."""
    calls = _calls()
    if calls is None:
        return _nothing
    calls[0](message)
    return calls[1]


def _nothing() -> None:
    pass


@contextmanager
def annotate(message: str) -> Iterator[None]:
    """An NVTX range around a block of host code (and so around the GPU work it enqueues, in Nsight Systems)."""
    pop = push(message)
    try:
        yield
    finally:
        pop()


class Steps:
    """Consecutive ranges: each ``step(message)`` ends the previous one (a lab's progress messages)."""

    def __init__(self) -> None:
        self._pop: Callable[[], None] | None = None

    def step(self, message: str) -> None:
        self.close()
        self._pop = push(message)

    def close(self) -> None:
        if self._pop is not None:
            self._pop()
            self._pop = None
