"""2-D copies and transposes through the Tensor Memory Accelerator, over any device array.

``copy(src)`` / ``transpose(src)`` move a 2-D array box by box: TMA loads a box into shared memory and a TMA
store writes it out (transposed in shared memory first for ``transpose``). One thread per block issues every
copy, tails need no code (TMA fills the part of a box past the array and a store writes only the 16-byte units
that hold part of the array: where the caller's ``dst`` has rows that end inside such a unit, the op uses thread
stores instead, ``op.method == 'threads'``, so no byte after a row is written),
and rows may be pitched. ``prepare_copy`` / ``prepare_transpose`` do every check, build the tensor maps and
the kernel once and return a callable that only launches.

Arrays: anything with ``__cuda_array_interface__`` or DLPack (CuPy, PyTorch, cuda.core); 2-D, rows contiguous,
base address and row pitch multiples of 16 bytes (``empty_pitched`` makes such arrays); a caller's ``dst`` writable
and sharing no byte with ``src`` (blocks load and store at once: an overlapping copy or an in-place transpose raises
LaunchConfigError; column blocks of one pitched array are fine); element types
float32, float16, bfloat16 (a torch bfloat16 tensor, or uint16 bits with ``dtype="bfloat16"``), uint8 and the
other TMA types (copy), 1-, 2- and 4-byte types (transpose). The output is allocated in the input's library
(torch in, torch out; anything else, CuPy) with a 16-byte row pitch when ``dst`` is None.

Streams: ``stream=None`` is the current stream of the input's library (PyTorch's for a tensor, CuPy's
otherwise), resolved at every call; the producer of each array is ordered before it (``cuadv.interop``).

Defaults are the fastest configurations the ``tma`` lab measured on an NVIDIA H200: copy, boxes of 8 rows x
1 KiB, one block per 4 side-by-side boxes, all loaded at once (2026-12-02: 4.17 TB/s, 97.4% of the copy ceiling,
1.02x Triton 3.6's TMA copy; the persistent 24-slot ring before it: 92.2%); transpose, boxes of 256 rows x 128 B:
83.1% (run docs/results/h200-2026-12-01-0920). Where the copy's 32 KiB per block does not fit a GPU's shared
memory, the lab's default ring (4 slots) is used; where the transpose box does not fit, 64 rows x 256 B.

Needs compute capability 9.0 (``UnsupportedFeatureError`` otherwise, naming the fallback).
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..device import current_device
from ..errors import KernelArgumentError, LaunchConfigError
from ..features import require
from ..interop import device_array, empty, library_of, overlaps, stream_handle, torch_allocation_stream, writable
from ..launching import Launcher, prepare
from ..memo import BoundedMemo
from .kernels import ELEMENT_TYPES, MAX_EXTENT, TILE_THREADS, Launch, Plan2D, TmaCopyConfig, TmaOps, _round128
from .tensormap import (TensorMapError, TiledLayout, describe_array, element_size, pitch_elements,
                        tma_store_overruns)

# The lab's best float32 copy on the H200 (8 x 256 float32 = 8 KiB boxes, 4 side by side per block, one block per
# 4 boxes, all 4 loads at once): other element types keep the box's bytes (rows scale as 32 / itemsize, 256
# columns), so the shared memory per block is the same. The persistent ring it replaces (24 slots, 20 loads ahead,
# 1 block per SM) gave each SM the same share, and SMs that stream faster then wait for the slowest (92% vs 97%).
BEST_COPY_CONFIG = TmaCopyConfig(stages=4, lookahead=4, chunk=4, burst=4, persistent=False)
COPY_BOX_BYTES = 8 * 1024
# The lab's best float32 transpose (256 x 32: 32 KiB boxes, 128 KiB of shared memory per block), and the box
# used where that does not fit (64 x 64 float32: 16 KiB, 64 KiB per block); columns scale as 4 / itemsize.
TRANSPOSE_BOXES_F32 = ((256, 32), (64, 64))

COPY_FALLBACK = "cupy.copyto(dst, src) or torch's dst.copy_(src) (thread loads and stores)"
TRANSPOSE_FALLBACK = "cupy.copyto(dst, src.T) or torch's dst.copy_(src.T) (thread loads and stores)"


def default_copy_box(itemsize: int) -> tuple[int, int]:
    """Rows x columns of the default copy box: 8 KiB, 256 elements per row (8 x 256 for float32)."""
    return max(1, COPY_BOX_BYTES // (256 * itemsize)), 256


def default_transpose_boxes(itemsize: int) -> tuple[tuple[int, int], ...]:
    """Candidate transpose boxes, fastest first: 256 rows x 128 B, then 64 rows x 256 B."""
    return tuple((rows, max(1, cols * 4 // itemsize)) for rows, cols in TRANSPOSE_BOXES_F32)


def empty_pitched(shape: Sequence[int], dtype: Any, *, like: Any = None, stream: Any = None) -> Any:
    """An uninitialised (rows, cols) array whose rows start 16 bytes apart, as TMA needs: a view of a
    (rows, pitch) allocation, pitch the smallest multiple of 16 bytes >= a row. In ``like``'s library
    (a torch tensor gives torch on its device; anything else, CuPy on ``stream``)."""
    rows, cols = _shape2(shape, "shape")
    lib = library_of(like) if like is not None else "cupy"
    h = stream_handle(stream, *(() if like is None else (like,)))
    if lib == "torch" and type(dtype).__module__.startswith("torch"):  # a torch dtype (bfloat16 has no NumPy one)
        torch = sys.modules["torch"]
        itemsize = torch.empty((), dtype=dtype).element_size()
        with torch_allocation_stream(like, h):
            return torch.empty((rows, pitch_elements(cols, itemsize)), dtype=dtype, device=like.device)[:, :cols]
    itemsize = np.dtype(dtype).itemsize
    return empty(lib if lib == "torch" else "cupy", (rows, pitch_elements(cols, itemsize)), dtype, like=like,
                 stream=h)[:, :cols]


def prepare_copy(src: Any, dst: Any = None, *, box: Sequence[int] | None = None, dtype: str | None = None,
                 config: TmaCopyConfig | None = None, stream: Any = None) -> "TmaCopy":
    """A checked ``dst[...] = src`` through TMA, ready to launch again and again (see TmaCopy).

    box: (rows, columns) per TMA copy (default: the H200's best, 8 KiB); config: the ring (TmaCopyConfig;
    default: the H200's best with the default box, else 4 slots); dtype: how TMA sees the elements (e.g.
    "bfloat16" for uint16 bits). dst=None allocates a pitched output in src's library on ``stream``."""
    return TmaCopy(src, dst, box=box, dtype=dtype, config=config, stream=stream)


