"""TMA tensor maps (``CUtensorMap``) for a user's array, with the driver's rules checked in Python first.

A tensor map tells the Tensor Memory Accelerator where an array lives (base, shape, row pitch, element
type) and which box one copy moves. ``cuTensorMapEncodeTiled`` rejects a bad one with a bare
``CUDA_ERROR_INVALID_VALUE``; here every rule is checked first, by pure functions that need no GPU, and
a violation raises ``TensorMapError`` naming the rule, the value seen and the limit.

Shapes, strides and boxes are given in the array's own index order (NumPy order: rows, then columns).
The driver and the device code take them innermost first, so on the device the coordinates of a 2-D
box are ``{x = column, y = row}``.

Example::

    import cupy as cp
    from cuadv.tma.tensormap import TensorMap, pitch_elements

    rows, cols = 1000, 999
    storage = cp.zeros((rows, pitch_elements(cols, "uint8")), dtype=cp.uint8)  # rows padded to 16 B
    image = storage[:, :cols]                        # the user's array: pitched rows
    tmap = TensorMap.tiled(image, box=(64, 128))     # 64 rows x 128 columns per copy
    launch(kernel, config, tmap)                     # or inside a struct: tmap.kernel_param_bytes()

Needs compute capability 9.0 for the device side; building the descriptor needs the driver (a GPU
machine), checking the rules does not.
"""

from __future__ import annotations

import ctypes
import math
import numbers
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import CuadvError, KernelArgumentError
from ..interop import device_array

MAX_RANK = 5
MAX_BOX = 256
MAX_ELEMENT_STRIDE = 8
MAX_DIM = 2**32
STRIDE_LIMIT = 2**40
ADDRESS_ALIGN = 16
STRIDE_ALIGN = 16
BOX_INNER_ALIGN = 16
DESCRIPTOR_BYTES = 128

# Element types TMA knows, with their size in bytes and the driver's enum suffix.
DTYPES: dict[str, tuple[int, str]] = {
    "uint8": (1, "UINT8"),
    "uint16": (2, "UINT16"),
    "uint32": (4, "UINT32"),
    "int32": (4, "INT32"),
    "uint64": (8, "UINT64"),
    "int64": (8, "INT64"),
    "float16": (2, "FLOAT16"),
    "bfloat16": (2, "BFLOAT16"),
    "float32": (4, "FLOAT32"),
    "float64": (8, "FLOAT64"),
}
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
SWIZZLE_BYTES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
OOB_FILLS = ("zero", "nan")
L2_PROMOTIONS = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}

# __cuda_array_interface__ type strings -> TMA element types.
_TYPESTRS = {"|u1": "uint8", "<u2": "uint16", "<u4": "uint32", "<i4": "int32", "<u8": "uint64", "<i8": "int64",
             "<f2": "float16", "<f4": "float32", "<f8": "float64"}


class TensorMapError(CuadvError, ValueError):
    """A tensor-map rule is broken; the message names the rule, the value and the limit."""


def element_type(dtype: Any) -> str:
    """The TMA element type named by ``dtype``: a name of ``DTYPES``, or anything NumPy reads as one of them
    (``np.float32``, ``np.dtype('uint8')``, ml_dtypes' bfloat16)."""
    name = dtype
    if dtype is not None and not isinstance(dtype, str):  # None stays None: np.dtype(None) is float64
        import numpy as np

        try:
            name = np.dtype(dtype).name
        except (TypeError, ValueError):  # a torch dtype, or no type at all
            name = None
    if name not in DTYPES:
        raise TensorMapError(f"TMA element type must be one of {', '.join(DTYPES)} (a name or a NumPy dtype); "
                             f"got {dtype!r}")
    return name


def element_size(dtype: Any) -> int:
    return DTYPES[element_type(dtype)][0]


def tma_store_overruns(cols: int, itemsize: int) -> bool:
    """Whether TMA stores into rows of ``cols`` elements write past each row's end: a TMA store writes whole
    16-byte units, also the one a row ends inside (seen on an H200, 2026-12-02: a copy into a 61-column
    float32 slice of 64-column rows also wrote columns 61 to 63). Harmless in padding cuadv allocated; in a
    caller's array those bytes may be the caller's data."""
    return (cols * itemsize) % 16 != 0


