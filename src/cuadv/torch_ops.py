"""cuadv's operations as ``torch.library`` custom ops, so ``torch.compile`` keeps a model that calls
them in one graph (a plain Python call into cuadv is opaque to Dynamo and breaks the graph there).

    import cuadv.torch_ops
    cuadv.torch_ops.register()                      # defines torch.ops.cuadv.histogram / .bincount
    counts = torch.ops.cuadv.histogram(x, 4096, 0.0, 1.0)

    scale = cuadv.torch_ops.tile_op("mylib::scale", kernel, "(Tensor(a!) v, float alpha) -> ()",
                                    lambda v, alpha: (-(-v.numel() // 1024), (v, v.numel(), alpha)))
    scale(v, 2.0)                                   # or torch.ops.mylib.scale(v, 2.0), also under torch.compile

Each op runs on torch's current stream (cuadv's ``stream=None`` rule) and has a fake (meta) kernel that
gives torch.compile the output's shape and dtype without running it (and makes the op's cheap checks: bins, dtype,
rank). Needs torch with CUDA; given a CPU tensor, ``register()``'s ops raise KernelArgumentError naming torch's own
op as the fallback, and a tile op (a CUDA kernel only) torch's NotImplementedError. A tensor that requires grad is
read through its detached alias: the ops take no part in autograd, as torch.histc does not.
``torch.ops.cuadv.histogram`` is tagged ``cudagraph_unsafe`` (where torch has the tag): without lo and hi it reads
x's min and max back to the host, which a CUDA graph cannot, so ``torch.compile(mode="reduce-overhead")`` runs the
graphs that hold it without CUDA graphs.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .errors import CuadvError, KernelArgumentError

__all__ = ["register", "tile_op"]

NAMESPACE = "cuadv"
_libraries: dict[str, Any] = {}  # namespace -> torch.library.Library: an op lives as long as its library
_defining = threading.Lock()  # one thread at a time checks whether an op exists and defines it


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise CuadvError("cuadv.torch_ops needs PyTorch (pip install torch); without it call cuadv.histogram / "
                         "TileKernel directly") from exc
    return torch


def _library(namespace: str):
    torch = _torch()
    if namespace not in _libraries:
        _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return _libraries[namespace]


def _defined(qualname: str) -> bool:
    torch = _torch()
    namespace, name = qualname.split("::")
    return hasattr(getattr(torch.ops, namespace), name)


def register() -> None:
    """Define ``torch.ops.cuadv.histogram(Tensor x, int bins, float? lo=None, float? hi=None) -> Tensor`` (int64
    counts, ``cuadv.histogram``'s semantics; the edges are not returned, as ``torch.histc``) and
    ``torch.ops.cuadv.bincount(Tensor x, int minlength=0) -> Tensor``. Calling it again does nothing."""
    torch = _torch()
    with _defining:
        if not _defined(f"{NAMESPACE}::histogram"):
            _define_histogram_ops(torch)


def _define_histogram_ops(torch) -> None:
    from .histograms.api import bincount, check_bins, check_dtype, histogram

    lib = _library(NAMESPACE)
    unsafe = getattr(torch.Tag, "cudagraph_unsafe", None)  # the min/max pass of a call without lo and hi
    lib.define("histogram(Tensor x, int bins, float? lo=None, float? hi=None) -> Tensor",
               tags=(unsafe,) if unsafe is not None else ())
    lib.define("bincount(Tensor x, int minlength=0) -> Tensor")  # its length is data-dependent: never in a graph

    def range_of(lo, hi):
        if (lo is None) != (hi is None):
            raise ValueError(f"give both lo and hi, or neither (the range is then x.min(), x.max()); got lo={lo!r}, "
                             f"hi={hi!r}")
        return None if lo is None else (lo, hi)

    def histogram_cuda(x, bins, lo=None, hi=None):
        counts, _ = histogram(x, bins=bins, range=range_of(lo, hi))
        return counts

    def bincount_cuda(x, minlength=0):
        return bincount(x, minlength=minlength)

    def on_cpu(op: str, fallback: str):
        def refuse(x, *args):
            raise KernelArgumentError(f"torch.ops.cuadv.{op} needs a CUDA tensor; x is on {x.device}; fallback: "
                                      f"{fallback}")
        return refuse

    lib.impl("histogram", histogram_cuda, "CUDA")
    lib.impl("bincount", bincount_cuda, "CUDA")
    lib.impl("histogram", on_cpu("histogram", "torch.histc(x, bins, lo, hi) (float counts)"), "CPU")
    lib.impl("bincount", on_cpu("bincount", "torch.bincount(x, minlength=minlength)"), "CPU")

    def dtype_name(x) -> str:
        return str(x.dtype).removeprefix("torch.")

    # The fake kernels make the real op's cheap checks too, so torch.compile reports a bad call where it traces it
    # (a symbolic bins is left to the real op).
    def histogram_fake(x, bins, lo=None, hi=None):
        check_dtype(dtype_name(x))
        range_of(lo, hi)
        return x.new_empty((check_bins(bins) if isinstance(bins, int) else bins,), dtype=torch.int64)

    def bincount_fake(x, minlength=0):
        check_dtype(dtype_name(x), integer_only=True)
        if x.dim() != 1:
            raise ValueError(f"bincount needs a 1-D tensor, got shape {tuple(x.shape)}")
        length = torch.library.get_ctx().new_dynamic_size()  # max(x.max() + 1, minlength): known only from the data
        return x.new_empty((length,), dtype=torch.int64)

    torch.library.register_fake(f"{NAMESPACE}::histogram", histogram_fake, lib=lib)
    torch.library.register_fake(f"{NAMESPACE}::bincount", bincount_fake, lib=lib)


def tile_op(qualname: str, kernel: Any, schema: str, launch: Callable[..., tuple[Any, tuple]]) -> Callable[..., None]:
    """Make a ``TileKernel`` a torch custom op that writes its outputs in place.

    qualname: "namespace::name" (not "cuadv::..."); schema: the op's arguments in torch's schema language, the
    tensors it writes marked ``(a!)``, ``(b!)``, ..., returning ``()``, e.g. ``"(Tensor(a!) v, float alpha) -> ()"``.
    launch(*op_args, **op_kwargs) -> (tiles, kernel_args): the tile grid and the kernel's arguments (after the
    schedule) for one call. Returns a callable that calls ``torch.ops.namespace.name``."""
    torch = _torch()
    if not isinstance(qualname, str) or not isinstance(schema, str):
        raise TypeError(f"qualname and schema must be str, got {type(qualname).__name__} and {type(schema).__name__}")
    if not callable(kernel) or not callable(launch):
        raise TypeError(f"kernel (a TileKernel) and launch (op args -> (tiles, kernel args)) must be callable, got "
                        f"{type(kernel).__name__} and {type(launch).__name__}")
    if qualname.count("::") != 1 or not all(qualname.split("::")):
        raise ValueError(f"qualname must look like 'mylib::name', got {qualname!r}")
    namespace, name = qualname.split("::")
    if namespace == NAMESPACE:
        raise ValueError(f"the namespace {NAMESPACE!r} is cuadv's own; use your project's name")
    if not schema.replace(" ", "").endswith("->()"):
        raise ValueError("a tile op writes its outputs in place and returns nothing (schema '... -> ()'); "
                         f"got {schema!r}")
    if "!" not in schema:
        raise ValueError("mark the tensors the kernel writes with (a!), (b!), ... in the schema, so torch.compile "
                         f"orders them; got {schema!r}")

    def run(*args, **kwargs):
        tiles, kernel_args = launch(*args, **kwargs)
        kernel(tiles, *kernel_args)

    with _defining:
        if _defined(qualname):
            raise ValueError(f"torch.ops.{namespace}.{name} is already defined")
        lib = _library(namespace)
        lib.define(name + schema.strip())
        lib.impl(name, run, "CUDA")
        torch.library.register_fake(qualname, lambda *args, **kwargs: None, lib=lib)  # in place: no new tensors
    op = getattr(getattr(torch.ops, namespace), name)

    def call(*args, **kwargs) -> None:
        op(*args, **kwargs)

    call.__name__, call.__doc__ = name, f"torch.ops.{namespace}.{name}{schema}"
    return call
