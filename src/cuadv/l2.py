"""L2 persistence: keep a hot, reused buffer in L2 while other data streams past it.

The one call most code needs::

    with cuadv.l2.persist(table):          # CuPy array, torch tensor, DLPack array, or (ptr, nbytes)
        lookup_kernel(...)                 # launches on the current stream keep `table` in L2

``persist`` reserves the persisting set-aside (the device maximum unless ``set_aside=`` says less),
sets an access-policy window over the buffer on the stream (``stream=None``: the current stream of
the array's library), and on exit waits for that stream, clears the window, turns the persisting
lines back to normal (``cuCtxResetPersistingL2Cache``) and puts the previous set-aside back. It
raises ``UnsupportedFeatureError`` where the GPU has no persisting L2 (a MIG instance, GPUs before
compute capability 8.0): the fallback is plain caching, that is the same code without ``persist``.

The pieces, for code that needs them separately:

- The set-aside (``CU_LIMIT_PERSISTING_L2_CACHE_SIZE``) is the part of L2 that persisting lines may
  occupy; up to ``caps.persisting_l2_max_bytes`` (0 under MIG and on GPUs without the feature).
  Normal and streaming lines use it while no persisting line does.
- A window marks accesses to ``[base, base + num_bytes)``: a fraction ``hit_ratio`` of its lines
  get ``hit`` (persisting), the rest ``miss`` (streaming). Give it per launch
  (``LaunchConfig(access_policy=...)``, also inside CUDA graphs) or per stream (``set_stream_window``).
  A window larger than the set-aside with hit_ratio 1 makes persisting lines evict each other: use
  ``hit_ratio_for(set_aside, window)`` (what ``persist`` does by default).
- Persisting lines stay persisting after the window is gone, until ``reset_persisting_lines()``
  (or until other persisting lines replace them): reset between phases.

Example with per-launch windows::

    with SetAside(caps.persisting_l2_max_bytes) as granted:
        window = AccessPolicyWindow(table_ptr, table_bytes, hit_ratio_for(granted, table_bytes))
        launch(kernel, LaunchConfig(grid, block, access_policy=window), ...)
        reset_persisting_lines()

The set-aside and the persisting lines belong to the CUDA context, not to a stream: two ``persist``
blocks active at once on different streams share one set-aside.
"""

from __future__ import annotations

import numbers
import threading
from dataclasses import dataclass, field
from typing import Any

from ._cuda import check, driver, ready_driver
from .dims import is_int
from .errors import CudaDriverError, LaunchConfigError, UnsupportedFeatureError
from .features import require as require_feature
from .interop import capturing, device_array, stream_handle
from .launching import AccessPolicyWindow
from .waiting import wait

__all__ = ["persist", "Persist", "SetAside", "hit_ratio_for", "reset_persisting_lines", "get_set_aside",
           "set_set_aside", "get_stream_window", "set_stream_window", "unsupported_reason"]

FALLBACK = "plain caching: the same code without persist() (same results; the buffer competes for L2)"


def unsupported_reason(caps) -> str | None:
    """Why L2 persistence cannot be used on this GPU, or None."""
    if caps.compute_capability < (8, 0):
        return (f"L2 persistence needs compute capability >= 8.0 (got {caps.cc_string()}); "
                "fallback: no window (plain caching)")
    if caps.persisting_l2_max_bytes == 0:
        return ("L2 persistence is not available on this GPU: its persisting-L2 maximum is 0 B (a MIG instance, or "
                "a GPU without the feature); fallback: no window (plain caching)")
    if caps.access_policy_max_window_bytes == 0:
        return "this GPU reports an access-policy window limit of 0 B; fallback: no window (plain caching)"
    return None


def _limit():
    return driver().CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE


def get_set_aside() -> int:
    """The current persisting set-aside in bytes."""
    return int(check(ready_driver().cuCtxGetLimit(_limit()), "cuCtxGetLimit(PERSISTING_L2_CACHE_SIZE)"))


