"""The mechanisms the launch lab compares (lab-private): N one-warp tasks launched from the host one by
one, as a CUDA graph, by the persistent queue, by dynamic parallelism and by device graph launch, each
behind one interface (prepare the task set, run once, check). The lab (``launch_many.py``) measures and
reports them; the device code is ``launch_many.cu`` beside this file.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from .._cuda import check, driver
from ..compiler import INCLUDE_DIR, CompiledModule, kernel_source, shipped
from ..errors import CuadvError, ValidationError
from ..launching import LaunchConfig, launch, prepare
from ..params import c_struct
from ..persistent import check_task_count as _check_task_count, check_tasks_per_ticket, resident_grid
from ..timing import synchronize, synchronize_device
from .base import readback

WARP = 32
PERSISTENT_BLOCK = 128
DP_PARENT_BLOCK = 128
CHUNK = 16
TASK_DTYPE = c_struct("TaskParams", [("counts", "<u8"), ("n", "<u4"), ("pad", "<u4"), ("task_ns", "<u8")],
                      size=24)  # mirrors TaskParams in launch_many.cu
MAX_TASKS = 2**32 - 1  # TaskParams.n is 32 bits


def task_params(counts_ptr: int, n: int, task_ns: int = 0) -> bytes:
    rec = np.zeros((), TASK_DTYPE)
    rec["counts"], rec["n"], rec["task_ns"] = counts_ptr, n, task_ns
    return rec.tobytes()


def check_task_count(n: int) -> int:
    return _check_task_count(n, MAX_TASKS)  # the rule of cuadv.persistent, at this lab's 32-bit limit


check_chunk = check_tasks_per_ticket  # the rule of cuadv.persistent


def build_modules(arch: str) -> dict[int, CompiledModule]:
    """Part 0 (host-launched), 1 (dynamic parallelism, relocatable) and 2 (device graph, relocatable)."""
    return {part: shipped("launch_many.cu", name=f"launch_many_{part}", arch=arch, defines={"CUADV_LM_PART": part},
                          rdc=part > 0) for part in (0, 1, 2)}


@dataclass
class Tasks:
    """The counters of one task set; counts[i] is how often task i ran."""

    n: int
    task_ns: int = 0
    counts: object = field(init=False)

    def __post_init__(self):
        import cupy as cp

        check_task_count(self.n)
        self.counts = cp.zeros(max(self.n, 1), dtype=cp.uint32)
        # cp.zeros runs on CuPy's stream; the tasks run on a non-blocking stream that does not wait for it.
        synchronize_device()

    @property
    def params(self) -> bytes:
        return task_params(self.counts.data.ptr, self.n, self.task_ns)

    def check(self, runs: int, label: str) -> None:
        got = readback(self.counts)[: self.n]
        if not np.array_equal(got, np.full(self.n, runs, dtype=np.uint32)):
            lost, dup = int((got < runs).sum()), int((got > runs).sum())
            raise ValidationError(f"{label}, N={self.n}: after {runs} runs {lost} tasks ran fewer times and {dup} "
                                  "more times than that (each task must run exactly once per run)")


class ContextLimit:
    """Raise a context limit (cuCtxSetLimit) for a while and put the old value back. A limit the
    driver refuses leaves ``error`` set (the work then runs under the old limit)."""

    def __init__(self, name: str, value: int):
        drv = driver()
        self.limit = getattr(drv.CUlimit, f"CU_LIMIT_{name}")
        self.name, self.value = name, value
        self.old: int | None = None
        self.error = ""

    def __enter__(self):
        drv = driver()
        try:
            old = int(check(drv.cuCtxGetLimit(self.limit), f"cuCtxGetLimit({self.name})"))
            if self.value > old:
                check(drv.cuCtxSetLimit(self.limit, self.value), f"cuCtxSetLimit({self.name}={self.value})")
                self.old = old
        except CuadvError as exc:
            self.error = str(exc)
        return self

    def __exit__(self, exc_type, *exc):
        if self.old is not None:
            result = driver().cuCtxSetLimit(self.limit, self.old)
            if exc_type is None:  # a failed restore would leave later labs the raised limit (and its memory)
                check(result, f"cuCtxSetLimit({self.name}={self.old}) (restoring it)")


# -- the mechanisms --------------------------------------------------------------------------
class Mechanism:
    """One way of running N tasks: prepare(tasks) once, then run() enqueues one full run on the stream."""

    label = ""
    max_n = math.inf

    def __init__(self, stream):
        self.stream = stream

    def prepare(self, tasks: Tasks) -> float:
        """Host seconds spent preparing (capture, instantiation)."""
        self.tasks = tasks
        return 0.0

    def run(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        pass

    def after_check(self) -> None:
        """Mechanism-specific checks after the runs (errors recorded on the device, reset state)."""


class HostLaunches(Mechanism):
    """One cuadv launch per task through a prepared launcher (checked once, arguments packed in place)."""

    label = "host launch per task (cuadv)"

    def __init__(self, stream, module):
        super().__init__(stream)
        self.kernel = module.kernel("lm_task")
        self.cfg = LaunchConfig(grid=1, block=WARP)
        self.launcher = prepare(self.kernel, self.cfg)  # the device checks, outside any capture
        scratch = Tasks(1)  # one launch before any capture or timing
        self.launcher(scratch.params, np.uint32(0), stream=stream)
        synchronize(stream)

    def run(self) -> None:
        params, launcher, stream = self.tasks.params, self.launcher, self.stream
        for i in range(self.tasks.n):
            launcher(params, np.uint32(i), stream=stream)  # the same argument types as CuPy's row


class LaunchCalls(HostLaunches):
    """The same launches through ``cuadv.launch`` each time: the configuration's launcher is looked
    up per call instead of held (what code that does not keep a launcher pays)."""

    label = "host launch per task (cuadv.launch call)"

    def run(self) -> None:
        params, kernel, cfg, stream = self.tasks.params, self.kernel, self.cfg, self.stream
        for i in range(self.tasks.n):
            launch(kernel, cfg, params, np.uint32(i), stream=stream)


class CupyLaunches(Mechanism):
    label = "host launch per task (CuPy RawKernel, peer)"

    def __init__(self, stream):
        import cupy as cp

        super().__init__(stream)
        module = cp.RawModule(code=kernel_source("launch_many.cu"),
                              options=("-std=c++17", "-DCUADV_LM_PART=0", f"-I{INCLUDE_DIR}"))
        self.kernel = module.get_function("lm_task_args")

    def run(self) -> None:
        t = self.tasks
        n, ns = np.uint32(t.n), np.uint64(t.task_ns)
        with self.stream:
            for i in range(t.n):
                self.kernel((1,), (WARP,), (t.counts, n, ns, np.uint32(i)))


class GraphOfLaunches(Mechanism):
    label = "CUDA graph, one node per task"

    def __init__(self, stream, module):
        super().__init__(stream)
        self.host = HostLaunches(stream, module)
        self.graph = None

    def prepare(self, tasks: Tasks) -> float:
        from ..graphs import Graph

        super().prepare(tasks)
        self.host.prepare(tasks)
        t0 = time.perf_counter()
        self.graph = Graph.capture(self.stream, self.host.run) if tasks.n else None
        return time.perf_counter() - t0

    def run(self) -> None:
        if self.graph is not None:
            self.graph.launch(self.stream)

    def release(self) -> None:
        if self.graph is not None:
            self.graph.close()
            self.graph = None


class PersistentQueue(Mechanism):
    """SMs x resident blocks of 128 threads; every warp takes `chunk` tasks per ticket: lm_persistent, the
    protocol cuadv.persistent.PersistentKernel wraps around a user's task, on the lab's fixed task."""

    def __init__(self, stream, module, caps, chunk: int):
        import cupy as cp

        super().__init__(stream)
        self.kernel = module.kernel("lm_persistent")
        self.chunk = check_chunk(chunk)
        self.cfg = LaunchConfig(grid=resident_grid(self.kernel, PERSISTENT_BLOCK), block=PERSISTENT_BLOCK)
        self.state = cp.zeros(2, dtype=cp.uint64)  # QueueState {next, exited}; resets itself
        synchronize_device()  # zeroed on CuPy's stream before the non-blocking stream uses it
        self.label = f"persistent queue, {chunk} task{'s' if chunk > 1 else ''} per ticket"

    def run(self) -> None:
        launch(self.kernel, self.cfg, self.tasks.params, self.state, np.uint32(self.chunk), stream=self.stream)

    def after_check(self) -> None:
        synchronize(self.stream)
        state = readback(self.state)
        if state.any():
            raise ValidationError(f"{self.label}: the queue state did not reset itself (next={state[0]}, "
                                  f"exited={state[1]})")


class DynamicParallelism(Mechanism):
    label = "dynamic parallelism, one child grid per task"

    def __init__(self, stream, linked: CompiledModule):
        import cupy as cp

        super().__init__(stream)
        self.parent = linked.kernel("lm_dp_parent")
        self.error = cp.zeros(1, dtype=cp.int32)
        synchronize_device()  # zeroed on CuPy's stream before the non-blocking stream uses it

    def run(self) -> None:
        n = self.tasks.n
        if n == 0:
            return
        cfg = LaunchConfig(grid=-(-n // DP_PARENT_BLOCK), block=DP_PARENT_BLOCK)
        launch(self.parent, cfg, self.tasks.params, self.error, stream=self.stream)

    def after_check(self) -> None:
        synchronize(self.stream)
        code = int(readback(self.error)[0])
        if code:
            raise ValidationError(f"{self.label}: a device-side launch failed with {_cuda_error(code)} (raise the "
                                  "pending-launch limit for more children in flight)")


class DeviceGraphLaunch(Mechanism):
    label = "device graph launch, one launch per task"

    def __init__(self, stream, linked: CompiledModule):
        import cupy as cp

        super().__init__(stream)
        self.task_kernel = linked.kernel("lm_graph_task")
        self.launcher = linked.kernel("lm_graph_launcher")
        self.state = cp.zeros(2, dtype=cp.int32)  # GraphTaskState {cursor, error}
        synchronize_device()  # zeroed on CuPy's stream before the non-blocking stream uses it
        self.graphs = []
        self._warm()

    def _warm(self) -> None:
        """Check both configurations without launching: a kernel that launches device graphs may only
        run inside a graph (launched directly it fails with CUDA_ERROR_NOT_SUPPORTED)."""
        from ..launching import prepare

        for kernel in (self.task_kernel, self.launcher):
            prepare(kernel, LaunchConfig(grid=1, block=WARP))

    def prepare(self, tasks: Tasks) -> float:
        from ..graphs import Graph

        super().prepare(tasks)
        t0 = time.perf_counter()
        task_graph = Graph.capture(self.stream, lambda: launch(
            self.task_kernel, LaunchConfig(grid=1, block=WARP), tasks.params, self.state, stream=self.stream),
            device_launch=True)
        self.graphs.append(task_graph)
        task_graph.upload(self.stream)  # device resources in place before the first device-side launch
        self.graphs.append(Graph.capture(self.stream, lambda: launch(
            self.launcher, LaunchConfig(grid=1, block=WARP), np.uint64(task_graph.exec_handle), np.uint32(tasks.n),
            self.state, stream=self.stream)))
        synchronize(self.stream)
        return time.perf_counter() - t0

    def run(self) -> None:
        self.graphs[-1].launch(self.stream)

    def release(self) -> None:
        for g in reversed(self.graphs):
            g.close()
        self.graphs = []

    def after_check(self) -> None:
        synchronize(self.stream)
        cursor, error = (int(v) for v in readback(self.state))
        if error:
            raise ValidationError(f"{self.label}: a device-side cudaGraphLaunch failed with {_cuda_error(error)}")
        if cursor:
            raise ValidationError(f"{self.label}: the cursor did not return to 0 (it is {cursor})")



def device_side_mechanisms(modules: dict[int, CompiledModule], stream) -> tuple[dict, dict]:
    """The two mechanisms that need cudadevrt, or the reason each is unavailable (kept apart so the
    rest of the lab runs without them)."""
    from ..linking import link_device_runtime

    made, missing = {}, {}
    for part, make in ((1, DynamicParallelism), (2, DeviceGraphLaunch)):
        try:
            made[make.label] = make(stream, link_device_runtime(modules[part]))
        except Exception as exc:  # linking, loading or the first launch: this mechanism only
            missing[make.label] = _reason(exc)
    return made, missing

def _cuda_error(code: int) -> str:
    """'cudaErrorX (n)' for a runtime error code recorded by device code."""
    try:
        from cuda.bindings import runtime

        return f"{runtime.cudaError_t(code).name} ({code})"
    except Exception:  # an unknown code
        return f"cudaError {code}"


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, CuadvError) else f"{type(exc).__name__}: {exc}"
