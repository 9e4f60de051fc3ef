"""The one mirror of a device-side parameter struct: a NumPy structured dtype laid out as C lays out
the struct (natural alignment), its size checked against the size the device code asserts, and a
mixin that packs a frozen dataclass into those bytes by field name.

Example::

    LAYOUT = c_struct("TaskParams", [("counts", "<u8"), ("n", "<u4"), ("task_ns", "<u8")], size=24)

    @dataclass(frozen=True)
    class TaskParams(StructArgument):
        LAYOUT: ClassVar[np.dtype] = LAYOUT
        counts: int
        n: int
        task_ns: int

    launch(kernel, config, TaskParams(ptr, n, 1000))   # 24 bytes, as the kernel declares

A field of the layout that the dataclass lacks (padding, a reserved word) stays zero; a field whose
value has ``kernel_param_bytes()`` (a nested struct, a TMA tensor map) is copied in as raw bytes. Its layout
field is the nested struct's own ``c_struct`` dtype, which NumPy aligns as C does (to its widest member), or
``"V<size>"``, which NumPy aligns to 1 byte: a raw field then needs explicit padding ahead of it to sit where C
puts it (after ``u8, u4``, an 8-byte-aligned struct starts at 16, a ``V8`` at 12, with the same total size, so
the size check cannot tell), and a ``CUtensorMap`` (``alignas(64)``) needs an offset that is a multiple of 64.
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar, Sequence

import numpy as np


def c_struct(c_name: str, fields: Sequence[tuple], size: int) -> np.dtype:
    """The aligned dtype of a C struct; raises (naming the struct) when it is not ``size`` bytes, the
    size the device code's ``static_assert`` fixes."""
    dtype = np.dtype(list(fields), align=True)
    if dtype.itemsize != size:
        raise AssertionError(f"the Python mirror of {c_name} is {dtype.itemsize} B but the device struct is {size} B")
    return dtype


class StructArgument:
    """Mixin for a frozen dataclass whose fields are named as in ``LAYOUT``: packs itself as the kernel
    parameter (``kernel_param_bytes``, which cuadv's argument packing uses)."""

    LAYOUT: ClassVar[np.dtype]

    def kernel_param_bytes(self) -> bytes:
        return pack_struct(self.LAYOUT,
                           {name: getattr(self, name) for name in self.LAYOUT.names if hasattr(self, name)})


def pack_struct(layout: np.dtype, values: dict[str, Any]) -> bytes:
    """The bytes of ``layout`` with ``values`` by field name (absent or None: zero). Fields of numbers, 1-D arrays
    of numbers and raw bytes (nested structs, tensor maps) given as Python ints, floats and bools, tuples or lists
    of them, and ``kernel_param_bytes()`` pack through a ``struct.Struct`` made once (a launch packs its parameter
    struct every call), which writes what NumPy's assignment writes for those; anything else (a NumPy scalar, a
    NaN, a value out of range, a name the layout lacks) takes NumPy's assignment, which converts or raises as it
    always did."""
    compiled = _compiled(layout)
    if compiled is not None and compiled[2].issuperset(values):
        packer, plan, _names = compiled
        flat: list[Any] = []
        try:
            for name, count, floating in plan:
                value = values.get(name)
                if value is None:
                    flat.extend(_ZEROS[count] if count > 0 else (bytes(-count) if count < 0 else 0,))
                elif count > 0:
                    if type(value) not in (tuple, list) or len(value) != count:
                        raise _Refused
                    for v in value:
                        _check_scalar(v, floating)
                    flat.extend(value)
                elif count < 0:  # raw bytes: a nested struct's or a tensor map's, exactly as long as the field
                    data = value.kernel_param_bytes()
                    if type(data) is not bytes or len(data) != -count:
                        raise _Refused
                    flat.append(data)
                else:
                    _check_scalar(value, floating)
                    flat.append(value)
            return packer.pack(*flat)
        except (_Refused, struct.error, OverflowError, AttributeError):
            pass
    return _pack_with_numpy(layout, values)


class _Refused(Exception):
    """A value the struct path does not take: NumPy's assignment decides."""


def _check_scalar(value: Any, floating: bool) -> None:
    """Python ints and bools anywhere, finite-or-infinite Python floats into float fields (NaN payloads, NumPy
    scalars and floats into integer fields are NumPy's to convert)."""
    kind = type(value)
    if kind is int or kind is bool or (floating and kind is float and value == value):
        return
    raise _Refused


_STRUCT_CODES = {("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q", ("u", 1): "B", ("u", 2): "H",
                 ("u", 4): "I", ("u", 8): "Q", ("f", 4): "f", ("f", 8): "d"}
_ZEROS = {n: (0,) * n for n in range(1, 17)}  # zero-filled 1-D array fields (longer ones are NumPy's)
_COMPILED: dict[np.dtype, tuple[struct.Struct, tuple[tuple[str, int, bool], ...], frozenset[str]] | None] = {}


def _compiled(layout: np.dtype) -> tuple[struct.Struct, tuple[tuple[str, int, bool], ...], frozenset[str]] | None:
    """A little-endian ``struct.Struct`` of the layout, padding included; per field its name, element count (0: a
    scalar, -n: n raw bytes) and whether it holds floats; and the field names. None where a field is none of
    these (a structured field, an array of more than one dimension or more than 16 elements, a big-endian one)."""
    if layout in _COMPILED:
        return _COMPILED[layout]
    fmt, plan, end = "<", [], 0
    for name, (dt, offset, *_title) in sorted(layout.fields.items(), key=lambda kv: kv[1][1]):
        base, shape = dt.subdtype if dt.subdtype else (dt, ())
        raw = base.kind == "V" and base.names is None and not shape
        code = f"{base.itemsize}s" if raw else (
            _STRUCT_CODES.get((base.kind, base.itemsize)) if base.byteorder in "<=|" else None)
        count = -base.itemsize if raw else shape[0] if len(shape) == 1 else 0
        if code is None or offset < end or len(shape) > 1 or count > 16:
            _COMPILED[layout] = None
            return None
        fmt += "x" * (offset - end) + (f"{count}{code}" if count > 0 else code)
        plan.append((name, count, base.kind == "f"))
        end = offset + dt.itemsize
    packer = struct.Struct(fmt + "x" * (layout.itemsize - end))
    compiled = (packer, tuple(plan), frozenset(layout.names)) if packer.size == layout.itemsize else None
    _COMPILED[layout] = compiled
    return compiled


def _pack_with_numpy(layout: np.dtype, values: dict[str, Any]) -> bytes:
    rec = np.zeros((), dtype=layout)
    for name, value in values.items():
        if value is None:
            continue
        if hasattr(value, "kernel_param_bytes"):
            value = np.frombuffer(value.kernel_param_bytes(), dtype=layout.fields[name][0])[0]
        rec[name] = value
    return rec.tobytes()
