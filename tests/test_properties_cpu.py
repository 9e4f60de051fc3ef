"""Property tests of launch-configuration validation without a GPU: for capabilities and configurations
drawn around every limit, ``LaunchConfig`` plus ``check_config`` accept a configuration exactly when it
is within every limit. The oracle below is written from the limits of the CUDA Programming Guide's
"Technical Specifications per Compute Capability" table and the capability object's fields, not from the
code under test; the occupancy queries are stand-ins whose answers the oracle reads too."""

from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

from cuadv.device import DeviceCaps
from cuadv.errors import LaunchConfigError
import cuadv.launching as launch_module
from cuadv.launching import LaunchConfig, check_config

GRID_LIMITS = (2**31 - 1, 65535, 65535)
BLOCK_LIMITS = (1024, 1024, 64)
THREADS_PER_BLOCK = 1024
CLUSTER_LIMIT = 16  # blocks in a non-portable cluster on compute capability 9.0 and 10.0
BLOCK_RESERVED_SHARED = 1024  # per resident block (the stand-in occupancy query's rule)


def edges(*limits: int) -> list[int]:
    """Each limit, one below and one above it, and the invalid 0 and -1."""
    return sorted({v for limit in limits for v in (limit - 1, limit, limit + 1)} | {0, -1})


@st.composite
def mostly(draw, valid: st.SearchStrategy, *edge_values: int):
    """Usually a value from ``valid``, about one time in seven one at an edge (so that many drawn configurations
    pass: one_of's branches would be drawn about as often each). The edge branch is taken on a middle value of
    a small integer, as Hypothesis draws the ends of a range more often than the rest."""
    if draw(st.integers(0, 6)) == 3:
        return draw(st.sampled_from(sorted(edge_values)))
    return draw(valid)


@st.composite
def capabilities(draw) -> DeviceCaps:
    optin = draw(st.sampled_from([48 * 1024, 101_376, 232_448]))  # 8.0-class, 8.6/8.9, 9.0
    nonportable = draw(st.sampled_from([8, 12, 16]))
    return DeviceCaps(
        ordinal=0, name="stand-in GPU", compute_capability=(9, 0), arch="sm_90a",
        sm_count=draw(st.sampled_from([1, 7, 132])), l2_cache_bytes=50 << 20, persisting_l2_max_bytes=30 << 20,
        access_policy_max_window_bytes=128 << 20, shared_mem_per_block_optin=optin,
        shared_mem_per_sm=optin + BLOCK_RESERVED_SHARED, max_threads_per_sm=2048, max_blocks_per_sm=32,
        cluster_launch=True, max_cluster_size_portable=8, max_cluster_size_nonportable=nonportable,
        cooperative_launch=True, stream_priority_low=0, stream_priority_high=draw(st.sampled_from([-5, -1, 0])),
        mem_sync_domain_count=4, tma=True, pdl=True, clc=False, driver_version=13000, nvrtc_version=(13, 0))


class StandInKernel:
    """What check_config reads of a kernel; attribute writes are recorded nowhere (no GPU)."""

    name = "stand_in"
    compile_time_cluster = None

    def __init__(self, max_threads: int, static_shared: int):
        self.max_threads_per_block = max_threads
        self.static_shared_bytes = static_shared

    def ensure_dynamic_shared(self, nbytes: int) -> None:
        pass

    def set_non_portable_cluster(self, allowed: bool) -> None:
        pass


