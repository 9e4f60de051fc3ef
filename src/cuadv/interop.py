"""The one reader of foreign arrays and streams.

Arrays come in through the CUDA Array Interface (CuPy, PyTorch, Numba, cuda.core buffers) or DLPack;
``device_array`` turns any of them into a ``DeviceArray`` (address, shape, byte strides, element
type, which library made it). Streams come in as cuda.core, CuPy or PyTorch stream objects,
anything with ``__cuda_stream__``, or a raw handle; ``stream_handle`` turns them into a ``CUstream``
handle. With ``stream=None`` the library of the input arrays decides, as their own operations do:
PyTorch's current stream for a tensor, CuPy's current stream for a CuPy array (both the legacy
default stream unless the caller made another current), else the legacy default stream.

Ordering with the producer: where the CUDA Array Interface names a stream (CAI v3) other than the
one cuadv works on, cuadv makes its stream wait for that stream (an event, no host wait). DLPack
producers are asked for their data on cuadv's stream, which the DLPack protocol makes them order.
PyTorch's interface (v2) names no stream: with ``stream=None`` cuadv works on torch's current stream,
which orders the tensor's producers; pass another stream and ordering it is the caller's business.
Nothing is ordered while cuadv's stream is being captured into a graph.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ._cuda import check, device_ordinal, driver, init_driver
from .errors import KernelArgumentError


@dataclass(frozen=True)
class DeviceArray:
    """A device array as cuadv sees it: where it is and how it is laid out, not what owns it."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes
    typestr: str  # NumPy type string ('<f4'); '<V2' style for types NumPy lacks (bfloat16)
    itemsize: int
    library: str  # 'cupy', 'torch', 'cuda.core' or 'other'
    type_name: str  # NumPy's name for the element type ('float32'), 'bfloat16' where NumPy has none
    owner: Any = None
    readonly: bool = False  # the producer marks the data read-only (CAI data[1], DLPack's read-only flag)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def byte_range(self) -> tuple[int, int]:
        """[first, last + 1) of the bytes the elements occupy: ``(ptr, ptr + nbytes)`` for a C-contiguous array,
        wider for a strided one (rows a pitch apart, a column slice), starting below ``ptr`` where a stride is
        negative; ``(ptr, ptr)`` for an empty array."""
        if self.size == 0:
            return self.ptr, self.ptr
        lo = hi = self.ptr
        for n, s in zip(self.shape, self.strides):
            lo, hi = lo + min(0, s * (n - 1)), hi + max(0, s * (n - 1))
        return lo, hi + self.itemsize

    @property
    def dtype(self) -> np.dtype | None:
        """The NumPy dtype, or None for a type NumPy does not have (bfloat16)."""
        return _typestr_info(self.typestr)[0]

    @property
    def contiguous(self) -> bool:
        """C-contiguous; the stride of a dimension of extent 1 does not matter (libraries report any)."""
        if self.size == 0:
            return True
        dense = c_strides(self.shape, self.itemsize)
        return all(s == d for s, d, n in zip(self.strides, dense, self.shape) if n > 1)


def writable(arr: DeviceArray, what: str) -> DeviceArray:
    """``arr`` if cuadv may write it; KernelArgumentError naming ``what`` where its producer marks it read-only."""
    if arr.readonly:
        raise KernelArgumentError(f"{what} is read-only (its producer marks the data read-only); pass a writable "
                                  "array")
    return arr


