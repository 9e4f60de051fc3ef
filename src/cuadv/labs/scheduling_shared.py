"""Lab-private experiments of the ``scheduling`` lab, called from ``SchedulingLab.run``:

  d. against what users write on Hopper: policy ``atomic_counter`` (a persistent grid taking tiles from a
     global counter zeroed by a memset before every launch, the FlashAttention-3 kind) against ``steal``
     (a counter that resets itself: no memset) and ``fixed_blocks``, on the same tile bodies, as many
     launches back to back on one stream and as a CUDA graph of those launches replayed.
  e. a shared GPU: another kernel (``sm_holder.cu``) holds K whole SMs while the tile kernel runs, as a
     communication kernel does; each policy's makespan against the ideal over the slots left free,
     max(total work / ((SMs - K) x blocks per SM of that policy's own kernel), longest tile).

``policy_slots`` gives the slots of each policy's own kernel, from which every ideal of the lab is computed.
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np

from .._cuda import check, driver
from ..compiler import shipped
from ..device import current_device
from ..errors import ValidationError
from ..graphs import Graph
from ..kernel import max_active_blocks_per_sm
from ..launching import LaunchConfig, launch
from ..memory import HostWords
from ..params import c_struct
from ..report.results import LabResult, Spread, Table
from ..timing import EventPair, StreamGate, synchronize, synchronize_device
from ..work_stealing.timeline import common_window
from .base import RunContext, interleaved_rounds, interleaved_samples, ratio_interval, ratio_target
from .profile_notes import COUNTER
from .scheduling_support import SHARED, WORKLOAD_SEED, Regime, spin_kernel, workload
from .vecscale import DEFAULT_SHAPE, tiles_for, validate, vecscale_kernel

# d. Labels, policy, quantum (us; None = default, inf = never yield); atomic_counter first: the baseline.
COUNTER_POLICIES = [("atomic_counter", "atomic_counter", None), ("steal", "steal", None),
                    ("steal Q=inf", "steal", math.inf), ("fixed_blocks", "fixed_blocks", None)]
LAUNCHES = 10  # launches per timed stream sequence and per captured graph
# Rounds of table d per repeat of the lab: its ratios are within a few percent of 1.0, and a Pareto launch's time
# moves by that much between rounds (which tiles end last: 689-718 us for the same tiles, 10th to 90th percentile,
# H100 2026-12-06), so its medians take more rounds than the other tables'. A round launches about 80 ms of
# kernels; 105 rounds (the bench's 7 repeats) put a ratio's standard error near 0.3% where 21 left it near 0.6%.
COUNTER_ROUNDS_PER_REPEAT = 15
SHORT = Regime("short", "short launches", 8, 10_000, 20.0, 24.0)  # 8 tiles of 10 us per slot: ~80 us a launch
MIXED = Regime("mixed", "Pareto tiles", 50, 10_000, 20.0, 24.0)  # 50 per slot: ~0.5 ms a launch
VECSCALE_ELEMS = 1 << 26  # 256 MiB of float32: ~0.13 ms a launch at the copy ceiling

# e. Labels and policies of the shared-GPU experiment, and the SMs held.
SHARED_POLICIES = [("fixed_work", "fixed_work", None), ("fixed_blocks", "fixed_blocks", None),
                   ("steal", "steal", None), ("steal Q=inf", "steal", math.inf),
                   ("atomic_counter", "atomic_counter", None)]
HELD = (0, 16, 33, 66)
HOLDER_BLOCK = 32
HOLD_TIMEOUT_NS = 2_000_000_000  # a holder block leaves after 2 s whatever happens
RESIDENT_TIMEOUT_S = 1.0  # the host waits this long for all K holder blocks to run
# mirrors HolderParams in sm_holder.cu
HOLDER_DTYPE = c_struct("HolderParams", [("resident", "<u8"), ("smids", "<u8"), ("release", "<u8"), ("all_in", "<u8"),
                                         ("generation", "<u8"), ("timeout_ns", "<u8"), ("timed_out", "<u8")], size=56)


@functools.lru_cache(maxsize=None)
def policy_slots(policy: str, quantum_us: float | None = None) -> int:
    """Blocks of ``policy``'s own spin kernel resident at once on this GPU (its occupancy x SMs): the slots
    of that policy's ideal makespan (each policy compiles to its own kernel, with its own registers)."""
    return spin_kernel(policy, quantum_us).resident_units(policy)


