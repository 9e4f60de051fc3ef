"""Work stealing without a GPU: policy choice, input checks, and the CLC code for sm_100a."""

import math
from contextlib import contextmanager, nullcontext

import numpy as np
import pytest

from cuadv.errors import LaunchConfigError, UnsupportedFeatureError
from cuadv.state_pool import StatePool
from cuadv.work_stealing import DEFAULT_QUANTUM_US, Schedule, SliceReport, TileKernel, resolve_policy
from cuadv.work_stealing.policies import check_quantum, check_tiles
from cuadv.work_stealing.schedule import COUNT_EXITS, PHASE1, learned_min_units, steal_grid_units

COUNT_BODY = "if (threadIdx.x == 0) atomicAdd(&count[tile.index], 1u);"


def test_auto_picks_clc_on_blackwell_steal_on_hopper_and_fixed_work_below():
    assert resolve_policy("auto", (10, 0)) == "clc"
    assert resolve_policy("auto", (9, 0)) == "steal"
    assert resolve_policy("auto", (8, 6)) == resolve_policy("auto", (8, 0)) == "fixed_work"


@pytest.mark.parametrize("arch", ["sm_80", "sm_86"])
def test_auto_compiles_below_hopper_as_fixed_work(arch):
    # Steal's loop is sm_90 PTX (elect.sync, fence.mbarrier_init): auto must not pick it, on the host or in a user
    # kernel that names cuadv::ws::Auto itself.
    check = "static_assert(cuda::std::is_same_v<cuadv::ws::Auto, cuadv::ws::FixedWork>);"
    k = TileKernel("unsigned int* count", COUNT_BODY + check, check, name="count_tiles")
    m = k.compile(arch, "auto")
    assert m.resources_for("count_tiles").spill_store_bytes == 0
    assert "fence.mbarrier_init" not in m.ptx and "elect.sync" not in m.ptx


def test_clc_on_hopper_names_capability_and_fallback():
    with pytest.raises(UnsupportedFeatureError) as info:
        resolve_policy("clc", (9, 0))
    text = str(info.value)
    assert "compute capability >= 10.0" in text and "got 9.0" in text and "steal" in text


def test_steal_needs_hopper():
    with pytest.raises(UnsupportedFeatureError, match="compute capability >= 9.0"):
        resolve_policy("steal", (8, 0))


def test_unknown_policy():
    with pytest.raises(ValueError, match="policy must be one of"):
        TileKernel("int* x", "", policy="greedy")


@pytest.mark.parametrize("quantum", [0, -5.0, float("nan"), "10"])
def test_invalid_quantum(quantum):
    with pytest.raises(LaunchConfigError, match="quantum_us"):
        check_quantum(quantum, "steal")


def test_quantum_only_for_steal():
    assert check_quantum(None, "steal") > 0 and check_quantum(math.inf, "steal") == 0
    assert check_quantum(2.5, "steal") == 2500 and check_quantum(None, "fixed_work") == 0
    with pytest.raises(LaunchConfigError, match="applies to policy 'steal' only"):
        check_quantum(10.0, "fixed_blocks")


@pytest.mark.parametrize("kw, match", [(dict(min_tiles=0), "min_tiles must be None or an int"),
                                       (dict(min_tiles=2.0), "min_tiles must be None or an int"),
                                       (dict(min_tiles=2, policy="fixed_blocks"), "policy 'fixed_blocks'"),
                                       (dict(min_tiles=2, quantum_us=math.inf), "finite quantum")])
def test_invalid_min_tiles(kw, match):
    kw.setdefault("policy", "steal")
    with pytest.raises(LaunchConfigError, match=match):
        TileKernel("int* x", "", **kw)


@pytest.mark.parametrize("min_tiles, tiles, cluster, grid", [(1, (1001, 1, 1), 1, (1001, 1, 1)),
                                                             (7, (1001, 1, 1), 1, (143 + 10, 1, 1)),
                                                             (4, (10, 7, 3), 1, (53 + 10, 1, 1)),
                                                             (3, (40, 6, 1), (2, 2, 1), (2 * (20 + 10), 2, 1)),
                                                             (50, (30, 1, 1), 1, (10, 1, 1)),
                                                             (3, (12, 1, 1), 1, (10, 1, 1)),
                                                             (2, (8, 1, 1), 1, (8, 1, 1))])
def test_steal_grid_shrinks_by_min_tiles(min_tiles, tiles, cluster, grid):
    """ceil(units / min_tiles) blocks (clusters) take every unit when each takes min_tiles, and a spare wave of
    the units that fit at once (10 here) refills the SMs that the last yields free; where the 10 that fit take
    every unit, only those; never more than the units."""
    k = TileKernel("int* x", "", policy="steal", quantum_us=10.0, min_tiles=min_tiles, cluster=cluster)
    k._resident[None] = 10  # what the occupancy query of a compiled kernel would give
    assert k.launch_config(None, "steal", tiles).grid == grid


@pytest.mark.parametrize("units, k, resident, blocks", [(8448, 5, 1056, 1690 + 1056), (8448, 1, 1056, 8448),
                                                        (100, 7, 1056, 100), (32768, 7, 660, 4682 + 660),
                                                        (8448, 8, 1056, 1056), (6000, 7, 1056, 1056)])
def test_steal_grid_units(units, k, resident, blocks):
    assert steal_grid_units(units, k, resident) == blocks


def test_slice_report_word():
    assert SliceReport.from_word(0) is None
    assert SliceReport.from_word(7 << 32 | 6_900) == SliceReport(units_per_slice=7, ns_per_unit=6_900)


@pytest.mark.parametrize("report, units, resident, k", [(None, 10_000, 396, 1),  # nothing learned: the full grid
                                                        (SliceReport(7, 6_900), 32_768, 396, 7),
                                                        # a share of 3 <= 2 slices: no block yields while work is left
                                                        (SliceReport(7, 6_900), 1_000, 396, 1_000),
                                                        (SliceReport(5, 10_000), 8_448, 1_056, 8_448),  # 8 <= 2 x 5
                                                        (SliceReport(5, 10_000), 11_616, 1_056, 5),  # 11 > 10: slices
                                                        (SliceReport(7, 6_900), 4_000, 396, 4_000),  # 11 <= 14
                                                        (SliceReport(7, 6_900), 300, 396, 300),
                                                        (SliceReport(1, 90_000), 32_768, 396, 1)])
def test_learned_min_units(report, units, resident, k):
    assert learned_min_units(report, units, resident) == k


