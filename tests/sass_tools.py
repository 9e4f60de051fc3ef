"""Reading the SASS of a compiled module in CPU tests (cuobjdump and nvdisasm from the test extra)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

_FUNCTION = re.compile(r"Function : (\S+)")
_OPCODE = re.compile(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)")
_PREDICATED = re.compile(r"/\*[0-9a-f]{4}\*/\s+([^;]+?)\s*;")  # an instruction whole, predicate included


def cuobjdump() -> str | None:
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        found = find_nvidia_binary_utility("cuobjdump")
        if found:
            return str(found)
    except Exception:  # older cuda-pathfinder: no binary-utility lookup
        pass
    return shutil.which("cuobjdump")


def sass(cubin: bytes, tmp_path: Path) -> str:
    """The SASS text of a cubin; skips the test where no cuobjdump is installed."""
    tool = cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    path = tmp_path / "module.cubin"
    path.write_bytes(cubin)
    done = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, f"cuobjdump -sass failed (it needs nvdisasm beside it): {done.stderr}"
    return done.stdout


def sass_ops(cubin: bytes, tmp_path: Path) -> dict[str, set[str]]:
    """Opcodes per kernel (mangled name) of a cubin."""
    return {name: set(ops) for name, ops in sass_opcodes(cubin, tmp_path).items()}


def _per_kernel(cubin: bytes, tmp_path: Path, pattern: re.Pattern, item: Callable[[re.Match], Any]) -> dict[str, list]:
    """item(match) for each SASS line that ``pattern`` matches, per kernel (mangled name), in program order."""
    out: dict[str, list] = {}
    current = None
    for line in sass(cubin, tmp_path).splitlines():
        if m := _FUNCTION.search(line):
            current = m.group(1)
            out[current] = []
        elif current and (m := pattern.search(line)):
            out[current].append(item(m))
    return out


def sass_opcodes(cubin: bytes, tmp_path: Path) -> dict[str, list[str]]:
    """Each kernel's opcodes (mangled name -> opcodes in program order) of a cubin."""
    return _per_kernel(cubin, tmp_path, _OPCODE, lambda m: m.group(1))


_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)([^;]*);")
_TARGET = re.compile(r"0x([0-9a-f]+)\s*$")


def sass_listing(cubin: bytes, tmp_path: Path) -> dict[str, list[tuple[int, str, str]]]:
    """Each kernel's instructions (mangled name -> (address, opcode, operands) in program order) of a cubin."""
    return _per_kernel(cubin, tmp_path, _INSTRUCTION, lambda m: (int(m.group(1), 16), m.group(2), m.group(3).strip()))


def sass_loops(listing: list[tuple[int, str, str]]) -> list[tuple[int, int]]:
    """The loops of one kernel's listing: (first, last) indices of each backward branch's body, from its target to
    the branch (a branch to itself, the trap after the last EXIT, is none), innermost first."""
    index = {addr: i for i, (addr, _, _) in enumerate(listing)}
    loops = []
    for i, (addr, op, operands) in enumerate(listing):
        m = _TARGET.search(operands)
        if op.startswith("BRA") and m and int(m.group(1), 16) < addr and int(m.group(1), 16) in index:
            loops.append((index[int(m.group(1), 16)], i))
    return sorted(loops, key=lambda loop: loop[1] - loop[0])


def sass_instructions(cubin: bytes, tmp_path: Path) -> dict[str, list[str]]:
    """Each kernel's instructions with their operands ('@!P0 LDG.E.128 R4, desc[UR8][R2.64]'), in program order."""
    return _per_kernel(cubin, tmp_path, _PREDICATED, lambda m: m.group(1))