def ideal_ms(durations: np.ndarray, slots: int) -> float:
    """max(total work / slots, longest tile), in ms, for tile durations in ns."""
    return max(float(durations.sum()) / slots, float(durations.max())) / 1e6


# -- d. atomic_counter against steal, in streams and graphs -----------------------------------------

def counter_table(ctx: RunContext, result: LabResult, repeats: int) -> None:
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    gate = StreamGate()
    slots = policy_slots("fixed_blocks")
    rng = np.random.default_rng(WORKLOAD_SEED)
    labels = {}  # case key -> what the table calls it
    calls, done_of = {}, {}  # (case key, policy label) -> one launch; its per-tile counters (spin)
    for key, kind, regime in (("short", "uniform", SHORT), ("mixed", "pareto", MIXED)):
        tiles = regime.tiles(slots)
        d = cp.asarray(workload(kind, tiles, rng, regime))
        labels[key] = f"spin, {kind}, {tiles} tiles of mean {regime.mean_ns / 1000:.0f} us ({regime.label})"
        for name, p, q in COUNTER_POLICIES:
            k, done = spin_kernel(p, q), cp.zeros(tiles, dtype=cp.uint32)
            done_of[(key, name)] = done
            calls[(key, name)] = (lambda k=k, d=d, done=done, n=tiles: k(n, d, done, 0, stream=stream))
    kernels = {name: vecscale_kernel(p, q) for name, p, q in COUNTER_POLICIES}
    validate({(name, DEFAULT_SHAPE): k for name, k in kernels.items()}, (DEFAULT_SHAPE.tile_elems * 3 + 5,))
    data = cp.random.standard_normal(VECSCALE_ELEMS, dtype=cp.float32)
    labels["vecscale"] = f"vecscale v := a v, {4 * VECSCALE_ELEMS >> 20} MiB"
    for name, k in kernels.items():
        calls[("vecscale", name)] = (lambda k=k: k(tiles_for(VECSCALE_ELEMS), data, VECSCALE_ELEMS, np.float32(1.0), 0,
                                                   stream=stream))
    synchronize_device()
    runs = dict.fromkeys(calls, 0)
    for key, call in calls.items():  # load, learn steal's min_tiles, then capture LAUNCHES launches in a graph
        for _ in range(3):
            call()
        runs[key] += 3
    synchronize(stream.ptr)
    graphs = {key: Graph.capture(stream, lambda call=call: [call() for _ in range(LAUNCHES)])
              for key, call in calls.items()}

    def timed(enqueue) -> list[float]:
        ev = EventPair()
        gate.hold(stream.ptr)  # the GPU starts once everything is queued: host launch time is not measured
        try:
            ev.record_start(stream.ptr)
            enqueue()
            ev.record_stop(stream.ptr)
        finally:
            gate.release()  # also when a launch raised: a gated stream would hang every later synchronize
        return [1e3 * ev.elapsed_ms() / LAUNCHES]

    def in_stream(key):
        def measure():
            runs[key] += LAUNCHES
            return timed(lambda: [calls[key]() for _ in range(LAUNCHES)])
        return measure

    def in_graph(key):
        def measure():
            runs[key] += LAUNCHES
            return timed(lambda: graphs[key].launch(stream.ptr))
        return measure

    variants = {}
    for key in calls:
        variants[(key, "stream")] = in_stream(key)
        variants[(key, "graph")] = in_graph(key)
    memset_buf = cp.zeros(2, dtype=cp.uint32)

    def memsets():
        for _ in range(LAUNCHES):
            check(driver().cuMemsetD32Async(memset_buf.data.ptr, 0, 2, stream.ptr), "cuMemsetD32Async")

    memset_graph = Graph.capture(stream, memsets)
    variants[("memset", "stream")] = lambda: timed(memsets)
    variants[("memset", "graph")] = lambda: timed(lambda: memset_graph.launch(stream.ptr))
    rounds = COUNTER_ROUNDS_PER_REPEAT * repeats
    samples = interleaved_samples(variants, rounds, on_round=lambda r: ctx.progress(
        f"atomic counter vs steal: round {r + 1} of {rounds}"))
    synchronize(stream.ptr)
    for (key, name), done in done_of.items():
        if not bool((done == runs[(key, name)]).all()):
            raise ValidationError(f"{labels[key]} / {name}: a tile was skipped or run twice in {runs[(key, name)]} "
                                  "launches")
    counter_report(result, labels, samples)
    result.checks.append("atomic_counter, steal and fixed_blocks ran every tile exactly once per launch, in streams "
                         "and in graph replays (per-tile counters); vecscale under each matched NumPy")
    for g in graphs.values():
        g.close()
    memset_graph.close()


