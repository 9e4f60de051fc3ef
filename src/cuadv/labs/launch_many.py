"""Launching many small tasks: host launches, CUDA graphs, a persistent work queue, dynamic
parallelism and device graph launch, on the same N tasks.

Shows: the cost per task of N tiny tasks (N = 10 ... 100,000; one warp each, whose only effect is
counts[i] += 1) under
  - one host launch per task: cuadv through a prepared launcher (``cuadv.prepare``: checked once,
    arguments packed in place), cuadv through ``cuadv.launch(...)`` per call, and CuPy's RawKernel
    as the peer,
  - a CUDA graph with one kernel node per task (captured once, replayed),
  - a persistent kernel (SMs x resident blocks) whose warps take tasks from one global atomic
    ticket, one task per ticket (the atomic hot spot) or 16 per ticket; its exit protocol loses and
    duplicates nothing and its counters reset themselves, so it replays in a graph,
  - dynamic parallelism: a parent grid that launches one child grid per task (relocatable device
    code linked with cudadevrt),
  - device graph launch: a one-node graph, instantiated for device launch, that runs one task and
    tail-launches itself for the next.
Every run is checked: each task ran exactly once per launch.
Needs: compute capability 9.0 for the lab as a whole (device graph launch needs 9.0; dynamic
parallelism 5.0 with CDP2); libcudadevrt.a for the two device-side mechanisms (without it, those
rows say why and the rest runs).
Key insight: a launch costs microseconds wherever it comes from (host, graph node, device); a
persistent kernel pays one launch and then an atomic per task (or per chunk of tasks), which is
nanoseconds - as long as the tasks are small and the queue is not a hot spot.
Run: ``cuadv bench launch`` (``--quick`` for a short run).

Under compute-sanitizer (``cuadv check``), ``smoke()`` runs the device-side mechanisms only under a
tool that supports device-side launches (memcheck). racecheck, synccheck and initcheck do not
support dynamic parallelism - loading such a module makes them warn "not supported by the selected
tool", which counts as a finding - nor the device runtime's graph launches (synccheck stopped the
tail-launched task graph with CUDA_ERROR_LAUNCH_FAILED). Under them those two mechanisms are
skipped with a note, and everything launched from the host (host launches, the graph of launches,
the persistent queue and its exit protocol, also replayed in a graph) is checked.
"""

from __future__ import annotations

import os
import re

from ..errors import CuadvError
from ..report.results import LabResult, Selection, Spread, Table, spread_map
from ..timing import synchronize, time_gpu
from .base import RunContext
from .launch_mechanisms import (CHUNK, MAX_TASKS, PERSISTENT_BLOCK, TASK_DTYPE, WARP, ContextLimit,  # noqa: F401
                                CupyLaunches, DeviceGraphLaunch, DynamicParallelism, GraphOfLaunches, HostLaunches,
                                LaunchCalls, Mechanism, PersistentQueue, Tasks, _reason, build_modules, check_chunk,
                                check_task_count, device_side_mechanisms, task_params)

N_VALUES = (10, 100, 1_000, 10_000, 100_000)
VALIDATION_N = (0, 1, 9_973)
CUPY_LAUNCH_US = 8.9  # H200 reference: an empty kernel launched from Python through CuPy
GRAPH_NODE_US = 0.51  # H200 reference: one node of a captured CUDA graph
TARGET_US = 0.1  # target for the persistent queue
SANITIZER_TOOL_ENV = "CUADV_SANITIZER_TOOL"  # the compute-sanitizer tool smoke() runs under (set by the caller)
DEVICE_LAUNCH_TOOLS = ("memcheck",)  # compute-sanitizer tools that support device-side launches


# -- running and timing ------------------------------------------------------------------------
def runs_for(mechanism: Mechanism, n: int, quick: bool) -> tuple[int, int]:
    """(warm-up, repeats): few for host launches of many tasks (seconds each), more otherwise."""
    if isinstance(mechanism, (HostLaunches, CupyLaunches)):
        return (1, 2) if n >= 10_000 else (1, 5)
    if n >= 100_000:
        return (1, 3) if quick else (2, 5)
    return (2, 10) if quick else (3, 20)


