"""Multi-stage shared-memory pipelines: the device header ``<cuadv/pipeline.cuh>`` (fill / steady state / drain over
a ring of stages, cp.async or TMA fed, tails handled) and the 2-D 5-point stencil built on it as the example op.

``stencil(x)`` computes ``out[i, j] = c_center * x[i, j] + c_neighbour * (x[i-1, j] + x[i+1, j] + x[i, j-1] +
x[i, j+1])`` with zeros outside the array, float32, rounded in that order (NumPy's float32 result bit for bit).
``variant="auto"`` takes what the pipeline lab measured fastest on the H200 (a TMA-fed pipeline whose blocks claim
chunks of tiles by ticket, 92.9% of the copy ceiling at 16K x 16K; docs/pipeline.md) where the GPU has TMA and the
arrays keep its rules, else the cp.async pipeline. Needs compute capability 8.0; the TMA variants 9.0.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import KernelArgumentError, LaunchConfigError, UnsupportedFeatureError
from ..interop import DeviceArray, device_array, empty, overlaps, stream_handle, writable
from ..tma.tensormap import tma_store_overruns
from .stencil import (
    SYNC, VARIANTS, Grid2D, Stencil, Trace, Variant, reference, tile, tma,
)

__all__ = ["stencil", "prepare_stencil", "PreparedStencil", "Stencil", "Variant", "STENCIL_VARIANTS", "BUILT_VARIANTS",
           "Trace", "reference", "header_path"]

BUILT_VARIANTS: tuple[Variant, ...] = VARIANTS  # every Variant the shipped module has a kernel for (the lab's sweep)

# The named variants of the public op (any other Variant of BUILT_VARIANTS may be passed too).
# Figures: 16384 x 16384 float32 on the H200, % of the copy ceiling (docs/results/h200-2026-12-01-0920).
STENCIL_VARIANTS: dict[str, Variant] = {
    "tma_store": tma(3, 64, store=True, chunk=2, tickets=True),  # 92.9%: TMA loads and stores, tickets
    "tma": tma(4, 64, chunk=2, tickets=True),                    # 92.6%: TMA loads, 16-byte thread stores
    "thread": tile("thread", 2),                                 # 72.7%: cuda::memcpy_async, thread scope
    "mbar": tile("mbar", 4),                                     # 69.2%: cp.async on full / empty mbarriers
    "sync": SYNC,                                                # 58.3%: plain loads (the baseline)
}
_NO_TMA_FALLBACK = "variant='thread' or 'mbar' (cp.async copies; 4-byte alignment suffices), or 'auto'"


def header_path() -> str:
    """The folder to pass as an include path (``-I``) for ``#include <cuadv/pipeline.cuh>`` outside cuadv's own
    compiler (cuadv.compiler.compile_source adds it already)."""
    from ..compiler import include_dirs

    return include_dirs()[0]


_STENCILS: dict[str, Stencil] = {}


def _kernels() -> Stencil:
    """The Stencil (compiled kernels, occupancy cache) for the current device's target, built once."""
    from ..device import current_device

    arch = current_device().caps.arch
    if arch not in _STENCILS:
        _STENCILS[arch] = Stencil(arch)
    return _STENCILS[arch]


ASYNC_COPY_FALLBACK = "the same stencil as array operations (shifted slices of x; no staging in shared memory)"


def _device_has_tma() -> tuple[bool, str]:
    """Whether this GPU has TMA, and its compute capability; UnsupportedFeatureError below 8.0, where none of the
    stencil's kernels builds (they stage tiles with asynchronous copies, cp.async)."""
    from ..device import current_device

    caps = current_device().caps
    if caps.compute_capability < (8, 0):
        raise UnsupportedFeatureError("the stencil's asynchronous copies into shared memory (cp.async)",
                                      "compute capability >= 8.0", caps.cc_string(), ASYNC_COPY_FALLBACK)
    return caps.tma, caps.cc_string()