def pitch_elements(cols: int, dtype: str | int) -> int:
    """The smallest row length (in elements) >= cols whose byte size is a multiple of 16: a legal row pitch.
    ``dtype``: a TMA element type name, or the element size in bytes."""
    per = STRIDE_ALIGN // math.gcd(STRIDE_ALIGN, dtype if isinstance(dtype, int) else element_size(dtype))
    return -(-cols // per) * per


@dataclass(frozen=True)
class TiledLayout:
    """What a tiled tensor map describes, in NumPy order (outermost dimension first). Checked on construction.

    address: device address of element [0, ..., 0]; shape: elements per dimension; strides: bytes between
    consecutive indices of each dimension (the last must equal the element size); box: elements per copy
    along each dimension; element_strides: traversal step per dimension (1 = every element).
    """

    address: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...] | None = None
    swizzle: str = "none"
    oob_fill: str = "zero"
    l2_promotion: str = "128B"

    def __post_init__(self):
        object.__setattr__(self, "dtype", element_type(self.dtype))
        for name in ("shape", "strides", "box"):
            object.__setattr__(self, name, _integers(name, getattr(self, name)))
        if self.element_strides is None:
            object.__setattr__(self, "element_strides", (1,) * len(self.shape))
        else:
            object.__setattr__(self, "element_strides", _integers("element_strides", self.element_strides))
        check_tiled(self)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return element_size(self.dtype)

    @property
    def box_bytes(self) -> int:
        """Bytes one load writes into shared memory (always the full box, out-of-bounds part included): along a
        dimension with element stride e, TMA loads ceil(box / e) elements (the driver's rule)."""
        return math.prod(-(-b // e) for b, e in zip(self.box, self.element_strides)) * self.itemsize

    def tiles(self) -> tuple[int, ...]:
        """Boxes needed to cover the array along each dimension (NumPy order; the last ones may be partial)."""
        return tuple(-(-n // b) for n, b in zip(self.shape, self.box))

    def driver_arguments(self) -> dict[str, Any]:
        """The arguments of cuTensorMapEncodeTiled, innermost dimension first, as plain integers."""
        return {
            "rank": self.rank,
            "global_dim": tuple(reversed(self.shape)),
            "global_strides": tuple(reversed(self.strides[:-1])),  # the innermost stride is implied
            "box_dim": tuple(reversed(self.box)),
            "element_strides": tuple(reversed(self.element_strides)),
        }


def _integers(name: str, values: Any) -> tuple[int, ...]:
    """``values`` as a tuple of ints; TensorMapError for anything else (2.5 would otherwise be cut to 2)."""
    if type(values) is tuple and all(type(v) is int for v in values):  # already one: as is
        return values
    try:
        items = tuple(values)
    except TypeError:
        raise TensorMapError(f"{name} must be a sequence of integers, one per dimension; got {values!r}") from None
    if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in items):
        raise TensorMapError(f"{name} must hold integers; got {values!r}")
    return tuple(int(v) for v in items)


def check_tiled(layout: TiledLayout) -> None:
    """Every rule of cuTensorMapEncodeTiled (interleave none) that can be checked without the driver."""
    dtype, shape, strides, box = layout.dtype, layout.shape, layout.strides, layout.box
    esize = element_size(dtype)
    rank = len(shape)
    if not 1 <= rank <= MAX_RANK:
        raise TensorMapError(f"TMA rule: rank must be 1 to {MAX_RANK}; got {rank} (shape {shape})")
    for name, seq in (("strides", strides), ("box", box), ("element_strides", layout.element_strides)):
        if len(seq) != rank:
            raise TensorMapError(f"{name} has {len(seq)} entries but the shape {shape} has rank {rank}")
    for axis, n in enumerate(shape):
        if not 1 <= n <= MAX_DIM:
            raise TensorMapError(
                f"TMA rule: every dimension must be 1 to 2^32 elements; dimension {axis} has {n}"
                + (" (an empty array needs no copy: skip the launch)" if n == 0 else ""))
    if layout.address % ADDRESS_ALIGN:
        raise TensorMapError(
            f"TMA rule: the global address must be {ADDRESS_ALIGN}-byte aligned; got {layout.address:#x} "
            f"({layout.address % ADDRESS_ALIGN} bytes past a {ADDRESS_ALIGN}-byte boundary)")
    if strides[-1] != esize:
        raise TensorMapError(
            f"TMA rule: the innermost dimension must be contiguous; its stride is {strides[-1]} B, "
            f"the element ({dtype}) is {esize} B")
    for axis in range(rank - 1):
        s = strides[axis]
        if s <= 0:
            raise TensorMapError(f"TMA rule: strides must be positive; dimension {axis} has stride {s} B")
        if s % STRIDE_ALIGN:
            inner = strides[axis + 1] * shape[axis + 1]
            hint = (f"; pad each row to {pitch_elements(shape[-1], dtype)} elements "
                    f"({pitch_elements(shape[-1], dtype) * esize} B)" if axis == rank - 2 else "")
            raise TensorMapError(
                f"TMA rule: strides must be multiples of {STRIDE_ALIGN} bytes; dimension {axis} has stride "
                f"{s} B ({s // esize} {dtype} elements, covering {inner} B of data){hint}")
        if s >= STRIDE_LIMIT:
            raise TensorMapError(f"TMA rule: strides must be below 2^40 bytes; dimension {axis} has {s} B")
        inner_extent = strides[axis + 1] * shape[axis + 1]
        if s < inner_extent:
            raise TensorMapError(
                f"dimension {axis} has stride {s} B but one index of it must span {inner_extent} B "
                f"(dimension {axis + 1}: {shape[axis + 1]} x {strides[axis + 1]} B): the rows would overlap")
    for axis, b in enumerate(box):
        if not 1 <= b <= MAX_BOX:
            raise TensorMapError(f"TMA rule: box dimensions must be 1 to {MAX_BOX}; box dimension {axis} is {b}")
    inner_bytes = box[-1] * esize
    if inner_bytes % BOX_INNER_ALIGN:
        raise TensorMapError(
            f"TMA rule: the box's inner extent must be a multiple of {BOX_INNER_ALIGN} bytes; got {box[-1]} x "
            f"{esize} B = {inner_bytes} B (use a multiple of {BOX_INNER_ALIGN // math.gcd(BOX_INNER_ALIGN, esize)} "
            f"{dtype} elements)")
    for axis, e in enumerate(layout.element_strides):
        if not 1 <= e <= MAX_ELEMENT_STRIDE:
            raise TensorMapError(
                f"TMA rule: element strides must be 1 to {MAX_ELEMENT_STRIDE}; dimension {axis} has {e}")
    if layout.element_strides[-1] != 1:  # the driver ignores it (interleave none): every element would be loaded
        raise TensorMapError(
            f"TMA rule: the innermost dimension's element stride must be 1 (TMA has no stride for it and the driver "
            f"ignores the value); got {layout.element_strides[-1]}")
    if layout.swizzle not in SWIZZLE_BYTES:
        raise TensorMapError(f"swizzle must be one of {', '.join(SWIZZLE_BYTES)}; got {layout.swizzle!r}")
    span = SWIZZLE_BYTES[layout.swizzle]
    if span and inner_bytes > span:
        raise TensorMapError(
            f"TMA rule: with swizzle {layout.swizzle} the box's inner extent must be at most {span} B; "
            f"got {inner_bytes} B")
    if layout.oob_fill not in OOB_FILLS:
        raise TensorMapError(f"oob_fill must be 'zero' or 'nan'; got {layout.oob_fill!r}")
    if layout.oob_fill == "nan" and dtype not in FLOAT_DTYPES:
        raise TensorMapError(f"TMA rule: NaN out-of-bounds fill needs a floating-point element type; got {dtype}")
    if layout.l2_promotion not in L2_PROMOTIONS:
        raise TensorMapError(f"l2_promotion must be one of {', '.join(L2_PROMOTIONS)}; got {layout.l2_promotion!r}")


def describe_array(array: Any, dtype: str | None = None) -> tuple[int, str, tuple[int, ...], tuple[int, ...]]:
    """(address, dtype, shape, strides in bytes) of a device array (CUDA Array Interface or DLPack).

    ``dtype`` overrides the array's element type when TMA should see the same bytes differently, e.g.
    ``"bfloat16"`` for a uint16 array holding bfloat16 bits, or ``"uint8"`` for int8 data.
    """
    try:
        arr = device_array(array)
    except KernelArgumentError as exc:
        if hasattr(array, "__cuda_array_interface__") or hasattr(array, "__dlpack__"):  # a host array
            raise TensorMapError(f"cannot describe {type(array).__name__}: {exc}") from None
        raise TensorMapError(f"cannot describe {type(array).__name__}: it has neither __cuda_array_interface__ "
                             "nor __dlpack__ (pass a CuPy / PyTorch / cuda.core array, or use from_pointer)") from None
    address, shape, strides, typestr, itemsize = arr.ptr, arr.shape, arr.strides, arr.typestr, arr.itemsize
    name = _TYPESTRS.get(typestr) or (arr.type_name if arr.type_name in DTYPES else None)
    if dtype is not None:
        dtype = element_type(dtype)
        if element_size(dtype) != itemsize:
            raise TensorMapError(f"dtype {dtype!r} is {element_size(dtype)} B but the array's elements are "
                                 f"{itemsize} B ({typestr})")
        name = dtype
    if name is None:
        raise TensorMapError(
            f"TMA has no element type for {typestr!r}; pass dtype= one of {', '.join(DTYPES)} with the same size "
            "(for example dtype='uint8' to move int8 bytes unchanged, dtype='bfloat16' for bfloat16 bits)")
    return address, name, shape, strides


class TensorMap:
    """A TMA descriptor for a tiled view of an array: 128 opaque bytes for a ``const __grid_constant__``
    kernel parameter (``kernel_param_bytes()``), plus the layout it was built from.

    The descriptor stores the array's address: keep the array alive while kernels use the map (the map
    holds a reference to the object it was built from).
    """

    def __init__(self, layout: TiledLayout, owner: Any = None):
        self.layout = layout
        self._owner = owner
        self._descriptor = _encode_tiled(layout)

    @classmethod
    def tiled(cls, array: Any, box: Sequence[int], *, dtype: str | None = None, oob_fill: str = "zero",
              swizzle: str = "none", l2_promotion: str = "128B",
              element_strides: Sequence[int] | None = None) -> "TensorMap":
        """A tiled tensor map over a device array; ``box`` in the array's index order (rows, columns)."""
        address, name, shape, strides = describe_array(array, dtype)
        layout = TiledLayout(address, name, shape, strides, box, element_strides=element_strides,
                             swizzle=swizzle, oob_fill=oob_fill, l2_promotion=l2_promotion)
        return cls(layout, owner=array)

    @classmethod
    def from_pointer(cls, address: int, dtype: str, shape: Sequence[int], strides: Sequence[int],
                     box: Sequence[int], **options) -> "TensorMap":
        """A tiled tensor map over raw device memory (strides in bytes, NumPy order)."""
        return cls(TiledLayout(int(address), dtype, shape, strides, box, **options))  # TiledLayout checks each

    @property
    def box_bytes(self) -> int:
        return self.layout.box_bytes

    def kernel_param_bytes(self) -> bytes:
        """The 128 bytes of the CUtensorMap, as a kernel parameter (or a field of a parameter struct)."""
        return ctypes.string_at(int(self._descriptor.getPtr()), DESCRIPTOR_BYTES)

    def __repr__(self) -> str:
        lay = self.layout
        return (f"TensorMap({lay.dtype}, shape={lay.shape}, strides={lay.strides}, box={lay.box}, "
                f"oob_fill={lay.oob_fill!r})")


def _encode_tiled(layout: TiledLayout):
    """cuTensorMapEncodeTiled for a checked layout (needs the driver: a GPU machine)."""
    from .._cuda import check, driver
    from ..device import current_device

    current_device()  # initialises the driver and makes a context current
    drv = driver()
    args = layout.driver_arguments()
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    fill = ("CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA" if layout.oob_fill == "nan"
            else "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")
    swizzle = "CU_TENSOR_MAP_SWIZZLE_NONE" if layout.swizzle == "none" else f"CU_TENSOR_MAP_SWIZZLE_{layout.swizzle}"
    return check(drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{DTYPES[layout.dtype][1]}"),
        args["rank"],
        layout.address,
        [u64(v) for v in args["global_dim"]],
        [u64(v) for v in args["global_strides"]],
        [u32(v) for v in args["box_dim"]],
        [u32(v) for v in args["element_strides"]],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, swizzle),
        getattr(drv.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{L2_PROMOTIONS[layout.l2_promotion]}"),
        getattr(drv.CUtensorMapFloatOOBfill, fill),
    ), f"cuTensorMapEncodeTiled({layout.dtype}, shape {layout.shape}, box {layout.box})")
