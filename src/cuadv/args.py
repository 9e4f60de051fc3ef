"""Kernel arguments: Python values and arrays turned into the bytes of the kernel's parameters.

The kernel's own parameter sizes (from ``cuKernelGetParamInfo``) decide how a Python ``int`` or
``float`` is packed, so an ``int`` parameter never receives 8 bytes and a ``float`` parameter never
receives a double. Arrays are passed as their device pointer: anything with
``__cuda_array_interface__`` or DLPack (CuPy, PyTorch, cuda.core buffers).

Where the kernel's source is known (``Kernel.signature``, see ``cuadv.signature``), each argument is also
checked against its declaration: an array's element type, C-contiguity and alignment against what a typed
pointer reads, a scalar against the range and kind of its C type; and, given the launch's GPU, an array in
another GPU's memory raises. A raw address (an int) for a pointer is passed unchecked.

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
from .interop import (DLPACK_CUDA, DeviceArray, cuda_array_interface, device_array, device_pointer, library_of,
                      require_on_gpu)
from .memory import DeviceBuffer
from .signature import CType, DeclaredParam, Signature

_INT_BY_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
_UINT_BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_FLOAT_BY_SIZE = {2: np.float16, 4: np.float32, 8: np.float64}


def pack_argument(value: Any, size: int, index: int, declared: Signature | None = None,
                  device: int | None = None) -> bytes:
    """The bytes of one parameter of ``size`` bytes (the kernel's declared size). ``declared``: the kernel's
    signature where its source is known: a scalar is then checked against its C type and an array against
    what the pointer points to (element type, C-contiguity, alignment). ``device``: the ordinal of the GPU
    the kernel launches on; an array in another GPU's memory raises."""
    param = declared.params[index] if declared is not None else None
    where = declared.where(index) if declared is not None else f"argument {index}"
    scalar = param.ctype if param is not None and not param.pointer else None
    if isinstance(value, (bool, np.bool_)):
        if scalar is not None and scalar.kind == "b":
            return bytes([bool(value)])
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
        if param is not None:
            _check_numpy_scalar(value, param, where)
        data = value.tobytes()
    elif isinstance(value, int):
        data = _pack_int(value, size, where, scalar)
    elif isinstance(value, float):
        if param is not None and (param.pointer or scalar is not None and scalar.kind != "f"):
            raise KernelArgumentError(f"{where}: a float ({value!r}) cannot be passed for {param.type_name}; pass "
                                      f"{_what_fits(param)}")
        if size not in _FLOAT_BY_SIZE:
            raise KernelArgumentError(f"{where}: a float cannot fill a {size}-byte parameter")
        data = _FLOAT_BY_SIZE[size](value).tobytes()
    else:
        data = _pack_array(value, where, param, device)
    if len(data) != size:
        raise KernelArgumentError(
            f"{where}: the kernel declares a {size}-byte parameter but got {len(data)} bytes "
            f"({type(value).__name__}); pass a NumPy scalar of the parameter's type")
    return data


def _pack_int(value: int, size: int, where: str, scalar: CType | None) -> bytes:
    """An int by its declared C type where known (an address where the parameter is a pointer), else by size."""
    if scalar is None:
        if size not in _INT_BY_SIZE:
            raise KernelArgumentError(f"{where}: an int cannot fill a {size}-byte parameter")
        lo, hi = np.iinfo(_INT_BY_SIZE[size]).min, np.iinfo(_UINT_BY_SIZE[size]).max
        if not lo <= value <= hi:
            raise KernelArgumentError(f"{where}: {value} does not fit the kernel's {size}-byte parameter")
        dtype = _INT_BY_SIZE[size] if value < 0 else _UINT_BY_SIZE[size]
        return dtype(value).tobytes()
    if scalar.kind in "iuc":
        lo, hi = integer_range(scalar)
        if not lo <= value <= hi:
            raise KernelArgumentError(f"{where}: {value} is outside the range of {scalar.spelling}, [{lo}, {hi}]")
        return value.to_bytes(scalar.size, "little", signed=value < 0)
    if scalar.kind == "f":  # C converts an int argument to the float parameter; only where that loses nothing
        try:
            with np.errstate(over="ignore"):
                converted = _FLOAT_BY_SIZE[scalar.size](value)
        except OverflowError:
            converted = None
        if converted is None or not np.isfinite(converted) or int(converted) != value:
            raise KernelArgumentError(f"{where}: the int {value} has no exact {scalar.spelling} value; pass a float")
        return converted.tobytes()
    raise KernelArgumentError(f"{where}: an int cannot be passed for {scalar.spelling}; pass "
                              "a NumPy scalar of that type or its bytes")


def integer_range(ctype: CType) -> tuple[int, int]:
    """The values an integer C type holds (char: either sign's, as C leaves its sign to the compiler)."""
    bits = 8 * ctype.size
    if ctype.kind == "i":
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if ctype.kind == "u":
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2**bits - 1


def _what_fits(param: DeclaredParam) -> str:
    if param.pointer:
        return "a device array (CuPy, PyTorch) or its address as an int"
    ctype = param.ctype
    if ctype is not None and ctype.kind in "iuc":
        return f"an int or np.{sorted(ctype.elements)[0]}"
    return "a NumPy scalar of the parameter's type or its bytes"


def _check_numpy_scalar(value: np.generic, param: DeclaredParam, where: str) -> None:
    """A NumPy scalar against the declared type: an integer for an integer parameter, within its range; a
    floating value for a floating one; an address-sized integer for a pointer."""
    kind = value.dtype.kind
    if param.pointer:
        if kind not in "iu":
            raise KernelArgumentError(f"{where}: a {value.dtype} scalar cannot be passed for {param.type_name}; "
                                      f"pass {_what_fits(param)}")
        return
    ctype = param.ctype
    if ctype is None or ctype.kind in "bv":
        return
    integer = ctype.kind in "iuc"
    if (kind in "iu") != integer or kind not in "iuf":
        raise KernelArgumentError(f"{where}: a {value.dtype} scalar cannot be passed for {ctype.spelling}; pass "
                                  f"np.{sorted(ctype.elements)[0]}(...)")
    if integer and value.dtype.itemsize == ctype.size:
        lo, hi = integer_range(ctype)
        if not lo <= int(value) <= hi:
            raise KernelArgumentError(f"{where}: {value.dtype} {int(value)} is outside the range of "
                                      f"{ctype.spelling}, [{lo}, {hi}]")


def _pack_array(value: Any, where: str, param: DeclaredParam | None, device: int | None) -> bytes:
    """A device array's address, once its layout fits the pointer the kernel declares and its memory is on
    the launch's GPU."""
    try:
        ptr = device_pointer(value)
    except KernelArgumentError as exc:
        raise KernelArgumentError(f"{where}: {exc}") from None
    if ptr is None:
        raise KernelArgumentError(
            f"{where}: cannot pass {type(value).__name__}; use a NumPy scalar, int, float, bytes, or an array "
            "with __cuda_array_interface__ or DLPack")
    if param is not None and not param.pointer and param.ctype is not None:
        raise KernelArgumentError(f"{where}: an array cannot be passed for {param.type_name}, which is no pointer; "
                                  f"pass {_what_fits(param)}")
    if param is not None and param.pointer and not _untyped(value):
        _check_layout(device_array(value, what=where), param, where)
    if device is not None:
        require_on_gpu(value, ptr, device, f"{where}: the array is", "the kernel launches")
    return ptr.to_bytes(8, "little")


def _untyped(value: Any) -> bool:
    """Memory with no element type or shape of its own (a cuda.core Buffer, cuadv's DeviceBuffer): it fits any
    pointer, as ``void*`` takes any array."""
    return isinstance(value, DeviceBuffer) or (library_of(value) == "cuda.core" and type(value).__name__ == "Buffer")


def _check_layout(array: DeviceArray, param: DeclaredParam, where: str) -> None:
    """What a pointer parameter reads: elements of its type (any for void* and the types cuadv does not
    know), one after another from the first (C-contiguous), starting at an address its type's alignment divides."""
    ctype = param.ctype
    # NumPy has no bfloat16: producers without ml_dtypes describe its elements as 2-byte voids ('<V2')
    element = "bfloat16" if array.dtype is None and array.itemsize == 2 else array.type_name
    if ctype is not None and element not in ctype.elements:
        wanted = sorted(ctype.elements)[0]
        raise KernelArgumentError(
            f"{where}: got a {element} array, but {param.type_name} reads {' or '.join(sorted(ctype.elements))}"
            f" elements; convert it (x.astype(cupy.{wanted}), torch: x.to(torch.{wanted})) or declare the "
            "parameter void*")
    if not array.contiguous and not param.strided:
        raise KernelArgumentError(
            f"{where}: the {array.type_name} array of shape {array.shape} has strides {array.strides} B, not "
            f"C-contiguous; {param.type_name} reads it as one dense block. Pass cupy.ascontiguousarray(x) (torch: "
            f"x.contiguous()), or, for a kernel that addresses rows itself, declare {param.name or 'the pointer'}_pitch"
            " (or _stride) beside it")
    alignment = ctype.alignment if ctype is not None else 1
    if array.ptr % alignment:
        raise KernelArgumentError(
            f"{where}: the array starts at {array.ptr:#x}, {array.ptr % alignment} B past a multiple of "
            f"{alignment} B, the alignment {ctype.spelling} needs (CUDA Programming Guide, "  # type: ignore[union-attr]
            f"Device Memory Accesses); pass an array that starts on a {alignment}-byte boundary, not a view offset "
            "into one")


def check_argument_count(count: int, sizes: Sequence[int], declared: Signature | None) -> None:
    """Raise unless ``count`` arguments (the hidden ones included) fill the kernel's parameters."""
    if count == len(sizes):
        return
    if declared is None:
        raise KernelArgumentError(f"the kernel takes {len(sizes)} arguments, got {count}")
    hidden = declared.hidden
    listed = ", ".join(p.describe() for p in declared.params[hidden:]) or "none"
    want = len(sizes) - hidden
    raise KernelArgumentError(f"kernel {declared.kernel!r} takes {want} argument{'s' if want != 1 else ''} "
                              f"({listed}), got {count - hidden}")


class PackedArguments:
    """Parameter bytes kept alive together with the void** array the driver reads them through.
    ``declared`` and ``device``: as for ``pack_argument``."""

    def __init__(self, values: Sequence[Any], sizes: Sequence[int], declared: Signature | None = None,
                 device: int | None = None):
        check_argument_count(len(values), sizes, declared)
        self.blobs = [pack_argument(v, s, i, declared, device) for i, (v, s) in enumerate(zip(values, sizes))]
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
    does not fix (an int's range, a bytes object's length, an array's element type, layout and GPU).
    Not safe for two calls at once: the caller serialises (``Launcher`` does).
    """

    def __init__(self, sizes: Sequence[int], declared: Signature | None = None, device: int | None = None):
        self.sizes = tuple(int(s) for s in sizes)
        self.declared, self.device = declared, device
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
            check_argument_count(len(args), self.sizes, self.declared)
            for i, (value, size) in enumerate(zip(args, self.sizes)):
                pack_argument(value, size, i, self.declared, self.device)  # every check of the uncached path
            plan = tuple(self._packer(type(v), size, offset, i)
                         for i, (v, size, offset) in enumerate(zip(args, self.sizes, self.offsets)))
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            self._plans[key] = plan
        self._plan = plan
        return plan

    def _packer(self, kind: type, size: int, offset: int, index: int) -> Callable[[Any], None]:
        """A writer for values of type ``kind`` into parameter ``index``; it raises _TypeChanged for another type.
        Whatever the fast writers cannot decide alone (a value out of range, a declared type that differs from
        the value's, an array that does not fit its pointer) goes through ``pack_argument``."""
        buf, end = self._buf, offset + size
        declared, device = self.declared, self.device
        param = declared.params[index] if declared is not None else None
        pointer = param is not None and param.pointer
        scalar = param.ctype if param is not None and not pointer else None

        def slow(value: Any) -> None:  # the uncached packing: exact, and raises the canonical errors
            buf[offset:end] = pack_argument(value, size, index, declared, device)

        def checked(value: Any) -> None:  # every call through the canonical path
            if type(value) is not kind:
                raise _TypeChanged
            slow(value)

        if kind is int and (scalar is None or scalar.kind in "iuc"):
            signed, unsigned = _INT_STRUCT[size]
            if scalar is not None and scalar.kind != "c":  # the declared signedness: struct refuses what does not fit
                signed = unsigned = signed if scalar.kind == "i" else unsigned

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
        if kind is float and size in (4, 8) and not pointer and (scalar is None or scalar.kind == "f"):
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
            if code is not None and (param is None or param.ctype is None and not pointer
                                     or scalar is not None and dtype.name in scalar.elements):
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
            return checked
        if hasattr(kind, "kernel_param_bytes") and not issubclass(kind, _BEFORE_PARAM_BYTES):  # cuadv structs

            def pack(value: Any) -> None:
                if type(value) is not kind:
                    raise _TypeChanged
                data = value.kernel_param_bytes()
                if len(data) == size:
                    buf[offset:end] = data
                else:
                    slow(value)  # the canonical error
            return pack
        if size == 8 and _is_cupy_ndarray(kind) and (param is None or pointer or param.ctype is None):
            # dtype objects, not names: dtype.name is a costly property (bfloat16, not in NumPy, takes the slow path)
            elements = frozenset(np.dtype(n) for n in param.ctype.elements if n != "bfloat16") \
                if pointer and param.ctype is not None else None
            alignment = param.ctype.alignment if pointer and param.ctype is not None else 1
            dense = pointer and not param.strided

            def pack(value: Any) -> None:
                if type(value) is not kind:
                    raise _TypeChanged
                data = value.data
                if value.size:
                    ptr = data.ptr  # == __cuda_array_interface__["data"][0], without the dict
                    strided = dense and not value.flags.c_contiguous
                else:  # whatever its interface says (CuPy: 0), and any strides: nothing is read
                    ptr, strided = int(value.__cuda_array_interface__["data"][0]), False
                if device is not None and data.device_id != device or ptr % alignment or strided or (
                        elements is not None and value.dtype not in elements):
                    slow(value)  # the canonical error
                else:
                    _U64(buf, offset, ptr)
            return pack
        if size == 8 and _plain_device_array(kind) and (param is None or pointer or param.ctype is None):
            typestrs = frozenset(np.dtype(n).str for n in param.ctype.elements if n != "bfloat16") \
                if pointer and param.ctype is not None else None
            alignment = param.ctype.alignment if pointer and param.ctype is not None else 1
            dense = pointer and not param.strided
            dlpack_device = device is not None and hasattr(kind, "__dlpack_device__")  # torch: no driver query

            def pack(value: Any) -> None:
                if type(value) is not kind:
                    raise _TypeChanged
                cai = cuda_array_interface(value)
                if cai is None:  # e.g. a tensor of the same type in host memory: the canonical path
                    slow(value)
                    return
                ptr = int(cai["data"][0])
                # strides None: C-contiguous (the interface's convention); anything else is decided exactly below
                if ptr % alignment or typestrs is not None and cai["typestr"] not in typestrs or (
                        dense and cai.get("strides") is not None) or device is not None and (
                        not dlpack_device or value.__dlpack_device__() != (DLPACK_CUDA, device)):
                    slow(value)
                else:
                    _U64(buf, offset, ptr)
            return pack
        return checked


# Types pack_argument takes before it asks for kernel_param_bytes (their own rules come first).
_BEFORE_PARAM_BYTES = (bool, np.bool_, np.ndarray, bytes, bytearray, memoryview, ctypes.Structure)


def _is_cupy_ndarray(kind: type) -> bool:
    return kind.__name__ == "ndarray" and kind.__module__.split(".")[0] == "cupy"


def _plain_device_array(kind: type) -> bool:
    """True when pack_argument would take this type's pointer from __cuda_array_interface__ (nothing earlier
    matches)."""
    early = _BEFORE_PARAM_BYTES + (np.generic, int, float)
    return (not issubclass(kind, early) and not hasattr(kind, "kernel_param_bytes")
            and hasattr(kind, "__cuda_array_interface__"))