def blocks_per_sm(caps: DeviceCaps, kernel: StandInKernel, threads: int, shared: int) -> int:
    """The stand-in occupancy query: threads, blocks and shared memory per SM, each a cap."""
    per_block_shared = shared + kernel.static_shared_bytes + BLOCK_RESERVED_SHARED
    return min(caps.max_blocks_per_sm, caps.max_threads_per_sm // threads, caps.shared_mem_per_sm // per_block_shared)


def dims(values: tuple[int, ...]) -> int:
    n = 1
    for v in values:
        n *= v
    return n


def within_limits(caps: DeviceCaps, kernel: StandInKernel, grid, block, cluster, shared, cooperative,
                  priority) -> bool:
    """The oracle: every rule a launch must keep, from the limits alone."""
    if any(not 1 <= g <= limit for g, limit in zip(grid, GRID_LIMITS)):
        return False
    if any(not 1 <= b <= limit for b, limit in zip(block, BLOCK_LIMITS)):
        return False
    threads = dims(block)
    if threads > THREADS_PER_BLOCK or threads > kernel.max_threads_per_block:
        return False
    if shared < 0 or shared + kernel.static_shared_bytes > caps.shared_mem_per_block_optin:
        return False
    if cluster is not None:
        size = dims(cluster)
        if min(cluster) < 1 or size > CLUSTER_LIMIT or any(g % c for g, c in zip(grid, cluster)):
            return False
        largest = caps.max_cluster_size_nonportable if size > 8 else caps.max_cluster_size_portable
        if size > largest:
            return False
    if cooperative:
        co_resident = blocks_per_sm(caps, kernel, threads, shared) * caps.sm_count
        if cluster is not None:
            co_resident = co_resident // dims(cluster) * dims(cluster)  # whole clusters only
        if dims(grid) > co_resident:
            return False
    if priority is not None and not caps.stream_priority_high <= priority <= caps.stream_priority_low:
        return False
    return True


def stand_in_device(monkeypatch, caps: DeviceCaps, kernel: StandInKernel) -> None:
    monkeypatch.setattr(launch_module, "current_device", lambda: SimpleNamespace(caps=caps, ordinal=caps.ordinal))
    monkeypatch.setattr(launch_module, "max_active_blocks_per_sm",
                        lambda k, block, shared_mem=0: blocks_per_sm(caps, k, dims(block), shared_mem))
    monkeypatch.setattr(launch_module, "max_cluster_size",
                        lambda k, block, shared_mem=0, non_portable=False:
                        caps.max_cluster_size_nonportable if non_portable else caps.max_cluster_size_portable)
    monkeypatch.setattr(launch_module, "max_active_clusters",
                        lambda k, block, cluster, shared_mem=0:
                        blocks_per_sm(caps, k, dims(block), shared_mem) * caps.sm_count // dims(cluster))


H200 = DeviceCaps(
    ordinal=0, name="NVIDIA H200", compute_capability=(9, 0), arch="sm_90a", sm_count=132,
    l2_cache_bytes=60 << 20, persisting_l2_max_bytes=45 << 20, access_policy_max_window_bytes=128 << 20,
    shared_mem_per_block_optin=232_448, shared_mem_per_sm=233_472, max_threads_per_sm=2048, max_blocks_per_sm=32,
    cluster_launch=True, max_cluster_size_portable=8, max_cluster_size_nonportable=16, cooperative_launch=True,
    stream_priority_low=0, stream_priority_high=-5, mem_sync_domain_count=4, tma=True, pdl=True, clc=False,
    driver_version=13000, nvrtc_version=(13, 0))


@st.composite
def launches(draw):
    """(capabilities, kernel, grid, block, cluster, shared, cooperative, priority), each part near its limits."""
    caps = draw(st.one_of(st.just(H200), capabilities()))
    kernel = StandInKernel(draw(st.sampled_from([128, 640, 1024])), draw(st.sampled_from([0, 1024, 48 * 1024])))
    cluster = draw(st.one_of(st.none(), st.tuples(mostly(st.sampled_from([1, 2, 4, 8]), 3, 12, 13, 16, 17, 0),
                                                  mostly(st.just(1), 2, 0), mostly(st.just(1), 2, -1))))
    shape = cluster or (1, 1, 1)
    # A grid axis is a multiple of the cluster's (or of 1), or at an edge of its limit (or off by one).
    grid = tuple(draw(mostly(st.integers(1, most).map(lambda m, c=c: m * max(c, 1)), *edges(limit), 97))
                 for c, limit, most in zip(shape, GRID_LIMITS, (300, 3, 2)))
    block = (draw(mostly(st.sampled_from([32, 64, 96, 128, 256]), *edges(BLOCK_LIMITS[0]))),
             draw(mostly(st.sampled_from([1, 2, 4]), *edges(BLOCK_LIMITS[1]))),
             draw(mostly(st.sampled_from([1, 2]), *edges(BLOCK_LIMITS[2]))))
    room = caps.shared_mem_per_block_optin - kernel.static_shared_bytes
    shared = draw(mostly(st.integers(0, 48 * 1024), *edges(room, 48 * 1024)))
    cooperative = draw(st.sampled_from([False, False, True]))
    priority = draw(st.one_of(st.none(), st.none(), st.integers(-7, 2)))
    return caps, kernel, grid, block, cluster, shared, cooperative, priority


@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(launch=launches())
@example(launch=(H200, StandInKernel(1024, 0), (1, 1, 1), (1, 1, 1), None, 0, False, None))
@example(launch=(H200, StandInKernel(1024, 0), (2**31 - 1, 65535, 65535), (1024, 1, 1), None, 232_448, False, -5))
@example(launch=(H200, StandInKernel(640, 1024), (32, 2, 1), (16, 8, 4), (16, 1, 1), 0, True, None))
def test_a_configuration_is_accepted_iff_it_is_within_every_limit(monkeypatch, launch):
    caps, kernel, grid, block, cluster, shared, cooperative, priority = launch
    stand_in_device(monkeypatch, caps, kernel)
    want = within_limits(caps, kernel, grid, block, cluster, shared, cooperative, priority)
    event(f"within every limit: {want}")  # both outcomes are drawn (pytest --hypothesis-show-statistics)
    try:
        config = LaunchConfig(grid=grid, block=block, cluster=cluster, shared_mem=shared, cooperative=cooperative,
                              priority=priority)
        check_config(kernel, config)
    except LaunchConfigError as exc:
        assert not want, f"refused a configuration within every limit: {exc}"
        assert any(ch.isdigit() for ch in str(exc)), f"the message names no value or limit: {exc}"
    else:
        assert want, "accepted a configuration that breaks a limit"


@pytest.mark.parametrize("grid, block, cluster, shared, cooperative, priority, want", [
    ((2**31 - 1, 65535, 65535), (1024, 1, 1), None, 0, False, None, True),  # every grid limit, exactly
    ((2**31, 1, 1), (32, 1, 1), None, 0, False, None, False),
    ((1, 1, 1), (32, 32, 1), None, 0, False, None, True),  # 1024 threads
    ((1, 1, 1), (32, 32, 2), None, 0, False, None, False),  # 2048 threads
    ((1, 1, 1), (1, 1, 64), None, 0, False, None, True),
    ((1, 1, 1), (1, 1, 65), None, 0, False, None, False),
    ((1, 1, 1), (32, 1, 1), None, 232_448, False, None, True),  # the opt-in limit, exactly
    ((1, 1, 1), (32, 1, 1), None, 232_449, False, None, False),
    ((16, 1, 1), (32, 1, 1), (16, 1, 1), 0, False, None, True),  # a non-portable cluster of 16
    ((32, 1, 1), (32, 1, 1), (17, 1, 1), 0, False, None, False),
    ((12, 1, 1), (32, 1, 1), (8, 1, 1), 0, False, None, False),  # 8 does not divide 12
    ((132 * 2, 1, 1), (1024, 1, 1), None, 0, True, None, True),  # 2 blocks of 1024 threads per SM
    ((132 * 2 + 1, 1, 1), (1024, 1, 1), None, 0, True, None, False),
    ((1, 1, 1), (32, 1, 1), None, 0, False, -5, True),
    ((1, 1, 1), (32, 1, 1), None, 0, False, -6, False),
    ((1, 1, 1), (32, 1, 1), None, 0, False, 1, False),
])
def test_h200_limits_exactly(monkeypatch, grid, block, cluster, shared, cooperative, priority, want):
    """The oracle and the code agree at the H200's own limits (and the oracle says what the guide says)."""
    kernel = StandInKernel(1024, 0)
    stand_in_device(monkeypatch, H200, kernel)
    assert within_limits(H200, kernel, grid, block, cluster, shared, cooperative, priority) is want
    try:
        check_config(kernel, LaunchConfig(grid=grid, block=block, cluster=cluster, shared_mem=shared,
                                          cooperative=cooperative, priority=priority))
        accepted = True
    except LaunchConfigError:
        accepted = False
    assert accepted is want


def test_a_nested_struct_sits_where_c_puts_it():
    """struct Outer { u8 x; u4 n; Inner inner; } with Inner { u8 q; }: C aligns inner to 8 (offset 16). The nested
    c_struct dtype does; a raw V8 field (aligned to 1 byte) would sit at 12 with the same total size."""
    from cuadv.params import c_struct, pack_struct

    inner = c_struct("Inner", [("q", "<u8")], size=8)
    outer = c_struct("Outer", [("x", "<u8"), ("n", "<u4"), ("inner", inner)], size=24)
    assert outer.fields["inner"][1] == 16
    assert c_struct("Raw", [("x", "<u8"), ("n", "<u4"), ("inner", "V8")], size=24).fields["inner"][1] == 12

    class Q:
        def kernel_param_bytes(self):
            return (7).to_bytes(8, "little")

    packed = pack_struct(outer, {"x": 1, "n": 2, "inner": Q()})
    assert packed == (1).to_bytes(8, "little") + (2).to_bytes(4, "little") + bytes(4) + (7).to_bytes(8, "little")
