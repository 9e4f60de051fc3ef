"""Every tile exactly once, for every policy this GPU runs: sizes with tails, 2-D and 3-D grids,
clusters up to 16, tiny and infinite quanta, back-to-back launches, graph replays, two streams."""

import math

import numpy as np
import pytest

from cuadv import TileKernel, current_device
from cuadv.timing import synchronize
from cuadv.work_stealing.schedule import steal_grid_units
from cuadv.work_stealing.policies import runnable_policies

pytestmark = pytest.mark.gpu

PARAMS = "unsigned int* count, unsigned int* prologues"
PROLOGUE = "if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) atomicAdd(prologues, 1u);"
# Every thread takes part, so a tile body run by a partial block or twice shows in the count.
BODY = """
      __syncthreads();
      if (threadIdx.x == blockDim.x - 1 && threadIdx.y == blockDim.y - 1 && threadIdx.z == blockDim.z - 1)
        atomicAdd(&count[tile.index], 1u);
"""

SPIN_1US = """
      if (threadIdx.x == 0) { unsigned long long t0 = cuadv::ptx::globaltimer_ns();
        while (cuadv::ptx::globaltimer_ns() - t0 < 1000) {} }  // 1 us of work per tile
"""


def policies() -> tuple[str, ...]:
    return runnable_policies(current_device().caps.compute_capability)


def run_counts(cp, kernel, tiles, launches=1, stream=None, **kw):
    n = math.prod(tiles) if isinstance(tiles, tuple) else tiles
    count = cp.zeros(max(n, 1), dtype=cp.uint32)
    prologues = cp.zeros(1, dtype=cp.uint32)
    for _ in range(launches):
        kernel(tiles, count, prologues, stream=stream, **kw)
    synchronize(stream)
    return cp.asnumpy(count)[:n], int(prologues.get()[0])


@pytest.mark.parametrize("policy", ["fixed_work", "fixed_blocks", "atomic_counter", "auto", "steal", "clc"])
@pytest.mark.parametrize("tiles", [0, 1, 2, 97, 1000, 12345, 1_000_003])
def test_each_tile_once_1d(cp, policy, tiles):
    if policy not in policies():
        pytest.skip(f"{policy} does not run on this GPU")
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=64, name="once_1d")
    counts, prologues = run_counts(cp, k, tiles)
    assert (counts == 1).all()
    assert prologues <= max(tiles, 0)
    if policy == "fixed_work":
        assert prologues == tiles  # one prologue per tile: the seed's cost of fixed work


@pytest.mark.parametrize("policy", ["fixed_work", "fixed_blocks", "atomic_counter", "steal"])
def test_tens_of_millions_of_tiles(cp, policy):
    if policy not in policies():
        pytest.skip(f"{policy} does not run on this GPU")
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=32, name="once_big")
    counts, _ = run_counts(cp, k, 20_000_003)
    assert (counts == 1).all()


@pytest.mark.parametrize("policy", ["fixed_work", "fixed_blocks", "atomic_counter", "steal"])
@pytest.mark.parametrize("tiles", [(37, 23), (5, 7, 11), (1, 1, 9)])
def test_each_tile_once_2d_3d(cp, policy, tiles):
    if policy not in policies():
        pytest.skip(f"{policy} does not run on this GPU")
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=(16, 4), name="once_nd")
    counts, _ = run_counts(cp, k, tiles)
    assert (counts == 1).all()


@pytest.mark.parametrize("policy", ["fixed_work", "fixed_blocks", "atomic_counter", "steal"])
@pytest.mark.parametrize("cluster, tiles", [((2, 1, 1), (2 * 101,)), ((4, 1, 1), (4 * 33,)), ((8, 1, 1), (8 * 51,)),
                                            ((16, 1, 1), (16 * 37,)), ((2, 2, 1), (38, 22)),
                                            ((2, 2, 2), (6, 4, 10)), ((1, 4, 1), (3, 8))])