def counter_report(result: LabResult, labels: dict[str, str], samples: dict) -> None:
    """Table d and its figures from the rounds' samples (us per launch, one per round): samples[((case, policy
    label), mode)] for every case of ``labels`` (case -> what the table calls it), every COUNTER_POLICIES label
    and mode "stream" / "graph", and samples[("memset", mode)]. Raises ValueError where the lists differ in
    length (the intervals pair the variants' samples round by round)."""
    rounds = len(samples[("memset", "stream")])
    if any(len(s) != rounds for s in samples.values()):
        raise ValueError(f"table d needs one sample per round of every variant; got lists of "
                         f"{sorted({len(s) for s in samples.values()})} samples")
    us = {key: Spread.of(s) for key, s in samples.items()}
    rows, missed = [], False
    for key, label in labels.items():
        base = {mode: us[((key, "atomic_counter"), mode)] for mode in ("stream", "graph")}
        for name, _, _ in COUNTER_POLICIES:
            t = {mode: us[((key, name), mode)] for mode in ("stream", "graph")}
            x = {mode: base[mode] / t[mode] for mode in t}
            target = "-"
            if name.startswith("steal"):
                interval = {mode: ratio_interval(samples[((key, "atomic_counter"), mode)], samples[((key, name), mode)])
                            for mode in t}
                for mode, (low, high) in interval.items():
                    result.figures[f"counter_{key}_{_key(name)}_{mode}_x_atomic_counter_low"] = low
                    result.figures[f"counter_{key}_{_key(name)}_{mode}_x_atomic_counter_high"] = high
                worst = min(t, key=lambda mode: x[mode])
                target = f"{worst}: {ratio_target(x[worst], interval[worst])}"
                missed |= name == "steal" and x[worst] < 1.0
            rows.append([label, name, t["stream"], x["stream"], t["graph"], x["graph"], target])
            for mode in t:
                result.figures[f"counter_{key}_{_key(name)}_{mode}_x_atomic_counter"] = x[mode]
    result.tables.append(Table(
        "d. dynamic scheduling as users write it on Hopper: atomic_counter (memset before every launch) vs steal",
        ["workload", "policy", "stream us / launch", "x atomic_counter (stream)", "graph us / launch",
         "x atomic_counter (graph)", "target: steal >= 1.0x atomic_counter"], rows,
        note=f"atomic_counter: the FlashAttention-3 kind of tile scheduler (a resident grid; each block's first tile "
             f"is its index, then thread 0 takes atomicAdd(counter, 1) + grid, issued before the tile and broadcast "
             f"through shared memory), the same tile body, its counter zeroed by a memset enqueued before every "
             f"launch (a memset node per launch in the graph), counted in its time. steal's counter resets itself "
             f"(no memset). stream: {LAUNCHES} launches enqueued behind a device-side gate, then timed together "
             f"(CUDA events), so the host's launch time is not in it; graph: a graph of the same {LAUNCHES} launches "
             f"replayed. Per launch, medians of {rounds} interleaved rounds; x atomic_counter = its time / this "
             f"policy's (above 1: faster); the target is judged on the lower of the two ratios (stream, graph), with "
             f"the 90% interval of that ratio from resampling the rounds (each round's pair kept together; the "
             f"choice of the lower one is not in it). The memset alone: "
             f"{us[('memset', 'stream')]:.2f} us per launch in a stream, {us[('memset', 'graph')]:.2f} us in a "
             f"graph. Every tile checked to run exactly once per launch"
             + (f". Why steal misses: {COUNTER}" if missed else "")))
    result.figures["counter_memset_stream_us"] = us[("memset", "stream")]
    result.figures["counter_memset_graph_us"] = us[("memset", "graph")]