def prepare_transpose(src: Any, dst: Any = None, *, box: Sequence[int] | None = None, dtype: str | None = None,
                      stream: Any = None) -> "TmaTranspose":
    """A checked ``dst[...] = src.T`` through TMA, ready to launch again and again (see TmaTranspose).

    box: (rows, columns) of src per TMA load; dst's box is its transpose, so both box[0] and box[1] times the
    element size must be multiples of 16 bytes (default: 256 rows x 128 B)."""
    return TmaTranspose(src, dst, box=box, dtype=dtype, stream=stream)


def copy(src: Any, dst: Any = None, *, box: Sequence[int] | None = None, dtype: str | None = None,
         config: TmaCopyConfig | None = None, stream: Any = None) -> Any:
    """``dst[...] = src`` through TMA; returns dst (allocated in src's library when None). With ``dst`` given, a
    second call on the same two arrays (address, shape, strides, type) and options only launches (docs/tma.md)."""
    return _launch_once(TmaCopy, src, dst, stream, box=box, dtype=dtype, config=config)


def transpose(src: Any, dst: Any = None, *, box: Sequence[int] | None = None, dtype: str | None = None,
              stream: Any = None) -> Any:
    """``dst[...] = src.T`` through TMA; returns dst (shape (cols, rows), allocated in src's library when None).
    With ``dst`` given, a second call on the same two arrays and options only launches, as ``copy``'s does."""
    return _launch_once(TmaTranspose, src, dst, stream, box=box, dtype=dtype)