def set_set_aside(nbytes: int, caps=None) -> int:
    """Set the persisting set-aside; returns what the driver granted (it may round)."""
    if caps is None:
        from .device import current_device

        caps = current_device().caps
    features = _caps_dict(caps)
    if is_int(nbytes) and nbytes > 0:  # a set-aside of 0 B is what a GPU without persisting L2 has already
        require_feature("l2_persistence", features, name="an L2 set-aside for persisting accesses", fallback=FALLBACK)
    check_set_aside(nbytes, int(features["persisting_l2_max_bytes"]))
    check(ready_driver().cuCtxSetLimit(_limit(), int(nbytes)), f"cuCtxSetLimit(PERSISTING_L2_CACHE_SIZE={nbytes})")
    return get_set_aside()


def check_set_aside(nbytes: int, maximum: int) -> None:
    """A set-aside is an int number of bytes in [0, the device's persisting-L2 maximum]."""
    if not is_int(nbytes):
        raise TypeError(f"persisting L2 set-aside must be an int number of bytes, got {type(nbytes).__name__} "
                        f"{nbytes!r}")
    if not 0 <= nbytes <= maximum:
        raise LaunchConfigError(f"persisting L2 set-aside of {nbytes} B is outside [0, {maximum}] "
                                "(the device's persisting-L2 maximum)")