def test_min_units_only_for_steal_with_a_quantum():
    """An explicit min_tiles is used as given; the default learns only where blocks yield."""
    assert TileKernel("int* x", "", policy="steal", quantum_us=10.0, min_tiles=5).min_units(None, "steal", 99) == 5
    learned = TileKernel("int* x", "", policy="steal", quantum_us=10.0)
    assert learned.min_tiles is None and learned.slice_report is None
    assert learned.min_units(None, "steal", 10**6) == 1  # no report yet: the full grid, no occupancy query needed
    assert TileKernel("int* x", "", policy="steal", quantum_us=math.inf).min_units(None, "steal", 10**6) == 1
    assert TileKernel("int* x", "", policy="fixed_work").min_units(None, "fixed_work", 10**6) == 1


def test_tile_grid_checks():
    assert check_tiles(0, (1, 1, 1)) == (0, 1, 1)
    assert check_tiles((6, 4), (2, 2, 1)) == (6, 4, 1)
    with pytest.raises(LaunchConfigError, match="cluster dimension x = 4 does not divide tile count x = 10"):
        check_tiles(10, (4, 1, 1))
    with pytest.raises(LaunchConfigError, match=r"tile count y = 70000 is outside \[0, 65535\]"):
        check_tiles((1, 70000), (1, 1, 1))
    with pytest.raises(LaunchConfigError, match="outside"):
        check_tiles(-1, (1, 1, 1))


def test_cluster_shape_checked_at_construction():
    with pytest.raises(LaunchConfigError, match="1 to 16 blocks"):
        TileKernel("int* x", "", cluster=(4, 4, 2))


def test_schedule_layout_matches_header():
    b = Schedule(tiles=(5, 6, 7), cluster=(1, 2, 1), quantum_ns=9, prologue_factor=3, state_ptr=0x10,
                 trace_ptr=0x20, order_ptr=0x30, min_units=11, report_ptr=0x40).kernel_param_bytes()
    assert len(b) == 80 and int.from_bytes(b[56:64], "little") == 0x30
    assert int.from_bytes(b[64:68], "little") == 11 and int.from_bytes(b[72:80], "little") == 0x40
    assert int.from_bytes(b[0:4], "little") == 5 and int.from_bytes(b[16:20], "little") == 2
    assert int.from_bytes(b[24:32], "little") == 9 and int.from_bytes(b[32:36], "little") == 3
    assert int.from_bytes(b[40:48], "little") == 0x10 and int.from_bytes(b[48:56], "little") == 0x20


@pytest.mark.parametrize("cluster", [1, (2, 1, 1), (2, 2, 1)])
@pytest.mark.parametrize("arch, policies", [("sm_90a", ["fixed_work", "fixed_blocks", "atomic_counter", "steal",
                                                        "auto"]),
                                            ("sm_100a", ["fixed_work", "fixed_blocks", "atomic_counter", "steal", "clc",
                                                         "auto"])])
def test_every_policy_compiles(arch, policies, cluster):
    k = TileKernel("unsigned int* count", COUNT_BODY, block=128, cluster=cluster, name="count_tiles")
    for policy in policies:
        m = k.compile(arch, policy)
        res = m.resources_for("count_tiles")
        assert res.spill_store_bytes == 0 and res.stack_bytes == 0


def test_policy_type_and_barrier_between_tiles_seen_by_prologue_and_body():
    # The loops that hand each tile over at a block barrier say so; fixed_blocks (no barrier) and fixed_work (one
    # tile per block) do not. A static_assert in prologue and body fails the compile where the value is wrong.
    expected = {"fixed_work": False, "fixed_blocks": False, "atomic_counter": True, "steal": True, "clc": True}
    for policy, barrier in expected.items():
        check = f"static_assert(cuadv::ws::kBarrierBetweenTiles<cuadv_policy> == {str(barrier).lower()});"
        k = TileKernel("unsigned int* count", COUNT_BODY + check, check, name="barrier_between_tiles")
        k.compile("sm_100a", policy)


def test_clc_on_sm90_does_not_compile():
    from cuadv.compiler import compile_source
    from cuadv.errors import CompileError

    k = TileKernel("unsigned int* count", COUNT_BODY)
    with pytest.raises(CompileError, match="ClusterLaunchControl needs sm_100"):
        compile_source(k.source("clc"), name="clc_on_hopper", arch="sm_90a")


@pytest.mark.parametrize("arch, cancels", [("sm_100a", True), ("sm_100f", True), ("sm_100", False), ("sm_120", False)])
def test_the_headers_auto_takes_clc_only_where_the_target_has_its_multicast_response(arch, cancels):
    """cuadv::ws::Auto in C++ chooses as policy_for_arch does: clc's cancel answers the whole cluster
    (.multicast::cluster::all), which only architecture- and family-specific targets have; plain ones run Steal."""
    from cuadv.compiler import compile_source

    k = TileKernel("unsigned int* count", COUNT_BODY)
    source = k.source("steal").replace("using cuadv_policy = cuadv::ws::Steal;",
                                       "using cuadv_policy = cuadv::ws::Auto;")
    assert "cuadv::ws::Auto;" in source
    ptx = compile_source(source, name=f"auto_{arch}", arch=arch).ptx
    assert ("clusterlaunchcontrol.try_cancel" in ptx) == cancels


def test_clc_ptx_has_try_cancel_and_steal_does_not():
    k = TileKernel("unsigned int* count", COUNT_BODY)
    clc = k.compile("sm_100a", "clc").ptx
    assert "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128" in clc
    assert "multicast::cluster::all" in clc  # cluster form
    assert "clusterlaunchcontrol.query_cancel.is_canceled" in clc
    assert "clusterlaunchcontrol.query_cancel.get_first_ctaid" in clc
    assert "fence.proxy.async::generic.acquire.sync_restrict::shared::cluster.cluster" in clc
    assert "fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster" in clc
    steal = k.compile("sm_90a", "steal").ptx
    assert "clusterlaunchcontrol" not in steal
    assert "mbarrier.complete_tx.relaxed.cluster.shared::cluster.b64" in steal  # the software completion (clusters)
    assert "atom.add.relaxed.gpu.u64" in steal  # a block's first ticket
    assert "atom.relaxed.gpu.global.add.u64" in steal and "elect.sync" in steal  # the loop's, by one elected lane
    assert steal.count("st.relaxed.sys.b64") == 1  # the slice report to host-mapped memory
    assert ".sys" not in clc  # CLC has no slices to report


def test_clc_sass_has_the_hardware_instruction(tmp_path):
    from sass_tools import sass

    k = TileKernel("unsigned int* count", COUNT_BODY)
    assert "UGETNEXTWORKID" in sass(k.compile("sm_100a", "clc").cubin, tmp_path)  # the try_cancel of sm_100
    steal = sass(k.compile("sm_90a", "steal").cubin, tmp_path)
    assert "UGETNEXTWORKID" not in steal and "SYNCS.PHASECHK.TRANS64.TRYWAIT" in steal