# The checked launches of one-shot calls with a dst, by what they were checked on. A launch's parameter bytes (the
# tensor maps: addresses, shapes, strides, box; the ring; the grid) and every check (layout, overlap, a writable dst)
# are functions of that key alone, so a hit is exactly what the checks and the build would make again; it keeps
# no reference to the arrays. cuadv works on one GPU per process (CUADV_DEVICE), so the key names none.
KEPT_LAUNCHES_MAX = 64
_KEPT_LAUNCHES = BoundedMemo(KEPT_LAUNCHES_MAX)  # key -> (launcher or None: nothing to launch, parameter bytes)


def _launch_once(cls: type["_TileOp"], src: Any, dst: Any, stream: Any, **options: Any) -> Any:
    """One call of ``cls`` (TmaCopy or TmaTranspose): the kept launch where these arrays and options were checked
    before, else the whole check and build (whose errors are the prepared op's), kept for the next call."""
    if options.get("box") is not None:
        try:  # once, as the constructor reads it: a one-use iterator is used up here, and floats never match ints
            options["box"] = _shape2(options["box"], "box")
        except TypeError:
            return cls(src, dst, stream=stream, **options)(stream=stream)  # raises the constructor's TypeError
    try:
        h = None if dst is None else stream_handle(stream, src)
    except Exception:  # a bad stream, or a src no stream can be found for: the op's own checks raise it
        key = None
    else:  # describing both arrays on h orders their producers' pending work before a kept launch
        key = _launch_key(cls.op, src, dst, options, order_on=h)
    kept = _KEPT_LAUNCHES.get(key) if key is not None else None
    if kept is None:
        op = cls(src, dst, stream=stream, **options)
        result = op(stream=stream)
        if key is not None:
            _KEPT_LAUNCHES.put(key, (op._launcher, op._blob))
        return result
    launcher, blob = kept
    if launcher is not None:
        launcher(blob, stream=h)
    return dst


def _enqueue(launcher: Launcher, blob: bytes, views: tuple[Any, ...], stream: Any, like: Any) -> None:
    """Launch ``blob`` on ``stream`` (None: the current stream of ``like``'s library) after the pending work of
    each view's producer."""
    h = stream_handle(stream, like)
    for view in views:  # the producers' pending work is ordered before this launch
        device_array(view, stream=h)
    launcher(blob, stream=h)


def _launch_key(op: str, src: Any, dst: Any, options: dict[str, Any], order_on: int | None = None) -> tuple | None:
    """What a one-shot call's launch depends on, or None where it is not kept: no dst (each call allocates one),
    options that are not plain values, or arrays that cannot be described (the checks then raise). ``order_on``:
    the stream the launch will use; each array's producer's pending work is ordered before it."""
    if dst is None:
        return None
    box, config = options.get("box"), options.get("config")
    if config is not None and not isinstance(config, TmaCopyConfig):
        return None
    try:
        arrays = []
        for array in (src, dst):
            view, implied = _tma_view(array)
            a = device_array(view, stream=order_on)
            arrays.append((a.ptr, a.shape, a.strides, a.typestr, a.type_name, a.readonly, implied))
        key = (op, *arrays, None if box is None else tuple(box), options.get("dtype"), config)
        hash(key)
    except (TypeError, ValueError, KernelArgumentError):
        return None
    return key


# ---------------------------------------------------------------------------------------------- the prepared ops

@dataclass(frozen=True)
class _Operand:
    """A user's array as the kernels see it: ``view`` is what the tensor map is built over (a torch bfloat16
    tensor is viewed as int16, whose bytes TMA reads as bfloat16)."""

    array: Any
    view: Any
    dtype: str  # TMA element type
    shape: tuple[int, int]
    strides: tuple[int, int]

    @property
    def itemsize(self) -> int:
        return element_size(self.dtype)

    @property
    def empty(self) -> bool:
        return 0 in self.shape


