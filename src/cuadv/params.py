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
value has ``kernel_param_bytes()`` (a nested struct, a TMA tensor map) is copied in as raw bytes, its
layout field being ``"V<size>"``.
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
        return pack_struct(self.LAYOUT, {name: getattr(self, name) for name in self.LAYOUT.names if hasattr(self, name)})


def pack_struct(layout: np.dtype, values: dict[str, Any]) -> bytes:
    """The bytes of ``layout`` with ``values`` by field name (absent or None: zero). A layout of numbers, arrays
    of numbers and raw bytes (nested structs, tensor maps) packs through a ``struct.Struct`` made once (a launch
    packs its parameter struct every call); a value that form refuses (out of range, a float for an integer,
    raw bytes that are no ``kernel_param_bytes()``) takes NumPy's assignment, which converts or raises as it
    always did."""
    compiled = _compiled(layout)
    if compiled is not None:
        packer, plan = compiled
        flat: list[Any] = []
        try:
            for name, count in plan:
                value = values.get(name)
                if count > 0:
                    flat.extend((0,) * count if value is None else tuple(value))
                elif count < 0:  # raw bytes: a nested struct's or a tensor map's, exactly as long as the field
                    data = bytes(-count) if value is None else value.kernel_param_bytes()
                    if len(data) != -count:
                        raise ValueError("raw bytes of another length")
                    flat.append(data)
                else:
                    flat.append(0 if value is None else value)
            return packer.pack(*flat)
        except (struct.error, TypeError, ValueError, OverflowError, AttributeError):
            pass
    return _pack_with_numpy(layout, values)


_STRUCT_CODES = {("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q", ("u", 1): "B", ("u", 2): "H",
                 ("u", 4): "I", ("u", 8): "Q", ("f", 4): "f", ("f", 8): "d"}
_COMPILED: dict[np.dtype, tuple[struct.Struct, tuple[tuple[str, int], ...]] | None] = {}


def _compiled(layout: np.dtype) -> tuple[struct.Struct, tuple[tuple[str, int], ...]] | None:
    """A little-endian ``struct.Struct`` of the layout, padding included, and per field its name and element
    count (0: a scalar, -n: n raw bytes); None where a field is none of these (a structured or wide field)."""
    if layout in _COMPILED:
        return _COMPILED[layout]
    fmt, plan, end = "<", [], 0
    for name, (dt, offset, *_title) in sorted(layout.fields.items(), key=lambda kv: kv[1][1]):
        base, shape = dt.subdtype if dt.subdtype else (dt, ())
        raw = base.kind == "V" and base.names is None and not shape
        code = f"{base.itemsize}s" if raw else (
            _STRUCT_CODES.get((base.kind, base.itemsize)) if base.byteorder in "<=|" else None)
        if code is None or offset < end:
            _COMPILED[layout] = None
            return None
        count = -base.itemsize if raw else int(np.prod(shape)) if shape else 0
        fmt += "x" * (offset - end) + (f"{count}{code}" if count > 0 else code)
        plan.append((name, count))
        end = offset + dt.itemsize
    packer = struct.Struct(fmt + "x" * (layout.itemsize - end))
    compiled = _COMPILED[layout] = (packer, tuple(plan)) if packer.size == layout.itemsize else None
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
