"""Grid, block and cluster shapes (``Dim3``) and the launch limits every CUDA GPU shares."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .errors import LaunchConfigError

Dim3 = tuple[int, int, int]
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
MAX_CLUSTER_SIZE = 16  # non-portable limit of Hopper and Blackwell
PORTABLE_CLUSTER_SIZE = 8
STATIC_SHARED_LIMIT = 48 * 1024


def as_dim3(value: int | Sequence[int], name: str = "dimension") -> Dim3:
    """``value`` as (x, y, z): an int (NumPy integers too) or a sequence of 1 to 3 of them, missing ones 1.
    Only the form is checked here; each caller checks the range its ``name`` allows."""
    if type(value) is tuple and len(value) == 3 and all(type(v) is int for v in value):  # already a Dim3: as is
        return value  # type: ignore[return-value]
    if is_int(value):
        return (int(value), 1, 1)  # type: ignore[arg-type]
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise LaunchConfigError(f"{name} must be an int or a tuple of 1 to 3 ints (x, y, z), got {value!r} "
                                f"({type(value).__name__})")
    if not 1 <= len(value) <= 3:
        raise LaunchConfigError(f"{name} has 1 to 3 components (x, y, z), got {len(value)}: {tuple(value)!r}")
    for axis, v in enumerate(value):
        if not is_int(v):
            raise LaunchConfigError(f"{name} component {'xyz'[axis]} must be an int, got {v!r} ({type(v).__name__})")
    return tuple(int(v) for v in value) + (1,) * (3 - len(value))  # type: ignore[return-value]


def is_int(value: object) -> bool:
    """An int or a NumPy integer; bool is no size."""
    if type(value) is int:  # the common case, before the isinstance checks
        return True
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def volume(d: Dim3) -> int:
    return d[0] * d[1] * d[2]
