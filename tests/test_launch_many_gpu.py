"""Many small tasks on the GPU: every mechanism runs every task exactly once per run, at sizes with
tails, back to back and (persistent queue) replayed in a graph; the device-side mechanisms link
with cudadevrt and run."""

import pytest

from cuadv import current_device
from cuadv.labs.launch_many import (CHUNK, ContextLimit, DeviceGraphLaunch, DynamicParallelism, GraphOfLaunches,
                                    HostLaunches, PersistentQueue, Tasks, build_modules, measure, validate)
from cuadv.linking import link_device_runtime
from cuadv.timing import synchronize

pytestmark = pytest.mark.gpu

SIZES = (0, 1, 31, 9_973)


@pytest.fixture(scope="module")
def modules():
    caps = current_device().caps
    if caps.compute_capability < (9, 0):
        pytest.skip("the launch lab assumes compute capability 9.0")
    return build_modules(caps.arch)


@pytest.fixture(scope="module")
def stream():
    import cupy as cp

    return cp.cuda.Stream(non_blocking=True)


@pytest.fixture(scope="module")
def pending_launches():
    with ContextLimit("DEV_RUNTIME_PENDING_LAUNCH_COUNT", 20_000) as limit:
        assert not limit.error, limit.error
        yield


def test_host_launches(modules, stream):
    validate(HostLaunches(stream, modules[0]), sizes=(0, 1, 257), runs=2)


def test_graph_of_launches(modules, stream):
    validate(GraphOfLaunches(stream, modules[0]), sizes=(0, 1, 257), runs=3)


@pytest.mark.parametrize("chunk", [1, 3, CHUNK, 1000])
def test_persistent_queue_exactly_once(modules, stream, chunk):
    queue = PersistentQueue(stream, modules[0], current_device().caps, chunk)
    validate(queue, sizes=SIZES + (100_003,), runs=3)


def test_persistent_queue_with_work_per_task(modules, stream):
    queue = PersistentQueue(stream, modules[0], current_device().caps, 4)
    tasks = Tasks(5_000, task_ns=2_000)
    queue.prepare(tasks)
    queue.run()
    synchronize(stream)
    tasks.check(1, queue.label)
    queue.after_check()


def test_persistent_queue_replays_in_a_graph(modules, stream):
    from cuadv.graphs import Graph

    queue = PersistentQueue(stream, modules[0], current_device().caps, CHUNK)
    tasks = Tasks(9_973)
    queue.prepare(tasks)
    queue.run()  # launched once outside the capture
    with Graph.capture(stream, queue.run) as graph:
        for _ in range(4):
            graph.launch(stream)
        synchronize(stream)
    tasks.check(5, queue.label)
    queue.after_check()


def test_dynamic_parallelism(modules, stream, pending_launches):
    dp = DynamicParallelism(stream, link_device_runtime(modules[1]))
    validate(dp, sizes=SIZES + (15_000,), runs=2)


def test_device_graph_launch(modules, stream):
    dg = DeviceGraphLaunch(stream, link_device_runtime(modules[2]))
    validate(dg, sizes=SIZES, runs=3)


def test_measure_reports_per_task_cost(modules, stream):
    queue = PersistentQueue(stream, modules[0], current_device().caps, CHUNK)
    us, prep = measure(queue, 10_000, quick=True)
    assert us > 0 and prep == 0.0


def test_smoke():
    from cuadv.labs.launch_many import LaunchManyLab

    assert LaunchManyLab().smoke(device_side=True) == []


def test_smoke_under_a_tool_without_device_launches_skips_them_with_a_note(monkeypatch):
    from cuadv.labs.launch_many import SANITIZER_TOOL_ENV, LaunchManyLab

    monkeypatch.setenv(SANITIZER_TOOL_ENV, "synccheck")
    notes = LaunchManyLab().smoke()
    assert len(notes) == 1 and "skipped under compute-sanitizer synccheck" in notes[0]


def test_host_launches_use_one_prepared_launcher(modules, stream):
    host = HostLaunches(stream, modules[0])
    launcher = host.launcher
    validate(host, sizes=(3, 1_000), runs=2)
    launchers = host.kernel._launchers
    assert len(launchers) == 1 and launchers.get(host.cfg) is launcher and len(launcher.packer._plans) == 1