class _TileOp:
    """What TmaCopy and TmaTranspose share: the bound arrays, the checked launch and the call."""

    op = "copy"
    src: Any
    dst: Any
    box: tuple[int, int]
    launch: Launch | None  # None for an empty array: nothing to move
    stream: Any
    method: str = "tma"  # 'threads' for a caller's dst whose rows end inside a 16-byte unit (_store_method)

    def _bind(self, src: _Operand, dst: _Operand, launch: Launch | None, stream: Any) -> None:
        self.src, self.dst, self._views, self.launch, self.stream = src.array, dst.array, (src.view, dst.view), \
            launch, stream
        self._launcher: Launcher | None = None
        self._blob = b""
        if launch is not None:
            self._launcher = prepare(launch.kernel, launch.config)  # device checks of the configuration, once
            self._blob = launch.params.kernel_param_bytes()         # the tensor maps hold the arrays' addresses

    def __call__(self, *, stream: Any = None) -> Any:
        """Launch on ``stream`` (default: the stream given when prepared, else the current stream of src's
        library); returns dst. The arrays are those given when prepared: a tensor map holds their addresses."""
        if self._launcher is not None:
            _enqueue(self._launcher, self._blob, self._views, stream if stream is not None else self.stream, self.src)
        return self.dst

    def __repr__(self) -> str:
        return f"{type(self).__name__}(box={self.box}, launch={self.launch!r})"


class TmaCopy(_TileOp):
    """``dst[...] = src`` by tma_copy, checked once: tensor maps, kernel, grid and parameter bytes are kept,
    a call launches (``op()`` or ``op(stream=s)``) and returns dst. Attributes: src, dst, box, config, launch."""

    op = "copy"

    def __init__(self, src: Any, dst: Any = None, *, box: Sequence[int] | None = None, dtype: str | None = None,
                 config: TmaCopyConfig | None = None, stream: Any = None):
        if config is not None and not isinstance(config, TmaCopyConfig):
            raise TypeError(f"config must be a cuadv.tma.TmaCopyConfig; got {type(config).__name__}")
        s = _operand(src, "src", dtype)
        self.box = _shape2(box, "box") if box is not None else default_copy_box(s.itemsize)
        _check_layout(s, "src", self.box)
        d = None
        if dst is not None:
            d = _operand(dst, "dst", dtype)
            if d.shape != s.shape or d.dtype != s.dtype:
                raise LaunchConfigError(f"tma.copy: dst is {d.dtype}{d.shape}, src {s.dtype}{s.shape}: a copy needs "
                                        "the same shape and element type")
            _check_layout(d, "dst", self.box)
            _check_output(s, d, "tma.copy")
        self.config = config
        job = None
        if not s.empty:
            require("tma", _device_caps(), name="cuadv.tma.copy (TMA bulk tensor copies)", fallback=COPY_FALLBACK)
        d = d or _allocate(s, s.shape, stream)
        if not s.empty:
            ops = _engine()
            box_bytes = math.prod(self.box) * s.itemsize
            if config is None and box is None and ops.copy_fits(box_bytes, BEST_COPY_CONFIG):
                self.config = BEST_COPY_CONFIG
            self.method = _store_method(d, dst is not None)
            if self.method == "threads":
                if config is not None:
                    raise LaunchConfigError(
                        f"tma.copy: dst's rows ({d.shape[1]} x {d.itemsize} B) end inside a 16-byte unit, which a TMA "
                        "store writes whole, so this copy uses thread stores and takes no TmaCopyConfig; fallback: "
                        "leave config out, or give dst rows of a multiple of 16 bytes")
                self.config = None
                job = ops.copy_launch(s.view, d.view, self.box, method="threads", dtype=s.dtype)
            else:
                job = ops.copy_launch(s.view, d.view, self.box, dtype=s.dtype, config=self.config)
                if self.config is None:  # the lab's default ring, as copy_launch chose it
                    self.config = TmaCopyConfig(stages=job.params.stages, lookahead=job.params.lookahead)
        self._bind(s, d, job, stream)