def test_tile_order_must_be_a_permutation():
    import numpy as np

    from cuadv import TileOrder

    with pytest.raises(LaunchConfigError, match="permutation"):
        TileOrder(np.array([0, 0, 2]))
    with pytest.raises(LaunchConfigError, match="permutation"):
        TileOrder(np.array([0, 3, 1]))
    with pytest.raises(LaunchConfigError, match="1-D integer"):
        TileOrder(np.array([0.0, 1.0]))


def test_schedule_bytes_match_the_hand_packed_struct():
    """Schedule packs through cuadv.params (c_struct / StructArgument): the same 80 bytes as the former
    hand-written packing, field for field, with and without the counted reset."""
    import struct

    for count_exits, phase, flags, state in ((False, 0, 0, 0x10), (True, 0, 1, 0x10), (False, 1, 2, 0x20)):
        s = Schedule(tiles=(5, 6, 7), cluster=(1, 2, 1), quantum_ns=9, prologue_factor=3, state_ptr=0x10,
                     trace_ptr=0x20, order_ptr=0x30, count_exits=count_exits, phase=phase, min_units=11,
                     report_ptr=0x40)  # phase 1: the pair's second state, 16 bytes on
        want = struct.pack("<3I3IQIIQQQIIQ", 5, 6, 7, 1, 2, 1, 9, 3, flags, state, 0x20, 0x30, 11, 0, 0x40)
        assert s.kernel_param_bytes() == want


# -- the grid of each policy comes from the occupancy of that policy's own kernel -------------------

class _FakeKernel:
    param_sizes = (80, 8)  # the schedule, then the one pointer of TileKernel("int* x", ...)
    static_shared_bytes = 0

    def __init__(self, name, per_sm, max_threads_per_block=1024):
        self.name, self.per_sm, self.max_threads_per_block = name, per_sm, max_threads_per_block


class _FakeCaps:
    sm_count = 132
    compute_capability = (9, 0)
    arch = "sm_90a"
    shared_mem_per_block_optin = 227 * 1024

    def cc_string(self):
        return "9.0"


class _FakeDevice:
    caps = _FakeCaps()


@pytest.fixture
def fake_occupancy(monkeypatch):
    """Occupancy queries answered by the fake kernels (steal: 8 blocks per SM, fixed_blocks: 3), no GPU."""
    from cuadv.work_stealing import tile_kernel

    calls = []

    def blocks_per_sm(kernel, block, shared_mem=0):
        calls.append(kernel.name)
        return kernel.per_sm

    monkeypatch.setattr(tile_kernel, "max_active_blocks_per_sm", blocks_per_sm)
    monkeypatch.setattr(tile_kernel, "current_device", lambda: _FakeDevice())
    monkeypatch.setattr(tile_kernel, "capturing", lambda stream: False)
    monkeypatch.setattr(tile_kernel, "relaxed_capture_mode", nullcontext)
    return {"steal": _FakeKernel("steal", 8), "fixed_blocks": _FakeKernel("fixed_blocks", 3)}, calls


def test_each_policy_grid_uses_its_own_kernels_occupancy(fake_occupancy):
    kernels, calls = fake_occupancy
    k = TileKernel("int* x", "", policy="steal", quantum_us=math.inf, block=256)
    tiles = (1_000_000, 1, 1)
    assert k.launch_config(kernels["steal"], "steal", tiles).grid == (8 * 132, 1, 1)
    # before the fix this reused steal's 1056 blocks
    assert k.launch_config(kernels["fixed_blocks"], "fixed_blocks", tiles).grid == (3 * 132, 1, 1)
    assert k.launch_config(kernels["steal"], "steal", tiles).grid == (8 * 132, 1, 1)
    assert calls == ["steal", "fixed_blocks"]  # one query per kernel, then cached


def test_a_block_the_kernel_cannot_run_names_the_limit_before_any_occupancy_query(fake_occupancy):
    _, calls = fake_occupancy
    k = TileKernel("int* x", "", policy="fixed_blocks", block=256)
    with pytest.raises(LaunchConfigError, match="block of 256 threads exceeds this kernel's limit of 128"):
        k.launch_config(_FakeKernel("fixed_blocks", 0, max_threads_per_block=128), "fixed_blocks", 10_000)
    with pytest.raises(LaunchConfigError, match="exceeds the per-block limit"):
        TileKernel("int* x", "", policy="fixed_blocks", block=256, shared_mem=228 * 1024).launch_config(
            _FakeKernel("fixed_blocks", 0), "fixed_blocks", 10_000)
    assert calls == []


class _HostPool(StatePool):
    """A StatePool whose slots are host numbers (one per stream; captures get their own), no GPU."""

    def __init__(self):
        super().__init__("tests")
        self.captured = set()

    def slot_for(self, stream):
        return 0x1000 + stream, stream in self.captured

    @contextmanager
    def use(self, stream):
        yield self.slot_for(stream)


def test_state_pool_phase_alternates_and_a_failed_launch_keeps_it():
    pool = _HostPool()
    seen = []
    for _ in range(3):
        with pool.phase(0x1000) as phase:
            seen.append(phase)
    with pytest.raises(RuntimeError):
        with pool.phase(0x1000) as phase:
            raise RuntimeError("the launch failed: it never ran, so it cleared nothing")
    with pool.phase(0x1000) as phase:
        seen.append(phase)
    with pool.phase(0x2000) as phase:  # another stream's slot has its own
        seen.append(phase)
    assert seen == [0, 1, 0, 1, 0]


