"""Memory synchronization domains: keep a kernel's fences from waiting for another kernel's traffic.

A fence (``__threadfence()``, a release at .gpu or .sys scope) must wait until the memory operations
it orders are visible. Without domains the GPU may also make it wait for unrelated writes still in
flight, such as the NVLink writes of a communication kernel running beside a compute kernel.
Hopper (compute capability 9.0) tags every launch with a domain; a fence waits only for the
traffic of its own domain (plus what it orders explicitly). Two logical domains are exposed:

- ``"default"``: where every launch goes unless told otherwise;
- ``"remote"``: for kernels whose writes others need not wait for (NCCL puts its kernels here).

Per launch::

    launch(comm_kernel, LaunchConfig(grid, block, mem_sync_domain="remote"), ...)

or for every later launch on a stream (``set_stream_domain``, or ``in_domain`` for a ``with`` block).
Where the GPU has one domain only (before Hopper) the fallback is the default domain: the same
code without the attribute, with fences that may wait for everything.

Work across domains still needs the usual synchronisation (stream order, events): a domain only
narrows what a fence waits for, it does not order anything by itself.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from ._cuda import check, driver, ready_driver
from .errors import LaunchConfigError
from .features import require, why_not as _feature_why_not
from .interop import stream_handle
from .launching import MEM_SYNC_DOMAINS

__all__ = ["DOMAINS", "why_not", "registry_reason", "in_domain", "set_stream_domain", "stream_domain"]

DOMAINS: tuple[str, ...] = tuple(MEM_SYNC_DOMAINS)  # ("default", "remote"), as LaunchConfig accepts them
FALLBACK = "launch in the default domain"


def _get(caps: Any, key: str):
    return caps.get(key) if isinstance(caps, dict) else getattr(caps, key, None)


def why_not(caps: Any) -> str | None:
    """Why this GPU cannot place launches in separate domains (None: it can). ``caps``: a DeviceCaps, a
    report's capability dict, or any object with ``compute_capability`` and ``mem_sync_domain_count``."""
    cc = tuple(_get(caps, "compute_capability") or (0, 0))
    count = int(_get(caps, "mem_sync_domain_count") or 0)
    if cc < (9, 0):
        return f"memory sync domains need compute capability >= 9.0 (got {cc[0]}.{cc[1]}); fallback: {FALLBACK}"
    if count < 2:
        return f"memory sync domains need 2 or more domains (this GPU has {count}); fallback: {FALLBACK}"
    return None


def registry_reason(caps: dict) -> str | None:
    """The feature registry's one line (``cuadv.features``), as caps and the selection matrix print it."""
    return _feature_why_not("mem_sync_domains", caps)


def check_domain(domain: str) -> None:
    """A domain name LaunchConfig accepts (the same message)."""
    if not isinstance(domain, str) or domain not in MEM_SYNC_DOMAINS:
        raise LaunchConfigError(f"memory sync domain must be 'default' or 'remote', got {domain!r}")


def _attr():
    drv = driver()
    return drv.CUstreamAttrID.CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN


def _features() -> dict:
    """This GPU's capabilities as the feature registry reads them."""
    from .device import current_device

    return current_device().caps.as_dict()


def set_stream_domain(stream: Any, domain: str) -> None:
    """Put every later launch on ``stream`` (a CuPy / torch / cuda.core stream or a handle) in ``domain``,
    unless a launch names its own (``LaunchConfig(mem_sync_domain=...)``). On a GPU with one domain,
    ``"remote"`` raises UnsupportedFeatureError naming the fallback and ``"default"`` is what every launch
    gets already (nothing to set)."""
    check_domain(domain)
    handle = stream_handle(stream)  # KernelArgumentError for what is no stream, before the driver
    features = _features()
    if domain == "default" and registry_reason(features) is not None:
        return  # one domain: every launch is in it already
    require("mem_sync_domains", features, name="memory sync domains", fallback=FALLBACK)
    drv = ready_driver()
    value = drv.CUstreamAttrValue()
    value.memSyncDomain = getattr(drv.CUlaunchMemSyncDomain, f"CU_LAUNCH_MEM_SYNC_DOMAIN_{domain.upper()}")
    check(drv.cuStreamSetAttribute(drv.CUstream(handle), _attr(), value),
          f"cuStreamSetAttribute(MEM_SYNC_DOMAIN={domain})")


def stream_domain(stream: Any) -> str:
    """The domain later launches on ``stream`` go to ("default" on a GPU with one domain)."""
    handle = stream_handle(stream)
    if registry_reason(_features()) is not None:
        return "default"
    drv = ready_driver()
    value = check(drv.cuStreamGetAttribute(drv.CUstream(handle), _attr()),
                  "cuStreamGetAttribute(MEM_SYNC_DOMAIN)")
    return value.memSyncDomain.name.removeprefix("CU_LAUNCH_MEM_SYNC_DOMAIN_").lower()


@contextmanager
def in_domain(stream: Any, domain: str) -> Iterator[None]:
    """Launches on ``stream`` inside the block go to ``domain``; the stream's previous domain comes back after."""
    check_domain(domain)
    # KernelArgumentError for what is no stream, before the driver. The handle, not ``stream``, from here on:
    # stream=None is the stream current now, and the one restored on exit even if another becomes current inside.
    handle = stream_handle(stream)
    previous = stream_domain(handle)
    set_stream_domain(handle, domain)
    try:
        yield
    finally:
        set_stream_domain(handle, previous)
