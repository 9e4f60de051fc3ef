"""The scheduling policies of a TileKernel, their limits, and the checks that run before anything
reaches the GPU (the policy name, the tile grid, the cluster, the quantum)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..arch import parse_arch
from ..dims import MAX_CLUSTER_SIZE, MAX_GRID, Dim3, as_dim3, volume
from ..errors import LaunchConfigError, UnsupportedFeatureError

POLICIES = ("fixed_work", "fixed_blocks", "atomic_counter", "clc", "steal", "auto")
# The C++ policy type each concrete policy instantiates (cuadv::ws::Scheduler<...> in work_stealing.cuh).
_POLICY_TYPE = {"fixed_work": "FixedWork", "fixed_blocks": "FixedBlocks", "atomic_counter": "AtomicCounter",
                "clc": "ClusterLaunchControl", "steal": "Steal"}
# Policies that launch only the blocks (clusters) that fit at once; steal does too when it never yields.
RESIDENT_GRID = ("fixed_blocks", "atomic_counter")
TAKES_QUANTUM = ("steal", "auto")  # the policies a TileKernel may be given quantum_us and min_tiles for
DEFAULT_QUANTUM_US = 200.0
DEFAULT_PROLOGUE_FACTOR = 19  # a block's prologue costs at most 1/20 of its life
MAX_TILES = MAX_GRID  # fixed_work launches one block per tile, so a tile grid has a launch grid's limits
MAX_STEAL_UNITS = 2**31 - 1  # tickets (at most units + grid) fit the low 32 bits of the state word (work_stealing.cuh)
MAX_U32 = 2**32 - 1  # Schedule's 32-bit fields (prologue_factor, min_units)
MAX_U64 = 2**64 - 1  # Schedule's 64-bit fields (quantum_ns, the pointers)


def check_policy(policy: object) -> str:
    """``policy`` if it is one of POLICIES (no GPU needed); TypeError for a non-str, ValueError for another name."""
    if not isinstance(policy, str):
        raise TypeError(f"policy must be a str, one of {', '.join(POLICIES)}; got {policy!r} ({type(policy).__name__})")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    return policy


def resolve_policy(policy: str, cc: tuple[int, int]) -> str:
    """The concrete policy for a GPU; raises for one it cannot run, naming the capability and fallback."""
    check_policy(policy)
    if policy == "auto":  # below 9.0 steal does not compile (sm_90 PTX): the hardware scheduler's fixed_work
        return "clc" if cc >= (10, 0) else "steal" if cc >= (9, 0) else "fixed_work"
    cc_text = f"{cc[0]}.{cc[1]}"
    if policy == "clc" and cc < (10, 0):
        raise UnsupportedFeatureError("Cluster Launch Control (policy 'clc')", "compute capability >= 10.0", cc_text,
                                      "policy='steal' (software CLC, same loop) or policy='auto'")
    if policy == "steal" and cc < (9, 0):
        raise UnsupportedFeatureError("software CLC (policy 'steal')",
                                      "compute capability >= 9.0 (elect.sync; with clusters, mbarrier "
                                      "transaction counts)", cc_text,
                                      "policy='fixed_work' or 'fixed_blocks'")
    return policy


def runnable_policies(cc: tuple[int, int]) -> tuple[str, ...]:
    """Every policy name a GPU of compute capability ``cc`` runs (those ``resolve_policy`` accepts)."""
    out = []
    for policy in POLICIES:
        try:
            resolve_policy(policy, cc)
        except UnsupportedFeatureError:
            continue
        out.append(policy)
    return tuple(out)


def policy_for_arch(policy: str, arch: str) -> str:
    """``resolve_policy`` for a compile target ("sm_90a"), so code can be built without the GPU. clc's cluster-wide
    cancel (``.multicast::cluster::all``) builds only for an architecture- or family-specific target ("sm_100a",
    "sm_100f"): on a plain one ("sm_100", "sm_120") auto takes steal and clc raises, before anything compiles."""
    concrete = resolve_policy(policy, parse_arch(arch))
    if concrete == "clc" and arch[-1] not in "af":  # parse_arch accepted it: a suffix is its last letter
        if policy == "auto":
            return "steal"
        raise UnsupportedFeatureError("Cluster Launch Control (policy 'clc')",
                                      f"an {arch}a or {arch}f target (.multicast::cluster::all, which its cluster-wide "
                                      "cancel uses, exists only on architecture- and family-specific targets)",
                                      f"target {arch}", "policy='steal' (software CLC, same loop) or policy='auto'")
    return concrete


def check_cluster(cluster: int | Sequence[int]) -> Dim3:
    """A cluster shape as (x, y, z): 1 to MAX_CLUSTER_SIZE blocks, each dimension >= 1."""
    c = as_dim3(cluster, "cluster")
    if min(c) < 1 or volume(c) > MAX_CLUSTER_SIZE:
        raise LaunchConfigError(f"cluster {c} must have 1 to {MAX_CLUSTER_SIZE} blocks")
    return c


def check_tiles(tiles: int | Sequence[int], cluster: Dim3) -> Dim3:
    """Validate a tile grid (zero allowed: nothing to do) against the grid limits and the cluster shape."""
    t = as_dim3(tiles, "tiles")
    for axis, (n, limit) in enumerate(zip(t, MAX_TILES)):
        if not 0 <= n <= limit:
            raise LaunchConfigError(f"tile count {'xyz'[axis]} = {n} is outside [0, {limit}]")
        if n % cluster[axis]:
            raise LaunchConfigError(
                f"cluster dimension {'xyz'[axis]} = {cluster[axis]} does not divide tile count {'xyz'[axis]} = {n}; "
                "each cluster takes a cluster-shaped group of tiles")
    return t  # type: ignore[return-value]


def check_steal_units(policy: str, units: int) -> None:
    """steal's tickets fit 32 bits: at most MAX_STEAL_UNITS units of work (tiles / cluster size) per launch."""
    if policy == "steal" and units > MAX_STEAL_UNITS:
        raise LaunchConfigError(f"policy 'steal' takes at most {MAX_STEAL_UNITS} units of work (tiles / cluster "
                                f"size); got {units}")


def check_quantum(quantum_us: float | None, policy: str) -> int:
    """Quantum in nanoseconds (0: never yield). Only 'steal' (or 'auto') takes one."""
    if quantum_us is None:
        return int(DEFAULT_QUANTUM_US * 1000) if policy in TAKES_QUANTUM else 0
    if policy not in TAKES_QUANTUM:
        raise LaunchConfigError(f"a quantum applies to policy 'steal' only, not {policy!r}")
    if quantum_us == math.inf:
        return 0
    if not (isinstance(quantum_us, (int, float, np.integer, np.floating)) and not isinstance(quantum_us, bool)
            and math.isfinite(quantum_us) and quantum_us > 0):
        raise LaunchConfigError(f"quantum_us must be a positive number of microseconds or math.inf, got {quantum_us!r}")
    # In Python's numbers: a NumPy integer's product would wrap (np.int64(10**16) became a 1 ns quantum), and a float
    # beyond float64's range becomes inf, which int() refuses with an OverflowError.
    scaled = (quantum_us.item() if isinstance(quantum_us, np.generic) else quantum_us) * 1000
    if not scaled <= MAX_U64:  # the schedule's 64-bit field; any real slice is far shorter
        raise LaunchConfigError(f"quantum_us = {quantum_us!r} exceeds the {MAX_U64 / 1000:.4g} us a 64-bit count of "
                                "nanoseconds holds; math.inf: never yield")
    return max(int(scaled), 1)
