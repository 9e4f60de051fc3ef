"""Building a benchmark peer's CUDA C++ source with the toolkit's nvcc into a shared library that a lab loads
with ctypes: finding nvcc (``$CUDA_HOME``/``$CUDA_PATH``, ``PATH``, then ``cuda.pathfinder``) and building
once per source, nvcc version and target (``nvcc -O3 -arch=sm_XX -shared -Xcompiler -fPIC``), cached in
cuadv's compile cache under ``peers/``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

BUILD_TIMEOUT_S = 600


class PeerUnavailable(RuntimeError):
    """The peer cannot run here; the message says why."""


def find_nvcc() -> tuple[str | None, str]:
    """(path to nvcc or None, where it was looked for)."""
    looked = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            cand = Path(root) / "bin" / "nvcc"
            if cand.is_file():
                return str(cand), f"${var}"
            looked.append(f"${var}/bin")
    found = shutil.which("nvcc")
    if found:
        return found, "PATH"
    looked.append("PATH")
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        found = find_nvidia_binary_utility("nvcc")
        if found:
            return str(found), "cuda.pathfinder"
        looked.append("cuda.pathfinder")
    except Exception:  # not installed, or too old to find binaries
        looked.append("cuda.pathfinder (unavailable)")
    return None, "nvcc not found (looked in " + ", ".join(looked) + ")"


def nvcc_version(nvcc: str) -> str:
    """The last line of ``nvcc --version`` (release and build), which keys the cache."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def build_command(nvcc: str, sm: str, out: Path, source: Path) -> list[str]:
    return [nvcc, "-O3", f"-arch={sm}", "-shared", "-Xcompiler", "-fPIC", "-o", str(out), str(source)]


def library_path(source: Path, sm: str, version: str) -> Path:
    """Where the build of ``source`` for ``sm`` by this nvcc lives: cuadv's cache directory
    (``CUADV_CACHE_DIR``; a temporary one when the cache is off), ``peers/``, named by the source's stem and a
    hash of the source, nvcc version and target (the name ``cuadv cache`` counts and clears)."""
    from ... import cache as disk_cache

    key = disk_cache.make_key(f"{source.stem}.so", source.read_bytes(), version, sm)
    root = (disk_cache.cache_dir()
            or Path(tempfile.gettempdir()) / f"cuadv-{os.getuid() if hasattr(os, 'getuid') else 0}")
    return root / "peers" / f"{source.stem}-{sm}-{key[:24]}.so"


def build_library(source: Path, sm: str, nvcc: str | None = None) -> Path:
    """The shared library of ``source`` for target ``sm`` (e.g. 'sm_90'), cached or built now; raises
    PeerUnavailable with nvcc's output when the build fails."""
    if nvcc is None:
        nvcc, where = find_nvcc()
        if nvcc is None:
            raise PeerUnavailable(where)
    lib = library_path(source, sm, nvcc_version(nvcc))
    if lib.is_file():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_name(f".tmp-{os.getpid()}-{lib.name}")
    proc = subprocess.run(build_command(nvcc, sm, tmp, source), capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise PeerUnavailable(f"nvcc failed to build {source.name} for {sm}: {(proc.stderr or proc.stdout)[-600:]}")
    os.replace(tmp, lib)  # atomic: a concurrent build of the same key writes the same bytes
    return lib


def cub_version_string(code: int) -> str:
    """CUB_VERSION (MMMmmmpp) as 'major.minor.patch'."""
    return f"{code // 100000}.{code // 100 % 1000}.{code % 100}"


def load_cub_library(path: Path, entry: str, argtypes: list) -> tuple[ctypes.CDLL, str]:
    """A peer library built from a source with the cub peers' C interface (``cuadv_cub_version``,
    ``cuadv_cub_error_string`` and the int-returning ``entry`` taking ``argtypes``), loaded with ctypes, and the
    CUB version its headers had."""
    lib = ctypes.CDLL(str(path))
    lib.cuadv_cub_version.restype = ctypes.c_int
    getattr(lib, entry).restype = ctypes.c_int
    getattr(lib, entry).argtypes = argtypes
    lib.cuadv_cub_error_string.restype = ctypes.c_char_p
    lib.cuadv_cub_error_string.argtypes = [ctypes.c_int]
    return lib, cub_version_string(lib.cuadv_cub_version())
