"""TMA: 2-D tiled copies and transposes driven by tensor maps built in Python, and multicast to a cluster.

Shows (TMA tiled copies, CUDA Programming Guide, and TMA multicast): a tensor map built from Python for a user's array
(pitched rows; float32, float16, bfloat16, uint8) with every alignment and size rule checked before
anything reaches the driver; a 2-D copy and a transpose through TMA against the same tiles moved by 256
threads, over tile shapes, element types, pitches and tail tiles (TMA fills the out-of-bounds part of a
box and clips the stores); the TMA copy swept over tile shape x blocks per SM x ring slots, then tile order
(side-by-side chunks), loads in flight, L2 promotion and evict-first hints, every configuration measured
and checked in the same run; then a batched matrix-vector product whose blocks share the tiles of A, with
per-block loads against TMA multicast to clusters of 1 to 8 blocks (time, and DRAM and L2 bytes from
Nsight Compute where it runs).
Needs: compute capability 9.0 (TMA, clusters); multicast is built for sm_90a / sm_100a.
Key insight: one thread per block can keep an SM's share of HBM bandwidth in flight with TMA, streaming
boxes through a ring of shared-memory slots with no per-thread address arithmetic; tails and pitches cost
nothing, and what is left to tune is the order and width of the runs the boxes make in memory. Multicast
pays when several blocks consume the same tiles and the L2-to-SM traffic, not DRAM, is the limit; with
one consumer, or with enough compute per byte, per-block loads are as fast and simpler.
Run: ``cuadv bench tma`` (``--quick`` for a smaller problem).

What users call (tensor maps, ``copy``, ``transpose``, their ``prepare_*`` forms) lives in ``cuadv.tma``; the
multicast gemv, data, checks and Nsight Compute runner in ``tma_support``; the Triton peers (a tensor-descriptor
copy, a pointer copy) and their table in ``triton_peers``. This module measures and reports.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import LaunchConfigError, ValidationError
from ..report.results import LabResult, Selection, Spread, Table, spread_map
from ..tma.kernels import COPY_THREADS, MAX_STAGES, TmaCopyConfig, _round128, build_module, default_stages
from ..tma.tensormap import element_size
from ..timing import time_gpu
from .base import RunContext, rates
from .triton_peers import compare_copy  # the Triton peers (lab-private; triton and torch imported only when run)
from .tma_support import (BF16_NOTE, GEMV_VECTORS_PER_BLOCK, NCU_CONFIGS, NCU_METRICS,
                          NUMPY_TYPES, VALIDATION_CASES, TmaOps, box_for, integer_problem, ncu_worker,
                          pitched, poison_against, random_array, run_ncu, validate_copy_configs, validate_gemv,
                          validate_tiles)

# Names this module has always offered (tests and older callers import them from here); they live in cuadv.tma
# (the library) and in tma_support (the lab's multicast gemv, data and checks).
from ..tma.kernels import (ELEMENT_TYPES, EVICT_FIRST, MAX_CHUNK, MAX_READING, TILE_THREADS, Plan2D,  # noqa: F401
                           kernel_expressions)
from ..tma.params import THREAD_PARAMS_BYTES, TMA_PARAMS_BYTES, ThreadTileParams, TmaTileParams  # noqa: F401
from .tma_support import (COPY_CONFIG_CASES, GEMV_PARAMS_BYTES, GemvParams, _bits, parse_ncu_csv,  # noqa: F401
                          validate_oob_fill)

# ---------------------------------------------------------------------------------------------- the lab

TILE_SHAPES = ((4, 256), (8, 256), (16, 256), (32, 256), (16, 128), (32, 32), (32, 128), (64, 64), (128, 64),
               (256, 32))
SWEEP_BLOCKS_PER_SM = (1, 2, 4)
SWEEP_RING_KIB = (64, 128, 192)  # shared memory per SM given to the rings
SWEEP_CHUNKS = (2, 4, 8, 16)      # and a whole row of tiles
SWEEP_TOP = 3                    # tiles (their fastest grid configuration) whose chunks are swept
CONFIRM_REPEATS = 100
# Measured whatever the greedy steps pick: long runs per row sent out together, at one and two blocks per SM.
SWEEP_EXTRA = (
    ((8, 256), TmaCopyConfig(stages=24, lookahead=16, blocks_per_sm=1, chunk=4, burst=4)),
    ((8, 256), TmaCopyConfig(stages=12, lookahead=8, blocks_per_sm=2, chunk=4, burst=4)),
    ((8, 256), TmaCopyConfig(stages=12, lookahead=8, blocks_per_sm=2, chunk=8, burst=8)),
    ((4, 256), TmaCopyConfig(stages=32, lookahead=24, blocks_per_sm=1, chunk=8, burst=8)),
    ((4, 256), TmaCopyConfig(stages=24, lookahead=16, blocks_per_sm=2, chunk=8, burst=8)),
    ((16, 256), TmaCopyConfig(stages=12, lookahead=8, blocks_per_sm=1, chunk=4, burst=4)),
    ((16, 256), TmaCopyConfig(stages=6, lookahead=4, blocks_per_sm=2, chunk=2, burst=2)),
)


def sweep_grid(tiles: Sequence[tuple[int, int]], itemsize: int, quick: bool = False
               ) -> list[tuple[tuple[int, int], TmaCopyConfig]]:
    """Tile shape x blocks per SM x ring depth for tma_copy: for each tile and blocks per SM, the stages that give
    the rings of one SM about SWEEP_RING_KIB of shared memory; loads run stages - 1 ahead for rings of up to 4 slots,
    stages - 2 for deeper ones. Configurations that do not fit an SM are skipped where they are measured."""
    out = []
    for box in tiles:
        stride = _round128(box[0] * box[1] * itemsize)
        for bps in (1, 2) if quick else SWEEP_BLOCKS_PER_SM:
            seen: set[int] = set()
            for kib in (128,) if quick else SWEEP_RING_KIB:
                stages = max(2, min(MAX_STAGES, round(kib * 1024 / (bps * stride))))
                if stages not in seen:
                    seen.add(stages)
                    out.append((box, TmaCopyConfig(stages=stages, lookahead=stages - (1 if stages <= 4 else 2),
                                                   blocks_per_sm=bps)))
    return out


def _variant(config: TmaCopyConfig, **changes: Any) -> TmaCopyConfig | None:
    try:
        return replace(config, **changes)
    except LaunchConfigError:
        return None


def chunk_variants(config: TmaCopyConfig, chunk: int) -> list[TmaCopyConfig]:
    """``chunk`` side-by-side tiles per block with loads issued one by one, and (where the ring allows) with the
    chunk's loads issued together: burst = chunk, lookahead the largest multiple of it that keeps at most
    MAX_READING stores reading, so bursts line up with the chunks."""
    out = [replace(config, chunk=chunk, burst=1)]
    ahead = config.lookahead // chunk * chunk
    together = _variant(config, chunk=chunk, burst=chunk, lookahead=ahead) if ahead >= chunk > 1 else None
    return out + ([together] if together else [])


def ring_neighbours(config: TmaCopyConfig) -> list[TmaCopyConfig]:
    """The same shared memory per SM arranged differently: 1, 2 or 4 stores reading; twice the blocks with half
    the slots, or half the blocks with twice the slots (each kept only where it is a valid configuration)."""
    out = []
    for reading in (1, 2, 4):
        if reading != config.reading and config.stages - reading >= 1:
            out.append(_variant(config, lookahead=config.stages - reading))
    bps = config.blocks_per_sm or 1
    for b, st in ((bps * 2, config.stages // 2), (bps // 2, config.stages * 2)):
        if b >= 1 and 2 <= st <= MAX_STAGES:
            out.append(_variant(config, blocks_per_sm=b, stages=st, lookahead=st - min(config.reading, st - 1)))
    return [c for c in out if c is not None]


def config_label(config: TmaCopyConfig) -> str:
    """Short form for the tables: '12 slots, 10 ahead, 2/SM, chunk 4' (+ non-default L2 settings)."""
    bps = "max" if config.blocks_per_sm is None else str(config.blocks_per_sm)
    label = f"{config.stages} slots, {config.lookahead} ahead, {bps}/SM, chunk {config.chunk}"
    if config.burst > 1:
        label += f", bursts of {config.burst}"
    if config.l2_promotion != "128B":
        label += f", L2 {config.l2_promotion}"
    if config.evict_first != "none":
        label += f", evict-first {config.evict_first}"
    return label


class TmaLab:
    name = "tma"
    title = "TMA: tiled 2-D copies and transposes from Python tensor maps, and multicast to a cluster"

    def supported(self, caps) -> str | None:
        if not caps.tma:
            return (f"TMA needs compute capability >= 9.0 (got {caps.cc_string()}); fallback: cp.async copies "
                    "(cuadv bench pipeline) and per-block loads")
        if not caps.cluster_launch:
            return "TMA multicast needs thread block clusters; fallback: per-block TMA loads"
        return None

    def build(self, arch: str):
        return [build_module(arch)]

    def smoke(self) -> None:
        ops = TmaOps()
        validate_tiles(ops, cases=VALIDATION_CASES[:3])
        validate_copy_configs(ops)
        validate_gemv(ops, clusters=(1, 2, 3, 8))

    def run(self, ctx: RunContext) -> LabResult:
        result = LabResult(self.name, self.title)
        ops = TmaOps()
        ctx.progress("tma: validating copies, transposes and out-of-bounds fill")
        result.checks += validate_tiles(ops)
        ctx.progress("tma: validating the TMA copy's ring configurations")
        result.checks.append(validate_copy_configs(ops))
        ctx.progress("tma: validating the multicast gemv for clusters of 1 to 8")
        result.checks.append(validate_gemv(ops))
        best = self._tile_table(ctx, ops, result)
        compare_copy(ctx, result, best["box"], best["config"])  # cuadv.tma.copy vs Triton and torch, same rounds
        self._dtype_table(ctx, ops, result)
        self._multicast(ctx, ops, result)
        return result

    def _timer(self, ctx):
        """A timer of a callable (ms: the median of ``repeats`` CUDA-event timings, with their spread), and repeats."""
        repeats = 10 if ctx.quick else 30
        return (lambda fn: Spread.of(time_gpu(fn, repeats=repeats).samples)), repeats

    def _tile_table(self, ctx: RunContext, ops: TmaOps, result: LabResult) -> dict[str, Any]:
        import cupy as cp

        timed, repeats = self._timer(ctx)
        side = 8192 if ctx.quick else 16384
        rows, cols = side + 77, side + 45  # tail tiles in both directions
        src = random_array(cp, None, rows, cols, "float32")
        dst = pitched(cp, rows, cols, "float32", extra=1)
        dst_t = pitched(cp, cols, rows, "float32")
        nbytes = 2 * 4 * rows * cols  # read + write

        def pct(ms: float) -> float:
            return rates(ms, nbytes, ctx.ceiling)[1]

        def checked(fn: Callable[[], None], target, expected, what: str) -> Spread:
            """Median ms of fn; then the target is poisoned, fn rerun and its output compared with expected."""
            ms = timed(fn)
            target.fill(cp.nan)
            fn()
            if not bool(cp.array_equal(target, expected)):
                raise ValidationError(f"{what} wrong at {rows} x {cols}")
            return ms

        ctx.progress("tma: CuPy copy and transpose")
        peer_copy = timed(lambda: cp.copyto(dst, src))
        peer_t = timed(lambda: cp.copyto(dst_t, src.T))
        times: dict[tuple[tuple[int, int], str, str], Spread] = {}
        for box in TILE_SHAPES:
            ctx.progress(f"tma: tile {box[0]} x {box[1]}")
            for op, method in (("copy", "tma"), ("copy", "threads"), ("transpose", "tma"), ("transpose", "threads")):
                target, expected = (dst, src) if op == "copy" else (dst_t, src.T)
                prep = ops.prepare_copy if op == "copy" else ops.prepare_transpose
                times[(box, op, method)] = checked(prep(src, target, box, method=method), target, expected,
                                                   f"{method} {op}, box {box}")
        records = [{"box": box, "config": TmaCopyConfig(stages=default_stages(4 * box[0] * box[1])),
                    "ms": times[(box, "copy", "tma")], "step": "default"} for box in TILE_SHAPES]
        records += self._copy_sweep(ctx, ops, src, dst, checked)
        for r in records:
            r["pct"] = pct(r["ms"])
        best = max(records, key=lambda r: r["pct"])

        # The winner again, with more repeats: the maximum of many medians is biased upwards.
        confirm_fn = ops.prepare_copy(src, dst, best["box"], config=best["config"])
        confirm = time_gpu(confirm_fn, repeats=repeats if ctx.quick else CONFIRM_REPEATS)
        thread_same = None
        if best["config"].chunk > 1:  # the baseline with the winner's tile order, for a like-for-like ratio
            thread_same = checked(ops.prepare_copy(src, dst, best["box"], method="threads",
                                                   chunk=best["config"].chunk), dst, src, "thread copy (chunked)")

        table = []
        for box in TILE_SHAPES:
            tag = f"{box[0]}x{box[1]}"
            default_ms = times[(box, "copy", "tma")]
            swept = [r for r in records if r["box"] == box and r["step"] != "default"]
            top = min(swept, key=lambda r: r["ms"]) if swept else None
            tma_ms = min(default_ms, top["ms"]) if top else default_ms
            thr_ms = times[(box, "copy", "threads")]
            tt_ms, tthr_ms = times[(box, "transpose", "tma")], times[(box, "transpose", "threads")]
            table.append([f"{box[0]} x {box[1]}", pct(default_ms), pct(top["ms"]) if top else "-",
                          config_label(top["config"]) if top else "-", pct(thr_ms), thr_ms / tma_ms,
                          peer_copy / tma_ms, pct(tt_ms), pct(tthr_ms), tthr_ms / tt_ms, peer_t / tt_ms])
            result.figures[f"tma_copy_{tag}_pct_ceiling"] = pct(default_ms)
            if top:
                result.figures[f"tma_copy_swept_{tag}_pct_ceiling"] = pct(top["ms"])
            result.figures[f"tma_transpose_{tag}_pct_ceiling"] = pct(tt_ms)
        result.tables.append(Table(
            f"float32 {rows} x {cols} (pitched rows, tail tiles both ways): tile shape by method, "
            "% of the copy ceiling",
            ["tile (rows x cols)", "TMA copy % (default ring)", "TMA copy % (best swept)", "best swept configuration",
             "thread copy %", "copy: TMA x threads", "copy: TMA x CuPy", "TMA transpose %", "thread transpose %",
             "transpose: TMA x threads", "transpose: TMA x CuPy"],
            table,
            note=f"bytes = 8 per element (read + write); copy ceiling {ctx.ceiling.tb_per_s:.2f} TB/s measured in "
                 f"this run; CuPy copy {pct(peer_copy):.1f}%, CuPy "
                 f"transpose (copyto of .T) {pct(peer_t):.1f}%. TMA copy: "
                 "one thread per block streams boxes through a ring of shared-memory slots; default ring: 4 slots "
                 "(fewer for boxes over 24 KiB), 3 loads ahead, as many blocks as fit, blocks interleaved tile by "
                 "tile; best swept: the fastest configuration of the next table for that tile ('chunk' = side-by-side "
                 "tiles a block takes at a time); the ratios use the faster of the two TMA copies. Threads: 256 per "
                 f"block, 16-byte loads, tiles interleaved. Medians of {repeats} CUDA-event timings; every output "
                 "poisoned, rerun and compared with the source after timing"))
        self._sweep_table(ops, records, result, rows, cols, repeats)

        result.figures["tma_copy_best_pct_ceiling"] = best["pct"]
        result.figures["tma_copy_best_confirmed_pct_ceiling"] = pct(confirm.median_ms)
        note = (f"best TMA copy: tile {best['box'][0]} x {best['box'][1]}, {config_label(best['config'])}: "
                f"{best['pct']:.1f}% of the copy ceiling (best of {len(records)} configurations; re-timed with "
                f"{len(confirm.samples)} repeats: {pct(confirm.median_ms):.1f}%)")
        if thread_same is not None:
            result.figures["tma_copy_best_x_threads_same_order"] = thread_same / best["ms"]
            note += (f"; threads with the same tile and chunk: {pct(thread_same):.1f}% "
                     f"({thread_same / best['ms']:.2f}x slower)")
        result.notes.append(note)
        best_t = max(TILE_SHAPES, key=lambda b: pct(times[(b, "transpose", "tma")]))
        result.figures["tma_transpose_best_pct_ceiling"] = pct(times[(best_t, "transpose", "tma")])
        result.notes.append(f"best TMA transpose: tile {best_t[0]} x {best_t[1]}, "
                            f"{pct(times[(best_t, 'transpose', 'tma')]):.1f}% of the copy ceiling")
        result.checks.append(f"every timed copy and transpose at {rows} x {cols} ({len(records)} TMA copy "
                             "configurations among them) equals its source (or its transpose) element for element, "
                             "output poisoned with NaN before the checked run")
        return best  # the fastest TMA copy configuration of this run (box, config): the Triton table measures it

    def _copy_sweep(self, ctx: RunContext, ops: TmaOps, src, dst, checked) -> list[dict[str, Any]]:
        """tma_copy over sweep_grid; chunks for the fastest configuration of each of the SWEEP_TOP fastest tiles;
        then, greedily from the fastest so far, the ring's arrangement, the L2 promotion and the evict-first hints.
        Every configuration measured is returned (median ms and the step that proposed it)."""
        measured: dict[tuple[tuple[int, int], TmaCopyConfig], dict[str, Any]] = {}

        def measure(box: tuple[int, int], config: TmaCopyConfig, step: str) -> None:
            if (box, config) in measured or not ops.copy_fits(4 * box[0] * box[1], config):
                return
            fn = ops.prepare_copy(src, dst, box, config=config)
            ms = checked(fn, dst, src, f"TMA copy ({config_label(config)}), box {box}")
            measured[(box, config)] = {"box": box, "config": config, "ms": ms, "step": step}

        def fastest(count: int = 1) -> list[dict[str, Any]]:
            return sorted(measured.values(), key=lambda r: r["ms"])[:count]

        grid = sweep_grid(TILE_SHAPES, 4, ctx.quick)
        for i, (box, config) in enumerate(grid):
            if i % 16 == 0:
                ctx.progress(f"tma: TMA copy sweep, tile x blocks per SM x slots ({i + 1} of {len(grid)})")
            measure(box, config, "grid")
        if not ctx.quick:
            for box, config in SWEEP_EXTRA:
                measure(box, config, "extra")
        ctx.progress("tma: TMA copy sweep, chunks")
        leaders: dict[tuple[int, int], dict[str, Any]] = {}  # the fastest configuration of each tile, fastest first
        for r in fastest(len(measured)):
            if r["step"] == "grid":
                leaders.setdefault(r["box"], r)
        for r in list(leaders.values())[:1 if ctx.quick else SWEEP_TOP]:
            tiles_x = -(-src.shape[1] // r["box"][1])
            for chunk in (4,) if ctx.quick else SWEEP_CHUNKS + (tiles_x,):  # ... and a whole row of tiles
                for config in chunk_variants(r["config"], chunk):
                    measure(r["box"], config, "chunk")
        refinements: tuple[tuple[str, Callable[[TmaCopyConfig], list[TmaCopyConfig]]], ...] = (
            ("ring", ring_neighbours),
            ("L2 promotion", lambda c: [replace(c, l2_promotion=v) for v in ("none", "256B") if v != c.l2_promotion]),
            ("evict-first", lambda c: [replace(c, evict_first=v) for v in ("loads", "stores", "both")
                                       if v != c.evict_first]),
        )
        for step, variants in refinements:
            ctx.progress(f"tma: TMA copy sweep, {step}")
            best = fastest()[0]
            for config in variants(best["config"]):
                measure(best["box"], config, step)
        return list(measured.values())

    def _sweep_table(self, ops: TmaOps, records: list[dict[str, Any]], result: LabResult, rows: int, cols: int,
                     repeats: int) -> None:
        table = []
        for r in sorted(records, key=lambda r: -r["pct"]):
            box, c = r["box"], r["config"]
            box_bytes = 4 * box[0] * box[1]
            shared = c.shared_bytes(box_bytes)
            bps = c.blocks_per_sm or ops.blocks_per_sm("tma_copy", COPY_THREADS, shared)
            table.append([f"{box[0]} x {box[1]}", box_bytes / 1024, c.stages, c.lookahead, c.reading, c.burst,
                          bps if c.blocks_per_sm else f"{bps} (all that fit)", c.chunk, c.l2_promotion,
                          c.evict_first, bps * shared / 1024, bps * c.lookahead * box_bytes / 1024, r["pct"],
                          r["step"]])
        result.tables.append(Table(
            f"TMA copy, float32 {rows} x {cols}: every configuration measured, fastest first, % of the copy ceiling",
            ["tile (rows x cols)", "box KiB", "slots", "loads ahead", "stores reading", "burst", "blocks/SM",
             "chunk (tiles)",
             "L2 promotion", "evict-first", "shared KiB/SM", "loads in flight/SM KiB", "% of copy ceiling", "step"],
            table,
            note="one issuing thread per block; 'loads ahead' boxes are in flight while the oldest is stored, and "
                 "a slot is refilled once the store that last used it has read it, so 'stores reading' = slots - "
                 "loads ahead stores may still be reading their slots; loads leave in bursts of 'burst' once that "
                 "many are due; the grid is blocks/SM x SMs (persistent); chunk = side-by-side tiles of one row a "
                 "block takes at a time (runs of chunk x tile width; with burst = chunk they leave together). Steps: "
                 "default = the first table's default ring; grid = tile x blocks/SM x slots (rings of about 64, 128, "
                 "192 KiB of shared memory per SM; those that do not fit an SM are left out); extra = a few long-run "
                 "configurations measured in every full run; chunk = chunks of "
                 f"{', '.join(map(str, SWEEP_CHUNKS))} tiles and a whole row of tiles, loads one by one and in "
                 "bursts of a chunk, for the fastest grid "
                 f"configuration of each of the {SWEEP_TOP} fastest tiles; then, greedily from the fastest so far: "
                 "ring (the same shared memory per SM arranged differently), L2 promotion, evict-first hints. "
                 f"Medians of {repeats} CUDA-event timings; every output poisoned, rerun and compared with the source"))

    def _dtype_table(self, ctx: RunContext, ops: TmaOps, result: LabResult) -> None:
        import cupy as cp

        timed, _ = self._timer(ctx)
        rows = (4096 if ctx.quick else 8192) + 77
        width_bytes = (4096 if ctx.quick else 8192) * 4 + 52
        table = []
        for dtype in NUMPY_TYPES:
            es = element_size(dtype)
            cols = width_bytes // es
            box = box_for(dtype, (64, 64))
            tdtype = "bfloat16" if dtype == "bfloat16" else None
            ctx.progress(f"tma: {dtype}")
            src = random_array(cp, None, rows, cols, dtype)
            dst, dst_t = pitched(cp, rows, cols, dtype, extra=2), pitched(cp, cols, rows, dtype)
            nbytes = 2 * es * rows * cols
            cells = [dtype, f"{box[0]} x {box[1]}", f"{src.strides[0]} B"]
            for op in ("copy", "transpose"):
                target = dst if op == "copy" else dst_t
                for method in ("tma", "threads"):
                    prep = ops.prepare_copy if op == "copy" else ops.prepare_transpose
                    fn = prep(src, target, box, method=method, dtype=tdtype)
                    ms = timed(fn)
                    poison_against(cp, target, src if op == "copy" else src.T)
                    fn()
                    if not bool(cp.array_equal(target, src if op == "copy" else src.T)):
                        raise ValidationError(f"{method} {op} wrong for {dtype} at {rows} x {cols}")
                    cells.append(rates(ms, nbytes, ctx.ceiling)[1])
                peer = timed(lambda: cp.copyto(dst, src)) if op == "copy" else timed(lambda: cp.copyto(dst_t, src.T))
                cells.append(rates(peer, nbytes, ctx.ceiling)[1])
            table.append(cells)
        result.tables.append(Table(
            f"By element type: {rows} rows of about {width_bytes} B, boxes of 64 rows x 256 B, % of the copy ceiling",
            ["dtype", "box", "row pitch", "TMA copy", "thread copy", "CuPy copy", "TMA transpose", "thread transpose",
             "CuPy transpose"], table,
            note="rows pitched to a multiple of 16 B; " + BF16_NOTE))

    def _multicast(self, ctx: RunContext, ops: TmaOps, result: LabResult) -> None:
        import cupy as cp

        timed, repeats = self._timer(ctx)
        m = k = 8192 if ctx.quick else 16384
        a_bytes = 4 * m * k
        rng = np.random.default_rng()
        table, best = [], {}
        for vb in GEMV_VECTORS_PER_BLOCK:
            ctx.progress(f"tma: multicast gemv, {vb} vectors per block")
            vectors = 8 * vb
            a, x, y, expected = integer_problem(cp, rng, m, k, vectors, reference="cupy")
            baseline = None
            for cluster in (1, 2, 4, 8):
                cells = [vb, cluster]
                times = {}
                for multicast in (False, True):
                    fn = ops.prepare_gemv(a, x, y, vectors_per_block=vb, cluster=cluster, multicast=multicast)
                    times[multicast] = timed(fn)
                    y.fill(cp.nan)
                    fn()
                    if not bool(cp.array_equal(y, expected)):
                        raise ValidationError(f"gemv wrong at {m} x {k}, cluster {cluster}, multicast {multicast}")
                baseline = baseline or times[False]
                # Model of the L2 -> SM traffic: per-block loads read the band once per block (8 per band),
                # multicast once per cluster.
                cells += [times[False], times[True], times[False] / times[True], baseline / times[True],
                          spread_map(lambda t: a_bytes / (t * 1e-3) / 1e12, times[True]), 8 * a_bytes / 2**30,
                          8 // cluster * a_bytes / 2**30]
                table.append(cells)
                result.figures[f"tma_gemv_vb{vb}_c{cluster}_multicast_x_per_block"] = times[False] / times[True]
                if vb == 1:
                    best[cluster] = (times[False], times[True])
            del a, x, y, expected
        result.tables.append(Table(
            f"Batched y = A x, A {m} x {k} float32 ({a_bytes / 2**30:.2f} GiB), 8 blocks per band of 64 rows share "
            "every tile: per-block loads vs TMA multicast",
            ["vectors per block", "cluster", "per-block ms", "multicast ms", "multicast x per-block (same cluster)",
             "multicast x per-block, no cluster", "A TB/s (multicast)", "A from L2, per-block GiB (model)",
             "A from L2, multicast GiB (model)"], table,
            note="cluster 1 = no cluster (multicast then loads for itself); per-block loads use the same cluster "
                 "launch, so the column 'same cluster' isolates multicast. L2->SM bytes are the model: per-block "
                 f"every block reads the band, multicast once per cluster. Medians of {repeats} CUDA-event timings; "
                 "results checked against the exact integer product (float64, cuBLAS)"))
        self._ncu(ctx, result)
        per_block_1 = best[1][0]
        c_best = min(best, key=lambda c: best[c][1])
        mc_ms = best[c_best][1]
        pays = mc_ms < 0.95 * per_block_1
        evidence = (f"A {m} x {k} read by 8 blocks per band, 1 vector each: multicast to clusters of {c_best} "
                    f"{mc_ms:.3f} ms vs per-block loads {per_block_1:.3f} ms ({per_block_1 / mc_ms:.2f}x)")
        if "tma_ncu_l2_bytes_ratio" in result.figures:
            evidence += f"; L2 bytes {result.figures['tma_ncu_l2_bytes_ratio']:.2f}x fewer (ncu, cluster 8)"
        result.selection.append(Selection(
            "tiles reused by several blocks",
            f"TMA multicast, cluster of {c_best}" if pays else "per-block loads (L2 serves the reuse)",
            evidence, fallback="per-block TMA or cp.async loads; below compute capability 9.0 (no clusters) L2 "
                               "alone deduplicates the DRAM reads"))
        result.notes.append("multicast pays " + ("here" if pays else "not here") + f": {evidence}")

    def _ncu(self, ctx: RunContext, result: LabResult) -> None:
        if ctx.quick:
            result.notes.append("Nsight Compute counters skipped in --quick runs (ncu replays each kernel)")
            return
        m, k, vb = 4096, 8192, 1
        ctx.progress("tma: Nsight Compute on the gemv (DRAM and L2 bytes)")
        rows, why = run_ncu(m, k, vb)
        if not rows:
            result.notes.append(f"Nsight Compute counters unavailable: {why}")
            return
        a_bytes = 4 * m * k
        table = []
        for (cluster, multicast), metrics in zip(NCU_CONFIGS, rows):
            dram, l2 = metrics.get(NCU_METRICS[0], math.nan), metrics.get(NCU_METRICS[1], math.nan)
            table.append([cluster, "multicast" if multicast else "per-block", dram / 2**20, dram / a_bytes,
                          l2 / 2**20, l2 / a_bytes])
        per_block_8, multicast_8 = rows[NCU_CONFIGS.index((8, False))], rows[NCU_CONFIGS.index((8, True))]
        result.figures["tma_ncu_l2_bytes_ratio"] = per_block_8[NCU_METRICS[1]] / multicast_8[NCU_METRICS[1]]
        result.tables.append(Table(
            f"Nsight Compute: gemv A {m} x {k} float32 ({a_bytes / 2**20:.0f} MiB), 8 blocks per band, 1 vector each",
            ["cluster", "loads", "DRAM read MiB", "DRAM read / A", "L2 traffic MiB (lts__t_bytes)", "L2 / A"], table,
            note="ncu --clock-control none, one launch per configuration, caches flushed between replays; "
                 "DRAM stays near 1x A either way (L2 deduplicates), the L2 traffic is what multicast removes"))


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--ncu-worker":
        m, k, vb = json.loads(argv[1])
        ncu_worker(int(m), int(k), int(vb))
        return 0
    print("usage: python -m cuadv.labs.tma --ncu-worker '[m, k, vectors_per_block]'", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