def test_each_tile_once_with_clusters(cp, policy, cluster, tiles):
    if policy not in policies():
        pytest.skip(f"{policy} does not run on this GPU")
    if math.prod(cluster) > current_device().caps.max_cluster_size_nonportable:
        pytest.skip("cluster larger than this GPU allows")
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=64, cluster=cluster, name="once_cluster")
    counts, _ = run_counts(cp, k, tiles)
    assert (counts == 1).all()


@pytest.mark.parametrize("quantum_us", [0.5, 5.0, math.inf])
def test_steal_quantum_keeps_exactly_once(cp, quantum_us):
    if "steal" not in policies():
        pytest.skip("steal needs compute capability 9.0")
    spin = """
      if (threadIdx.x == 0) { unsigned long long t0 = cuadv::ptx::globaltimer_ns();
        while (cuadv::ptx::globaltimer_ns() - t0 < 2000) {} }  // 2 us of work per tile
    """
    k = TileKernel(PARAMS, spin + BODY, PROLOGUE, policy="steal", block=64, quantum_us=quantum_us, name="once_q")
    counts, prologues = run_counts(cp, k, 20_011)
    assert (counts == 1).all()
    assert 1 <= prologues <= 20_011


@pytest.mark.parametrize("min_tiles, tiles, cluster", [(2, 20_011, 1), (7, 20_011, 1), (64, 997, 1),
                                                      (5_000, 3_001, 1), (3, (37, 23, 5), 1),
                                                      (4, (2 * 3001,), (2, 1, 1)), (3, (38, 22), (2, 2, 1))])
def test_steal_min_tiles_keeps_exactly_once(cp, min_tiles, tiles, cluster):
    """A quantum far shorter than a tile, so every block yields as soon as min_tiles allows: the smaller grid
    (ceil(units / min_tiles) blocks and a spare wave) still takes every tile once."""
    if "steal" not in policies():
        pytest.skip("steal needs compute capability 9.0")
    k = TileKernel(PARAMS, SPIN_1US + BODY, PROLOGUE, policy="steal", block=64, cluster=cluster, quantum_us=0.2,
                   min_tiles=min_tiles, name="once_min_tiles")
    for launches in (1, 3):  # back to back on one stream: no reset between them
        counts, prologues = run_counts(cp, k, tiles, launches=launches)
        assert (counts == launches).all()
        units = math.prod(tiles if isinstance(tiles, tuple) else (tiles,)) // math.prod(k.cluster)
        blocks = steal_grid_units(units, min_tiles, k.resident_units())  # each block runs the prologue at most once
        assert prologues <= launches * math.prod(k.cluster) * blocks