def _key(label: str) -> str:
    return label.replace(" ", "_").replace("=", "").replace(",", "")


# -- e. a shared GPU --------------------------------------------------------------------------------

_HOST_FLAGS = HostWords()  # page-locked words the host polls: one page for every SmHolder of the process


class SmHolder:
    """K blocks of ``sm_holder``, each alone on its SM (it takes all the shared memory a block may have),
    held from ``hold`` until ``release``; ``finish`` waits for them and returns the SMs they held.
    ``whole_sm=False`` (the sanitizer smoke): no shared memory, so the blocks hold nothing but run the same code."""

    def __init__(self, caps, whole_sm: bool = True):
        import cupy as cp

        self.kernel = shipped("sm_holder.cu", name="sm_holder").kernel("sm_holder")
        reserved = current_device().attribute("RESERVED_SHARED_MEMORY_PER_BLOCK")
        self.shared = caps.shared_mem_per_block_optin if whole_sm else 0
        self.whole_sm = whole_sm
        # One holder block fits on an SM, and beside it not even a block without shared memory (each block
        # costs the reserved 1 KB): shared_mem_per_block_optin + reserved <= per SM < that + reserved.
        if whole_sm and not self.shared + reserved <= caps.shared_mem_per_sm < self.shared + 2 * reserved:
            raise ValidationError(f"a holder block of {self.shared} B shared memory (+{reserved} B reserved) does not "
                                  f"fill an SM of {caps.shared_mem_per_sm} B alone")
        per_sm = max_active_blocks_per_sm(self.kernel, HOLDER_BLOCK, self.shared)
        if whole_sm and per_sm != 1:
            raise ValidationError(f"the occupancy API fits {per_sm} holder blocks per SM, expected 1")
        self.arithmetic = (f"{self.shared} B dynamic shared memory per holder block + {reserved} B reserved = "
                           f"{self.shared + reserved} B of the SM's {caps.shared_mem_per_sm} B; any other block needs "
                           f"at least {reserved} B more")
        self.ctl = cp.zeros(3 + caps.sm_count, dtype=cp.uint32)  # resident, release, timed_out, smids
        self.flag, self.flag_ptr = _HOST_FLAGS.take()
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.generation = 0
        self.k = 0
        synchronize_device()

    def hold(self, k: int, timeout_s: float = RESIDENT_TIMEOUT_S) -> None:
        """Launch k holder blocks and return once all of them run (ValidationError after timeout_s)."""
        if not 0 <= k < current_device().caps.sm_count:  # ctl has one smid word per SM; K = all SMs leaves no slot
            raise ValueError(f"the holder takes 0 to {current_device().caps.sm_count - 1} SMs of this GPU; got {k}")
        self.generation += 1
        self.k = k
        base = self.ctl.data.ptr
        check(driver().cuMemsetD32Async(base, 0, 3, self.stream.ptr), "cuMemsetD32Async")
        rec = np.zeros((), HOLDER_DTYPE)
        rec["resident"], rec["release"], rec["timed_out"], rec["smids"] = base, base + 4, base + 8, base + 12
        rec["all_in"], rec["generation"], rec["timeout_ns"] = self.flag_ptr, self.generation, HOLD_TIMEOUT_NS
        launch(self.kernel, LaunchConfig(grid=k, block=HOLDER_BLOCK, shared_mem=self.shared), rec.tobytes(),
               stream=self.stream.ptr)
        deadline = time.perf_counter() + timeout_s
        while int(self.flag[0]) != self.generation:
            if time.perf_counter() > deadline:
                raise ValidationError(f"the {k} holder blocks were not all running after {timeout_s} s (they leave "
                                      f"by their own {HOLD_TIMEOUT_NS / 1e9:.0f} s timeout)")

    def release(self, stream: int) -> None:
        """Let the holder go once the work enqueued on ``stream`` so far is done (a stream write: no SM needed)."""
        check(driver().cuStreamWriteValue32(stream, self.ctl.data.ptr + 4, 1, 0), "cuStreamWriteValue32")

    def finish(self) -> set[int]:
        synchronize(self.stream.ptr)
        ctl = self.ctl.get()
        if ctl[2]:
            raise ValidationError(f"{ctl[2]} holder blocks left by their {HOLD_TIMEOUT_NS / 1e9:.0f} s timeout "
                                  "before the release: the SMs were not held for the whole tile kernel")
        held = set(int(s) for s in ctl[3:3 + self.k])
        if self.whole_sm and len(held) != self.k:
            raise ValidationError(f"{self.k} holder blocks ran on only {len(held)} distinct SMs")
        return held