def _named(name: Any) -> Variant | None:
    """The variant ``name`` stands for (None: 'auto'); ValueError for anything else, and for a Variant whose kernel
    is not built (the shipped module holds those of ``cuadv.pipeline.BUILT_VARIANTS`` only)."""
    if isinstance(name, Variant):
        if name not in VARIANTS:
            raise ValueError(f"variant {name.label} has no built kernel: a Variant must be one of "
                             "cuadv.pipeline.BUILT_VARIANTS (or name one of "
                             f"{', '.join(map(repr, STENCIL_VARIANTS))})")
        return name
    if isinstance(name, str) and (name == "auto" or name in STENCIL_VARIANTS):
        return STENCIL_VARIANTS.get(name)
    raise ValueError(f"variant must be 'auto', one of {', '.join(map(repr, STENCIL_VARIANTS))} or a "
                     f"cuadv.pipeline.Variant; got {name!r}")


def _choose(name: str | Variant, src: Grid2D, dst: Grid2D | None, has_tma: bool, cc: str) -> Variant:
    """The variant for these arrays: a named one (checked against the GPU and the TMA rules) or 'auto'."""
    variant = _named(name)
    if variant is None:
        if has_tma and src.tma_loadable and src.tma_addressable:
            storable = dst is None or (dst.tma_loadable and not _store_spills(dst))
            return STENCIL_VARIANTS["tma_store" if storable else "tma"]
        return STENCIL_VARIANTS["thread"]
    name = variant.label if isinstance(name, Variant) else name
    if variant.kind == "tma":
        if not has_tma:
            raise UnsupportedFeatureError(f"stencil variant {name!r} (TMA)", "compute capability >= 9.0", cc,
                                          _NO_TMA_FALLBACK)
        if not src.tma_loadable:
            raise LaunchConfigError(
                f"stencil variant {name!r} loads x by TMA, and the TMA rule is violated: x's base address and row "
                f"pitch must be 16-byte aligned (base {src.address:#x}, pitch {4 * src.pitch} B); fallback: "
                f"{_NO_TMA_FALLBACK}")
        if variant.tma_store and dst is not None and not dst.tma_loadable:
            raise LaunchConfigError(
                f"stencil variant {name!r} stores out by TMA: out's base and row pitch must be 16-byte aligned (base "
                f"{dst.address:#x}, pitch {4 * dst.pitch} B); fallback: variant='tma' (16- or 4-byte thread stores)")
        if variant.tma_store and dst is not None and _store_spills(dst):
            raise LaunchConfigError(
                f"stencil variant {name!r} stores out by TMA, which writes whole 16-byte units: out's rows "
                f"({dst.cols} float32) end inside one, so the store would overwrite the bytes after each row, which "
                "are not out's; fallback: variant='tma' (thread stores), or rows of a multiple of 4 columns")
    return variant


def _store_spills(dst: Grid2D) -> bool:
    """Whether TMA stores into the caller's float32 ``dst`` would write past its rows (``tma_store_overruns``)."""
    return tma_store_overruns(dst.cols, 4)


def _check_x(x: Any, stream: int) -> tuple[Any, Grid2D]:
    if isinstance(x, np.ndarray):
        raise KernelArgumentError("x is a NumPy array in host memory; copy it to the GPU first (cupy.asarray or "
                                  "torch.as_tensor(..., device='cuda'))")
    arr = device_array(x, stream=stream)  # raises for host objects; orders x's producer stream before ours
    if arr.typestr[1:] != "f4" or len(arr.shape) != 2:
        raise LaunchConfigError(f"x must be a 2-D float32 array; got {arr.type_name} of shape {arr.shape}")
    if 0 in arr.shape:
        raise LaunchConfigError(f"x must have at least one row and one column; got shape {arr.shape}")
    return arr, Grid2D.of(x, "x")


def _check_out(out: Any, x: DeviceArray, src: Grid2D, stream: int) -> Grid2D:
    if isinstance(out, np.ndarray):
        raise KernelArgumentError("out is a NumPy array in host memory; pass a device array (or out=None)")
    arr = writable(device_array(out, stream=stream), "out")
    if arr.typestr[1:] != "f4" or tuple(arr.shape) != (src.rows, src.cols):
        raise LaunchConfigError(f"out must be a float32 array of x's shape {(src.rows, src.cols)}; got "
                                f"{arr.type_name} of shape {arr.shape}")
    dst = Grid2D.of(out, "out")
    if overlaps(arr, x):
        raise LaunchConfigError(f"out (at {arr.ptr:#x}) overlaps x (at {x.ptr:#x}): the stencil reads neighbours, so "
                                "it cannot run in place; pass a separate out, or out=None for a new array")
    return dst


