"""Grid, block and cluster shapes (``Dim3``) and the launch limits every CUDA GPU shares."""

from __future__ import annotations

from typing import Sequence

from .errors import LaunchConfigError

Dim3 = tuple[int, int, int]
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
MAX_CLUSTER_SIZE = 16  # non-portable limit of Hopper and Blackwell
PORTABLE_CLUSTER_SIZE = 8
STATIC_SHARED_LIMIT = 48 * 1024


def as_dim3(value: int | Sequence[int]) -> Dim3:
    if isinstance(value, int):
        dims = (value, 1, 1)
    else:
        dims = tuple(int(v) for v in value) + (1,) * (3 - len(value))
        if len(dims) != 3:
            raise LaunchConfigError(f"a dimension has at most 3 components, got {value!r}")
    return dims  # type: ignore[return-value]


def volume(d: Dim3) -> int:
    return d[0] * d[1] * d[2]