def reset_persisting_lines() -> None:
    """Turn every persisting L2 line back to normal (cuCtxResetPersistingL2Cache)."""
    check(ready_driver().cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache")


def hit_ratio_for(set_aside: int, window_bytes: int) -> float:
    """The hit ratio that fills the set-aside without persisting lines evicting each other."""
    if window_bytes <= 0:
        return 0.0
    return min(1.0, set_aside / window_bytes)


def check_window_bytes(num_bytes: int, maximum: int) -> None:
    """A window may cover at most the device's maximum window (cuDeviceGetAttribute MAX_ACCESS_POLICY_WINDOW_SIZE)."""
    if num_bytes > maximum:
        raise LaunchConfigError(f"access-policy window of {num_bytes} B exceeds the maximum window {maximum} B")


def set_stream_window(stream: Any, window: AccessPolicyWindow | None, caps=None) -> None:
    """Give every later launch on ``stream`` this window (None: no window, num_bytes = 0)."""
    if caps is None:
        from .device import current_device

        caps = current_device().caps
    if window is not None:
        if not isinstance(window, AccessPolicyWindow):
            raise TypeError(f"window must be a cuadv.AccessPolicyWindow or None, got {type(window).__name__} "
                            f"{window!r}")
        check_window_bytes(window.num_bytes, int(_caps_dict(caps)["access_policy_max_window_bytes"]))
    drv = ready_driver()
    value = drv.CUstreamAttrValue()
    value.accessPolicyWindow = (window or AccessPolicyWindow(0, 0, 0.0, "normal", "normal")).to_driver()
    attr = drv.CUstreamAttrID.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW
    check(drv.cuStreamSetAttribute(drv.CUstream(stream_handle(stream)), attr, value),
          "cuStreamSetAttribute(ACCESS_POLICY_WINDOW)")


class SetAside:
    """Set the persisting set-aside for a while; on exit reset the persisting lines and put the
    previous set-aside back, so the GPU is left as it was found. ``as`` gives the granted size."""

    def __init__(self, nbytes: int, caps=None):
        self.nbytes, self.caps = nbytes, caps
        self.previous: int | None = None

    def __enter__(self) -> int:
        self.previous = get_set_aside()
        return set_set_aside(self.nbytes, self.caps)

    def __exit__(self, *exc) -> None:
        try:
            reset_persisting_lines()
        finally:  # the previous set-aside comes back even where the reset fails
            if self.previous is not None:
                check(driver().cuCtxSetLimit(_limit(), self.previous),
                      "cuCtxSetLimit(PERSISTING_L2_CACHE_SIZE, restore)")


def get_stream_window(stream: Any) -> AccessPolicyWindow | None:
    """The access-policy window set on ``stream`` (None: no window, num_bytes 0)."""
    handle = stream_handle(stream)
    drv = ready_driver()
    attr = drv.CUstreamAttrID.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW
    value = check(drv.cuStreamGetAttribute(drv.CUstream(handle), attr),
                  "cuStreamGetAttribute(ACCESS_POLICY_WINDOW)")
    w = value.accessPolicyWindow
    if int(w.num_bytes) == 0:
        return None
    prop = lambda p: p.name.removeprefix("CU_ACCESS_PROPERTY_").lower()  # noqa: E731
    return AccessPolicyWindow(int(w.base_ptr), int(w.num_bytes), float(w.hitRatio), prop(w.hitProp), prop(w.missProp))


def _caps_dict(caps) -> dict:
    """The capabilities as the feature registry reads them: a DeviceCaps, a dict, or any object with the fields."""
    if isinstance(caps, dict):
        return caps
    if hasattr(caps, "as_dict"):
        return caps.as_dict()
    return {k: getattr(caps, k) for k in ("compute_capability", "persisting_l2_max_bytes",
                                          "access_policy_max_window_bytes") if hasattr(caps, k)}


@dataclass
class _ActiveBlocks:
    """The persist() blocks active in this process: the set-aside and the persisting lines are the
    context's, shared by every stream, so only the last block to leave resets them."""

    active: int = 0
    previous: int = 0  # the set-aside before the first block
    granted: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


_blocks = _ActiveBlocks()


class Persist:
    """A persisting window over one buffer on one stream, for the duration of a ``with`` block. Made by
    ``persist`` (which checks everything first); entering reserves the set-aside and sets the window,
    leaving waits for the stream and puts everything back. Reusable, not re-entrant."""

    def __init__(self, ptr: int, nbytes: int, hit_ratio: float | None, stream: int, set_aside: int, caps):
        self.ptr, self.nbytes, self.stream = ptr, nbytes, stream
        self.requested_hit_ratio, self.requested_set_aside, self.caps = hit_ratio, set_aside, caps
        self.set_aside = 0  # granted by the driver, while active
        self.window: AccessPolicyWindow | None = None  # while active
        self._previous: int | None = None

    @property
    def active(self) -> bool:
        return self._previous is not None

    def __enter__(self) -> "Persist":
        if self.active:
            raise RuntimeError("this persist() block is already active; make another persist() for a second one")
        if capturing(self.stream):  # the set-aside and the reset act on the context, which no replay repeats
            raise UnsupportedFeatureError(
                "persist()", "a stream that runs its work (the block's set-aside, stream window and final wait "
                "act when it is entered and left, not when a graph replays)", "a stream being captured into a "
                "CUDA graph", "reserve the set-aside before the capture (with cuadv.l2.SetAside(...)) and give the "
                "captured launches LaunchConfig(access_policy=AccessPolicyWindow(...)), which the graph keeps")
        with _blocks.lock:  # the set-aside belongs to the context: the first block takes it, the last gives it back
            if _blocks.active == 0:
                _blocks.previous = get_set_aside()
                _blocks.granted = set_set_aside(self.requested_set_aside, self.caps)
            _blocks.active += 1
            self.set_aside = _blocks.granted
            self._previous = _blocks.previous
        try:
            ratio = self.requested_hit_ratio
            if ratio is None:
                ratio = hit_ratio_for(self.set_aside, self.nbytes)
            window = AccessPolicyWindow(self.ptr, self.nbytes, ratio, "persisting", "streaming")
            try:
                set_stream_window(self.stream, window, self.caps)
            except CudaDriverError as exc:
                if self.stream in (0, 1, 2):  # the legacy / per-thread default stream
                    raise LaunchConfigError(
                        f"the driver refused an access-policy window on the default stream ({exc}); pass a created "
                        "stream (stream=...) or give the window per launch: "
                        "LaunchConfig(access_policy=AccessPolicyWindow(...))") from exc
                raise
            self.window = window
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            # The work enqueued in the block should run while the set-aside is still reserved.
            wait(self.stream, what="the work enqueued in a persist() block")
        finally:  # a wait that raises (a timeout, Ctrl-C, a failed kernel) still clears the window and restores
            try:
                if self.window is not None:
                    set_stream_window(self.stream, None, self.caps)
            finally:
                self.window = None
                self._restore()

    def _restore(self) -> None:
        self._previous = None
        self.set_aside = 0
        with _blocks.lock:
            _blocks.active -= 1
            if _blocks.active:  # another block (another stream, another thread) still uses the set-aside
                return
            try:
                reset_persisting_lines()
            finally:  # the previous set-aside comes back even where the reset fails
                check(driver().cuCtxSetLimit(_limit(), _blocks.previous),
                      "cuCtxSetLimit(PERSISTING_L2_CACHE_SIZE, restore)")

    def __repr__(self) -> str:
        return (f"Persist(ptr=0x{self.ptr:x}, nbytes={self.nbytes}, stream=0x{self.stream:x}, "
                f"set_aside={self.requested_set_aside}, active={self.active})")


def persist(array_or_ptr: Any, nbytes: int | None = None, *, hit_ratio: float | None = None, stream: Any = None,
            set_aside: int | None = None, caps=None) -> Persist:
    """A context manager that keeps ``array_or_ptr`` (a device array, or an address with ``nbytes``) in the
    persisting part of L2 for the work enqueued on ``stream`` inside the ``with`` block.

    ``nbytes``: the window's size from the buffer's first byte (default: the whole array, for a strided
    one its whole extent from its lowest byte, padding between rows included; required with an address).
    ``hit_ratio``: the fraction of the window's lines that persist (default: set-aside / window, at most 1,
    so persisting lines do not evict each other). ``stream``: None is the current stream of the array's
    library. ``set_aside``: bytes of L2 reserved for persisting lines (default: the device maximum).
    ``caps``: the capabilities to check against (default: the current GPU's).

    Every check runs here, before the GPU is touched: no persisting L2 raises UnsupportedFeatureError
    (fallback: plain caching), a window over the device's maximum window or a set-aside over its
    maximum raises LaunchConfigError naming the limit."""
    if hit_ratio is not None and (isinstance(hit_ratio, bool) or not isinstance(hit_ratio, numbers.Real)
                                  or not 0.0 <= hit_ratio <= 1.0):
        raise LaunchConfigError(f"hit_ratio must be in [0, 1], got {hit_ratio!r}")
    if caps is None:
        from .device import current_device

        caps = current_device().caps
    features = _caps_dict(caps)
    require_feature("l2_persistence", features, name="L2 persistence (cuadv.l2.persist)", fallback=FALLBACK)
    if not is_int(array_or_ptr):  # a device array (an address is an int or a NumPy integer)
        array = device_array(array_or_ptr)  # KernelArgumentError for host arrays
        # A strided array (rows a pitch apart, a slice) spans more than nbytes: the window covers its whole extent,
        # from its lowest byte, padding included.
        ptr, end = array.byte_range
        size = end - ptr
        like: tuple = (array_or_ptr,)
        if nbytes is None:
            nbytes = size
        elif is_int(nbytes) and nbytes > size:
            raise LaunchConfigError(f"nbytes = {nbytes} exceeds the array's {size} B; the window lies inside the array")
    else:
        ptr, like = int(array_or_ptr), ()
        if ptr <= 0:
            raise LaunchConfigError(f"a device address must be positive, got {array_or_ptr!r}")
        if nbytes is None:
            raise LaunchConfigError("persist(address) needs nbytes: the window's size in bytes")
    if not is_int(nbytes) or nbytes <= 0:
        raise LaunchConfigError(f"nbytes must be a positive int (the window's size in bytes), got {nbytes!r}")
    nbytes = int(nbytes)
    check_window_bytes(nbytes, int(features["access_policy_max_window_bytes"]))
    maximum = int(features["persisting_l2_max_bytes"])
    if set_aside is None:
        set_aside = maximum
    elif not is_int(set_aside):
        raise LaunchConfigError(f"set_aside must be an int number of bytes, got {set_aside!r}")
    check_set_aside(set_aside, maximum)
    return Persist(ptr, nbytes, None if hit_ratio is None else float(hit_ratio), stream_handle(stream, *like),
                   int(set_aside), caps)
