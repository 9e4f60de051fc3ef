"""Programmatic dependent launch (PDL): overlap a kernel's setup with the previous kernel.

Shows: a producer/consumer pair where the consumer does independent setup before
``griddepcontrol.wait``; a consumer with the wait misplaced (it reads first) that returns wrong
results - made deterministic: the producer triggers its dependents, then holds its writes back
until every consumer block has reported its early read, so the stale read is certain whenever the
grids overlap; without the PDL attribute a flag protocol shows they never overlap. Then a chain of
K small kernels, the same kernel with and without the attribute, in a stream and in a CUDA graph:
the time saved per kernel boundary, with 0 or more microseconds of independent setup, and with the
trigger (launch_dependents) at block exit, before the setup or right after the wait.
Needs: compute capability 9.0 (griddepcontrol, the programmatic-stream-serialization attribute).
Key insight: PDL hides the launch gap between dependent kernels (about a microsecond) and any setup
that needs nothing from the previous kernel - but only the code after the wait may read its output;
the trigger orders no memory. Where the trigger sits matters in a chain: a trigger before the wait
lets every later link be scheduled as far as blocks fit (which hides the most setup, but without
setup the H200 runs such a chain slower in a graph; why is not established here); a trigger right
after the wait keeps the overlap to one link ahead.
The producer/consumer pair of the race and its checks live in ``pdl_support``; the chain and the lab here.
Run: ``cuadv bench pdl`` (``--quick`` for a short run).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compiler import shipped
from ..errors import ValidationError
from ..launching import LaunchConfig, launch
from ..pdl import Chain as PdlChain, prepare_chain
from ..report.results import LabResult, Selection, Spread, Table, spread_map
from ..timing import EventPair, synchronize, synchronize_device, time_gpu
from .base import RunContext, interleaved_rounds, readback
# The producer/consumer pair of the race lives in pdl_support; its names are this lab's as well.
from .pdl_support import (CONSUMERS, DEMO_DTYPE, DEMO_MAX_CONSUMER_BLOCKS, DEMO_PRODUCER_BLOCKS, POISON,  # noqa: F401
                          THREADS, DemoOutcome, PdlDemo, check_demo, check_demo_size)  # noqa: F401

# (threads per block, blocks per SM) of the grid-size sweep: 256-thread blocks from 1 to 8 per SM, 512 and 1024
# threads, then the grids of 4 to 16 blocks per SM with blocks small enough that a dependent grid fits beside.
GRID_SWEEP = ((256, 1), (256, 2), (256, 4), (256, 8), (512, 2), (1024, 1), (128, 4), (128, 8), (64, 16))


@dataclass(frozen=True)
class Mode:
    """How a chain's links are launched: with the PDL attribute or not, and where each link triggers its
    dependents (trigger: ChainTrigger in pdl.cu)."""

    key: str  # in figure names
    label: str
    pdl: bool
    trigger: int

    @property
    def place(self) -> str:
        """Where the trigger is, without the "PDL, " of the label."""
        return self.label.removeprefix("PDL, ")


OFF = Mode("off", "no PDL", False, 0)
AT_EXIT = Mode("exit", "PDL, trigger at exit", True, 0)
AT_START = Mode("start", "PDL, trigger at start", True, 1)
AFTER_WAIT = Mode("after_wait", "PDL, trigger after wait", True, 2)
MODES = (OFF, AT_EXIT, AT_START, AFTER_WAIT)
PDL_MODES = (AT_EXIT, AT_START, AFTER_WAIT)
SWEEP_ROUNDS = 2  # rounds of every mode per grid shape in the grid-size sweep


def saved_per_boundary(off_us: float, pdl_us: float, k: int) -> float:
    """Microseconds saved per kernel boundary by a chain of k kernels taking pdl_us instead of off_us each."""
    return (off_us - pdl_us) * k / (k - 1)


def build_module(arch: str | None = None):
    return shipped("pdl.cu", arch=arch, name="pdl")


class Chain:
    """K launches of pdl_chain_step over two buffers (a -> b -> a ...); every link adds 1."""

    def __init__(self, module, caps, stream, n: int | None = None):
        import cupy as cp

        self.cp, self.stream = cp, stream
        self.step = module.kernel("pdl_chain_step")
        self.spin = module.kernel("pdl_spin")
        self.grid, self.threads = caps.sm_count, THREADS
        self.n = n if n is not None else caps.sm_count * THREADS * 4
        self.bufs = [cp.zeros(self.n, dtype=cp.float32), cp.zeros(self.n, dtype=cp.float32)]
        self.graph_edges: dict[Mode, dict | None] = {}  # edge types of the graphs the last time_modes captured

    def reset(self) -> None:
        """Zero both buffers (on CuPy's stream, then wait for the device: the chain's stream is
        non-blocking and would not wait for the fill). Call it only when no chain is in flight."""
        for b in self.bufs:
            b.fill(0)
        synchronize_device()

    def prepare(self, k: int, pdl: bool, trigger: int, setup_ns: int, stamps: Any = None,
                graph: bool = False) -> PdlChain:
        """k links as a cuadv.pdl chain; trigger: where each calls launch_dependents (Mode.trigger); stamps:
        None, or a uint64 array of 2 k stamps (link i writes 2 i and 2 i + 1)."""
        cfg = LaunchConfig(grid=self.grid, block=self.threads, pdl=pdl)  # the first link too, as always
        n, setup = np.uint32(self.n), np.uint64(setup_ns)
        steps = [(self.step, cfg, (self.bufs[i % 2], self.bufs[(i + 1) % 2], n, setup, np.int32(trigger),
                                   np.uint64(0 if stamps is None else stamps.data.ptr + 16 * i))) for i in range(k)]
        return prepare_chain(steps, pdl=pdl, graph=graph)

    def enqueue(self, k: int, pdl: bool, trigger: int, setup_ns: int, stamps: Any = None) -> None:
        self.prepare(k, pdl, trigger, setup_ns, stamps)(self.stream)

    def boundary_gaps(self, k: int, pdl: bool, trigger: int, graph: bool) -> np.ndarray:
        """Nanoseconds from the last block of link i being done to the first block of link i + 1 being past
        its wait, for each of the k - 1 boundaries of one stamped chain (a stream run queued behind a spin
        kernel, or one replay of a captured chain). The stamps add two atomics per block, so this run is
        not one of the timed ones."""
        stamps = self.cp.zeros(2 * k, dtype=self.cp.uint64)

        def clear():
            stamps[0::2] = np.iinfo(np.uint64).max
            stamps[1::2] = 0
            synchronize_device()  # CuPy's fill is on its own stream

        self.reset()
        clear()
        if graph:
            self.enqueue(2, pdl, trigger, 0)  # checked outside the capture
            with self.prepare(k, pdl, trigger, 0, stamps, graph=True) as g:
                clear()
                g.launch(self.stream)
                synchronize(self.stream)
        else:
            launch(self.spin, LaunchConfig(grid=1, block=32), np.uint64(2_000_000 + k * 40_000), stream=self.stream)
            self.enqueue(k, pdl, trigger, 0, stamps)
            synchronize(self.stream)
        s = readback(stamps).astype(np.int64).reshape(k, 2)
        return s[1:, 0] - s[:-1, 1]

    def check(self, links: int) -> None:
        """After `links` links (an even number) from zeros, buffer 0 holds `links` everywhere."""
        synchronize(self.stream)
        got = readback(self.bufs[0])
        want = np.float32(links)
        if not np.array_equal(got, np.full(self.n, want, dtype=np.float32)):
            bad = int((got != want).sum())
            raise ValidationError(f"PDL chain: {bad} of {self.n} elements differ from {want} after {links} links")

    def time_stream(self, k: int, pdl: bool, trigger: int, setup_ns: int, repeats: int) -> tuple[list[float], int]:
        """Milliseconds of a chain of k launches on a stream, queued behind a spin kernel so the host's
        launch rate does not show, once per repeat; returns (samples, runs done)."""
        gate_ns = 2_000_000 + k * 40_000
        samples, runs = [], 0
        gate_cfg = LaunchConfig(grid=1, block=32)
        chain = self.prepare(k, pdl, trigger, setup_ns)  # checked once, outside the timed part
        for rep in range(repeats + 1):  # the first run is the warm-up
            ev = EventPair()
            launch(self.spin, gate_cfg, np.uint64(gate_ns), stream=self.stream)
            t0 = time.perf_counter()
            ev.record_start(self.stream)
            chain(self.stream)
            ev.record_stop(self.stream)
            host_ns = (time.perf_counter() - t0) * 1e9
            ms = ev.elapsed_ms()
            runs += 1
            if host_ns > 0.8 * gate_ns:  # the GPU may have caught up with the host: measure again, longer gate
                gate_ns = int(2 * host_ns)
                continue
            if rep > 0:
                samples.append(ms)
        if not samples:
            raise ValidationError("PDL chain: the host could not queue the chain ahead of the GPU")
        return samples, runs

    def capture(self, k: int, pdl: bool, trigger: int, setup_ns: int):
        """Two links on the stream (as the lab always ran them), then k captured: a cuadv.pdl graph chain."""
        self.enqueue(2, pdl, trigger, setup_ns)
        return self.prepare(k, pdl, trigger, setup_ns, graph=True)

    def time_modes(self, path: str, k: int, setup_ns: int, repeats: int, rounds: int) -> dict[Mode, Spread]:
        """Microseconds per kernel of a chain of k links in every mode, on a stream or as a CUDA graph. The
        modes take turns, round after round, so a drift of the clocks falls on all of them alike; medians
        (with their spread) over all rounds' samples. The chain's result is checked at the end."""
        self.reset()
        links = 0
        with contextlib.ExitStack() as graphs_alive:
            graphs = {}
            if path == "graph":
                for m in MODES:
                    graphs[m] = graphs_alive.enter_context(self.capture(k, m.pdl, m.trigger, setup_ns))
                    links += 2  # capture() runs two links first
                self.graph_edges = {m: g.edge_types() for m, g in graphs.items()}

            def one_round(m: Mode):
                def measure() -> list[float]:
                    nonlocal links
                    if path == "stream":
                        times, runs = self.time_stream(k, m.pdl, m.trigger, setup_ns, repeats)
                    else:
                        g = graphs[m]
                        times = list(time_gpu(lambda: g.launch(self.stream), stream=self.stream, warmup=3,
                                              repeats=repeats).samples)
                        runs = 3 + repeats
                    links += runs * k
                    return times
                return measure

            ms = interleaved_rounds({m: one_round(m) for m in MODES}, rounds)
        self.check(links)
        return {m: spread_map(lambda t: t * 1e3 / k, t) for m, t in ms.items()}


class PdlLab:
    name = "pdl"
    title = "Programmatic dependent launch: the misplaced wait, and the launch gap it hides"

    def supported(self, caps) -> str | None:
        if caps.compute_capability < (9, 0):
            return (f"programmatic dependent launch needs compute capability >= 9.0 (got {caps.cc_string()}); "
                    "fallback: plain stream order or a CUDA graph")
        return None

    def build(self, arch: str):
        return [build_module(arch)]

    def smoke(self) -> None:
        import cupy as cp

        from ..device import current_device

        caps = current_device().caps
        module = build_module(caps.arch)
        stream = cp.cuda.Stream(non_blocking=True)
        demo = PdlDemo(module, 1000, stream)
        for consumer in CONSUMERS:
            for pdl in (False, True):
                problem = check_demo(demo.run(consumer, pdl, timeout_ns=20_000_000))
                if problem:
                    raise ValidationError(f"PDL demo: {problem}")
        chain = Chain(module, caps, stream, n=caps.sm_count * THREADS + 3)
        chain.reset()
        chain.enqueue(4, True, 1, 1000)
        chain.check(4)

    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        result = LabResult(self.name, self.title)
        module = build_module(ctx.caps.arch)
        stream = cp.cuda.Stream(non_blocking=True)
        ctx.progress("PDL: producer/consumer race")
        self._demo(module, stream, result)
        ctx.progress("PDL: kernel chains")
        self._chains(module, ctx, stream, result)
        return result

    # -- the race ------------------------------------------------------------------------------
    def _demo(self, module, stream, result: LabResult) -> None:
        rows = []
        outcomes = {}
        for n in (1, 1000, 4099):
            demo = PdlDemo(module, n, stream)
            for consumer in CONSUMERS:
                for pdl in (False, True):
                    timeout = 1_000_000_000 if pdl else 2_000_000
                    o = demo.run(consumer, pdl, timeout)
                    problem = check_demo(o)
                    if problem:
                        raise ValidationError(f"PDL demo at n={n}: {problem}")
                    outcomes[(n, consumer, pdl)] = o
                    if n == 4099:
                        rows.append(["stream", consumer, "on" if pdl else "off", _yes(o.overlapped), o.right, o.stale,
                                     _overlap_us(o)])
            if n == 4099:
                for consumer in CONSUMERS:
                    o, edges = demo.run_in_graph(consumer, True, 1_000_000_000)
                    problem = check_demo(o)
                    if problem:
                        raise ValidationError(f"PDL demo in a graph: {problem}")
                    outcomes[(n, consumer, "graph")] = o
                    rows.append(["CUDA graph", consumer, "on", _yes(o.overlapped), o.right, o.stale, _overlap_us(o)])
                    if edges is not None:
                        result.figures["pdl_demo_graph_programmatic_edges"] = float(edges["programmatic"])
        misplaced = outcomes[(4099, "misplaced", True)]
        result.checks.append("the correct consumer (setup, then griddepcontrol.wait, then the read) returned every "
                             "element right at n = 1, 1000, 4099, with and without PDL, in a stream and in a graph")
        result.checks.append("without the PDL attribute no producer block ever saw a consumer block start "
                             "(flag protocol), and the misplaced consumer was then right as well")
        if misplaced.overlapped:
            result.checks.append(f"with PDL the misplaced consumer (read before the wait) returned the stale value in "
                                 f"all {misplaced.n} elements: the producer held its writes until every consumer block "
                                 "had read, so the wrong result is certain, not luck")
        else:
            result.notes.append("with PDL the consumer did not start early within 1 s on this run, so the misplaced "
                                "wait could not show its wrong result (PDL permits overlap; it does not force it)")
        graph_misplaced = outcomes.get((4099, "misplaced", "graph"))
        if graph_misplaced is not None:
            if graph_misplaced.overlapped:
                result.checks.append("captured into a CUDA graph, the PDL pair still overlapped (the misplaced "
                                     "consumer read stale data again): the programmatic dependency survives capture")
            else:
                result.notes.append("captured into a CUDA graph, the PDL pair did not overlap on this run")
        result.tables.append(Table(
            "Producer/consumer with the wait in the right place and misplaced (n = 4099 int32)",
            ["path", "consumer", "PDL", "grids overlapped", "right outputs", "stale outputs",
             "consumer start before producer end (us)"], rows,
            note=f"producer: {DEMO_PRODUCER_BLOCKS} blocks trigger first and hold their writes until every consumer "
                 "block reports (timeout 1 s with PDL, 2 ms without); stale = computed from the poisoned buffer"))

    # -- the chains ----------------------------------------------------------------------------
    def _chains(self, module, ctx: RunContext, stream, result: LabResult) -> None:
        k = 50 if ctx.quick else 100
        repeats = 8 if ctx.quick else 10
        rounds = 2 if ctx.quick else 3
        setups = (0, 2000) if ctx.quick else (0, 1000, 3000)
        chain = Chain(module, ctx.caps, stream)
        per_kernel: dict[tuple[str, int, Mode], float] = {}
        for setup in setups:
            for path in ("stream", "graph"):
                ctx.progress(f"PDL chain: setup {setup} ns, every mode, {path}")
                for m, us in chain.time_modes(path, k, setup, repeats, rounds).items():
                    per_kernel[(path, setup, m)] = us
        self._chain_table(per_kernel, setups, k, chain, result)
        self._gap_table(chain, ctx, k, result)
        edges = chain.graph_edges.get(AFTER_WAIT)  # the chain last captured above (edges do not depend on setup)
        self._grid_sweep(chain, ctx, k, repeats, result)
        if edges is not None:
            result.figures["pdl_chain_graph_programmatic_edges"] = float(edges["programmatic"])
            if edges["programmatic"] >= k - 1:
                result.checks.append(f"the captured PDL chain has {edges['programmatic']} programmatic edges "
                                     f"for {k - 1} kernel boundaries")
            else:
                result.notes.append(f"the captured PDL chain has {edges['programmatic']} programmatic and "
                                    f"{edges['default']} full edges for {k - 1} kernel boundaries")
        self._plot(per_kernel, setups, ctx, result)

    def _chain_table(self, per_kernel, setups, k, chain, result: LabResult) -> None:
        rows, best_of = [], {}
        for path in ("stream", "graph"):
            for setup in setups:
                us = {m: per_kernel[(path, setup, m)] for m in MODES}
                best = min(PDL_MODES, key=us.__getitem__)
                best_of[(path, setup)] = best
                saved = saved_per_boundary(us[OFF], us[best], k)
                rows.append([path, setup / 1000, *us.values(), best.label, saved, us[OFF] / us[best]])
                result.figures[f"pdl_saved_us_per_boundary_{path}_setup{setup}ns"] = saved
                for m in MODES:
                    result.figures[f"pdl_us_per_kernel_{path}_setup{setup}ns_{m.key}"] = us[m]
        result.tables.append(Table(
            f"A chain of {k} dependent kernels: microseconds per kernel",
            ["path", "independent setup (us)", *(m.label for m in MODES), "fastest PDL mode",
             "saved per boundary (us)", "x no PDL"], rows,
            note=f"each kernel: {chain.grid} blocks x {THREADS} threads, dst = src + 1 over {chain.n} floats after the "
                 "setup; saved = (no PDL - fastest PDL mode) x k / (k - 1); stream chains are queued behind a spin "
                 "kernel so Python's launch rate does not show; the modes take turns over several rounds and each "
                 "time is the median of all their CUDA-event timings; the buffers are checked after every path and "
                 "setup (= number of links run). Trigger at start: every later link may be scheduled as far as "
                 "blocks fit, which hides the most setup; after wait: never more than one link ahead"))
        best = min(("stream", "graph"), key=lambda p: per_kernel[(p, 0, best_of[(p, 0)])])
        mode = best_of[(best, 0)]
        saved0 = result.figures[f"pdl_saved_us_per_boundary_{best}_setup0ns"]
        result.selection.append(Selection(
            scenario="chained kernels",
            choice=(f"{mode.label} (the wait before the first dependent read) in a "
                    + ("CUDA graph" if best == "graph" else "stream")),
            evidence=(f"{per_kernel[(best, 0, mode)]:.2f} us per kernel vs {per_kernel[(best, 0, OFF)]:.2f} us without "
                      f"PDL ({saved0:.2f} us saved per boundary); graph without PDL "
                      f"{per_kernel[('graph', 0, OFF)]:.2f} us, stream without PDL "
                      f"{per_kernel[('stream', 0, OFF)]:.2f} us"),
            fallback="compute capability < 9.0: a CUDA graph without PDL"))
        for path in ("stream", "graph"):
            saved = result.figures[f"pdl_saved_us_per_boundary_{path}_setup0ns"]
            if saved < 0.5:
                result.notes.append(f"PDL saved {saved:.2f} us per boundary without setup in a {path} "
                                    f"({best_of[(path, 0)].label}); the target was 0.5 us")

    def _gap_table(self, chain: "Chain", ctx: RunContext, k: int, result: LabResult) -> None:
        """What there is to hide: the gap at each kernel boundary, from in-kernel stamps, in every mode."""
        rows = []
        for path in ("stream", "graph"):
            gaps = {}
            for m in MODES:
                ctx.progress(f"PDL chain: boundary gaps, {m.label}, {path}")
                gaps[m] = spread_map(lambda ns: ns / 1e3, Spread.of(chain.boundary_gaps(k, m.pdl, m.trigger,
                                                                                  graph=path == "graph")))
                result.figures[f"pdl_gap_us_{path}_{m.key}"] = gaps[m]
            least = min(PDL_MODES, key=gaps.__getitem__)
            hidden = gaps[OFF] - gaps[least]
            rows.append([path, *gaps.values(), hidden, 100 * hidden / gaps[OFF] if gaps[OFF] > 0 else 0.0])
        result.tables.append(Table(
            "The gap at a kernel boundary: last block of one link done to the first block of the next past its wait",
            ["path", *(f"{m.label} (us)" for m in MODES), "hidden at best (us)", "% of the gap hidden"], rows,
            note=f"medians (p10-p90) over the {k - 1} boundaries of one stamped chain per mode (%globaltimer, no "
                 f"setup, {chain.grid} blocks); a graph already overlaps most of the launch with the previous kernel, "
                 "so less is left for PDL to hide there than in a stream. What PDL leaves is the completion of the "
                 "previous grid and the flush of its memory that griddepcontrol.wait waits for"))

    def _grid_sweep(self, chain: "Chain", ctx: RunContext, k: int, repeats: int, result: LabResult) -> None:
        """The same chain (no setup) at several grid shapes: an early launch needs room for the dependent grid's
        blocks beside the running grid's. Smaller blocks give that room at 4 to 16 blocks per SM."""
        rows, sms = [], ctx.caps.sm_count
        for threads, per_sm in GRID_SWEEP:
            chain.grid, chain.threads = per_sm * sms, threads
            row = [threads, per_sm, chain.grid]
            for path in ("stream", "graph"):
                ctx.progress(f"PDL chain: {per_sm} blocks/SM of {threads} threads, every mode, {path}")
                us = chain.time_modes(path, k, 0, repeats, SWEEP_ROUNDS)
                row.append(us[OFF])
                suffix = "" if threads == THREADS else f"_{threads}_threads"
                for m in PDL_MODES:
                    saved = saved_per_boundary(us[OFF], us[m], k)
                    row.append(saved)
                    result.figures[f"pdl_saved_us_per_boundary_{path}_{per_sm}_blocks_per_sm{suffix}_{m.key}"] = saved
            rows.append(row)
        chain.grid, chain.threads = sms, THREADS
        saved_cols = [f"{path}: saved, {m.place}" for path in ("stream", "graph") for m in PDL_MODES]
        result.tables.append(Table(
            f"The chain of {k} kernels (no setup) by grid size: microseconds per kernel without PDL, and saved per "
            "boundary by each PDL mode",
            ["threads per block", "blocks per SM", "blocks", "stream: no PDL", *saved_cols[:3], "graph: no PDL",
             *saved_cols[3:]], rows,
            note=f"the same {chain.n} floats per kernel at every grid size; {SWEEP_ROUNDS} rounds of every mode, "
                 "medians. An SM holds 2048 threads and 32 blocks: with 256-thread blocks at 8 per SM one grid fills "
                 "the SMs' threads and the dependent grid's blocks find no room to start early; every other row "
                 "uses at most 1024 threads and 16 blocks per SM, leaving room for a second grid of the same shape, "
                 "so the rows show whether room for the blocks is what limits the saving"))

    def _plot(self, per_kernel, setups, ctx: RunContext, result: LabResult) -> None:
        from ..figures import pyplot as _pyplot

        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(8, 4.5))
        xs = [s / 1000 for s in setups]
        for path, style in (("stream", "-"), ("graph", "--")):
            for m, marker in zip(MODES, "osD^"):
                ax.plot(xs, [per_kernel[(path, s, m)] for s in setups], style, marker=marker,
                        label=f"{path}: {m.label}")
        ax.set_xlabel("independent setup per kernel (us)")
        ax.set_ylabel("time per kernel of the chain (us)")
        ax.set_title("PDL: time per dependent kernel")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ctx.save_figure(fig, "pdl_chain.png", result)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _overlap_us(o: DemoOutcome) -> float:
    return o.overlap_ns / 1e3 if o.overlap_ns is not None else float("nan")
