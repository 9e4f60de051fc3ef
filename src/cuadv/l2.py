"""L2 persistence: the persisting set-aside, access-policy windows per stream and per launch, and
the reset between phases.

- The set-aside (``CU_LIMIT_PERSISTING_L2_CACHE_SIZE``) is the part of L2 that persisting lines may
  occupy; up to ``caps.persisting_l2_max_bytes`` (0 under MIG and on GPUs without the feature).
  Normal and streaming lines use it while no persisting line does.
- A window marks accesses to ``[base, base + num_bytes)``: a fraction ``hit_ratio`` of its lines
  get ``hit`` (persisting), the rest ``miss`` (streaming). Give it per launch
  (``LaunchConfig(access_policy=...)``) or per stream (``set_stream_window``). A window larger than
  the set-aside with hit_ratio 1 makes persisting lines evict each other: use
  ``hit_ratio_for(set_aside, window)``.
- Persisting lines stay persisting after the window is gone, until ``reset_persisting_lines()``
  (or until other persisting lines replace them): reset between phases.

Example::

    with SetAside(caps.persisting_l2_max_bytes) as granted:
        window = AccessPolicyWindow(table_ptr, table_bytes, hit_ratio_for(granted, table_bytes))
        launch(kernel, LaunchConfig(grid, block, access_policy=window), ...)
        reset_persisting_lines()
"""

from __future__ import annotations

from typing import Any

from ._cuda import check, driver
from .errors import LaunchConfigError, UnsupportedFeatureError
from .launch import AccessPolicyWindow, stream_handle


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


def require(caps) -> None:
    reason = unsupported_reason(caps)
    if reason:
        raise UnsupportedFeatureError("L2 persistence", "a GPU with persisting L2 (not MIG)",
                                      f"{caps.persisting_l2_max_bytes} B persisting L2", "no window")


def _limit():
    return driver().CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE


def get_set_aside() -> int:
    """The current persisting set-aside in bytes."""
    return int(check(driver().cuCtxGetLimit(_limit()), "cuCtxGetLimit(PERSISTING_L2_CACHE_SIZE)"))


def set_set_aside(nbytes: int, caps=None) -> int:
    """Set the persisting set-aside; returns what the driver granted (it may round)."""
    if caps is None:
        from .device import current_device

        caps = current_device().caps
    if not 0 <= nbytes <= caps.persisting_l2_max_bytes:
        raise LaunchConfigError(f"persisting L2 set-aside of {nbytes} B is outside [0, {caps.persisting_l2_max_bytes}] "
                                "(the device's persisting-L2 maximum)")
    check(driver().cuCtxSetLimit(_limit(), nbytes), f"cuCtxSetLimit(PERSISTING_L2_CACHE_SIZE={nbytes})")
    return get_set_aside()


def reset_persisting_lines() -> None:
    """Turn every persisting L2 line back to normal (cuCtxResetPersistingL2Cache)."""
    check(driver().cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache")


def hit_ratio_for(set_aside: int, window_bytes: int) -> float:
    """The hit ratio that fills the set-aside without persisting lines evicting each other."""
    if window_bytes <= 0:
        return 0.0
    return min(1.0, set_aside / window_bytes)


def set_stream_window(stream: Any, window: AccessPolicyWindow | None, caps=None) -> None:
    """Give every later launch on ``stream`` this window (None: no window, num_bytes = 0)."""
    if caps is None:
        from .device import current_device

        caps = current_device().caps
    if window is not None and window.num_bytes > caps.access_policy_max_window_bytes:
        raise LaunchConfigError(f"access-policy window of {window.num_bytes} B exceeds the maximum window "
                                f"{caps.access_policy_max_window_bytes} B")
    drv = driver()
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
        reset_persisting_lines()
        if self.previous is not None:
            check(driver().cuCtxSetLimit(_limit(), self.previous), "cuCtxSetLimit(PERSISTING_L2_CACHE_SIZE, restore)")