class TmaTranspose(_TileOp):
    """``dst[...] = src.T`` by tma_transpose, checked once: tensor maps, kernel, grid and parameter bytes are
    kept, a call launches (``op()`` or ``op(stream=s)``) and returns dst. Attributes: src, dst, box, launch."""

    op = "transpose"

    def __init__(self, src: Any, dst: Any = None, *, box: Sequence[int] | None = None, dtype: str | None = None,
                 stream: Any = None):
        s = _operand(src, "src", dtype)
        if s.itemsize not in ELEMENT_TYPES:
            raise LaunchConfigError(f"transpose supports 1-, 2- and 4-byte elements; got {s.itemsize}-byte {s.dtype}")
        rows, cols = s.shape
        candidates = (_shape2(box, "box"),) if box is not None else default_transpose_boxes(s.itemsize)
        self.box = candidates[0]
        d = None
        if dst is not None:
            d = _operand(dst, "dst", dtype)
            if d.shape != (cols, rows) or d.dtype != s.dtype:
                raise LaunchConfigError(f"tma.transpose: dst is {d.dtype}{d.shape}, expected {s.dtype}{(cols, rows)} "
                                        "(src's columns by its rows, src's element type)")
        _check_transpose_boxes(s, d, self.box)
        if d is not None:
            _check_output(s, d, "tma.transpose")
        job = None
        if not s.empty:
            require("tma", _device_caps(), name="cuadv.tma.transpose (TMA bulk tensor copies)",
                    fallback=TRANSPOSE_FALLBACK)
        d = d or _allocate(s, (cols, rows), stream)
        if not s.empty:
            ops = _engine()
            if box is None:  # the fastest default box whose buffers fit this GPU
                self.box = next((b for b in candidates if _transpose_fits(ops, s.itemsize, b)), candidates[-1])
                _check_transpose_boxes(s, d, self.box)
            self.method = _store_method(d, dst is not None)
            job = ops.transpose_launch(s.view, d.view, self.box, method=self.method, dtype=s.dtype)
        self._bind(s, d, job, stream)


# ---------------------------------------------------------------------------------------------- checks and helpers

_engines: dict[str, TmaOps] = {}


def _device_caps() -> dict:
    """The current GPU's capabilities (a function, so GPU-free tests can stand in another GPU)."""
    return current_device().caps.as_dict()


def _engine() -> TmaOps:
    """tma.cu's kernels for the current GPU (one TmaOps per target and process)."""
    arch = current_device().caps.arch
    ops = _engines.get(arch)
    if ops is None:
        ops = _engines.setdefault(arch, TmaOps(arch))
    return ops


def _shape2(value: Any, what: str) -> tuple[int, int]:
    try:
        rows, cols = value
    except (TypeError, ValueError):
        rows = cols = None
    if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in (rows, cols)):
        raise TypeError(f"{what} must be two integers (rows, columns); got {value!r}")
    return int(rows), int(cols)


def _tma_view(array: Any) -> tuple[Any, str | None]:
    """What a tensor map is built over: a torch bfloat16 tensor as int16 (the CUDA Array Interface has no
    bfloat16), anything else as it is."""
    if type(array).__module__.startswith("torch") and str(getattr(array, "dtype", "")) == "torch.bfloat16":
        return array.view(sys.modules["torch"].int16), "bfloat16"
    return array, None


def _operand(array: Any, what: str, dtype: str | None) -> _Operand:
    view, implied = _tma_view(array)
    try:
        _, name, shape, strides = describe_array(view, dtype or implied)
    except TensorMapError as exc:
        raise type(exc)(f"{what}: {exc}") from None
    if len(shape) != 2:
        raise LaunchConfigError(f"{what} must be a 2-D array (rows, columns); got shape {shape}")
    return _Operand(array, view, name, (shape[0], shape[1]), (strides[0], strides[1]))


