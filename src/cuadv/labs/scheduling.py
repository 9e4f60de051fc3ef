"""Scheduling: the CUDA Programming Guide 4.12 trade-off table (overhead / preemption / load balance), measured.

Needs: compute capability 9.0 (policy 'steal'); 10.0 would add hardware 'clc' (not available here).
Key insight: the three classic answers each give up one property: fixed work pays the prologue per
tile, fixed blocks cannot balance or yield, and work stealing keeps all three only if a block gives
its SM back after a time slice (CLC does this in hardware; 'steal' does it with a quantum).
Run: ``cuadv bench scheduling``.

Experiments, each measured in one run:
  a. overhead   vector-scalar multiply with a prologue cost per running block; % of the copy ceiling.
  b. balance    tiles that spin on %globaltimer for known durations (uniform, Pareto(1.5), triangular,
                periodic-heavy); makespan over the ideal max(total / slots, longest tile), in two regimes:
                many tiles per slot, and one tile that outweighs a slot's share (the brief's setting).
  c. preemption a long low-priority kernel, a short high-priority kernel launched into it; the
                latency of the latter against its time alone; a sweep of the steal quantum.
  d. atomic counter   steal against the atomic-counter tile scheduler users write on Hopper (a memset
                before every launch), in streams and CUDA-graph replays (``scheduling_shared``).
  e. shared GPU another kernel holds K SMs; each policy against the ideal over the free slots (``scheduling_shared``).
Every ideal is computed from the resident slots of the kernel that ran (each policy compiles to its own
kernel, with its own occupancy). The spin kernel, the workloads and the policies compared live in
``scheduling_support``; experiments d and e in ``scheduling_shared``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..errors import ValidationError
from ..report.results import LabResult, Selection, Spread, Table
from ..timing import EventPair, StreamGate, synchronize, synchronize_device
from ..work_stealing import DEFAULT_PROLOGUE_FACTOR, DEFAULT_QUANTUM_US, TileKernel, TileOrder
from ..work_stealing.perfetto import to_chrome_trace
from ..work_stealing.timeline import common_window
from .base import RunContext, rates
# The spin kernel, workloads, regimes and policies live in scheduling_support; their names are this lab's as well.
from .scheduling_support import (DOMINANT, MEAN_TILE_NS, POLICIES, REGIMES, SHARED, SPIN_BLOCK,  # noqa: F401
                                 SPIN_BODY, SPIN_PARAMS, SPIN_PROLOGUE, TILES, WORKLOADS, BalanceRow,  # noqa: F401
                                 WORKLOAD_SEED, Regime, spin_kernel, workload)  # noqa: F401
from .scheduling_shared import counter_table, ideal_ms, policy_slots, shared_gpu, smoke_holder
from .vecscale import tiles_for, vecscale_kernel

class SchedulingLab:
    name = "scheduling"
    title = ("Work stealing: fixed work, fixed blocks, an atomic counter, software CLC (steal), a shared GPU and the "
             "trade-off table of the CUDA Programming Guide 4.12")

    def supported(self, caps) -> str | None:
        if caps.compute_capability < (9, 0):
            return f"needs compute capability 9.0 for policy 'steal' (got {caps.cc_string()}); fallback: fixed_blocks"
        return None

    def build(self, arch: str):
        out = [spin_kernel(p).compile(arch) for p in ("fixed_work", "fixed_blocks", "steal", "atomic_counter")]
        out += [vecscale_kernel(p).compile(arch) for p in ("fixed_work", "fixed_blocks", "steal", "atomic_counter")]
        from ..arch import parse_arch
        from ..compiler import shipped

        out.append(shipped("sm_holder.cu", arch=arch, name="sm_holder"))  # the shared-GPU experiment's holder

        if parse_arch(arch) >= (10, 0):
            out.append(spin_kernel("clc").compile(arch))
        return out

    def smoke(self) -> None:
        import cupy as cp

        d = cp.full(5003, 2000, dtype=cp.uint32)
        for label, policy, q, k in ([(*p, None) for p in POLICIES]
                                    + [("steal, 1 us slice, min_tiles 3", "steal", 1.0, 3)]):
            done = cp.zeros(d.size, dtype=cp.uint32)
            spin_kernel(policy, q, min_tiles=k)(d.size, d, done, 1000)
            if not bool((done == 1).all()):
                raise ValidationError(f"scheduling smoke: {label} did not run every tile exactly once")
        # The default min_tiles: the first launch reports its slices, the next two run the grid learned from them.
        d = cp.full(20_011, 2000, dtype=cp.uint32)
        done = cp.zeros(d.size, dtype=cp.uint32)
        learner = spin_kernel("steal", 10.0, name="smoke_learned")
        for _ in range(3):
            learner(d.size, d, done, 1000)
        if not bool((done == 3).all()):
            raise ValidationError("scheduling smoke: steal with a learned min_tiles did not run every tile exactly "
                                  "once")
        smoke_holder()  # the shared-GPU experiment's holder kernel

    # -- helpers ----------------------------------------------------------------------------------
    def _slots(self, caps) -> int:
        """Slots of the whole GPU that workloads are sized by (tiles per slot): blocks/SM x SMs of the fixed_blocks
        kernel. Ideals are computed per policy from its own kernel (``policy_slots``)."""
        return policy_slots("fixed_blocks")

    def _run_spin(self, kernel: TileKernel, durations, prologue_ns: int, repeats: int, check: bool = True,
                  stream=None, priority=None, order=None) -> Spread:
        """Milliseconds per launch: the median of ``repeats`` CUDA-event timings, with their spread."""
        import cupy as cp

        from ..timing import time_gpu

        done = cp.zeros(durations.size, dtype=cp.uint32)
        launches = 0

        def run():
            nonlocal launches
            kernel(durations.size, durations, done, prologue_ns, stream=stream, priority=priority, order=order)
            launches += 1

        run()  # the first launch of a steal kernel with the defaults has the full grid; later ones the learned one
        timing = time_gpu(run, stream=stream, warmup=1, repeats=repeats)
        if check and not bool((done == launches).all()):
            raise ValidationError(f"{kernel.name}: a tile was skipped or run twice in {launches} launches")
        return Spread.of(timing.samples)

    # -- the lab ----------------------------------------------------------------------------------
    def run(self, ctx: RunContext) -> LabResult:
        result = LabResult(self.name, self.title)
        repeats = 3 if ctx.quick else 7
        slots = self._slots(ctx.caps)
        own = ", ".join(f"{label} {policy_slots(p, q)}" for label, p, q in POLICIES)
        result.notes.append(f"workloads sized by {slots} slots ({slots // ctx.caps.sm_count} blocks of {SPIN_BLOCK} "
                            f"threads per SM of the fixed_blocks kernel); every ideal max(total work / slots, longest "
                            f"tile) uses the slots of the kernel that ran (occupancy API x SMs): {own}; tiles spun on "
                            f"%globaltimer; the overhead and preemption runs use {TILES} uniform tiles of "
                            f"{MEAN_TILE_NS / 1000:.0f} us")
        balance = self._balance(ctx, result, slots, repeats)
        self._yield_cost(ctx, result, slots, repeats)
        overhead = self._overhead(ctx, result, slots, repeats)
        preempt = self._preemption(ctx, result, repeats)
        self._tradeoff(result, balance, overhead, preempt)
        counter_table(ctx, result, repeats)
        shared_gpu(ctx, result, repeats)
        return result

    def _balance(self, ctx, result, slots, repeats) -> list[BalanceRow]:
        import cupy as cp

        rng = np.random.default_rng(WORKLOAD_SEED)
        rows: list[BalanceRow] = []
        for regime in REGIMES:
            tiles = regime.tiles(slots)
            for kind in WORKLOADS:
                host = workload(kind, tiles, rng, regime, period=slots)
                d = cp.asarray(host)
                for label, policy, q in POLICIES:
                    ctx.progress(f"balance: {regime.label}: {kind} / {label}")
                    ms = self._run_spin(spin_kernel(policy, q), d, 0, repeats)
                    rows.append(BalanceRow(kind, label, ms, ideal_ms(host, policy_slots(policy, q)),
                                           regime=regime.key))
                if kind != "uniform":  # the same tiles handed out heaviest first (the costs are known here)
                    heaviest = TileOrder.heaviest_first(host)
                    for label, policy, q in POLICIES[:3]:
                        ctx.progress(f"balance: {regime.label}: {kind} / {label} / heaviest first")
                        ms = self._run_spin(spin_kernel(policy, q), d, 0, repeats, order=heaviest)
                        rows.append(BalanceRow(kind, label, ms, ideal_ms(host, policy_slots(policy, q)),
                                               order="heaviest first", regime=regime.key))
                if kind == "periodic" and regime is DOMINANT:  # few tiles: a timeline one can read
                    traced = [(label, policy, spin_kernel(policy, q)(tiles, d, cp.zeros(tiles, dtype=cp.uint32), 0,
                                                                     trace=True))
                              for label, policy, q in (POLICIES[1], POLICIES[2])]
                    window = common_window([trace for _, _, trace in traced])  # one time scale for the pair
                    for label, policy, trace in traced:
                        name = f"scheduling_timeline_periodic_{policy}.png"
                        trace.plot(ctx.plot_path(name), sm_count=ctx.caps.sm_count, window_us=window,
                                   title=f"periodic-heavy workload ({regime.label}), {label}: tiles per SM over time")
                        result.plots.append(name)
                    traced = []
        table_rows = []
        for regime in REGIMES:
            for kind in WORKLOADS:
                for order in ("index", "heaviest first"):
                    sub = {r.policy: r for r in rows
                           if r.workload == kind and r.order == order and r.regime == regime.key}
                    for label, r in sub.items():
                        table_rows.append([regime.label, kind, order, label, r.ms, r.ideal_ms, r.ms / r.ideal_ms,
                                           sub["fixed_blocks"].ms / r.ms, sub["fixed_work"].ms / r.ms])
                        key = (f"balance_{regime.key}_{kind}_{label.replace(' ', '_')}"
                               + ("_heaviest_first" if order != "index" else ""))
                        result.figures[f"{key}_over_ideal"] = r.ms / r.ideal_ms
        regimes = "; ".join(f"{r.label}: {r.tiles(slots)} tiles ({r.tiles_per_slot} per slot) of mean "
                            f"{r.mean_ns / 1000:.0f} us, Pareto capped at {r.pareto_cap:.0f} means, periodic heavy "
                            f"tile {r.periodic_heavy:.0f}x the others" for r in REGIMES)
        result.tables.append(Table(
            "b. load balance: makespan against the ideal max(total work / slots of its kernel, longest tile)",
            ["regime", "workload", "tile order", "policy", "median ms", "ideal ms", "x ideal",
             "speedup vs fixed_blocks", "speedup vs fixed_work"], table_rows,
            note=f"{regimes}; slots: the resident blocks of the policy's own kernel (occupancy API x SMs); no "
                 f"prologue; medians of {repeats} CUDA-event timings; every tile checked to run "
                 "exactly once. When one tile outweighs a slot's share, the ideal is that tile; in index order the "
                 "last heavy tile is handed out near the end, so no online scheduler reaches the ideal; handing the "
                 "tiles out heaviest first (TileOrder.heaviest_first) removes that"))
        self._plot_balance(ctx, result, [r for r in rows if r.order == "index" and r.regime == SHARED.key])
        result.checks.append("every tile ran exactly once under every policy, workload and regime (per-tile counters)")
        return rows

    def _yield_cost(self, ctx, result, slots, repeats) -> None:
        """What steal pays without hardware cancellation, on uniform tiles (many per slot): a block launch and a
        first claim per time slice, and one short-lived block per tile once the work is gone (the full grid,
        min_tiles 1). A 1 ms slice leaves almost only the second; no slice (Q = inf, a grid that fits at once)
        neither; the defaults learn min_tiles = what a slice holds, which keeps the slice but shrinks the grid to
        about the blocks that find work."""
        import cupy as cp

        tiles = SHARED.tiles(slots)
        d = cp.asarray(workload("uniform", tiles, np.random.default_rng(), SHARED, period=slots))
        ideal = tiles * SHARED.mean_ns / policy_slots("steal") / 1e6  # steal's own kernel's slots
        rows, ms = [], {}
        for label, q, k in (("steal, full grid (default slice, min_tiles 1)", None, 1),
                            ("steal, full grid, 1 ms slice", 1000.0, 1), ("steal Q=inf", math.inf, None),
                            ("steal (defaults)", None, None)):
            ctx.progress(f"balance: cost of yielding, {label}")
            kernel = spin_kernel("steal", q, min_tiles=k)
            ms[label] = self._run_spin(kernel, d, 0, repeats)
            shown = label
            if q is None and k is None:
                shown += f": min_tiles learned {kernel.min_units(kernel.kernel()[0], 'steal', tiles)}"
            rows.append([shown, ms[label], ms[label] / ideal])
        result.figures["steal_defaults_uniform_over_ideal"] = ms["steal (defaults)"] / ideal
        empty_per_sm = (tiles - slots) / ctx.caps.sm_count  # full-grid blocks per SM that find no work
        per_block_us = 1e3 * (ms["steal, full grid, 1 ms slice"] - ms["steal Q=inf"]) / empty_per_sm
        result.figures["steal_empty_block_us_per_sm"] = per_block_us
        result.tables.append(Table(
            f"what yielding costs without CLC: {tiles} uniform tiles of {SHARED.mean_ns / 1000:.0f} us",
            ["policy", "median ms", "x ideal"], rows,
            note=f"ideal {ideal:.2f} ms (on the {policy_slots('steal')} slots of steal's kernel); the full grid has "
                 "one block per tile (later blocks replace those "
                 "that gave their SM back, and every one launches, also after the work is gone); Q = inf launches "
                 f"only the {slots} blocks that fit; the defaults learn min_tiles k from the kernel's previous "
                 "launch (what one slice held): a block runs at least k tiles before its slice may end, so the grid "
                 f"is tiles / k. Full grid, 1 ms slice minus Q = inf: {per_block_us:.3f} us per block that finds no "
                 "work, per SM; full grid, default minus 1 ms slice: the relaunches of a short slice"))

    def _plot_balance(self, ctx, result, rows) -> None:
        from ..figures import pyplot as _pyplot

        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(9, 4))
        width = 0.8 / len(POLICIES)
        for i, (label, _, _) in enumerate(POLICIES):
            vals = [next(r.ms / r.ideal_ms for r in rows if r.workload == k and r.policy == label) for k in WORKLOADS]
            ax.bar(np.arange(len(WORKLOADS)) + (i - (len(POLICIES) - 1) / 2) * width, vals, width, label=label)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(WORKLOADS)), WORKLOADS)
        ax.set_yscale("log")
        ax.set_ylabel("makespan / ideal (log)")
        ax.set_title("Load balance per policy")
        ax.legend()
        ctx.save_figure(fig, "scheduling_balance.png", result)

    def _overhead(self, ctx, result, slots, repeats) -> dict:
        """a. Vector-scalar multiply with a prologue per running block, and the spin workload with a
        heavy prologue (100 us against 25 us tiles: the CUDA Programming Guide 4.12 convolution-coefficient case)."""
        import cupy as cp

        from ..timing import time_gpu

        n = (1 << 28) if not ctx.quick else (1 << 27)  # 1 GiB (quick: 512 MiB) of float32
        data = cp.random.standard_normal(n, dtype=cp.float32)
        alpha = np.float32(1.0)
        rows, out = [], {}
        for prologue_us in (0, 5, 50):
            times = {}
            for label, policy, q in POLICIES:
                ctx.progress(f"overhead: vecscale prologue {prologue_us} us / {label}")
                k = vecscale_kernel(policy, q)
                t = time_gpu(lambda: k(tiles_for(n), data, n, alpha, prologue_us * 1000), warmup=1, repeats=repeats)
                times[label] = Spread.of(t.samples)
            for label, _, _ in POLICIES:
                rows.append([f"{4 * n >> 20} MiB", prologue_us, label, times[label],
                             rates(times[label], 8 * n, ctx.ceiling)[1],
                             times["fixed_work"] / times[label], times["fixed_blocks"] / times[label]])
            out[f"vecscale_{prologue_us}"] = times
        del data
        result.tables.append(Table(
            "a. overhead: v := alpha * v with a prologue per running block",
            ["size", "prologue us", "policy", "median ms", "% of copy ceiling", "speedup vs fixed_work",
             "speedup vs fixed_blocks"], rows,
            note="bytes = 8 per element; copy ceiling measured in this run; the prologue spins on %globaltimer"))
        # Heavy prologue on the spin workload.
        d = cp.asarray(workload("uniform", TILES, np.random.default_rng()))
        heavy = {}
        for label, policy, q in POLICIES:
            ctx.progress(f"overhead: heavy prologue / {label}")
            heavy[label] = self._run_spin(spin_kernel(policy, q), d, 100_000, repeats)
        ideal = {label: TILES * MEAN_TILE_NS / policy_slots(p, q) / 1e6 for label, p, q in POLICIES}  # own slots
        result.tables.append(Table(
            "a. overhead: heavy prologue (100 us per running block, 25 us tiles)",
            ["policy", "median ms", "x fixed_blocks", "speedup vs fixed_work", "x ideal (no prologue)"],
            [[label, heavy[label], heavy[label] / heavy["fixed_blocks"], heavy["fixed_work"] / heavy[label],
              heavy[label] / ideal[label]] for label, _, _ in POLICIES],
            note=f"steal's time slice stretches to {DEFAULT_PROLOGUE_FACTOR}x the block's own prologue "
                 f"(prologue_factor), so a block spends at most 1/{DEFAULT_PROLOGUE_FACTOR + 1} of its life in the "
                 "prologue; targets: steal within 1.1x fixed_blocks and at least 4x faster than fixed_work"))
        out["heavy"] = heavy
        for label in heavy:
            result.figures[f"heavy_prologue_{label.replace(' ', '_')}_ms"] = heavy[label]
        return out

    def _preemption(self, ctx, result, repeats) -> dict:
        """c. A high-priority kernel launched into a running low-priority one."""
        import cupy as cp

        caps = ctx.caps
        low_stream = cp.cuda.Stream(non_blocking=True, priority=caps.stream_priority_low)
        high_stream = cp.cuda.Stream(non_blocking=True, priority=caps.stream_priority_high)
        long_d = cp.asarray(workload("uniform", TILES * 10, np.random.default_rng()))  # ~10 ms at 8 slots per SM
        short_tiles = caps.sm_count  # one 20 us tile per SM
        short_d = cp.full(short_tiles, 20_000, dtype=cp.uint32)
        short = spin_kernel("fixed_work", name="urgent")
        short_done = cp.zeros(short_tiles, dtype=cp.uint32)
        synchronize_device()  # CuPy zeroes on its own stream; the kernels run on non-blocking ones

        gate = StreamGate()

        def high_latency_ms(delay_s: float = 0.0) -> float:
            """The high-priority kernel is enqueued behind a gate, which opens after ``delay_s``: the
            events then time the GPU from the moment the kernel may start, not Python's launch."""
            ev = EventPair()
            gate.hold(high_stream.ptr)
            try:
                ev.record_start(high_stream.ptr)
                short(short_tiles, short_d, short_done, 0, stream=high_stream)
                ev.record_stop(high_stream.ptr)
                time.sleep(delay_s)
            finally:  # a launch that raises must not leave the stream gated
                gate.release()
            return ev.elapsed_ms()

        # Load the kernel before any gated launch: loading a kernel (lazily, at its first launch)
        # may wait for the context to go idle, which a held stream never does.
        short(short_tiles, short_d, short_done, 0, stream=high_stream)
        synchronize(high_stream)
        for _ in range(3):
            high_latency_ms()  # warm-up
        alone = Spread.of([high_latency_ms() for _ in range(repeats)])

        def latency_under(kernel: TileKernel) -> tuple[Spread, Spread]:
            long_done = cp.zeros(long_d.size, dtype=cp.uint32)
            synchronize_device()
            kernel(long_d.size, long_d, long_done, 0, stream=low_stream)  # compile + validate first
            synchronize(low_stream)
            if not bool((long_done == 1).all()):
                raise ValidationError(f"{kernel.name}: low-priority kernel skipped or repeated a tile")
            lat, total = [], []
            for _ in range(repeats):
                ev = EventPair()
                ev.record_start(low_stream.ptr)
                kernel(long_d.size, long_d, long_done, 0, stream=low_stream)
                ev.record_stop(low_stream.ptr)
                lat.append(high_latency_ms(0.003))  # released 3 ms into the ~10 ms low-priority kernel
                total.append(ev.elapsed_ms())
            if not bool((long_done == 1 + repeats).all()):  # the later launches' grids may be learned ones
                raise ValidationError(f"{kernel.name}: low-priority kernel skipped or repeated a tile")
            return Spread.of(lat), Spread.of(total)

        rows, out = [], {"alone": alone}
        for label, policy, q in POLICIES:
            ctx.progress(f"preemption: under {label}")
            lat, total = latency_under(spin_kernel(policy, q, name="background"))
            out[label] = lat
            rows.append([label, lat, lat / alone, total])
            result.figures[f"preempt_{label.replace(' ', '_')}_latency_ms"] = lat
        result.tables.append(Table(
            f"c. preemption: a high-priority kernel ({short_tiles} tiles of 20 us) launched 3 ms into a ~10 ms "
            "low-priority one",
            ["low-priority policy", "high-priority latency ms", "x its time alone", "low-priority kernel ms"], rows,
            note=f"alone: {alone:.3f} ms; latency: from the moment the already-enqueued high-priority kernel may start "
                 f"(a device-side gate opens; an event right after it) to its end, so no host launch time is in it; "
                 f"target under steal: alone + 2 quanta = {alone + 2 * DEFAULT_QUANTUM_US / 1000:.3f} ms; "
                 f"medians of {repeats}"))
        # Quantum sweep: preemption latency against the cost of a heavy prologue.
        d = cp.asarray(workload("uniform", TILES, np.random.default_rng()))
        sweep = []
        fixed_blocks_heavy = self._run_spin(spin_kernel("fixed_blocks"), d, 100_000, repeats)
        for q in (5, 20, 50, 200, 1000, math.inf):
            ctx.progress(f"quantum sweep: {q} us")
            k = TileKernel(SPIN_PARAMS, SPIN_BODY, SPIN_PROLOGUE, policy="steal", block=SPIN_BLOCK, quantum_us=q,
                           prologue_factor=0, name="sweep_steal", min_blocks_per_sm=8)
            lat, _ = latency_under(k)
            heavy = self._run_spin(k, d, 100_000, repeats)
            sweep.append([q, lat, lat / alone, heavy, heavy / fixed_blocks_heavy])
        result.tables.append(Table(
            "c. steal quantum sweep (prologue_factor off): preemption latency against prologue overhead",
            ["quantum us", "high-priority latency ms", "x alone", "heavy-prologue ms", "x fixed_blocks"], sweep,
            note="heavy prologue: 100 us per running block, 25 us tiles; short quanta yield fast but pay the prologue "
                 "more often"))
        self._plot_sweep(ctx, result, sweep)
        self._preemption_timeline(ctx, result, gate, low_stream, high_stream, long_d, short, short_d, short_done)
        return out

    def _plot_sweep(self, ctx, result, sweep) -> None:
        from ..figures import pyplot as _pyplot

        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        xs, ys = [r[4] for r in sweep], [r[1] for r in sweep]
        ax.plot(xs, ys, "o-")
        for r in sweep:
            ax.annotate(f"Q={'inf' if r[0] == math.inf else r[0]}", (r[4], r[1]), textcoords="offset points",
                        xytext=(5, 5))
        ax.set_xlabel("heavy-prologue time / fixed_blocks")
        ax.set_ylabel("high-priority latency (ms, log)")
        ax.set_yscale("log")
        ax.set_title("steal: the quantum trades preemption latency for prologue cost")
        ctx.save_figure(fig, "scheduling_quantum_sweep.png", result)

    def _preemption_timeline(self, ctx, result, gate, low_stream, high_stream, long_d, short, short_d,
                             short_done) -> None:
        """Trace of the low-priority steal kernel with the high-priority kernel's window shaded."""
        import cupy as cp

        from ..work_stealing.timeline import plot_sm_timeline

        for label, policy, q in (POLICIES[1], POLICIES[2]):
            k = spin_kernel(policy, q, name="background")
            done = cp.zeros(long_d.size, dtype=cp.uint32)
            synchronize_device()
            low = k(long_d.size, long_d, done, 0, stream=low_stream, trace=True)
            gate.hold(high_stream.ptr)  # then the high-priority kernel, as in the latency measurement
            try:
                high = short(short_d.size, short_d, short_done, 0, stream=high_stream, trace=True)
                time.sleep(0.003)
            finally:
                gate.release()
            t0 = low.start_ns
            hw = high.records[high.written]
            span = [((hw["start_ns"].min() - t0) / 1e3, (hw["end_ns"].max() - t0) / 1e3,
                     "high-priority kernel")] if len(hw) else []
            # Zoom on the preemption: 0.5 ms either side of the high-priority kernel.
            window = (max(span[0][0] - 500, 0), span[0][1] + 500) if span else None
            name = f"scheduling_preemption_{policy}.png"
            plot_sm_timeline(low, ctx.plot_path(name),
                             title=f"low-priority {label} kernel; high-priority kernel shaded",
                             sm_count=ctx.caps.sm_count, highlight=span, window_us=window,
                             others=[(high, "high-priority kernel's tiles")], time_origin_ns=int(t0))
            result.plots.append(name)
            if policy == "steal":  # the same two kernels for a profiler's timeline: one process each, one time base
                perfetto = f"scheduling_preemption_{policy}.perfetto.json.gz"
                to_chrome_trace([low, high], ctx.plot_path(perfetto),
                                names=[f"low-priority kernel ({label})", "high-priority kernel"])
                result.notes.append(f"block traces of the preemption run under {label}, both kernels, for Perfetto "
                                    f"(https://ui.perfetto.dev) or chrome://tracing: {perfetto}")
            low = high = None  # free the trace buffers now: freeing may synchronize, never while a gate is held

    def _tradeoff(self, result, balance: list[BalanceRow], overhead: dict, preempt: dict) -> None:
        """The CUDA Programming Guide 4.12 table: lower overhead / preemption / load balance, with the numbers
        behind each answer."""
        heavy = overhead["heavy"]

        def worst_balance(label: str) -> float:
            return max(r.ms / r.ideal_ms for r in balance
                       if r.policy == label and r.workload != "uniform" and r.order == "index"
                       and r.regime == SHARED.key)

        rows = []
        for label, _, _ in POLICIES:
            ov = heavy[label] / heavy["fixed_blocks"]
            pre = preempt[label] / preempt["alone"]
            bal = worst_balance(label)
            rows.append([label,
                         f"{'yes' if ov <= 1.1 else 'no'} ({ov:.2f}x fixed_blocks)",
                         f"{'yes' if pre <= 10 else 'no'} ({pre:.1f}x alone)",
                         f"{'yes' if bal <= 1.25 else 'no'} ({bal:.2f}x ideal)"])
        rows.append(["clc (hardware)", "not measured: needs compute capability 10.0", "-", "-"])
        result.tables.insert(0, Table(
            "The trade-off table of the CUDA Programming Guide 4.12, measured on this GPU",
            ["policy", "lower overhead", "preemption", "load balance"], rows,
            note="overhead: heavy-prologue time over fixed_blocks (yes if <= 1.1); preemption: high-priority latency "
                 "over its time alone (yes if <= 10); load balance: worst makespan over ideal on the pareto, "
                 f"triangular and periodic workloads with {SHARED.label}, in index order (yes if <= 1.25)"))
        best_var = min(("fixed_work", "fixed_blocks", "steal"), key=worst_balance)
        result.selection += [
            Selection("variable work per tile",
                      "steal (software CLC; clc on 10.0+)" if best_var == "steal" else best_var,
                      f"worst makespan/ideal: steal {worst_balance('steal'):.2f}, fixed_work "
                      f"{worst_balance('fixed_work'):.2f}, fixed_blocks {worst_balance('fixed_blocks'):.2f}",
                      "fixed_work"),
            Selection("heavy prologue", "steal or fixed_blocks",
                      f"100 us prologue: steal {heavy['steal']:.2f} ms, fixed_blocks {heavy['fixed_blocks']:.2f} ms, "
                      f"fixed_work {heavy['fixed_work']:.2f} ms", "fixed_blocks"),
            Selection("work that must yield to higher priority", "steal with a quantum (clc on 10.0+), or fixed_work",
                      f"latency {preempt['steal']:.3f} ms under steal, {preempt['fixed_work']:.3f} under fixed_work, "
                      f"{preempt['fixed_blocks']:.3f} under fixed_blocks (alone {preempt['alone']:.3f})",
                      "fixed_work"),
        ]