def smoke_holder() -> None:
    """The holder once, one block, released from another stream at once (``SchedulingLab.smoke``)."""
    import cupy as cp

    holder = SmHolder(current_device().caps, whole_sm=False)  # the code under test, not the SM it would hold
    other = cp.cuda.Stream(non_blocking=True)
    holder.hold(1, timeout_s=30.0)  # compute-sanitizer slows the launch, not the holder's own clock
    holder.release(other.ptr)
    synchronize(other.ptr)
    holder.finish()


def shared_gpu(ctx: RunContext, result: LabResult, repeats: int) -> None:
    import cupy as cp

    caps = ctx.caps
    holder = SmHolder(caps)
    stream = cp.cuda.Stream(non_blocking=True)
    per_slot = 20 if ctx.quick else 100
    tiles = per_slot * policy_slots("fixed_blocks")
    host = workload("uniform", tiles, np.random.default_rng(), SHARED)
    d = cp.asarray(host)
    kernels = {label: spin_kernel(p, q) for label, p, q in SHARED_POLICIES}
    # blocks per SM of the kernel that ran (each policy's own: its registers decide its occupancy)
    per_sm = {label: kernels[label].resident_units(p) // caps.sm_count for label, p, _ in SHARED_POLICIES}
    done = {label: cp.zeros(tiles, dtype=cp.uint32) for label in kernels}
    runs = dict.fromkeys(kernels, 0)
    synchronize_device()

    def run(label, k_held: int, trace: bool = False):
        """One launch of the tile kernel while k_held SMs are held: its ms, its trace, the held SMs."""
        if k_held:
            holder.hold(k_held)
        try:
            ev = EventPair()
            ev.record_start(stream.ptr)
            tr = kernels[label](tiles, d, done[label], 0, stream=stream, trace=trace)
            ev.record_stop(stream.ptr)
        finally:  # a launch that raises must not leave K SMs held into the next lab (until the holder's own timeout)
            if k_held:
                holder.release(stream.ptr)
        runs[label] += 1
        ms = ev.elapsed_ms()
        if tr is not None:
            tr.records  # read (and its buffer freed) now: freeing may wait for the context, never while SMs are held
        return ms, tr, holder.finish() if k_held else set()

    for label in kernels:  # load every kernel (and let steal learn its grid) before any SM is held
        for _ in range(2):
            run(label, 0)
    run("fixed_blocks", 1)  # and the holder
    held_list = tuple(k for k in ((16,) if ctx.quick else HELD) if k < caps.sm_count)
    rows, violations = [], []
    for k_held in held_list:
        ms = interleaved_rounds({label: (lambda label=label: [run(label, k_held)[0]]) for label in kernels}, repeats,
                                on_round=lambda r: ctx.progress(f"shared GPU: {k_held} SMs held, round {r + 1}"))
        pair = []  # the traces of fixed_blocks and steal at K = 16, drawn on one time scale
        for label in kernels:  # one traced launch each: no tile may run on a held SM
            _, tr, held = run(label, k_held, trace=True)
            on_held = int(np.isin(tr.records["smid"], list(held)).sum())
            if on_held or not tr.written.all():
                violations.append(f"{label} at K={k_held}: {on_held} tiles on held SMs")
            if k_held == 16 and label in ("fixed_blocks", "steal"):
                pair.append((label, tr, held))
            tr = None
        window = common_window([t for _, t, _ in pair])  # one time scale for the pair
        for label, tr, held in pair:
            name = f"scheduling_shared_gpu_{label.replace(' ', '_')}.png"
            tr.plot(ctx.plot_path(name), sm_count=caps.sm_count, shade_sms=held, window_us=window,
                    title=f"{label}, {k_held} SMs held by another kernel (shaded): tiles per SM over time")
            result.plots.append(name)
        pair = []
        for label in kernels:
            slots = (caps.sm_count - k_held) * per_sm[label]
            ideal = ideal_ms(host, slots)
            x_ideal, speedup = ms[label] / ideal, ms["fixed_blocks"] / ms[label]
            target = "-"
            if k_held == 16 and label == "steal":
                target = (f"within 15% of ideal: {'met' if x_ideal <= 1.15 else 'missed'} ({x_ideal:.2f}x); "
                          f">= 1.25x fixed_blocks: {'met' if speedup >= 1.25 else 'missed'} ({speedup:.2f}x)")
            rows.append([k_held, label, per_sm[label], slots, ms[label], ideal, x_ideal, speedup, target])
            result.figures[f"shared_K{k_held}_{_key(label)}_over_ideal"] = x_ideal
            result.figures[f"shared_K{k_held}_{_key(label)}_speedup_vs_fixed_blocks"] = speedup
    synchronize(stream.ptr)
    for label in kernels:
        if not bool((done[label] == runs[label]).all()):
            raise ValidationError(f"shared GPU / {label}: a tile was skipped or run twice in {runs[label]} launches")
    if violations:
        raise ValidationError("tiles ran on SMs the holder kernel held: " + "; ".join(violations))
    result.tables.append(Table(
        "e. a shared GPU: another kernel holds K SMs while the tile kernel runs",
        ["SMs held (K)", "policy", "blocks/SM of its kernel", "free slots", "median ms", "ideal ms", "x ideal",
         "speedup vs fixed_blocks", "target (K = 16)"], rows,
        note=f"{tiles} uniform tiles of {SHARED.mean_ns / 1000:.0f} us ({per_slot} per slot of the whole GPU). The "
             f"holder (sm_holder.cu) is K blocks, each alone on an SM ({holder.arithmetic}; occupancy API: 1 per "
             f"SM; distinct %smid checked), launched first on its own stream; the host waits until all K run "
             f"(host-mapped flag), then the tile kernel runs on another stream between CUDA events, then a stream "
             f"write releases the holder. Ideal = max(total work / free slots, longest tile), free slots = (SMs - K) x "
             f"blocks per SM of that policy's own kernel (occupancy API). fixed_blocks and atomic_counter launch the "
             f"blocks that fit on the whole GPU, so those beyond the free slots wait for a second wave. Medians of "
             f"{repeats} interleaved rounds; one traced launch per policy and K checks that no tile ran on a held SM"))
    result.checks.append("shared GPU: no tile of any policy ran on an SM the holder kernel held (block traces), and "
                         "every tile ran exactly once per launch")
