"""Compilation targets: which ``sm_XY[a]`` a compute capability compiles for, and back."""

from __future__ import annotations

import re

_ARCH_RE = re.compile(r"^sm_(\d{2,3})([af]?)$")


def arch_for(compute_capability: tuple[int, int]) -> str:
    """Target for a compute capability: the architecture-specific 'a' target from 9.0 on
    (needed for wgmma, setmaxnreg, CLC), the plain one before."""
    major, minor = compute_capability
    return f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"


def parse_arch(arch: str) -> tuple[int, int]:
    """'sm_90a' -> (9, 0); raises ValueError naming the accepted form."""
    m = _ARCH_RE.match(arch) if isinstance(arch, str) else None
    if not m:
        raise ValueError(f"target {arch!r} is not of the form sm_XY[a] (for example sm_90a, sm_100a)")
    digits = m.group(1)
    return int(digits[:-1]), int(digits[-1])