def _check_output(src: _Operand, dst: _Operand, op: str) -> None:
    """A caller's dst must be writable and share no byte with src: blocks load and store their boxes at the same
    time, so an overlapping copy or an in-place transpose would read bytes another block already wrote."""
    out, inp = writable(device_array(dst.view), "dst"), device_array(src.view)
    if overlaps(out, inp):
        raise LaunchConfigError(f"{op}: dst (at {out.ptr:#x}) overlaps src (at {inp.ptr:#x}); blocks load and store "
                                "concurrently, so the result would be undefined: pass a separate dst, or dst=None for "
                                "a new array")


def _check_layout(operand: _Operand, what: str, box: tuple[int, int]) -> None:
    """Every tensor-map rule for ``operand`` with ``box`` (nothing to check for an empty array)."""
    if operand.empty:
        return
    if max(operand.shape) > MAX_EXTENT:
        raise LaunchConfigError(
            f"{what}: the kernels address boxes with 32-bit signed TMA coordinates, so rows and columns must be at "
            f"most 2^31; got shape {operand.shape}; fallback: cupy.copyto or torch's copy_ (thread loads and stores)")
    try:
        Plan2D.of(operand.view, box, operand.dtype)
    except (TensorMapError, LaunchConfigError, KernelArgumentError) as exc:
        raise type(exc)(f"{what}: {exc}") from None


def _check_transpose_boxes(src: _Operand, dst: _Operand | None, box: tuple[int, int]) -> None:
    """src with box (rows, cols) and dst with its transpose (cols, rows); a dst yet to be allocated is checked
    as the pitched array it will be."""
    _check_layout(src, "src", box)
    if src.empty:
        return
    if dst is not None:
        _check_layout(dst, "dst", (box[1], box[0]))
        return
    rows, cols = src.shape
    try:
        TiledLayout(0, src.dtype, (cols, rows), (pitch_elements(rows, src.itemsize) * src.itemsize, src.itemsize),
                    (box[1], box[0]))
    except TensorMapError as exc:
        raise TensorMapError(f"dst (the transposed box {box[1]} x {box[0]}): {exc}") from None


def _store_method(dst: _Operand, given: bool) -> str:
    """'tma', or 'threads' where TMA stores would write past the rows of a dst the caller owns
    (``tma_store_overruns``); an output cuadv allocates has its own padding there, and keeps TMA."""
    return "threads" if given and tma_store_overruns(dst.shape[1], dst.itemsize) else "tma"


def _transpose_fits(ops: TmaOps, itemsize: int, box: tuple[int, int]) -> bool:
    shared = 4 * _round128(box[0] * box[1] * itemsize) + 128  # as transpose_launch sizes it
    try:
        ops.blocks_per_sm(f"tma_transpose<{ELEMENT_TYPES[itemsize]}>", TILE_THREADS, shared)
    except LaunchConfigError:
        return False
    return True


def _allocate(src: _Operand, shape: tuple[int, int], stream: Any) -> _Operand:
    """A pitched output like src (its library, its element type; on the op's stream)."""
    rows, cols = shape
    if library_of(src.array) == "torch":
        pitch = pitch_elements(cols, src.itemsize)
        with torch_allocation_stream(src.array, stream_handle(stream, src.array)):
            out = src.array.new_empty((rows, pitch))[:, :cols]  # keeps the dtype (bfloat16) and the device
    else:
        arr = device_array(src.view)
        np_dtype = arr.dtype if arr.dtype is not None else np.dtype(f"u{arr.itemsize}")
        out = empty("cupy", (rows, pitch_elements(cols, src.itemsize)), np_dtype,
                    stream=stream_handle(stream, src.array))
        out = out[:, :cols]
    view, _ = _tma_view(out)
    _, _, _, strides = describe_array(view, src.dtype)
    return _Operand(out, view, src.dtype, (rows, cols), (strides[0], strides[1]))