@pytest.mark.parametrize("cluster", [1, (2, 1, 1)])
def test_steal_learns_min_tiles_from_spent_slices(cp, cluster):
    """The default min_tiles: the first launch has the full grid, and its blocks that give their SM back
    report what a slice held; later launches run one block per that many units, every tile still once."""
    if "steal" not in policies():
        pytest.skip("steal needs compute capability 9.0")
    k = TileKernel(PARAMS, SPIN_1US + BODY, PROLOGUE, policy="steal", block=64, cluster=cluster, quantum_us=20.0,
                   prologue_factor=0, name="learned")
    tiles, units = 200_002, 200_002 // math.prod(k.cluster)
    counts, prologues = run_counts(cp, k, tiles)
    assert (counts == 1).all() and k.slice_report is not None
    report = k.slice_report
    assert 1000 <= report.ns_per_unit <= 10_000  # tiles of 1 us and more (a GPU shared with other tests)
    assert 2 <= report.units_per_slice == -(-20_000 // report.ns_per_unit) <= 20  # 20 us slices, rounded up
    kernel, _ = k.kernel()
    learned, resident = k.min_units(kernel, "steal", units), k._resident_units(kernel)
    share = -(-units // resident)  # a slot's share: where it is at most two slices, no block yields while work is left
    whole = share <= 2 * report.units_per_slice
    assert learned == (units if whole else min(report.units_per_slice, units // resident)) >= 2
    blocks = steal_grid_units(units, learned, resident)
    assert blocks == (resident if whole else -(-units // learned) + resident) < units
    assert k.launch_config(kernel, "steal", (tiles, 1, 1), min_units=learned).grid[0] == blocks * k.cluster[0]
    counts, prologues = run_counts(cp, k, tiles, launches=3)
    assert (counts == 3).all()
    smaller = steal_grid_units(units, 2, k._resident_units(kernel))  # the grid of any learned min_tiles >= 2
    assert prologues <= 3 * math.prod(k.cluster) * smaller


def test_steal_learns_from_a_launch_whose_slices_never_end(cp):
    """Slices longer than the launch: no block gives its SM back, so the first sampled block to find the work
    gone reports its pace; the next launch runs only the blocks that fit at once, none yielding while work is
    left, every tile still once (the full tile grid again would launch a block per tile, nearly all finding no
    work)."""
    if "steal" not in policies():
        pytest.skip("steal needs compute capability 9.0")
    k = TileKernel(PARAMS, SPIN_1US + BODY, PROLOGUE, policy="steal", block=64, quantum_us=2e6,
                   prologue_factor=0, name="never_spent")
    tiles = 200_002
    counts, _ = run_counts(cp, k, tiles)
    assert (counts == 1).all() and k.slice_report is not None
    report = k.slice_report
    assert report.units_per_slice == -(-2_000_000_000 // report.ns_per_unit)  # a 2 s slice at its pace
    kernel, _ = k.kernel()
    resident = k._resident_units(kernel)
    assert k.min_units(kernel, "steal", tiles) == tiles  # a slot's share is within two slices: no yield
    assert k.launch_config(kernel, "steal", (tiles, 1, 1)).grid[0] == resident
    counts, prologues = run_counts(cp, k, tiles, launches=2)
    assert (counts == 2).all() and prologues <= 2 * resident
    launched = k.last_launch  # the second launch: the resident grid, no block yielding while work is left
    assert launched.config.grid[0] == resident and launched.min_units == tiles


def test_steal_without_quantum_launches_only_resident_blocks(cp):
    """Q = inf never yields, so the grid is what fits at once: each resident block runs the prologue once."""
    if "steal" not in policies():
        pytest.skip("steal needs compute capability 9.0")
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy="steal", block=64, quantum_us=math.inf, name="once_resident")
    counts, prologues = run_counts(cp, k, 1_000_003)
    assert (counts == 1).all()
    kernel, _ = k.kernel()
    assert prologues <= k.launch_config(kernel, "steal", (1_000_003, 1, 1)).grid[0] < 1_000_003


@pytest.mark.parametrize("policy", ["steal", "fixed_blocks", "atomic_counter", "auto"])
def test_back_to_back_launches_need_no_reset(cp, policy):
    """No host reset between launches (atomic_counter's memset is part of each launch, not the caller's)."""
    if policy not in policies():
        pytest.skip(f"{policy} does not run on this GPU")
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=64,
                   quantum_us=3.0 if policy in ("steal", "auto") else None,
                   name="back_to_back")
    counts, _ = run_counts(cp, k, 50_021, launches=7)
    assert (counts == 7).all()


@pytest.mark.parametrize("min_tiles", [1, 5, None])
def test_graph_replays_need_no_reset(cp, min_tiles):
    if "steal" not in policies():
        pytest.skip("steal needs compute capability 9.0")
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy="steal", block=64, quantum_us=2.0, min_tiles=min_tiles,
                   name="graph_replay")
    tiles = 30_011
    count = cp.zeros(tiles, dtype=cp.uint32)
    prologues = cp.zeros(1, dtype=cp.uint32)
    cp.cuda.Device().synchronize()  # the zeros (CuPy's stream) land before the non-blocking stream's kernels
    stream = cp.cuda.Stream(non_blocking=True)
    k(tiles, count, prologues, stream=stream)  # compiles and checks outside the capture
    stream.synchronize()
    stream.begin_capture()
    k(tiles, count, prologues, stream=stream)
    graph = stream.end_capture()
    for _ in range(5):
        graph.launch(stream)
    k(tiles, count, prologues, stream=stream)  # the stream's own counters are untouched by the graph
    stream.synchronize()
    assert (cp.asnumpy(count) == 7).all()


@pytest.mark.parametrize("cluster", [1, (2, 1, 1)])
def test_atomic_counter_graph_replays(cp, cluster):
    """atomic_counter captured in a graph: each captured launch brings its memset node, so replays and a
    stream launch after them each run every tile exactly once (a missing reset would skip tiles)."""
    from cuadv.graphs import Graph

    k = TileKernel(PARAMS, SPIN_1US + BODY, PROLOGUE, policy="atomic_counter", block=64, cluster=cluster,
                   name="counter_graph")
    tiles, launches = 30_010, 3
    count = cp.zeros(tiles, dtype=cp.uint32)
    prologues = cp.zeros(1, dtype=cp.uint32)
    cp.cuda.Device().synchronize()  # the zeros (CuPy's stream) land before the non-blocking stream's kernels
    stream = cp.cuda.Stream(non_blocking=True)
    k(tiles, count, prologues, stream=stream)  # compiles and checks outside the capture
    stream.synchronize()
    graph = Graph.capture(stream, lambda: [k(tiles, count, prologues, stream=stream) for _ in range(launches)])
    assert graph.node_count() == 2 * launches  # a memset and a kernel per launch
    for _ in range(5):
        graph.launch(stream)
    k(tiles, count, prologues, stream=stream)
    stream.synchronize()
    assert (cp.asnumpy(count) == 2 + 5 * launches).all()
    assert int(prologues.get()[0]) <= (2 + 5 * launches) * k.resident_units("atomic_counter") * math.prod(k.cluster)


def test_atomic_counter_on_two_streams(cp):
    """Two streams at once never share a counter (each stream's launches have their own)."""
    k = TileKernel(PARAMS, SPIN_1US + BODY, PROLOGUE, policy="atomic_counter", block=64, name="counter_streams")
    tiles = 100_003
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    counts = [cp.zeros(tiles, dtype=cp.uint32) for _ in streams]
    prologues = cp.zeros(1, dtype=cp.uint32)
    cp.cuda.Device().synchronize()
    for _ in range(3):
        for s, c in zip(streams, counts):
            k(tiles, c, prologues, stream=s)
    for s in streams:
        s.synchronize()
    for c in counts:
        assert (cp.asnumpy(c) == 3).all()
    assert k.last_launch.config.grid == (k.resident_units("atomic_counter"), 1, 1)


def test_two_streams_do_not_share_scheduler_state(cp):
    if "steal" not in policies():
        pytest.skip("steal needs compute capability 9.0")
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy="steal", block=64, quantum_us=1.0, name="two_streams")
    tiles = 200_003
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    counts = [cp.zeros(tiles, dtype=cp.uint32) for _ in streams]
    prologues = cp.zeros(1, dtype=cp.uint32)
    cp.cuda.Device().synchronize()  # the zeros (CuPy's stream) land before the non-blocking streams' kernels
    for _ in range(3):
        for s, c in zip(streams, counts):
            k(tiles, c, prologues, stream=s)
    for s in streams:
        s.synchronize()
    for c in counts:
        assert (cp.asnumpy(c) == 3).all()


@pytest.mark.parametrize("policy", ["steal", "atomic_counter"])
def test_a_stream_per_batch_reuses_finished_slots(cp, monkeypatch, policy):
    """A stream created per batch and dropped, every other one with its launches still running: each launch
    exact, and the pool (2 slots a chunk here) hands a new stream a slot whose launches finished rather than
    growing by one per stream."""
    if policy not in policies():
        pytest.skip("steal needs compute capability 9.0")
    from cuadv.state_pool import StatePool
    from cuadv.work_stealing import tile_kernel

    pool = StatePool("tests", slots=2)
    monkeypatch.setattr(tile_kernel, "_pool" if policy == "steal" else "_counters", pool)
    k = TileKernel(PARAMS, SPIN_1US + BODY, PROLOGUE, policy=policy, block=64, name="stream_per_batch")
    tiles, rounds = 50_001, 8
    counts = [cp.zeros(tiles, dtype=cp.uint32) for _ in range(rounds)]
    prologues = cp.zeros(1, dtype=cp.uint32)
    cp.cuda.Device().synchronize()  # the zeros (CuPy's stream) land before the non-blocking streams' kernels
    for r in range(rounds):
        s = cp.cuda.Stream(non_blocking=True)
        for _ in range(2):
            k(tiles, counts[r], prologues, stream=s)
        if r % 2 == 0:
            s.synchronize()
        del s  # destroyed: a later stream may get its handle while its work still runs
    cp.cuda.Device().synchronize()
    for c in counts:
        assert (cp.asnumpy(c) == 2).all()
    assert pool.taken <= 2 + rounds // 2  # each synchronized stream's slot went to a later one


@pytest.mark.parametrize("policy", ["fixed_work", "fixed_blocks", "atomic_counter", "steal"])
def test_trace_records_every_tile(cp, policy):
    if policy not in policies():
        pytest.skip(f"{policy} does not run on this GPU")
    caps = current_device().caps
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=64, name="traced")
    tiles = 5003
    count = cp.zeros(tiles, dtype=cp.uint32)
    trace = k(tiles, count, cp.zeros(1, dtype=cp.uint32), trace=True)
    assert trace.written.all() and len(trace.records) == tiles
    assert (trace.records["smid"] < caps.sm_count).all()
    assert (trace.records["start_ns"] <= trace.records["end_ns"]).all()
    assert trace.makespan_ns > 0
    if policy in ("fixed_blocks", "atomic_counter"):
        assert len(np.unique(trace.records["block"])) <= k.resident_units(policy)


@pytest.mark.parametrize("policy", ["fixed_work", "fixed_blocks", "atomic_counter", "steal"])
@pytest.mark.parametrize("cluster, tiles", [((1, 1, 1), (10_007,)), ((2, 1, 1), (2 * 999,)), ((2, 2, 1), (38, 22))])
def test_tile_order_keeps_each_tile_once(cp, policy, cluster, tiles):
    from cuadv import TileOrder

    if policy not in policies():
        pytest.skip(f"{policy} does not run on this GPU")
    units = math.prod(tiles) // math.prod(cluster)
    order = TileOrder(np.random.default_rng().permutation(units))
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=64, cluster=cluster, quantum_us=2.0 if policy == "steal"
                   else None, name="ordered")
    counts, _ = run_counts(cp, k, tiles, launches=2, order=order)
    assert (counts == 2).all()


def test_tile_order_is_followed(cp):
    """fixed_blocks with one block per SM slot hands out units in order: the trace shows it."""
    from cuadv import TileOrder

    tiles = 3001
    perm = np.random.default_rng().permutation(tiles)
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy="fixed_blocks", block=64, name="ordered_trace")
    count = cp.zeros(tiles, dtype=cp.uint32)
    trace = k(tiles, count, cp.zeros(1, dtype=cp.uint32), trace=True, order=TileOrder(perm))
    grid = len(np.unique(trace.records["block"]))
    # block b runs units perm[b], perm[b + grid], ... in that order
    for b in (0, grid // 2):
        mine = perm[b::grid]
        starts = trace.records["start_ns"][mine]
        assert (np.diff(starts.astype(np.int64)) >= 0).all()



def test_each_policy_grid_is_its_own_kernels_resident_count(cp):
    """One TileKernel launched with steal (Q = inf: the grid that fits at once) and then fixed_blocks:
    each grid equals the resident count of that policy's own compiled kernel (the occupancy API), not
    the first policy's. The two kernels differ (different loops and registers)."""
    from cuadv.kernel import max_active_blocks_per_sm

    if "steal" not in policies():
        pytest.skip("steal needs compute capability 9.0")
    caps = current_device().caps
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy="steal", block=256, quantum_us=math.inf, name="own_grid")
    tiles = 2_000_003
    for policy in ("steal", "fixed_blocks", "steal"):
        counts, _ = run_counts(cp, k, tiles, policy=policy)
        assert (counts == 1).all()
        kernel, concrete = k.kernel(policy)
        resident = max_active_blocks_per_sm(kernel, 256) * caps.sm_count
        assert k.last_launch.policy == concrete == policy
        assert k.last_launch.config.grid == (resident, 1, 1) == (k.resident_units(policy), 1, 1)
    assert k.kernel("steal")[0] is not k.kernel("fixed_blocks")[0]


