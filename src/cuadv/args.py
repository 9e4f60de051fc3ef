"""Kernel arguments: Python values and arrays turned into the bytes of the kernel's parameters.

The kernel's own parameter sizes (from ``cuKernelGetParamInfo``) decide how a Python ``int`` or
``float`` is packed, so an ``int`` parameter never receives 8 bytes and a ``float`` parameter never
receives a double. Arrays are passed as their device pointer: anything with
``__cuda_array_interface__`` or DLPack (CuPy, PyTorch, cuda.core buffers).

``PackedArguments`` packs one call from scratch. ``ArgumentPacker`` is the repeated-launch form:
one parameter buffer and one ``void*`` array for the kernel's lifetime, and per tuple of argument
types a plan (one packer per parameter) checked once through ``pack_argument`` and reused, so a
repeated call costs a few ``struct`` writes and raises the same errors as the first.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any, Callable, Sequence

import numpy as np

from .errors import KernelArgumentError
from .interop import device_pointer

_INT_BY_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
_UINT_BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_FLOAT_BY_SIZE = {2: np.float16, 4: np.float32, 8: np.float64}


def pack_argument(value: Any, size: int, index: int) -> bytes:
    """The bytes of one parameter of ``size`` bytes (the kernel's declared size)."""
    where = f"argument {index}"
    if isinstance(value, (bool, np.bool_)):
        raise KernelArgumentError(f"{where}: bool is ambiguous as a kernel argument; pass np.int32(0/1) or np.uint8")
    if isinstance(value, np.ndarray):
        raise KernelArgumentError(f"{where}: a NumPy array lives in host memory; copy it to the GPU (cupy.asarray)")
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    elif isinstance(value, ctypes.Structure):
        data = bytes(value)
    elif hasattr(value, "kernel_param_bytes"):  # cuadv structs and tensor maps
        data = value.kernel_param_bytes()
    elif isinstance(value, np.generic):
        data = value.tobytes()
    elif isinstance(value, int):
        data = _pack_int(value, size, where)
    elif isinstance(value, float):
        if size not in _FLOAT_BY_SIZE:
            raise KernelArgumentError(f"{where}: a float cannot fill a {size}-byte parameter")
        data = _FLOAT_BY_SIZE[size](value).tobytes()
    else:
        ptr = device_pointer(value)
        if ptr is None:
            raise KernelArgumentError(
                f"{where}: cannot pass {type(value).__name__}; use a NumPy scalar, int, float, bytes, or an array "
                "with __cuda_array_interface__ or DLPack")
        data = ptr.to_bytes(8, "little")
    if len(data) != size:
        raise KernelArgumentError(
            f"{where}: the kernel declares a {size}-byte parameter but got {len(data)} bytes "
            f"({type(value).__name__}); pass a NumPy scalar of the parameter's type")
    return data


def _pack_int(value: int, size: int, where: str) -> bytes:
    if size not in _INT_BY_SIZE:
        raise KernelArgumentError(f"{where}: an int cannot fill a {size}-byte parameter")
    lo, hi = np.iinfo(_INT_BY_SIZE[size]).min, np.iinfo(_UINT_BY_SIZE[size]).max
    if not lo <= value <= hi:
        raise KernelArgumentError(f"{where}: {value} does not fit the kernel's {size}-byte parameter")
    dtype = _INT_BY_SIZE[size] if value < 0 else _UINT_BY_SIZE[size]
    return dtype(value).tobytes()


class PackedArguments:
    """Parameter bytes kept alive together with the void** array the driver reads them through."""

    def __init__(self, values: Sequence[Any], sizes: Sequence[int]):
        if len(values) != len(sizes):
            raise KernelArgumentError(f"the kernel takes {len(sizes)} arguments, got {len(values)}")
        self.blobs = [pack_argument(v, s, i) for i, (v, s) in enumerate(zip(values, sizes))]
        self._buffers = [ctypes.create_string_buffer(b, max(len(b), 1)) for b in self.blobs]
        self._pointers = (ctypes.c_void_p * max(len(self._buffers), 1))(
            *[ctypes.addressof(b) for b in self._buffers])

    @property
    def address(self) -> int:
        """Address of the void* array for cuLaunchKernelEx's kernelParams (0 when no arguments)."""
        return ctypes.addressof(self._pointers) if self.blobs else 0

    def as_scalars(self) -> list[np.generic] | None:
        """The same bytes as NumPy scalars, for cuda.core's launch; None if some parameter is a struct."""
        out = []
        for blob in self.blobs:
            dtype = _UINT_BY_SIZE.get(len(blob))
            if dtype is None:
                return None
            out.append(np.frombuffer(blob, dtype=dtype)[0])
        return out


# -- the repeated-launch packer -----------------------------------------------------------------
_INT_STRUCT = {size: (struct.Struct("<" + s).pack_into, struct.Struct("<" + u).pack_into)
               for size, s, u in ((1, "b", "B"), (2, "h", "H"), (4, "i", "I"), (8, "q", "Q"))}
_NP_STRUCT = {("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q",
              ("u", 1): "B", ("u", 2): "H", ("u", 4): "I", ("u", 8): "Q",
              ("f", 4): "f", ("f", 8): "d"}
_U64 = struct.Struct("<Q").pack_into
MAX_PLANS = 64  # argument-type signatures remembered per kernel (a bound, not a tuning knob)


class _TypeChanged(Exception):
    """An argument's type differs from the current plan's: choose (or build) another plan."""


class ArgumentPacker:
    """Packs the arguments of one kernel, call after call, into a buffer that never moves.

    ``address`` is the ``void**`` for ``cuLaunchKernelEx``: one slot per parameter, each pointing
    at its 8-byte-aligned place in one buffer. The first call with a new tuple of argument types
    checks every argument through ``pack_argument`` (same errors as ``PackedArguments``) and makes
    a plan; later calls with the same types only write the values, and still check what the type
    does not fix (an int's range, a bytes object's length). Not safe for two calls at once: the
    caller serialises (``Launcher`` does).
    """

    def __init__(self, sizes: Sequence[int]):
        self.sizes = tuple(int(s) for s in sizes)
        offsets, end = [], 0
        for size in self.sizes:
            end = -(-end // 8) * 8
            offsets.append(end)
            end += size
        self.offsets = tuple(offsets)
        self._buf = bytearray(max(end, 1))
        self._cbuf = (ctypes.c_char * len(self._buf)).from_buffer(self._buf)  # pins the bytearray's memory
        base = ctypes.addressof(self._cbuf)
        self._pointers = (ctypes.c_void_p * max(len(self.sizes), 1))(*[base + o for o in self.offsets])
        self.address = ctypes.addressof(self._pointers) if self.sizes else 0
        self._plan: tuple[Callable[[Any], None], ...] | None = None
        self._plans: dict[tuple[type, ...], tuple[Callable[[Any], None], ...]] = {}

    def pack(self, args: Sequence[Any]) -> None:
        """Write ``args`` into the buffer. A bad argument raises KernelArgumentError (the buffer may then
        hold part of the call: launch nothing from it)."""
        plan = self._plan
        if plan is not None and len(args) == len(plan):
            try:
                for pack, value in zip(plan, args):
                    pack(value)
                return
            except _TypeChanged:
                pass
        plan = self._plan_for(args)
        for pack, value in zip(plan, args):
            pack(value)

    def blobs(self) -> list[bytes]:
        """The bytes of each parameter as last packed (for tests and debugging)."""
        return [bytes(self._buf[o:o + s]) for o, s in zip(self.offsets, self.sizes)]

    def _plan_for(self, args: Sequence[Any]) -> tuple[Callable[[Any], None], ...]:
        key = tuple(type(v) for v in args)
        plan = self._plans.get(key)
        if plan is None:
            if len(args) != len(self.sizes):
                raise KernelArgumentError(f"the kernel takes {len(self.sizes)} arguments, got {len(args)}")
            for i, (value, size) in enumerate(zip(args, self.sizes)):
                pack_argument(value, size, i)  # every check of the uncached path, once per signature
            plan = tuple(self._packer(type(v), size, offset, i)
                         for i, (v, size, offset) in enumerate(zip(args, self.sizes, self.offsets)))
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            self._plans[key] = plan
        self._plan = plan
        return plan

    def _packer(self, kind: type, size: int, offset: int, index: int) -> Callable[[Any], None]:
        """A writer for values of type ``kind`` into parameter ``index``; it raises _TypeChanged for another type."""
        buf, end = self._buf, offset + size

        def slow(value: Any) -> None:  # the uncached packing: exact, and raises the canonical errors
            buf[offset:end] = pack_argument(value, size, index)

        if kind is int:
            signed, unsigned = _INT_STRUCT[size]

            def pack(value: Any) -> None:
                if type(value) is not int:
                    raise _TypeChanged
                try:
                    (unsigned if value >= 0 else signed)(buf, offset, value)
                    return
                except struct.error:
                    pass
                slow(value)  # out of range: the canonical message
            return pack
        if kind is float and size in (4, 8):
            write = struct.Struct("<f" if size == 4 else "<d").pack_into

            def pack(value: Any) -> None:
                if type(value) is not float:
                    raise _TypeChanged
                if value != value:  # NaN: NumPy's conversion decides the payload, as in the uncached path
                    slow(value)
                    return
                try:
                    write(buf, offset, value)
                    return
                except OverflowError:
                    pass
                slow(value)  # beyond float32: NumPy's conversion (inf), as in the uncached path
            return pack
        if kind in (bytes, bytearray):
            write = struct.Struct(f"<{size}s").pack_into

            def pack(value: Any) -> None:
                if type(value) is not kind:
                    raise _TypeChanged
                if len(value) == size:
                    write(buf, offset, value)
                else:  # struct would pad or cut: the canonical error instead
                    slow(value)
            return pack
        if issubclass(kind, np.generic) and not issubclass(kind, np.bool_):
            dtype = np.dtype(kind)
            code = _NP_STRUCT.get((dtype.kind, dtype.itemsize)) if dtype.itemsize == size else None
            if code is not None:
                write = struct.Struct("<" + code).pack_into
                floating = dtype.kind == "f"

                def pack(value: Any) -> None:
                    if type(value) is not kind:
                        raise _TypeChanged
                    if floating and value != value:  # NaN: keep its exact bits
                        slow(value)
                        return
                    write(buf, offset, value)  # integers through __index__, floats exactly through __float__
                return pack
        if size == 8 and _is_cupy_ndarray(kind):
            def pack(value: Any) -> None:
                if type(value) is not kind:
                    raise _TypeChanged
                if value.size:
                    _U64(buf, offset, value.data.ptr)  # == __cuda_array_interface__["data"][0], without the dict
                else:  # an empty array: whatever its interface says
                    slow(value)
            return pack
        if size == 8 and _plain_device_array(kind):
            def pack(value: Any) -> None:
                if type(value) is not kind:
                    raise _TypeChanged
                cai = getattr(value, "__cuda_array_interface__", None)
                if cai is None:  # e.g. a tensor of the same type in host memory: the canonical path
                    slow(value)
                else:
                    _U64(buf, offset, int(cai["data"][0]))
            return pack

        def pack(value: Any) -> None:
            if type(value) is not kind:
                raise _TypeChanged
            slow(value)
        return pack


def _is_cupy_ndarray(kind: type) -> bool:
    return kind.__name__ == "ndarray" and kind.__module__.split(".")[0] == "cupy"


def _plain_device_array(kind: type) -> bool:
    """True when pack_argument would take this type's pointer from __cuda_array_interface__ (nothing earlier matches)."""
    early = (bool, np.bool_, np.ndarray, bytes, bytearray, memoryview, ctypes.Structure, np.generic, int, float)
    return (not issubclass(kind, early) and not hasattr(kind, "kernel_param_bytes")
            and hasattr(kind, "__cuda_array_interface__"))