def measure(mechanism: Mechanism, n: int, quick: bool) -> tuple[Spread, float]:
    """(microseconds per task, with the spread of the runs; host seconds of preparation); every task checked
    exactly once per run."""
    tasks = Tasks(n)
    warmup, repeats = runs_for(mechanism, n, quick)
    try:  # a prepare that fails partway (a second capture, say) releases what it made too
        prep = mechanism.prepare(tasks)
        t = time_gpu(mechanism.run, stream=mechanism.stream, warmup=warmup, repeats=repeats)
        tasks.check(warmup + repeats, mechanism.label)
        mechanism.after_check()
    finally:
        mechanism.release()
    return spread_map(lambda ms: ms * 1e3 / max(n, 1), Spread.of(t.samples)), prep


def validate(mechanism: Mechanism, sizes=VALIDATION_N, runs: int = 2) -> None:
    """Exactly once per run at sizes with tails (0, 1, a prime)."""
    for n in sizes:
        tasks = Tasks(n)
        try:
            mechanism.prepare(tasks)
            for _ in range(runs):
                mechanism.run()
            synchronize(mechanism.stream)
            tasks.check(runs, mechanism.label)
            mechanism.after_check()
        finally:
            mechanism.release()


def replay_queue_in_graph(queue: PersistentQueue, stream, n: int, replays: int) -> None:
    """The persistent queue captured into a CUDA graph and replayed: its counters must reset themselves."""
    from ..graphs import Graph

    tasks = Tasks(n)
    queue.prepare(tasks)
    with Graph.capture(stream, queue.run) as graph:
        for _ in range(replays):
            graph.launch(stream)
        synchronize(stream)
    tasks.check(replays, queue.label + " replayed in a CUDA graph")
    queue.after_check()


def sanitizer_tool(environ=None) -> str | None:
    """The compute-sanitizer tool this process runs under: ``CUADV_SANITIZER_TOOL`` (set by
    ``cuadv check``), '' when some sanitizer is injected but the tool is not named, None otherwise."""
    environ = os.environ if environ is None else environ
    tool = environ.get(SANITIZER_TOOL_ENV)
    if tool:
        return tool
    injected = (environ.get("CUDA_INJECTION64_PATH", "") + environ.get("LD_PRELOAD", "")).lower()
    return "" if "sanitizer" in injected else None


def device_side_skip_reason(tool: str | None) -> str | None:
    """Why the device-side mechanisms are not run under this sanitizer tool, or None to run them."""
    if tool is None or tool in DEVICE_LAUNCH_TOOLS:
        return None
    name = f"compute-sanitizer {tool}" if tool else "compute-sanitizer (tool unknown)"
    return (f"dynamic parallelism and device graph launch skipped under {name}: the tool does not support "
            f"launches from device code (it counts loading such a module as a finding, and the device-launched "
            f"grids fail under it); {', '.join(DEVICE_LAUNCH_TOOLS)} checks them")