class _RelaxedMode:
    """A stand-in for interop.relaxed_capture_mode: ``on`` says whether a call is made inside it."""

    def __init__(self):
        self.depth = 0

    @property
    def on(self) -> bool:
        return self.depth > 0

    @contextmanager
    def __call__(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1


class _Events:
    """Stand-ins for the pool's CUDA events: an event is done once its stream's work is (``finish``)."""

    def __init__(self):
        self.recorded, self.busy = {}, set()

    def install(self, monkeypatch, ids):
        """Streams are keyed by ids(stream); slots are host numbers from 0x10000, 32 bytes apart. ``zeroing`` logs
        how each chunk was allocated (its fill, whether in relaxed capture mode) and zeroed."""
        from types import SimpleNamespace

        from cuadv import state_pool

        chunks, self.zeroing, relaxed = [], [], _RelaxedMode()

        def buffer(size, fill):
            self.zeroing.append(("alloc", fill, relaxed.on))
            chunks.append(SimpleNamespace(ptr=0x10000 * (len(chunks) + 1),
                                          fill=lambda byte, stream: self.zeroing.append(("fill", byte, stream))))
            return chunks[-1]

        monkeypatch.setattr(state_pool, "is_capturing", lambda stream: stream < 0)  # negative: a capturing stream
        monkeypatch.setattr(state_pool, "stream_key", lambda stream: (1, ids(stream)))
        monkeypatch.setattr(state_pool, "DeviceBuffer", buffer)
        monkeypatch.setattr(state_pool, "relaxed_capture_mode", relaxed)
        monkeypatch.setattr(state_pool, "new_nonblocking_stream", lambda: 0x5E)
        monkeypatch.setattr(state_pool, "_destroy_stream", lambda stream: self.zeroing.append(("destroy", stream)))
        monkeypatch.setattr(state_pool, "wait", lambda stream, what: self.zeroing.append(("wait", stream, relaxed.on)))
        monkeypatch.setattr(state_pool, "_new_event", lambda: SimpleNamespace())
        monkeypatch.setattr(state_pool, "_record", lambda event, stream: self.recorded.update({id(event): stream}))
        monkeypatch.setattr(state_pool, "event_done", lambda event: self.recorded[id(event)] not in self.busy)
        return chunks


def test_state_pool_keys_slots_by_stream_id(monkeypatch):
    """Handle 2 (CU_STREAM_PER_THREAD) is a different stream in each thread, so its id is the thread's: two threads
    launching on it get different slots; any other stream is one slot whichever thread launches; and a stream
    created with a destroyed one's handle (a new id) gets a slot of its own, while the old one's work may run."""
    import threading

    ids = {7: 70}
    _Events().install(monkeypatch, lambda stream: (stream, threading.get_ident()) if stream == 2 else ids[stream])
    pool = StatePool("tests")
    here = (pool.slot_for(2), pool.slot_for(2), pool.slot_for(7))
    there = []
    worker = threading.Thread(target=lambda: there.extend((pool.slot_for(2), pool.slot_for(7))))
    worker.start()
    worker.join()
    assert here[0] == here[1] and here[0] != there[0]
    assert here[2] == there[1]
    assert {a for a, _ in (*here, *there)} == {0x10000, 0x10000 + 32, 0x10000 + 64}  # 32-byte slots: a pair each
    ids[7] = 71  # handle 7 destroyed and created again
    assert pool.slot_for(7) == (0x10000 + 96, False)


def test_state_pool_gives_a_new_stream_the_slot_whose_launches_finished(monkeypatch):
    """Full (chunks of 2 slots here), the pool hands a new stream the least recently used slot whose last launch
    through use() has finished, phase and all; a busy slot, one whose launch is being enqueued and a capture's
    are never taken; with none free it grows by another chunk, up to MAX_CHUNKS."""
    from cuadv import state_pool

    events = _Events()
    chunks = events.install(monkeypatch, lambda stream: stream)
    pool = StatePool("tests", slots=2)
    with pool.use(1) as (a, captured):
        assert (a, captured) == (0x10000, False)
    with pool.phase(a) as phase:
        assert phase == 0  # the launch on stream 1 takes phase 0, so its slot's next is 1
    with pool.use(2) as (b, _):
        pass
    events.busy = {1, 2}  # both streams' launches still run
    with pool.use(3) as (c, _):
        assert c == 0x20000 and len(chunks) == 2  # grown: no slot was free
    with pool.use(4) as (d, _):
        assert d == 0x20000 + 32  # room left: a new slot
    events.busy = {2, 4}  # stream 1's and stream 3's work is done: stream 1's slot was used least recently
    with pool.use(5) as (e, _):
        assert e == a
        events.busy = {2, 3, 4}
        with pool.use(6) as (f, _):
            assert f == 0x30000  # stream 5's launch is still being enqueued: its slot is not taken
    with pool.phase(e) as phase:
        assert phase == 1  # the slot's phase went with it
    assert pool.slot_for(1) == (0x30000 + 32, False)  # stream 1 lost its slot
    assert pool.slot_for(-1) == (0x40000, True) and pool.slot_for(-1) == (0x40000 + 32, True)  # captures: fresh
    assert pool.last_new == 0x40000 + 32
    # Every chunk, a capture's too: cuMemAlloc in relaxed mode (a global-mode capture prohibits it) and no memset on
    # the legacy stream (it would wait for a blocking capturing stream), but on a stream of its own, waited for
    zeroed = [("alloc", None, True), ("fill", 0, 0x5E), ("wait", 0x5E, True), ("destroy", 0x5E)]
    assert events.zeroing == zeroed * 4
    monkeypatch.setattr(state_pool, "MAX_CHUNKS", 4)
    with pytest.raises(LaunchConfigError, match="more than 8 streams with launches in flight and graph captures"):
        pool.slot_for(-1)


class _FakeLauncher:
    """What tile_kernel.prepare returns, without the device checks: calling it calls ``launch`` with its kernel and
    configuration (as cuadv.launching.launch is called)."""

    def __init__(self, kernel, config, launch):
        self.kernel, self.config, self._launch = kernel, config, launch

    def __call__(self, *args, stream, before=None):
        if before is not None:  # the work a launch enqueues ahead of its kernel, then the kernel
            before()
        self._launch(self.kernel, self.config, *args, stream=stream)


def _launcher_calling(launch):
    return lambda kernel, config: _FakeLauncher(kernel, config, launch)


def test_steal_stream_launches_alternate_phases_and_captures_count_exits(fake_occupancy, monkeypatch):
    """Each stream's steal launches alternate between the two states of its slot (the second with the kPhase1
    flag), other policies' launches leave the phase alone, and a captured launch counts exits in the first."""
    from cuadv.work_stealing import tile_kernel

    kernels, _ = fake_occupancy
    pool, flags = _HostPool(), []
    monkeypatch.setattr(tile_kernel, "_pool", pool)
    monkeypatch.setattr(tile_kernel, "prepare", _launcher_calling(
        lambda kernel, config, schedule, *args, stream: flags.append((stream, schedule.flags, schedule.state))))
    k = TileKernel("int* x", "", policy="steal", quantum_us=math.inf, block=256)
    monkeypatch.setattr(k, "kernel", lambda policy=None: (kernels[policy or "steal"], policy or "steal"))
    for stream in (1, 1, 2, 1):
        k(50_000, 0x2000, stream=stream)
    k(50_000, 0x2000, stream=1, policy="fixed_blocks")
    pool.captured.add(3)
    k(50_000, 0x2000, stream=3)
    k(50_000, 0x2000, stream=1)
    assert flags == [(1, 0, 0x1001), (1, PHASE1, 0x1011), (2, 0, 0x1002), (1, 0, 0x1001), (1, 0, 0),
                     (3, COUNT_EXITS, 0x1003), (1, PHASE1, 0x1011)]  # phase 1: the slot's second state


def test_a_call_launches_each_policy_with_its_own_grid(fake_occupancy, monkeypatch):
    """TileKernel.__call__ with the GPU parts replaced: steal (Q = inf) then fixed_blocks on one TileKernel;
    last_launch shows each grid equal to its own kernel's resident count."""
    from cuadv.work_stealing import tile_kernel

    kernels, _ = fake_occupancy
    launched = []
    monkeypatch.setattr(tile_kernel, "_pool", _HostPool())
    monkeypatch.setattr(tile_kernel, "prepare", _launcher_calling(lambda kernel, config, *args, stream:
                                                                  launched.append((kernel, config))))
    k = TileKernel("int* x", "", policy="steal", quantum_us=math.inf, block=256)
    monkeypatch.setattr(k, "kernel", lambda policy=None: (kernels[policy or "steal"], policy or "steal"))
    for policy, per_sm in (("steal", 8), ("fixed_blocks", 3), ("steal", 8)):
        k(50_000, 0x2000, policy=policy, stream=0)
        assert k.last_launch.policy == policy and k.last_launch.stream == 0
        assert k.last_launch.config.grid == (per_sm * 132, 1, 1)
        assert launched[-1] == (kernels[policy], k.last_launch.config)
    assert k.resident_units("fixed_blocks") == 3 * 132 and k.resident_units("steal") == 8 * 132


def test_a_priority_is_checked_before_the_kept_launcher_is_looked_up(fake_occupancy, monkeypatch):
    """The launcher kept per configuration is found by the priority's value: False and -1.0 (equal to 0 and -1 as
    keys) are refused as a LaunchConfig refuses them, not launched with the launcher of 0 or -1."""
    from cuadv.work_stealing import tile_kernel

    kernels, _ = fake_occupancy
    launched = []
    monkeypatch.setattr(tile_kernel, "_pool", _HostPool())
    monkeypatch.setattr(tile_kernel, "prepare", _launcher_calling(lambda kernel, config, *args, stream:
                                                                  launched.append(config.priority)))
    k = TileKernel("int* x", "", policy="steal", quantum_us=math.inf, block=256)
    monkeypatch.setattr(k, "kernel", lambda policy=None: (kernels[policy or "steal"], policy or "steal"))
    k(50_000, 0x2000, stream=0, priority=0)
    k(50_000, 0x2000, stream=0, priority=-1)
    k(50_000, 0x2000, stream=0, priority=np.int32(-1))
    for bad in (False, -1.0, [0]):
        with pytest.raises(LaunchConfigError, match="priority must be an int"):
            k(50_000, 0x2000, stream=0, priority=bad)
    assert launched == [0, -1, -1]


# -- atomic_counter: the FlashAttention-3 kind of scheduler, a global counter zeroed before every launch ----

def test_atomic_counter_policy_checks():
    assert resolve_policy("atomic_counter", (9, 0)) == "atomic_counter"
    assert resolve_policy("atomic_counter", (10, 0)) == "atomic_counter"  # auto never picks it
    with pytest.raises(LaunchConfigError, match="applies to policy 'steal' only, not 'atomic_counter'"):
        TileKernel("int* x", "", policy="atomic_counter", quantum_us=10.0)
    with pytest.raises(LaunchConfigError, match="policy 'atomic_counter'"):
        TileKernel("int* x", "", policy="atomic_counter", min_tiles=4)


def test_atomic_counter_ptx_takes_tiles_from_a_counter():
    k = TileKernel("unsigned int* count", COUNT_BODY, name="count_tiles")
    ptx = k.compile("sm_90a", "atomic_counter").ptx
    assert "atom.global.add.u64" in ptx  # the claim
    assert "mbarrier.init" not in ptx and "clusterlaunchcontrol" not in ptx and ".sys" not in ptx
    clustered = TileKernel("unsigned int* count", COUNT_BODY, cluster=(2, 1, 1), name="count_tiles")
    # the next unit, to every block
    assert "st.shared::cluster.u64" in clustered.compile("sm_90a", "atomic_counter").ptx


def test_atomic_counter_grid_is_the_resident_one(fake_occupancy):
    kernels, _ = fake_occupancy
    k = TileKernel("int* x", "", policy="atomic_counter", block=256)
    assert k.launch_config(kernels["fixed_blocks"], "atomic_counter", (1_000_000, 1, 1)).grid == (3 * 132, 1, 1)
    assert k.launch_config(kernels["fixed_blocks"], "atomic_counter", (100, 1, 1)).grid == (100, 1, 1)


def test_atomic_counter_launch_is_preceded_by_a_memset_on_its_stream(fake_occupancy, monkeypatch):
    """Every atomic_counter launch enqueues a memset of its counter on its own stream, then the kernel with
    that counter in the schedule (so a graph capture holds both); other policies enqueue no memset."""
    from cuadv.work_stealing import tile_kernel

    kernels, _ = fake_occupancy
    enqueued = []

    class Driver:
        def cuMemsetD32Async(self, ptr, value, count, stream):
            enqueued.append(("memset", ptr, value, count, stream))
            return (0,)

    def fake_launch(kernel, config, schedule, *args, stream):
        enqueued.append(("kernel", schedule.state_ptr, stream))

    monkeypatch.setattr(tile_kernel, "_counters", _HostPool())
    monkeypatch.setattr(tile_kernel, "driver", lambda: Driver())
    monkeypatch.setattr(tile_kernel, "check", lambda result, call: result)
    monkeypatch.setattr(tile_kernel, "prepare", _launcher_calling(fake_launch))
    k = TileKernel("int* x", "", policy="atomic_counter", block=256)
    monkeypatch.setattr(k, "kernel", lambda policy=None: (kernels["fixed_blocks"], policy or "atomic_counter"))
    for stream in (7, 7, 9):
        k(50_000, 0x2000, stream=stream)
        assert enqueued[-2:] == [("memset", 0x1000 + stream, 0, 2, stream), ("kernel", 0x1000 + stream, stream)]
    assert k.last_launch.config.grid == (3 * 132, 1, 1)
    k(50_000, 0x2000, stream=7, policy="fixed_blocks")
    assert enqueued[-1] == ("kernel", 0, 7) and len(enqueued) == 7


def test_runnable_policies_are_what_resolve_policy_accepts():
    from cuadv.work_stealing.policies import runnable_policies

    assert runnable_policies((8, 0)) == ("fixed_work", "fixed_blocks", "atomic_counter", "auto")
    assert runnable_policies((9, 0)) == ("fixed_work", "fixed_blocks", "atomic_counter", "steal", "auto")
    assert runnable_policies((10, 0)) == ("fixed_work", "fixed_blocks", "atomic_counter", "clc", "steal", "auto")


# -- a Schedule takes shapes as every cuadv API does -------------------------------------------------------------

@pytest.mark.parametrize("tiles, cluster, packed", [(5, 1, (5, 1, 1, 1, 1, 1)), ((5,), (1,), (5, 1, 1, 1, 1, 1)),
                                                    ((6, 4), (2, 2), (6, 4, 1, 2, 2, 1)),
                                                    (np.int64(5), [1], (5, 1, 1, 1, 1, 1)),
                                                    ((np.int32(6), 2), (3,), (6, 2, 1, 3, 1, 1))])
def test_schedule_shapes_missing_dimensions_are_one(tiles, cluster, packed):
    """An int or a short tuple is (x, 1, 1) or (x, y, 1), as everywhere in cuadv (it was broadcast: tiles=5 packed
    5 x 5 x 5 tiles)."""
    import struct

    s = Schedule(tiles=tiles, cluster=cluster)
    assert (s.tiles, s.cluster) == (packed[:3], packed[3:])
    assert struct.unpack("<3I3I", s.kernel_param_bytes()[:24]) == packed


def test_schedule_fields_at_their_limits_pack():
    s = Schedule(tiles=(2**31 - 1, 65535, 65535), cluster=(1, 1, 1), quantum_ns=2**64 - 1, prologue_factor=2**32 - 1,
                 state_ptr=2**64 - 32, phase=1, min_units=2**32 - 1, report_ptr=2**64 - 8, count_exits=True)
    b = s.kernel_param_bytes()
    assert int.from_bytes(b[24:32], "little") == 2**64 - 1 and int.from_bytes(b[32:36], "little") == 2**32 - 1
    assert int.from_bytes(b[40:48], "little") == 2**64 - 16  # phase 1: the pair's second state
    assert int.from_bytes(b[36:40], "little") == COUNT_EXITS | PHASE1


def test_a_launchs_schedule_packs_as_a_checked_one():
    """Schedule.of_launch (TileKernel's, every launch, without the field checks) packs the bytes a Schedule made
    by hand packs for the same values, defaults included."""
    full = dict(quantum_ns=50_000, prologue_factor=19, state_ptr=0x7F00_0000_0020, trace_ptr=0x7F00_1000_0000,
                order_ptr=0x7F00_2000_0000, count_exits=False, phase=1, min_units=7, report_ptr=0x7F00_3000_0008)
    for values in ({}, full):
        launch = Schedule.of_launch(tiles=(40, 2, 1), cluster=(2, 1, 1), **values)
        checked = Schedule(tiles=(40, 2), cluster=2, **values)
        assert launch == checked and launch.kernel_param_bytes() == checked.kernel_param_bytes()


# -- clc needs an architecture- or family-specific target --------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_100", "sm_120"])
def test_a_plain_target_from_sm_100_runs_steal_for_auto_and_refuses_clc(arch, monkeypatch):
    """clc's cancel uses .multicast::cluster::all, which ptxas accepts only for sm_100a / sm_100f and the like: on a
    plain target auto is steal, and clc raises naming the target and the fallback, before anything compiles."""
    from cuadv.work_stealing import policy_for_arch, tile_kernel

    assert policy_for_arch("auto", arch) == "steal"
    assert policy_for_arch("auto", arch + "a") == policy_for_arch("auto", arch + "f") == "clc"
    assert policy_for_arch("clc", arch + "f") == "clc" and policy_for_arch("steal", arch) == "steal"
    compiled = []
    monkeypatch.setattr(tile_kernel, "compile_source", lambda source, name, arch: compiled.append((name, source)))
    k = TileKernel("unsigned int* count", COUNT_BODY, name="count_tiles")
    with pytest.raises(UnsupportedFeatureError) as info:
        k.compile(arch, "clc")
    assert str(info.value) == (f"Cluster Launch Control (policy 'clc') needs an {arch}a or {arch}f target "
                               "(.multicast::cluster::all, which its cluster-wide cancel uses, exists only on "
                               f"architecture- and family-specific targets) (got target {arch}); fallback: "
                               "policy='steal' (software CLC, same loop) or policy='auto'")
    assert compiled == []
    k.compile(arch)  # the kernel's policy, auto
    assert [name for name, _ in compiled] == ["count_tiles_steal"]
    assert "cuadv::ws::Steal;" in compiled[0][1]


def test_auto_builds_for_a_plain_sm_100_target():
    k = TileKernel("unsigned int* count", COUNT_BODY, name="count_tiles")
    ptx = k.compile("sm_100").ptx  # a ptxas error before: auto was clc
    assert "clusterlaunchcontrol" not in ptx and "elect.sync" in ptx


def test_the_tile_grid_limits_are_the_launch_grid_limits():
    from cuadv.dims import MAX_GRID
    from cuadv.work_stealing import MAX_TILES

    assert MAX_TILES is MAX_GRID  # fixed_work launches one block per tile


# -- a call-time policy takes that policy's options ---------------------------------------------------------------

def _launch_recorder(monkeypatch, kernels):
    """Launches recorded as (config, schedule); the kernel of each policy from ``kernels`` (policy resolved)."""
    from types import SimpleNamespace

    from cuadv.work_stealing import tile_kernel

    launched = []
    monkeypatch.setattr(tile_kernel, "_pool", _HostPool())
    monkeypatch.setattr(tile_kernel, "_counters", _HostPool())
    monkeypatch.setattr(tile_kernel, "driver", lambda: SimpleNamespace(cuMemsetD32Async=lambda *args: (0,)))
    monkeypatch.setattr(tile_kernel, "_reports", SimpleNamespace(take=lambda: (np.zeros(1, np.uint64), 0x5000)))
    monkeypatch.setattr(tile_kernel, "prepare", _launcher_calling(lambda kernel, config, schedule, *args, stream:
                                                                  launched.append((config, schedule))))
    return launched


@pytest.mark.parametrize("built", ["fixed_work", "fixed_blocks", "atomic_counter"])
@pytest.mark.parametrize("called", ["steal", "auto"])
def test_a_call_time_steal_on_a_kernel_built_for_another_policy_gets_the_default_quantum(fake_occupancy, monkeypatch,
                                                                                        built, called):
    """Such a kernel could not be given a quantum, so its steal launches take the documented default, and
    the full tile grid until a slice is reported; they ran with quantum 0 (never yielding) on the resident grid."""
    from types import SimpleNamespace

    kernels, _ = fake_occupancy
    launched = _launch_recorder(monkeypatch, kernels)
    k = TileKernel("int* x", "", policy=built, block=256)
    monkeypatch.setattr(k, "compile", lambda arch, policy: SimpleNamespace(
        kernel=lambda name: kernels["steal" if policy == "steal" else "fixed_blocks"]))
    k(100_000, 0x2000, stream=3, policy=called)  # auto: steal on the stand-in 9.0
    config, schedule = launched[-1]
    assert k.last_launch.policy == "steal" and schedule.quantum_ns == int(DEFAULT_QUANTUM_US * 1000)
    assert schedule.report_ptr == 0x5000
    assert config.grid == (100_000, 1, 1)
    k(100_000, 0x2000, stream=3)  # the kernel's own policy: no quantum
    assert launched[-1][1].quantum_ns == 0 and k.last_launch.policy == built


def test_steal_options_apply_to_steal_launches_only(fake_occupancy, monkeypatch):
    """A kernel built for steal (or auto) with a quantum and min_tiles may be launched with another policy, which
    runs without them, as auto does where it runs fixed_work; its steal launches keep them."""
    kernels, _ = fake_occupancy
    launched = _launch_recorder(monkeypatch, kernels)
    k = TileKernel("int* x", "", policy="auto", block=256, quantum_us=10.0, min_tiles=4)
    monkeypatch.setattr(k, "kernel", lambda policy=None: (kernels["fixed_blocks" if policy else "steal"],
                                                          policy or "steal"))
    k(100_000, 0x2000, stream=3, policy="fixed_blocks")
    config, schedule = launched[-1]
    assert schedule.quantum_ns == 0 and schedule.min_units == 1 and config.grid == (3 * 132, 1, 1)
    k(100_000, 0x2000, stream=3)
    config, schedule = launched[-1]
    assert schedule.quantum_ns == 10_000 and schedule.min_units == 4
    assert config.grid == (steal_grid_units(100_000, 4, 8 * 132), 1, 1)


# -- a trace outlives its stream; a tile order has landed before a launch can read it ----------------------------

def test_a_trace_waits_for_an_event_after_its_launch_not_for_the_stream(fake_occupancy, monkeypatch):
    """The stream may be destroyed before the records are read (its handle then names nothing, or another stream):
    the records wait for an event recorded after the launch and are copied on a stream of cuadv's own. A captured
    launch records no event (one recorded in a capture cannot be waited for) and is read from its stream. Buffers
    are allocated in relaxed capture mode (a global-mode capture is invalidated by cuMemAlloc)."""
    from types import SimpleNamespace

    from cuadv.work_stealing import tile_kernel, trace as trace_module

    kernels, _ = fake_occupancy
    log = []

    relaxed = _RelaxedMode()

    class Buffer:  # the trace buffer, in host memory
        def __init__(self, nbytes, fill=None):
            self.ptr, self.nbytes = 0x9000, nbytes
            log.append(("alloc", relaxed.on))

        def fill(self, byte, stream=None):
            log.append(("poison", stream))

        def to_host(self, dtype, stream, what):
            log.append(("copy", stream))
            return np.full(self.nbytes, 0xFF, np.uint8)

    monkeypatch.setattr(tile_kernel, "DeviceBuffer", Buffer)
    monkeypatch.setattr(tile_kernel, "_new_event", lambda: "event")
    monkeypatch.setattr(tile_kernel, "_record", lambda event, stream: log.append(("record", event, stream)))
    monkeypatch.setattr(tile_kernel, "capturing", lambda stream: stream == 99)
    monkeypatch.setattr(tile_kernel, "relaxed_capture_mode", relaxed)
    monkeypatch.setattr(tile_kernel, "prepare", _launcher_calling(lambda kernel, config, *args, stream:
                                                                  log.append(("launch", stream))))
    monkeypatch.setattr(trace_module, "wait", lambda target, what=None: log.append(("wait", target)))
    monkeypatch.setattr(trace_module, "_copy_stream", lambda: 0xC0)
    monkeypatch.setattr(trace_module, "driver", lambda: SimpleNamespace(cuEventDestroy=lambda e: log.append(
        ("destroy", e))))
    k = TileKernel("int* x", "", policy="fixed_blocks", block=256)
    monkeypatch.setattr(k, "kernel", lambda policy=None: (kernels["fixed_blocks"], "fixed_blocks"))
    trace = k(1000, 0x2000, stream=7, trace=True)
    assert log == [("alloc", True), ("poison", 7), ("launch", 7), ("record", "event", 7)]
    log.clear()
    assert trace.records.shape == (1000,) and not trace.written.any()
    assert log == [("wait", "event"), ("copy", 0xC0), ("destroy", "event")]
    log.clear()
    captured = k(1000, 0x2000, stream=99, trace=True)
    assert log == [("alloc", True), ("poison", 99), ("launch", 99)]
    log.clear()
    assert captured.records.shape == (1000,) and log == [("copy", 99)]


def test_a_failed_captured_launch_keeps_its_trace_buffer_and_allocations_are_relaxed(fake_occupancy, monkeypatch):
    """A global-mode capture is invalidated by this thread's cuMemAlloc, cuMemHostAlloc and cuMemFree: a traced
    launch allocates its buffer, and a steal kernel takes its first slice report, in relaxed capture mode; a traced
    launch that raises while its stream is captured keeps its buffer for the process instead of freeing it (on a
    stream not captured, the buffer goes with the call)."""
    from cuadv import memory
    from cuadv.errors import KernelArgumentError
    from cuadv.work_stealing import tile_kernel

    kernels, _ = fake_occupancy
    relaxed, made, kept = _RelaxedMode(), [], []

    class Buffer:
        def __init__(self, nbytes, fill=None):
            self.ptr = 0x9000
            made.append(("buffer", relaxed.on))

        def fill(self, byte, stream=None):
            pass

    class Reports:
        def take(self):
            made.append(("report", relaxed.on))
            return None, 0x7000

    def refuse(kernel, config, *args, stream):
        raise KernelArgumentError("a bad argument")

    monkeypatch.setattr(tile_kernel, "DeviceBuffer", Buffer)
    monkeypatch.setattr(tile_kernel, "relaxed_capture_mode", relaxed)
    monkeypatch.setattr(tile_kernel, "_reports", Reports())
    monkeypatch.setattr(tile_kernel, "capturing", lambda stream: stream == 99)
    monkeypatch.setattr(memory, "_KEPT_FOR_GRAPHS", kept)
    monkeypatch.setattr(tile_kernel, "_pool", _HostPool())
    monkeypatch.setattr(tile_kernel, "prepare", _launcher_calling(refuse))
    k = TileKernel("int* x", "", policy="steal", quantum_us=10.0, block=256)
    monkeypatch.setattr(k, "kernel", lambda policy=None: (kernels[policy or "steal"], policy or "steal"))
    for stream in (7, 99):
        with pytest.raises(KernelArgumentError, match="a bad argument"):
            k(1000, 0x2000, stream=stream, trace=True, policy="fixed_blocks")
    assert len(kept) == 1 and isinstance(kept[0], Buffer)  # the captured launch's buffer only, no TileOrder
    with pytest.raises(KernelArgumentError):
        k(1000, 0x2000, stream=7)  # steal with its quantum: the kernel's first launch takes its report word
    assert made == [("buffer", True), ("buffer", True), ("report", True)]


def test_a_tile_order_has_landed_when_it_is_made(monkeypatch):
    """The upload is a copy from pageable memory, which may return before its DMA lands on the device; a launch on a
    non-blocking stream does not wait for it, so the constructor waits for it."""
    from cuadv.work_stealing import TileOrder, trace as trace_module

    log = []

    class Buffer:
        def __init__(self, nbytes, fill=0):
            log.append(("alloc", nbytes, fill))

        def from_host(self, array):
            log.append(("copy", array.dtype, array.tolist()))

    monkeypatch.setattr(trace_module, "DeviceBuffer", Buffer)
    monkeypatch.setattr(trace_module, "wait", lambda target=None, what=None: log.append(("wait", target)))
    assert TileOrder([2, 0, 1]).units == 3
    assert log == [("alloc", 12, None), ("copy", np.uint32, [2, 0, 1]), ("wait", 0)]


# -- a call-time policy is a name or None; a quantum too large for 64 bits raises as documented --------------------

@pytest.mark.parametrize("policy, error", [("", ValueError), (0, TypeError), (False, TypeError)])
def test_a_policy_that_is_no_name_raises_rather_than_running_the_kernels_own(fake_occupancy, policy, error):
    """None means the kernel's policy; any other false value ("", 0) raises as resolve_policy documents (it ran the
    kernel's policy as if none had been given)."""
    k = TileKernel("int* x", "", policy="fixed_work")
    with pytest.raises(error, match="policy must be"):
        k.kernel(policy)
    with pytest.raises(error, match="policy must be"):
        k.compile("sm_90a", policy)


@pytest.mark.parametrize("quantum", [1e306, np.float64(1e306), 1.8446744073709552e16, 10**30])
def test_a_quantum_beyond_64_bits_of_nanoseconds_is_a_launch_config_error(quantum):
    with pytest.raises(LaunchConfigError, match="64-bit count of nanoseconds"):  # 1e306 raised OverflowError
        TileKernel("int* x", "", policy="steal", quantum_us=quantum)


def test_a_numpy_integer_quantum_is_not_wrapped():
    assert check_quantum(np.int64(10**16), "steal") == 10**19  # np.int64 * 1000 wrapped: a 1 ns quantum
    assert check_quantum(np.float32(2.5), "steal") == 2500


# -- a bad argument raises before the work a launch enqueues ahead of its kernel ------------------------------

@pytest.mark.parametrize("policy, trace", [("atomic_counter", False), ("fixed_blocks", True), ("atomic_counter", True)])
def test_a_bad_argument_raises_before_a_trace_fill_or_a_counter_memset(fake_occupancy, monkeypatch, policy, trace):
    """The launcher is the real one (its device checks and the driver's launch stood in for): a float64 array for a
    float* raises KernelArgumentError with nothing enqueued (the trace buffer's poison and atomic_counter's memset
    were enqueued first); a good call enqueues them, then the kernel, on the launch's stream."""
    from types import SimpleNamespace

    import cuadv.launching as launching
    from cuadv import _cuda
    from cuadv.errors import KernelArgumentError
    from cuadv.kernel import Kernel
    from cuadv.work_stealing import tile_kernel

    enqueued = []

    class Buffer:
        def __init__(self, nbytes, fill=None):
            self.ptr = 0x9000

        def fill(self, byte, stream=None):
            enqueued.append(("poison", stream))

    class Driver:  # the real bindings, but a launch is recorded
        def __getattr__(self, name):
            return getattr(_cuda.driver(), name)

        def cuLaunchKernelEx(self, cfg, handle, params, extra):
            enqueued.append(("kernel", int(cfg.hStream)))
            return (0,)

    class Array:
        def __init__(self, typestr):
            self.__cuda_array_interface__ = {"data": (0x10000, False), "shape": (4,), "typestr": typestr,
                                             "version": 3}

        def __dlpack_device__(self):  # in GPU 0's memory, where the stand-in checks say the launch runs
            return (2, 0)

    k = TileKernel("float* x", "", policy=policy, block=256)
    kernel = Kernel(SimpleNamespace(handle=0xABC), "cuadv_tiles", module=SimpleNamespace(source=k.source(policy)))
    kernel.__dict__.update(param_sizes=(80, 8), max_threads_per_block=1024, static_shared_bytes=0)
    kernel.per_sm = 3  # the fake occupancy query's answer
    monkeypatch.setattr(k, "kernel", lambda policy=None: (kernel, policy or k.policy))
    monkeypatch.setattr(launching, "check_config", lambda kernel, config: 0)
    monkeypatch.setattr(launching, "driver", lambda: Driver())
    monkeypatch.setattr(tile_kernel, "DeviceBuffer", Buffer)
    monkeypatch.setattr(tile_kernel, "_counters", _HostPool())
    monkeypatch.setattr(tile_kernel, "driver", lambda: SimpleNamespace(
        cuMemsetD32Async=lambda ptr, value, count, stream: enqueued.append(("memset", stream)) or (0,)))
    monkeypatch.setattr(tile_kernel, "_new_event", lambda: "event")
    monkeypatch.setattr(tile_kernel, "_record", lambda event, stream: None)
    monkeypatch.setattr(tile_kernel, "capturing", lambda stream: False)
    with pytest.raises(KernelArgumentError, match="got a float64 array, but float\\* reads float32"):
        k(1000, Array("<f8"), stream=7, trace=trace)
    assert enqueued == []
    k(1000, Array("<f4"), stream=7, trace=trace)
    ahead = ([("poison", 7)] if trace else []) + ([("memset", 7)] if policy == "atomic_counter" else [])
    assert enqueued == ahead + [("kernel", 7)]


def test_heaviest_first_refuses_costs_that_are_not_finite():
    """A NaN cost would sort as the lightest and be handed out last: refused, naming the unit."""
    from cuadv.work_stealing.trace import TileOrder

    for bad in (math.nan, math.inf):
        with pytest.raises(LaunchConfigError, match=r"tile costs must be finite numbers; unit 1 costs"):
            TileOrder.heaviest_first([1.0, bad, 5.0])


def test_a_schedules_second_state_must_fit_the_address_space():
    with pytest.raises(LaunchConfigError, match=r"state_ptr = 0xfffffffffffffff8 with phase 1 puts the second state"):
        Schedule(tiles=8, cluster=1, state_ptr=2**64 - 8, phase=1)
    Schedule(tiles=8, cluster=1, state_ptr=2**64 - 8, phase=0)  # the first state is the one used
