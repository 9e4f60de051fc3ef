"""The one registry of the hardware features cuadv uses: how to tell from a GPU's capabilities
whether it has one, why not, and what cuadv does instead. The capability query (``cuadv caps``),
every UnsupportedFeatureError, the labs and the selection matrix read it.

``present`` takes the capabilities as a dict (``DeviceCaps.as_dict()`` or a report's ``caps``), so the
registry works on recorded capabilities as well as on the GPU in hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .errors import UnsupportedFeatureError


@dataclass(frozen=True)
class Feature:
    """A hardware feature cuadv uses, how to tell from the capabilities whether the GPU has it, and
    what cuadv does where it does not."""

    key: str
    name: str
    needs: str
    present: Callable[[dict], bool]
    fallback: str
    scenarios: tuple[str, ...]
    short: str = ""  # for the matrix cell: "CLC: needs ...; fallback: <short_fallback>"
    short_fallback: str = ""
    have: Callable[[dict], str] = lambda c: cc_text(c)  # what the GPU has instead (its compute capability)


FEATURES: tuple[Feature, ...] = (
    Feature("clc", "Cluster Launch Control (hardware work stealing)", "compute capability >= 10.0",
            lambda c: bool(c.get("clc")),
            "software CLC: policy 'steal' runs the same loop with a ticket in place of try_cancel",
            ("variable work per tile", "heavy prologue", "work that must yield to higher priority"),
            "Cluster Launch Control", "steal (software CLC)"),
    Feature("stream_priorities", "stream priorities", "a priority range wider than one level",
            lambda c: c.get("stream_priority_low") != c.get("stream_priority_high"),
            "none: urgent work waits for running blocks; keep blocks short (fixed_work or steal with a quantum)",
            ("work that must yield to higher priority",), "stream priorities", "short blocks (fixed_work)",
            lambda c: f"priorities {c.get('stream_priority_high')} to {c.get('stream_priority_low')}"),
    Feature("cluster_launch", "thread block clusters and distributed shared memory", "compute capability >= 9.0",
            lambda c: bool(c.get("cluster_launch")),
            "single-block shared memory, or global atomics where the data does not fit one block",
            ("data exchange between blocks", "tiles reused by several blocks"), "clusters / DSM",
            "single-block shared memory or global atomics"),
    Feature("cooperative_launch", "cooperative launch (grid-wide sync)", "a GPU with cooperative launch",
            lambda c: bool(c.get("cooperative_launch")),
            "two kernel launches in place of one grid-wide barrier", ("data exchange between blocks",),
            "cooperative launch", "two kernels", have=lambda c: "none"),
    Feature("tma", "TMA bulk tensor copies and multicast", "compute capability >= 9.0",
            lambda c: bool(c.get("tma")),
            "cp.async / cuda::memcpy_async loads issued by the block's threads", ("tiles reused by several blocks",),
            "TMA", "cp.async loads"),
    Feature("pdl", "programmatic dependent launch", "compute capability >= 9.0",
            lambda c: bool(c.get("pdl")),
            "plain stream order (the next kernel starts after the previous one ends), or a CUDA graph",
            ("chained kernels",), "PDL", "stream order or a CUDA graph"),
    Feature("l2_persistence", "L2 persistence (access-policy window)", "a GPU with persisting L2 (not MIG)",
            lambda c: int(c.get("persisting_l2_max_bytes") or 0) > 0,
            "ordinary L2 caching (no set-aside)", ("a hot read-only table",), "L2 persistence", "ordinary L2 caching",
            have=lambda c: f"{int(c.get('persisting_l2_max_bytes') or 0)} B persisting L2"),
    Feature("mem_sync_domains", "memory synchronization domains", "a GPU with 2 or more domains",
            lambda c: int(c.get("mem_sync_domain_count") or 0) > 1,
            "the default domain: a fence waits for all of the GPU's outstanding writes", (), "sync domains",
            "the default domain", have=lambda c: f"{int(c.get('mem_sync_domain_count') or 0)}"),
)


def cc_text(caps: dict) -> str:
    cc = caps.get("compute_capability")
    if isinstance(cc, (list, tuple)) and len(cc) == 2:
        return f"{cc[0]}.{cc[1]}"
    return str(cc)



BY_KEY: dict[str, Feature] = {f.key: f for f in FEATURES}


def feature(key: str) -> Feature:
    try:
        return BY_KEY[key]
    except KeyError:
        raise ValueError(f"unknown feature {key!r}; known: {', '.join(BY_KEY)}") from None


def why_not(key: str, caps: dict) -> str | None:
    """None where the GPU has the feature, else one line: what it needs, what this GPU has, the fallback."""
    f = feature(key)
    if f.present(caps):
        return None
    return f"{f.name} needs {f.needs} (got {f.have(caps)}); fallback: {f.fallback}"


def require(key: str, caps: dict, *, name: str | None = None, fallback: str | None = None) -> None:
    """Raise UnsupportedFeatureError unless the GPU has the feature. ``name`` and ``fallback`` say it in
    the caller's terms (the policy, the launch option) where the registry's words are more general."""
    f = feature(key)
    if not f.present(caps):
        raise UnsupportedFeatureError(name or f.name, f.needs, f.have(caps), fallback or f.fallback)