def _coefficient(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number (the stencil's float32 weight), got {type(value).__name__} "
                        f"{value!r}")
    return float(value)


@dataclass
class PreparedStencil:
    """The stencil for one input shape and variant, checked and compiled once: call it as
    ``prepared(x, out=None, *, stream=None)`` with arrays of that shape (the variant was chosen for the arrays given
    to prepare_stencil; an array that breaks its rules is refused, never launched). A call's ``stream=None`` is
    ``stream``, the one given to prepare_stencil, and where that was None too, the current stream of x's library."""

    shape: tuple[int, int]
    variant: Variant
    c_center: float
    c_neighbour: float
    kernels: Stencil = field(repr=False)
    stream: Any = None

    def __call__(self, x: Any, out: Any = None, *, stream: Any = None) -> Any:
        handle = stream_handle(self.stream if stream is None else stream, x)
        arr, src = _check_x(x, handle)
        if (src.rows, src.cols) != self.shape:
            raise LaunchConfigError(f"x has shape {(src.rows, src.cols)} but this stencil was prepared for "
                                    f"{self.shape}; prepare another")
        dst = _check_out(out, arr, src, handle) if out is not None else None
        has_tma = self.variant.kind == "tma"  # checked when prepared
        _choose(self.variant, src, dst, has_tma, "")  # the TMA rules for these arrays, before anything is launched
        if out is None:  # prepare_stencil checked that a dense output suits the variant
            out = empty(arr.library, self.shape, np.float32, like=x, stream=handle)
        self.kernels(self.variant, x, out, self.c_center, self.c_neighbour, stream=handle)
        return out


def prepare_stencil(x: Any, out: Any = None, *, c_center: float, c_neighbour: float, variant: str | Variant = "auto",
                    stream: Any = None) -> PreparedStencil:
    """Check ``x`` (and ``out``), choose the variant and compile the kernels once; returns a PreparedStencil to
    call with arrays of x's shape. Raises before anything is launched: TypeError (KernelArgumentError) for host
    arrays and a read-only ``out``, TypeError for a coefficient that is no real number, ValueError
    (LaunchConfigError) for a dtype other than float32, a rank other than 2, an empty shape, an ``out`` of another
    shape or dtype or sharing bytes with x, and an array that breaks a TMA rule when a TMA variant is named;
    UnsupportedFeatureError when a TMA variant is named on a GPU without TMA."""
    c_center, c_neighbour = _coefficient(c_center, "c_center"), _coefficient(c_neighbour, "c_neighbour")
    handle = stream_handle(stream, x)
    arr, src = _check_x(x, handle)
    dst = _check_out(out, arr, src, handle) if out is not None else None
    _named(variant)
    has_tma, cc = _device_has_tma()
    if dst is None:  # the dense output out=None will make (a fresh allocation: its base is 256-byte aligned)
        dst = Grid2D(0, src.rows, src.cols, src.cols)
    chosen = _choose(variant, src, dst, has_tma, cc)
    kernels = _kernels()
    if not kernels.fits(chosen):
        raise LaunchConfigError(f"{chosen.label} does not fit on an SM of this GPU ({chosen.shared_bytes} B shared "
                                f"memory, {chosen.threads} threads); fallback: variant='thread'")
    return PreparedStencil((src.rows, src.cols), chosen, c_center, c_neighbour, kernels, stream)


def stencil(x: Any, out: Any = None, *, c_center: float, c_neighbour: float,
            variant: str | Variant = "auto", stream: Any = None) -> Any:
    """out = the 5-point stencil of the 2-D float32 device array ``x`` (pitched rows allowed), zeros outside it.

    ``out``: a float32 device array of x's shape (may be pitched; must not overlap x), or None for a new one in x's
    library (torch in, torch out; anything else, CuPy). ``variant``: 'auto' (the fastest measured that this GPU and
    these arrays allow), 'tma_store', 'tma', 'thread', 'mbar', 'sync', or a cuadv.pipeline.Variant of
    cuadv.pipeline.BUILT_VARIANTS. ``stream``:
    None for the current stream of x's library. Returns ``out``. For repeated calls use prepare_stencil."""
    return prepare_stencil(x, out, c_center=c_center, c_neighbour=c_neighbour, variant=variant,
                           stream=stream)(x, out, stream=stream)