@pytest.mark.parametrize("policy", ["fixed_blocks", "steal"])
def test_stream_none_follows_a_non_blocking_cupy_stream(cp, policy):
    """stream=None inside `with stream:` launches on CuPy's current (non-blocking) stream, ordered with the
    CuPy work before and after it on that stream: exact counts without any device-wide synchronisation."""
    if policy not in policies():
        pytest.skip(f"{policy} does not run on this GPU")
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=64, quantum_us=2.0 if policy == "steal" else None,
                   name="cupy_stream")
    stream = cp.cuda.Stream(non_blocking=True)
    tiles = 100_003
    with stream:
        count = cp.zeros(tiles, dtype=cp.uint32)  # on the stream, before the kernel
        prologues = cp.zeros(1, dtype=cp.uint32)
        for _ in range(3):
            k(tiles, count, prologues)
        assert k.last_launch.stream == stream.ptr
        total = int(count.sum())  # CuPy on the same stream, after the kernels
        exact = bool((count == 3).all())
    assert total == 3 * tiles and exact


def test_stream_none_follows_a_torch_side_stream():
    """stream=None with torch tensors launches on torch's current stream (a side stream here), ordered
    with the torch work around it."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    # int32 tensors (torch has no uint32 arithmetic), so the kernel declares int counters: launch checks the dtype
    k = TileKernel("int* count, int* prologues", BODY, PROLOGUE, policy="fixed_blocks", block=64, name="torch_stream")
    side = torch.cuda.Stream()
    tiles = 100_003
    with torch.cuda.stream(side):
        count = torch.zeros(tiles, dtype=torch.int32, device="cuda")
        prologues = torch.zeros(1, dtype=torch.int32, device="cuda")
        for _ in range(2):
            k(tiles, count, prologues)
        assert k.last_launch.stream == side.cuda_stream
        doubled = count * 2  # torch on the side stream, after the kernels
    side.synchronize()
    assert bool((doubled == 4).all()) and int(count.sum()) == 2 * tiles


@pytest.mark.parametrize("trace", [False, True])
@pytest.mark.parametrize("non_blocking", [False, True])
def test_a_global_mode_capture_takes_a_new_state_chunk_and_a_trace_buffer(cp, monkeypatch, trace, non_blocking):
    """A capture begun in the global mode (torch.cuda.graph's default; cuadv's Graph.capture is relaxed) prohibits
    cuMemAlloc on its thread, a blocking stream's capture any legacy-stream work, and one such call invalidates it.
    A steal launch whose state slot needs a new chunk of the pool, and a traced launch's buffer, are made in relaxed
    mode and zeroed on a stream of their own instead: the capture ends, and its replays run every tile once (and
    write the trace)."""
    if "steal" not in policies():
        pytest.skip("steal needs compute capability 9.0")
    from cuadv._cuda import check, driver
    from cuadv.state_pool import StatePool
    from cuadv.work_stealing import tile_kernel

    pool = StatePool("tests", slots=1)  # the stream's launch takes the one slot of the first chunk
    monkeypatch.setattr(tile_kernel, "_pool", pool)
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy="steal", block=64, name="global_capture")
    tiles = 5_003
    count = cp.zeros(tiles, dtype=cp.uint32)
    prologues = cp.zeros(1, dtype=cp.uint32)
    cp.cuda.Device().synchronize()
    stream = cp.cuda.Stream(non_blocking=non_blocking)
    k(tiles, count, prologues, trace=trace, stream=stream)  # compiles and checks outside the capture
    stream.synchronize()
    drv = driver()
    h = drv.CUstream(stream.ptr)
    check(drv.cuStreamBeginCapture(h, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture")
    try:
        records = k(tiles, count, prologues, trace=trace, stream=stream)
    finally:
        graph = check(drv.cuStreamEndCapture(h), "cuStreamEndCapture")  # raises if the capture was invalidated
    graph_exec = check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    try:
        assert pool.taken == 2  # the captured launch's slot came from a second chunk, made during the capture
        for _ in range(2):
            check(drv.cuGraphLaunch(graph_exec, h), "cuGraphLaunch")
        stream.synchronize()
        assert (cp.asnumpy(count) == 3).all()
        assert records.written.all() if trace else records is None
    finally:
        drv.cuGraphExecDestroy(graph_exec)
        drv.cuGraphDestroy(graph)


def test_a_captured_traced_launch_keeps_its_order_and_trace_for_the_graph(cp):
    """trace=True and order= in a launch captured into a graph: the caller keeps neither the TileOrder nor the
    Trace's buffer alive, yet every replay reads the order and writes the trace (the launch holds both for the
    graph); the Trace reads the buffer again at each access, so it shows each finished replay's records."""
    import gc

    from cuadv import TileOrder
    from cuadv.graphs import Graph

    policy = "steal" if "steal" in policies() else "fixed_work"
    k = TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=64, name="captured_trace")
    tiles = 5_003
    count = cp.zeros(tiles, dtype=cp.uint32)
    prologues = cp.zeros(1, dtype=cp.uint32)
    cp.cuda.Device().synchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    k(tiles, count, prologues, stream=stream)  # compiles outside the capture
    stream.synchronize()
    traces = []
    graph = Graph.capture(stream, lambda: traces.append(
        k(tiles, count, prologues, trace=True, order=TileOrder(np.arange(tiles)[::-1].copy()), stream=stream)))
    trace = traces[0]
    assert trace.captured
    gc.collect()  # the TileOrder made in the lambda has no Python reference left
    for replay in range(2):
        poison = cp.full(tiles * 3, 0xFFFFFFFFFFFFFFFF, dtype=cp.uint64)  # reuses freed memory, if any was freed
        graph.launch(stream)
        stream.synchronize()
        del poison
        assert trace.written.all() and trace.makespan_ns > 0, replay
    assert (cp.asnumpy(count) == 1 + 2).all()  # every tile once per launch: the order was read intact
    graph.close()


def test_the_own_kernel_example_runs_every_row_five_times():
    """Its own checks: 3 stream launches and 2 graph replays, each row run exactly 5 times, sums equal to NumPy's."""
    from repo_files import load_example

    pytest.importorskip("cupy")
    load_example("schedule_own_kernel").main(3_000)


def test_the_trace_example_runs_every_tile_once(tmp_path):
    from repo_files import load_example

    pytest.importorskip("cupy")
    load_example("work_stealing_trace").main(str(tmp_path))
    assert list(tmp_path.iterdir())  # its timelines and Perfetto trace
