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
    rec = np.zeros((), dtype=layout)
    for name, value in values.items():
        if value is None:
            continue
        if hasattr(value, "kernel_param_bytes"):
            value = np.frombuffer(value.kernel_param_bytes(), dtype=layout.fields[name][0])[0]
        rec[name] = value
    return rec.tobytes()