def overlaps(a: DeviceArray, b: DeviceArray) -> bool:
    """Whether two arrays share a byte. Exact where each is contiguous or a stack of contiguous rows and the two
    have one row pitch (views of one pitched allocation, e.g. side-by-side column blocks); otherwise whether their
    byte ranges intersect (which may say True for interleaved arrays that share no byte)."""
    if a.size == 0 or b.size == 0:
        return False
    (a_lo, a_hi), (b_lo, b_hi) = a.byte_range, b.byte_range
    if a_hi <= b_lo or b_hi <= a_lo:
        return False
    ra, rb = _rows(a), _rows(b)
    if ra is None or rb is None:
        return True
    (a0, a_rows, a_pitch, a_len), (b0, b_rows, b_pitch, b_len) = ra, rb
    if a_rows > 1 and b_rows > 1 and a_pitch != b_pitch:
        return True
    pitch = a_pitch if a_rows > 1 else b_pitch
    if a_rows == 1 and b_rows == 1:
        return True  # two byte ranges, which intersect
    # Rows r of a and s of b meet where -b_len < (b0 - a0) + k * pitch < a_len for k = s - r (a single row has
    # only r = 0 or s = 0).
    d = b0 - a0
    k_lo = max(-(a_rows - 1), (-b_len - d) // pitch + 1)
    k_hi = min(b_rows - 1, -((d - a_len) // pitch) - 1)
    return k_lo <= k_hi


def _rows(arr: DeviceArray) -> tuple[int, int, int, int] | None:
    """(base, rows, row pitch, bytes per row) of a contiguous array (one row) or a 2-D array of contiguous rows
    with a positive pitch; None for any other layout."""
    if arr.contiguous:
        return arr.ptr, 1, arr.nbytes, arr.nbytes
    if len(arr.shape) == 2 and (arr.shape[1] == 1 or arr.strides[1] == arr.itemsize) and arr.strides[0] > 0:
        return arr.ptr, arr.shape[0], arr.strides[0], arr.shape[1] * arr.itemsize
    return None


def c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array (dimensions of extent 1 or 0 get the stride they would have)."""
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def library_of(obj: Any) -> str:
    module = type(obj).__module__.split(".")[0]
    if module in ("cupy", "torch"):
        return module
    if module == "cuda":
        return "cuda.core"
    return "other"


def cuda_array_interface(obj: Any) -> dict | None:
    """``obj.__cuda_array_interface__``, or None where it has none. A torch tensor that requires grad refuses to
    give one (RuntimeError); its detached alias, the same memory, gives it (cuadv's kernels take no part in
    autograd, as torch.histc does not)."""
    try:
        return getattr(obj, "__cuda_array_interface__", None)
    except RuntimeError:
        if not getattr(obj, "requires_grad", False):
            raise
        return obj.detach().__cuda_array_interface__


def device_array(obj: Any, *, stream: int | None = None, what: str = "the array") -> DeviceArray:
    """Describe a device array. ``stream``: the handle cuadv will use the data on; the producer's
    pending work is ordered before it (CAI v3 stream, DLPack stream argument). Raises
    KernelArgumentError for host arrays, big-endian ones and objects that are no device array (``what``
    names the argument in the big-endian message)."""
    if isinstance(obj, np.ndarray):
        raise KernelArgumentError("a NumPy array lives in host memory; copy it to the GPU (cupy.asarray)")
    library = library_of(obj)
    cai = cuda_array_interface(obj)
    if cai is not None:
        shape = tuple(int(v) for v in cai["shape"])
        typestr = cai["typestr"]
        itemsize = int(typestr[2:])
        if typestr[0] == ">" and itemsize > 1:  # every kernel reads its elements little-endian, as the GPU stores them
            raise KernelArgumentError(f"{what} has big-endian byte order ({typestr}); the GPU reads little-endian "
                                      f"data: pass a little-endian array (astype('<{typestr[1:]}'))")
        strides = cai.get("strides")
        strides = tuple(int(v) for v in strides) if strides is not None else c_strides(shape, itemsize)
        producer = cai.get("stream")
        if stream is not None and producer is not None and _legacy_as_one(int(producer)) != _legacy_as_one(stream) \
                and not capturing(stream):
            wait_for_stream(stream, int(producer))  # 1 and 2 are the driver's legacy and per-thread handles too
        return DeviceArray(int(cai["data"][0]), shape, strides, typestr, itemsize, library, _type_name(typestr), obj,
                           bool(cai["data"][1]))
    if hasattr(obj, "__dlpack__"):
        from cuda.core.utils import StridedMemoryView

        from_dlpack = getattr(StridedMemoryView, "from_dlpack", None)  # cuda.core >= 1.2; the constructor is deprecated
        # DLPack's stream argument: -1 asks for no ordering, 1 names the legacy default stream (never 0).
        consumer = -1 if stream is None or capturing(stream) else _legacy_as_one(stream)
        view = from_dlpack(obj, stream_ptr=consumer) if from_dlpack else StridedMemoryView(obj, stream_ptr=consumer)
        if not view.is_device_accessible:
            raise KernelArgumentError(f"{type(obj).__name__} lives in host memory; kernels need device memory: copy "
                                      "it to the GPU (tensor.cuda(), cupy.asarray)")
        shape = tuple(int(v) for v in view.shape)
        itemsize = int(view.dtype.itemsize)
        strides = (tuple(int(v) * itemsize for v in view.strides) if view.strides is not None
                   else c_strides(shape, itemsize))
        return DeviceArray(int(view.ptr), shape, strides, view.dtype.str, itemsize, library, view.dtype.name, obj,
                           bool(getattr(view, "readonly", False)))
    raise KernelArgumentError(
        f"cannot use {type(obj).__name__} as a device array: it has neither __cuda_array_interface__ nor "
        "__dlpack__ (pass a CuPy array, a PyTorch CUDA tensor or a cuda.core buffer)")


def _legacy_as_one(handle: int) -> int:
    """The legacy default stream as the CUDA Array Interface and DLPack name it (1); the driver takes 0 or 1."""
    return 1 if handle == 0 else handle


def capturing(stream: int) -> bool:
    """True while ``stream`` is being captured into a graph: then no event may be recorded on another
    stream (it would invalidate the capture), and ordering the inputs is the capturing code's business."""
    drv = driver()
    result = drv.cuStreamIsCapturing(drv.CUstream(stream))
    if result[0] == drv.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
        return True  # the legacy stream while a blocking stream is captured: its work would join that capture
    status = check(result, "cuStreamIsCapturing")
    return int(status) != int(drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)


@contextlib.contextmanager
def relaxed_capture_mode():
    """This thread's stream-capture mode set to relaxed for the block, then put back
    (``cuThreadExchangeStreamCaptureMode``, pushed and popped). A capture begun in the global or thread-local
    mode (``torch.cuda.graph``'s default) prohibits this thread's potentially unsafe calls, ``cuMemAlloc``
    among them, and a prohibited call invalidates the capture; in relaxed mode they are allowed. For memory that
    outlives every graph that may use it, which stream capture neither records nor needs to."""
    drv = driver()
    mode = drv.CUstreamCaptureMode
    previous = check(drv.cuThreadExchangeStreamCaptureMode(mode.CU_STREAM_CAPTURE_MODE_RELAXED),
                     "cuThreadExchangeStreamCaptureMode")
    try:
        yield
    finally:
        check(drv.cuThreadExchangeStreamCaptureMode(previous), "cuThreadExchangeStreamCaptureMode")


def stream_id(stream: int) -> int:
    """The driver's id of ``stream`` (cuStreamGetId), unique for the life of the process: unlike a handle, which a
    stream created after another's destruction may get again while the old one's work still runs."""
    drv = driver()
    return int(check(drv.cuStreamGetId(drv.CUstream(stream)), "cuStreamGetId"))


def stream_key(stream: int) -> tuple[int, int]:
    """(current context, ``stream_id``): what identifies a stream for state kept between launches on it. Not its
    handle, which a stream created after another's destruction may get while the old one's work still runs; for
    the per-thread default stream the id is the calling thread's own stream's."""
    return int(check(driver().cuCtxGetCurrent(), "cuCtxGetCurrent")), stream_id(stream)


def _type_name(typestr: str) -> str:
    return _typestr_info(typestr)[1]


def _typestr_info(typestr: str) -> tuple[np.dtype | None, str]:
    """NumPy's dtype of an array-interface type string (None for a type NumPy does not have: bfloat16 as '<V2')
    and NumPy's name for it, made once per typestr: np.dtype() and dtype.name cost microseconds on every launch."""
    known = _TYPES.get(typestr)
    if known is None:
        try:
            dt = np.dtype(typestr)
            known = (None if dt.kind == "V" else dt), dt.name
        except TypeError:
            known = None, typestr
        if len(_TYPES) < 256:  # the typestrs a process meets: a handful
            _TYPES[typestr] = known
    return known


_TYPES: dict[str, tuple[np.dtype | None, str]] = {}  # typestr -> (dtype or None, its name)


def device_pointer(obj: Any) -> int | None:
    """The device address of an array-like, or None if obj is not one (kernel-argument packing)."""
    cai = cuda_array_interface(obj)
    if cai is not None:
        return int(cai["data"][0])
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray):
        return device_array(obj).ptr
    handle = getattr(obj, "handle", None)  # cuda.core Buffer
    if type(obj).__name__ == "Buffer" and handle is not None:
        return int(handle)
    return None


def array_device(obj: Any, ptr: int, *, ask_driver: bool = True) -> int | None:
    """The ordinal of the GPU whose memory holds an array at ``ptr``; None where no one GPU holds it (managed or
    page-locked host memory, which every GPU reaches) or the driver does not know the address. CuPy arrays and
    DLPack producers say where they are; for a bare ``__cuda_array_interface__`` the driver is asked, unless
    ``ask_driver`` is False (then None: checks that must make no driver call)."""
    ordinal = getattr(getattr(obj, "data", None), "device_id", None)  # CuPy: MemoryPointer.device_id
    if isinstance(ordinal, int):
        return ordinal
    dlpack_device = getattr(obj, "__dlpack_device__", None)
    if dlpack_device is not None:
        kind, ordinal = dlpack_device()
        return int(ordinal) if int(kind) == DLPACK_CUDA else None
    if not ptr or not ask_driver:
        return None
    drv = driver()
    attrs = drv.CUpointer_attribute
    answers = []
    for attr in (attrs.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, attrs.CU_POINTER_ATTRIBUTE_IS_MANAGED,
                 attrs.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL):
        status, value = drv.cuPointerGetAttribute(attr, ptr)
        if int(status) != 0:
            return None
        answers.append(int(value))
    memory_type, managed, ordinal = answers
    device_memory = memory_type == int(drv.CUmemorytype.CU_MEMORYTYPE_DEVICE)
    return ordinal if device_memory and not managed else None


def require_on_gpu(obj: Any, ptr: int, device: int, subject: str, runs: str, *, ask_driver: bool = True) -> None:
    """KernelArgumentError where the array says (or the driver, unless ``ask_driver`` is False) it is in another
    GPU's memory than ``device``'s: the kernels would fault on it (or, with peer access, read it slowly). The message:
    "<subject> in the memory of GPU n, but <runs> on GPU m; ..." with the ways out."""
    on = array_device(obj, ptr, ask_driver=ask_driver)
    if on is not None and on != device:
        raise KernelArgumentError(f"{subject} in the memory of GPU {on}, but {runs} on GPU {device}; copy it there "
                                  f"(with cupy.cuda.Device({device}): cupy.asarray(x)), or run cuadv on GPU {on} "
                                  f"(CUADV_DEVICE={on})")


DLPACK_CUDA = 2  # DLDeviceType kDLCUDA (kDLCUDAHost 3 and kDLCUDAManaged 13 are reachable from every GPU)


def wait_for_stream(waiter: int, producer: int) -> None:
    """Make ``waiter`` wait for the work queued on ``producer`` so far (an event; the host does not wait)."""
    drv = driver()
    event = check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    try:
        check(drv.cuEventRecord(event, producer), "cuEventRecord")
        check(drv.cuStreamWaitEvent(waiter, event, 0), "cuStreamWaitEvent")
    finally:
        drv.cuEventDestroy(event)  # released once the wait has been satisfied


def current_stream(*like: Any) -> int:
    """The stream work on ``like`` goes to when the caller names none: PyTorch's current stream for a
    tensor, else CuPy's current stream when CuPy is in use. With no array of either library (``time_gpu``,
    ``wait``, raw pointers) and CuPy on its null stream, PyTorch's current stream on cuadv's GPU where torch has
    been initialised (under ``torch.cuda.stream(s)`` that is s, which need not be ordered with the legacy stream);
    else the legacy default stream (0)."""
    for obj in like:
        if type(obj).__module__.startswith("torch"):
            return int(sys.modules["torch"].cuda.current_stream(obj.device).cuda_stream)
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        init_driver()  # NoGpuError without a GPU, not CuPy's runtime error ("driver version is insufficient")
    handle = int(cupy.cuda.get_current_stream().ptr) if cupy is not None else 0
    torch = sys.modules.get("torch")
    if handle or torch is None or not torch.cuda.is_initialized() \
            or any(type(obj).__module__.startswith("cupy") for obj in like):
        return handle
    return int(torch.cuda.current_stream(device_ordinal()).cuda_stream)  # on the GPU cuadv works on


def stream_handle(stream: Any, *like: Any) -> int:
    """Raw CUstream of a cuda.core Stream, a CuPy/PyTorch stream, anything with __cuda_stream__, or an
    int; None follows ``current_stream(*like)``."""
    if stream is None:
        return current_stream(*like)
    if isinstance(stream, (bool, np.bool_)):  # an int to Python, but never meant as a handle
        raise KernelArgumentError(f"stream must be a stream object, a CUstream handle (an int) or None, got {stream!r}")
    if isinstance(stream, (int, np.integer)):
        return _checked_handle(int(stream))
    if hasattr(stream, "__cuda_stream__"):
        proto = stream.__cuda_stream__
        _version, handle = proto() if callable(proto) else proto
        return _checked_handle(int(handle))
    for attr in ("handle", "ptr", "cuda_stream"):
        h = getattr(stream, attr, None)
        if h is not None:
            return _checked_handle(int(h))
    raise KernelArgumentError(f"cannot use {type(stream).__name__} as a stream")


def _checked_handle(handle: int) -> int:
    """A CUstream is an address (0: the legacy default stream): a negative or wider value would reach the driver
    as some other stream, or fail there without naming the argument."""
    if not 0 <= handle < 2**64:
        raise KernelArgumentError(f"stream handle {handle} is not a CUstream: a handle is an address, "
                                  "0 <= handle < 2**64 (0: the legacy default stream)")
    return handle


def empty(library: str, shape: Sequence[int], dtype: Any, *, like: Any = None, stream: int = 0) -> Any:
    """A new uninitialised array in ``library`` ('torch' on ``like``'s device; anything else gives CuPy)."""
    if library == "torch":
        torch = sys.modules["torch"]
        with torch_allocation_stream(like, stream):
            return torch.empty(tuple(shape), dtype=getattr(torch, np.dtype(dtype).name), device=like.device)
    import cupy as cp

    if stream == cp.cuda.get_current_stream().ptr:
        return cp.empty(tuple(shape), dtype=dtype)
    # CuPy's memory pool keeps freed blocks per stream: allocate on the stream that will use the array.
    with _cupy_stream(cp, stream):
        return cp.empty(tuple(shape), dtype=dtype)


def _cupy_stream(cp: Any, handle: int) -> Any:
    """A CuPy stream object for a raw handle that cuadv does not own. CuPy 14 deprecates ``ExternalStream`` for
    ``Stream.from_external``, which wraps an object with ``__cuda_stream__`` in a plain ``Stream``; ExternalStream
    is kept while CuPy has it, since it never destroys the handle, and only its DeprecationWarning is silenced
    (802 such warnings in one GPU test run on 2026-12-05)."""
    external = getattr(cp.cuda, "ExternalStream", None)
    if external is None:
        # Kept for the process: in CuPy 14's source a collected Stream destroys its handle, here the caller's.
        if handle not in _FROM_EXTERNAL:
            _FROM_EXTERNAL[handle] = cp.cuda.Stream.from_external(_StreamHandle(handle))
        return _FROM_EXTERNAL[handle]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="ExternalStream is deprecated", category=DeprecationWarning)
        return external(handle)


_FROM_EXTERNAL: dict[int, Any] = {}  # handle -> the CuPy Stream wrapping it, never collected (see _cupy_stream)


@dataclass(frozen=True)
class _StreamHandle:
    """A raw CUstream as the CUDA stream protocol presents one (version 0)."""
    handle: int

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def torch_allocation_stream(like: Any, stream: int) -> Any:
    """A context in which torch allocates for work on ``stream``: torch's caching allocator ties a block to
    the stream current at allocation, so allocating on the stream that writes the array keeps the block
    from being handed out again while that stream still works on it."""
    torch = sys.modules["torch"]
    if stream == torch.cuda.current_stream(like.device).cuda_stream:
        return contextlib.nullcontext()
    return torch.cuda.stream(torch.cuda.ExternalStream(stream, device=like.device))


def zeros(library: str, shape: Sequence[int], dtype: Any, *, like: Any = None, stream: int = 0) -> Any:
    """As ``empty``, zero-filled on ``stream``."""
    out = empty(library, shape, dtype, like=like, stream=stream)
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if nbytes:
        check(driver().cuMemsetD8Async(data_ptr(out), 0, nbytes, stream), "cuMemsetD8Async")
    return out


def data_ptr(arr: Any) -> int:
    """The device address of an array that ``empty`` or ``zeros`` made (a torch tensor or a CuPy array), read
    from the array itself: it needs none of the checks of ``device_array``, which cost microseconds a call."""
    torch_ptr = getattr(arr, "data_ptr", None)
    return int(torch_ptr()) if torch_ptr is not None else int(arr.data.ptr)
