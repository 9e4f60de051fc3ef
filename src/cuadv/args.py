"""Kernel arguments: Python values and arrays turned into the bytes of the kernel's parameters.

The kernel's own parameter sizes (from ``cuKernelGetParamInfo``) decide how a Python ``int`` or
``float`` is packed, so an ``int`` parameter never receives 8 bytes and a ``float`` parameter never
receives a double. Arrays are passed as their device pointer: anything with
``__cuda_array_interface__`` or DLPack (CuPy, PyTorch, cuda.core buffers).
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np

from .errors import KernelArgumentError

_INT_BY_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
_UINT_BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_FLOAT_BY_SIZE = {2: np.float16, 4: np.float32, 8: np.float64}


def device_pointer(obj: Any) -> int | None:
    """The device address of an array-like, or None if obj is not one."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray):
        from cuda.core.utils import StridedMemoryView

        view = StridedMemoryView(obj, stream_ptr=-1)  # no stream ordering: the caller's stream decides
        if not view.is_device_accessible:
            raise KernelArgumentError(f"{type(obj).__name__} lives in host memory; kernels need device memory")
        return int(view.ptr)
    handle = getattr(obj, "handle", None)  # cuda.core Buffer
    if type(obj).__name__ == "Buffer" and handle is not None:
        return int(handle)
    return None


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
