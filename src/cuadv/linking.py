"""Relocatable device code linked with the CUDA device runtime (cudadevrt).

Dynamic parallelism (a kernel launching kernels) and device graph launch (a kernel calling
``cudaGraphLaunch``) call into the device runtime, which lives in the static library
``libcudadevrt.a``. The kernel must be compiled as relocatable device code
(``compile_source(..., rdc=True)``, i.e. ``-rdc=true``) and linked with that library; the linked
cubin is then loaded like any other. The link goes through ``cuda.core.Linker``, which uses nvJitLink
where it is installed and the driver's ``cuLink*`` API otherwise (which needs a current context).

Finding the library, in order: ``$CUADV_CUDADEVRT`` (a file), ``cuda.pathfinder.find_static_lib``
(where that API exists), ``$CUDA_HOME`` / ``$CUDA_PATH``, the ``nvidia-cuda-runtime`` wheel, and
``/usr/local/cuda``. A missing library raises ``DeviceRuntimeNotFoundError`` naming every place looked at.

Example::

    module = compile_source(src, name="dp", arch="sm_90a", rdc=True)
    linked = link_device_runtime(module)
    parent = linked.kernel("parent")
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path

from . import cache as disk_cache
from ._cuda import driver_version, library_identity
from .compiler import CompiledModule
from .errors import CuadvError

LIBRARY_FILE = "libcudadevrt.a"


class DeviceRuntimeNotFoundError(CuadvError):
    """libcudadevrt.a was not found; the message lists where cuadv looked."""


class LinkError(CuadvError):
    """The linker rejected the inputs; the message carries its log."""


def _pathfinder_candidate() -> tuple[Path | None, str]:
    try:
        from cuda import pathfinder
    except ImportError:
        return None, "cuda.pathfinder (not installed)"
    find = getattr(pathfinder, "find_static_lib", None)
    if find is None:
        return None, "cuda.pathfinder.find_static_lib (not in this cuda-pathfinder version)"
    try:
        found = find("cudadevrt")
    except Exception as exc:  # StaticLibNotFoundError, ValueError on versions without cudadevrt
        return None, f"cuda.pathfinder.find_static_lib('cudadevrt') ({type(exc).__name__})"
    return (Path(found) if found else None), "cuda.pathfinder.find_static_lib('cudadevrt')"


def _wheel_candidates() -> list[Path]:
    """libcudadevrt.a inside the nvidia-cuda-runtime wheels (cu13 and cu12 layouts)."""
    try:
        import nvidia
    except ImportError:
        return []
    out = []
    for root in getattr(nvidia, "__path__", []):
        for rel in ("cu13/lib", "cu12/lib", "cuda_runtime/lib"):
            out.append(Path(root) / rel / LIBRARY_FILE)
    return out


def _toolkit_candidates(roots: list[str]) -> list[Path]:
    return [Path(root) / rel / LIBRARY_FILE for root in roots
            for rel in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib")]


def find_cudadevrt() -> Path:
    """Path of libcudadevrt.a; raises DeviceRuntimeNotFoundError naming every place looked at."""
    looked: list[str] = []
    override = os.environ.get("CUADV_CUDADEVRT")
    if override:
        if Path(override).is_file():
            return Path(override)
        looked.append(f"$CUADV_CUDADEVRT={override} (no such file)")
    found, described = _pathfinder_candidate()
    if found is not None and found.is_file():
        return found
    looked.append(described)
    env_roots = [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    for path in _toolkit_candidates(env_roots) + _wheel_candidates() + _toolkit_candidates(["/usr/local/cuda"]):
        if path.is_file():
            return path
        looked.append(str(path))
    raise DeviceRuntimeNotFoundError(
        "dynamic parallelism and device graph launch need the CUDA device runtime library "
        f"{LIBRARY_FILE}, which was not found; looked at: " + "; ".join(looked)
        + ". Install the nvidia-cuda-runtime wheel (pip install nvidia-cuda-runtime) or a CUDA toolkit, "
        "or set CUADV_CUDADEVRT to the file")


def is_relocatable(module: CompiledModule) -> bool:
    """True when the module was compiled with -rdc=true (its cubin is an ELF relocatable object)."""
    elf_type = int.from_bytes(module.cubin[16:18], "little") if len(module.cubin) >= 18 else 0
    return "-rdc=true" in module.options and elf_type == 1  # ET_REL


def link_device_runtime(module: CompiledModule) -> CompiledModule:
    """The module's relocatable cubin linked with cudadevrt, as a loadable CompiledModule.

    Cached on disk (keyed on the cubin, the library's contents and the target). With nvJitLink no
    GPU is needed; the driver linker needs a current context (cuadv's device).
    """
    if not is_relocatable(module):
        raise LinkError(f"module {module.name!r} is not relocatable device code; compile it with "
                        "compile_source(..., rdc=True) before linking it with the device runtime")
    library = find_cudadevrt()
    # The linker decides the code too: nvJitLink's file, else the driver's (whose linker cuda.core falls back to).
    key = disk_cache.make_key("link-cudadevrt", module.arch, module.cubin, library.read_bytes(),
                              library_identity("nvJitLink") or f"driver {_driver_version_or_none()}")
    hit = disk_cache.load(key)
    if hit is not None:
        meta, cubin = hit
        return _linked(module, cubin, meta["log"], from_cache=True)
    cubin, log = _link(module, library)
    disk_cache.store(key, {"log": log}, cubin)
    return _linked(module, cubin, log, from_cache=False)


def _driver_version_or_none() -> int | None:
    try:
        return driver_version()
    except Exception:  # no driver here: nvJitLink links without one
        return None


def _linked(module: CompiledModule, cubin: bytes, log: str, from_cache: bool) -> CompiledModule:
    return dataclasses.replace(module, cubin=cubin, log=module.log + "\n--- link with cudadevrt ---\n" + log,
                               options=module.options + ("link:cudadevrt",), from_cache=from_cache,
                               _object_code=None, _kernels={})


def _link(module: CompiledModule, library: Path) -> tuple[bytes, str]:
    from cuda.core import Linker, LinkerOptions, ObjectCode

    inputs = [ObjectCode.from_cubin(module.cubin, name=module.name),
              ObjectCode.from_library(str(library), name="cudadevrt")]
    with warnings.catch_warnings():
        # cuda.core warns once when nvJitLink is missing and it falls back to the driver linker.
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            linker = Linker(*inputs, options=LinkerOptions(name=f"{module.name}+cudadevrt", arch=module.arch))
            which = getattr(Linker, "which_backend", None)  # cuda.core >= 1.2.2; older ones do not say
            backend = str(which()) if which is not None else "nvJitLink or driver"
            linked = linker.link("cubin")
        except Exception as exc:
            raise LinkError(f"linking {module.name!r} ({module.arch}) with {library} failed: "
                            f"{type(exc).__name__}: {exc}") from exc
    log = f"linker backend: {backend}\n{_logs(linker)}"
    return bytes(linked.code), log


def _logs(linker) -> str:
    parts = []
    for getter in ("get_info_log", "get_error_log"):
        try:
            text = getattr(linker, getter)()
        except Exception:  # a backend without that log
            continue
        if text and text.strip():
            parts.append(text.strip())
    return "\n".join(parts)