class LaunchManyLab:
    name = "launch"
    title = "Many small tasks: host launches, graphs, a persistent queue, dynamic parallelism, device graphs"

    def supported(self, caps) -> str | None:
        if caps.compute_capability < (9, 0):
            return (f"this lab's device graph launch and timings assume compute capability >= 9.0 "
                    f"(got {caps.cc_string()}); fallback: CUDA graphs or a persistent kernel")
        return None

    def build(self, arch: str):
        return list(build_modules(arch).values())

    def smoke(self, device_side: bool | None = None) -> list[str]:
        """Every mechanism at N = 0, 1, 37 (two runs each) and the queue replayed in a graph; returns notes.

        device_side: run dynamic parallelism and device graph launch; None decides from the
        compute-sanitizer tool this process runs under (``sanitizer_tool``): skipped under the tools
        that cannot check device-side launches, run otherwise.
        """
        import cupy as cp

        from ..device import current_device

        notes = []
        if device_side is None:
            reason = device_side_skip_reason(sanitizer_tool())
            device_side = reason is None
            if reason:
                notes.append(reason)
                print(f"smoke launch: {reason}")
        caps = current_device().caps
        modules = build_modules(caps.arch)
        stream = cp.cuda.Stream(non_blocking=True)
        queue = PersistentQueue(stream, modules[0], caps, CHUNK)
        mechanisms = [HostLaunches(stream, modules[0]), GraphOfLaunches(stream, modules[0]),
                      PersistentQueue(stream, modules[0], caps, 1), queue]
        for m in mechanisms:
            validate(m, sizes=(0, 1, 37), runs=2)
        replay_queue_in_graph(queue, stream, 37, replays=3)
        if device_side:  # their modules are not even loaded otherwise (loading one is what the tools warn about)
            with ContextLimit("DEV_RUNTIME_PENDING_LAUNCH_COUNT", 4096):
                device, missing = device_side_mechanisms(modules, stream)
                if missing:
                    raise CuadvError("; ".join(f"{k}: {v}" for k, v in missing.items()))
                for m in device.values():
                    validate(m, sizes=(0, 1, 37), runs=2)
        return notes

    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        result = LabResult(self.name, self.title)
        caps = ctx.caps
        modules = build_modules(caps.arch)
        stream = cp.cuda.Stream(non_blocking=True)
        host_max = 10_000 if ctx.quick else 100_000
        mechanisms: list[Mechanism] = [
            HostLaunches(stream, modules[0]), LaunchCalls(stream, modules[0]), CupyLaunches(stream),
            GraphOfLaunches(stream, modules[0]), PersistentQueue(stream, modules[0], caps, 1),
            PersistentQueue(stream, modules[0], caps, CHUNK)]
        for m in mechanisms:
            if isinstance(m, (HostLaunches, CupyLaunches, GraphOfLaunches)):
                m.max_n = host_max
        with ContextLimit("DEV_RUNTIME_PENDING_LAUNCH_COUNT", max(N_VALUES) + 4096) as limit:
            if limit.error:
                result.notes.append(f"the pending device-launch limit could not be raised: {limit.error}")
            device, missing = device_side_mechanisms(modules, stream)
            mechanisms += list(device.values())
            for label, reason in missing.items():
                result.notes.append(f"{label}: not measured - {reason}")
            ctx.progress("launch: exactly-once checks")
            for m in list(mechanisms):
                try:
                    validate(m, sizes=VALIDATION_N, runs=2)
                except Exception as exc:
                    if m not in device.values():
                        raise
                    mechanisms.remove(m)  # a device-side mechanism fails alone; the others still run
                    missing[m.label] = _reason(exc)
                    result.notes.append(f"{m.label}: not measured - {missing[m.label]}")
            result.checks.append("every mechanism ran every task exactly once per run at N = 0, 1 and 9,973 (two runs "
                                 "each) and in every timed run below (per-task counters)")
            self._graph_replay_check(mechanisms, stream, result)
            per_task, prep = {}, {}
            for m in mechanisms:
                for n in N_VALUES:
                    if n > m.max_n:
                        continue
                    ctx.progress(f"launch: {m.label}, N = {n:,}")
                    try:
                        per_task[(m.label, n)], prep[(m.label, n)] = measure(m, n, ctx.quick)
                    except Exception as exc:
                        if m not in device.values():
                            raise
                        result.notes.append(f"{m.label} at N = {n:,}: not measured - {_reason(exc)}")
                        break
        self._table(mechanisms, per_task, prep, missing, host_max, result)
        self._plot(mechanisms, per_task, ctx, result)
        self._select(mechanisms, per_task, result)
        return result

    def _graph_replay_check(self, mechanisms, stream, result: LabResult) -> None:
        """The persistent queue captured into a graph and replayed: its counters reset themselves."""
        queue = next(m for m in mechanisms if isinstance(m, PersistentQueue) and m.chunk > 1)
        replay_queue_in_graph(queue, stream, 9_973, replays=5)
        result.checks.append("the persistent queue captured into a CUDA graph and replayed 5 times ran every task 5 "
                             "times: its ticket counter resets itself at exit (no host reset)")

    def _table(self, mechanisms, per_task, prep, missing, host_max: int, result: LabResult) -> None:
        rows = []
        graph_top = max((n for n in N_VALUES if (GraphOfLaunches.label, n) in per_task), default=None)
        graph_us = per_task.get((GraphOfLaunches.label, graph_top))
        for m in mechanisms:
            cells = [per_task.get((m.label, n), float("nan")) for n in N_VALUES]
            measured = [n for n in N_VALUES if (m.label, n) in per_task]
            if not measured:
                rows.append([m.label, *(["failed"] * len(N_VALUES)), float("nan"), float("nan")])
                continue
            top = max(measured)
            setup = prep.get((m.label, top), 0.0)
            rows.append([m.label, *cells, graph_us / per_task[(m.label, top)] if graph_us else float("nan"), setup])
            for n in measured:
                result.figures[f"launch_us_per_task_{_key(m.label)}_N{n}"] = per_task[(m.label, n)]
        for label, reason in missing.items():
            rows.append([label, *(["unavailable"] * len(N_VALUES)), float("nan"), float("nan")])
        result.tables.append(Table(
            "Cost per task (microseconds) of N empty one-warp tasks",
            ["mechanism", *(f"N={n:,}" for n in N_VALUES), "x cheaper than a graph node (largest N)",
             "host setup s (largest N)"],
            rows,
            note=(f"median of CUDA-event timings of whole runs divided by N; every run checked (each task exactly "
                  f"once). H200 references: an empty kernel launched from Python through CuPy {CUPY_LAUNCH_US} us, one "
                  f"graph node {GRAPH_NODE_US} us; target for the persistent queue {TARGET_US} us per task or less. "
                  "Host launches and graphs run one task after another on one stream; 'cuadv' holds a prepared "
                  "launcher (checked once, arguments packed in place, one cuLaunchKernelEx per task), 'cuadv.launch "
                  "call' calls cuadv.launch per task; both pass the same argument types as the CuPy row. Host setup "
                  "= stream capture "
                  f"and instantiation. '-': not run (host launches and graphs stop at {host_max:,} tasks in this "
                  "mode)")))

    def _plot(self, mechanisms, per_task, ctx: RunContext, result: LabResult) -> None:
        from ..figures import pyplot as _pyplot

        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(8.5, 5))
        for m in mechanisms:
            ns = [n for n in N_VALUES if (m.label, n) in per_task]
            ax.plot(ns, [per_task[(m.label, n)] for n in ns], marker="o", label=m.label)
        for y, text in ((CUPY_LAUNCH_US, "CuPy launch (H200 ref.)"), (GRAPH_NODE_US, "graph node (H200 ref.)"),
                        (TARGET_US, "target")):
            ax.axhline(y, color="grey", linestyle=":", linewidth=1)
            ax.text(N_VALUES[0], y * 1.08, text, fontsize=7, color="grey")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tasks N")
        ax.set_ylabel("microseconds per task")
        ax.set_title("Cost per task of N tiny tasks")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
        ctx.save_figure(fig, "launch_cost_per_task.png", result)

    def _select(self, mechanisms, per_task, result: LabResult) -> None:
        largest = max(N_VALUES)
        at_largest = {m.label: per_task[(m.label, largest)] for m in mechanisms if (m.label, largest) in per_task}
        best = min(at_largest, key=at_largest.get)
        graph_top = max(n for n in N_VALUES if (GraphOfLaunches.label, n) in per_task)
        graph = per_task[(GraphOfLaunches.label, graph_top)]
        host = per_task[(HostLaunches.label, graph_top)]
        result.selection.append(Selection(
            scenario="many small tasks",
            choice=best,
            evidence=(f"{at_largest[best]:.3f} us per task at N={largest:,}; CUDA graph node {graph:.2f} us and host "
                      f"launch {host:.2f} us per task at N={graph_top:,}"),
            fallback="a CUDA graph of the launches (any GPU), or a persistent kernel with an atomic queue"))
        queue = [label for label in at_largest if label.startswith("persistent queue")]
        if queue:
            best_queue = min(at_largest[q] for q in queue)
            result.figures["launch_persistent_best_us_per_task"] = best_queue
            if best_queue > TARGET_US:
                result.notes.append(f"the persistent queue took {best_queue:.3f} us per task at N={largest:,}; "
                                    f"the target was {TARGET_US} us")
        self._host_against_cupy(per_task, graph_top, result)

    def _host_against_cupy(self, per_task, n: int, result: LabResult) -> None:
        """cuadv's host launch path against CuPy's RawKernel at the same N (target: at or below CuPy)."""
        cupy_us = per_task.get((CupyLaunches.label, n))
        if cupy_us is None:
            return
        for label in (HostLaunches.label, LaunchCalls.label):
            us = per_task.get((label, n))
            if us is None:
                continue
            result.figures[f"launch_{_key(label)}_over_cupy"] = us / cupy_us
            text = f"{label}: {us:.2f} us per task against CuPy's {cupy_us:.2f} us at N={n:,}"
            if us <= cupy_us:
                result.checks.append(text + " (at or below the peer)")
            else:
                result.notes.append(text + "; the target was CuPy's cost or less")


def _key(label: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", label.lower()).strip("_")
