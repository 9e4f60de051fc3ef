"""Asynchronous copies into shared memory: a 2-D 5-point stencil, synchronous vs ``cuda::memcpy_async`` and TMA
pipelines.

Shows (issue 5, item 1): the same stencil staged through shared memory in two layouts and
four ways. Layouts: ``tile`` (16 x 128 output tiles, each re-reading its halo; 32 and 64 x 128 too for ``tma``) and
``strip`` (a block walks down a strip of W columns; each stage brings R new rows and the rows above and below
come from the ring of stages already in shared memory, so every input row is read once). Staging: ``sync``
(plain loads, the baseline), ``thread`` (``cuda::memcpy_async`` with a per-thread ``cuda::pipeline`` plus one
block barrier per stage), ``mbar`` (a block-scope pipeline on explicit full / empty mbarriers:
``cp.async.mbarrier.arrive.noinc`` marks a stage landed, every thread waits on every phase it arrives on, no
block barrier in the loop) and ``tma`` (tiles only, warp specialised: one extra producer warp loads each tile
with its halo as one ``cp.async.bulk.tensor`` box from a tensor map of the input, completing the bytes on a full
mbarrier; every consumer thread releases the slot on an empty mbarrier; TMA zero-fills the box outside the array,
which is the stencil's boundary; optionally the tile leaves by one TMA store from shared memory, a block
takes chunks of side-by-side tiles, and blocks claim their chunks from a self-resetting ticket counter instead
of a static split). Every pipelined variant has an explicit fill, steady state and drain. Tails
that are not a multiple of the 16-byte copy are copied element by element; a row pitch or base that is not
16-byte aligned gets 4-byte copies throughout (and an output that is not gets 4-byte stores): the alignment a
copy claims is always one that was checked. TMA has no 4-byte fallback: a ``tma`` variant refuses such an input
with ``LaunchConfigError`` (use ``thread`` or ``mbar``). Several strip shapes (width, rows per stage, stages,
blocks per SM) and TMA tile heights, stage counts, stores, chunks and ticket claims are measured in the same run and
the best is picked by measurement. In-kernel ``%globaltimer`` stamps per stage are drawn as a fill / steady / drain
timeline.

Needs: compute capability 8.0 (cp.async, mbarrier), 9.0 for the ``tma`` variants; built for sm_90a and sm_100a.
Key insight: a staged kernel that waits for its loads idles for the memory latency once per stage; with S
stages, S - D of them are in flight while one is computed (D = stages one compute reads: 1 for a tile, 2 for a
strip), so the wait leaves the steady state. What is left is how the bytes move: on the H200 the cp.async
pipelines level off near 73-78% of the copy ceiling whatever the tile shape, stage count or row pitch, the strips
below that, while one TMA box per stage (no per-thread copy instructions, no edge code) reaches 82-86% with
tall tiles (less halo per output row) and a static split of the tiles, the most when a block takes 4 side-by-side
tiles in turn (longer runs of each input row from one SM). The static split is then what limits it: some SMs
stream faster than others (24 of the H200's 132, rates 1.4x apart) and sit idle at the end of their share. With
the tiles claimed by ticket (2 side-by-side tiles a claim) the same pipeline reaches 92-93% at 16K x 16K. TMA
stores instead of 16-byte thread stores change little.
Run: ``cuadv bench pipeline`` (``--quick`` for a smaller problem). The public ``cuadv.pipeline.stencil`` is also set
beside the same stencil written in Triton with tensor descriptors (``triton_peers``), where triton and torch are
installed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..compiler import shipped
from ..errors import LaunchConfigError, ValidationError
from ..pipeline.stencil import (  # noqa: F401  (the library's stencil; re-exported: the lab's names stay)
    ALIGNS, C_CENTER, C_NEIGHBOUR, HALO, KIND_LABELS, KINDS, OUT_VEC16, PARAMS_BYTES, STAGE_BYTES, STAGE_H, STAGE_W,
    STRIP_VARIANTS, STRIP_WIDTHS, SYNC, THREADS, TILE_H, TILE_VARIANTS, TILE_W, TIMELINE_VARIANTS, TMA_MAP_OFFSET,
    TMA_PARAMS_BYTES, TMA_TILE_HEIGHTS, TRACE_FIELDS, VARIANTS, _TICKETS, Grid2D, Stencil, StencilParams,
    StencilTmaParams, Variant, reference, stage_counts, stencil_expressions, strip, strip_work, tile, tile_count, tma,
    tma_layout, tma_store_layout, variants_for)
from ..pipeline.stencil import Trace as _LibraryTrace
from ..report.results import LabResult, Spread, Table
from ..tma.tensormap import pitch_elements
from .base import RunContext, rates, readback
from .triton_peers import compare_stencil  # the Triton peers (lab-private; triton and torch imported only when run)

TRACE_LIMIT_BYTES = 1 << 30  # the largest stamp buffer a traced launch allocates


class Trace(_LibraryTrace):
    """The library's per-stage %globaltimer stamps, limited by this module's TRACE_LIMIT_BYTES (read at launch)."""

    @property
    def limit_bytes(self) -> int:
        return TRACE_LIMIT_BYTES


def pitched_copy(x: Any) -> Any:
    """A CuPy copy of the 2-D float32 array x whose rows start 16-byte aligned: an input a tma variant takes."""
    import cupy as cp

    rows, cols = x.shape
    storage = cp.zeros((rows, pitch_elements(cols, "float32")), dtype=cp.float32)
    storage[:, :cols] = x
    return storage[:, :cols]


def peer_kernel():
    """CuPy's way: one ElementwiseKernel reading the neighbours straight from global memory (caches do the reuse)."""
    import cupy as cp

    return cp.ElementwiseKernel(
        "raw float32 x, int64 rows, int64 cols, float32 c0, float32 c1", "float32 y",
        """
        const long long r = i / cols, c = i - r * cols;
        const float up = r > 0 ? x[i - cols] : 0.0f;
        const float down = r + 1 < rows ? x[i + cols] : 0.0f;
        const float left = c > 0 ? x[i - 1] : 0.0f;
        const float right = c + 1 < cols ? x[i + 1] : 0.0f;
        const float s = __fadd_rn(__fadd_rn(__fadd_rn(up, down), left), right);
        y = __fadd_rn(__fmul_rn(c0, x[i]), __fmul_rn(c1, s));
        """, "cuadv_stencil5_peer")


def run_peer(peer, x, out) -> None:
    rows, cols = x.shape
    peer(x.reshape(-1), np.int64(rows), np.int64(cols), C_CENTER, C_NEIGHBOUR, out)


# Shapes that exercise every edge: single row/column, tails in both directions, a 16-byte-aligned pitch with a
# partial last chunk, pitches that are not multiples of 16 bytes, a misaligned base, a tile grid with remainders,
# strips whose last one is partial, blocks whose share of (strip, row) pairs spans several strips, a wide
# 1-row array (many 1-row runs per block) and heights that are no multiple of any stage.
VALIDATION_SHAPES = ((1, 1), (1, 7), (7, 1), (2, 3), (17, 131), (16, 128), (33, 300), (129, 257), (1000, 1001),
                     (257, 1031), (1, 5000), (12, 4), (3, 1030), (35, 2100))


def _cases(cp, rng, shapes) -> list[tuple[str, Any, np.ndarray, bool]]:
    """(name, x, x on the host, whether out is a view starting 4 bytes past a 16-byte boundary)."""
    cases = []
    for rows, cols in shapes:
        host = rng.standard_normal((rows, cols), dtype=np.float32)
        cases.append((f"{rows}x{cols}", cp.asarray(host), host, False))
    storage = cp.asarray(rng.standard_normal((61, 260), dtype=np.float32))
    cases.append(("61x253 pitched (pitch 260)", storage[:, :253], readback(storage[:, :253]), False))
    cases.append(("61x259 base +4 B", storage[:, 1:], readback(storage[:, 1:]), False))
    host = rng.standard_normal((45, 520), dtype=np.float32)
    cases.append(("45x520 into out base +4 B", cp.asarray(host), host, True))
    return cases


def _expect_refusal(stencil: Stencil, variant: Variant, x: Any, out: Any, what: str) -> None:
    try:
        stencil(variant, x, out)
    except LaunchConfigError:
        return
    raise ValidationError(f"stencil {variant.label}, {what} whose base or pitch is not 16-byte aligned was "
                          "launched instead of refused")


def validate(stencil: Stencil, shapes=VALIDATION_SHAPES, variants=None) -> list[str]:
    """Every element of every variant (default: all the stencil's target runs) against NumPy, on fresh random data;
    outputs poisoned with NaN first. Also a pitched view (16-byte pitch, odd width), a view whose base is 4 bytes
    past a 16-byte boundary, and an output view that is not 16-byte aligned (4-byte stores; the float before each
    row must stay NaN). A tma variant must refuse every input whose base or pitch is not 16-byte aligned (TMA
    cannot load it); it is then checked on a copy of that input with 16-byte rows. A TMA-store variant likewise
    refuses such an output and is checked on one with 16-byte rows."""
    import cupy as cp

    variants = stencil.variants if variants is None else variants
    cases = _cases(cp, np.random.default_rng(), shapes)
    for name, x, host, shifted_out in cases:
        expected = reference(host)
        rows, cols = host.shape
        for variant in variants:
            storage = cp.full((rows, cols + 1 if shifted_out else cols), cp.nan, dtype=cp.float32)
            out = storage[:, 1:] if shifted_out else storage
            src, guarded = x, shifted_out
            if variant.kind == "tma" and not Grid2D.of(x, "x").tma_loadable:
                _expect_refusal(stencil, variant, x, out, f"{name}: a TMA load of an input")
                src = pitched_copy(x)
            if variant.tma_store and not Grid2D.of(out, "out").tma_loadable:
                _expect_refusal(stencil, variant, src, out, f"{name}: a TMA store into an output")
                out, guarded = pitched_copy(cp.full((rows, cols), cp.nan, dtype=cp.float32)), False
            stencil(variant, src, out)
            got = readback(out)
            if not np.array_equal(got, expected):
                bad = np.argwhere(got != expected)
                raise ValidationError(f"stencil {variant.label}, {name} (copy alignment "
                                      f"{Grid2D.of(src, 'x').copy_alignment} B): {len(bad)} wrong elements, first "
                                      f"at {tuple(bad[0])}: {got[tuple(bad[0])]} != {expected[tuple(bad[0])]}")
            if guarded and not bool(cp.isnan(storage[:, 0]).all()):
                raise ValidationError(f"stencil {variant.label}, {name}: wrote outside the output view")
    empty = cp.zeros((0, 5), dtype=cp.float32)
    for variant in (SYNC, strip("mbar", 512, 8, 4), *(v for v in variants if v.kind == "tma")):
        if stencil(variant, empty, empty) != 0:
            raise ValidationError("an empty array launched a kernel")
    return [f"every element of {len(variants)} variants equals NumPy's float32 stencil (bit for bit) on "
            f"{len(cases)} shapes: {', '.join(n for n, _, _, _ in cases)}; 16-byte copies where base and pitch "
            "allow, 4-byte copies otherwise (16-byte stores likewise); the TMA variants refuse a base or pitch "
            "that is not 16-byte aligned and are checked on a 16-byte-pitched copy instead (with TMA stores, "
            "likewise for the output); an empty array launches nothing"]


def trace_phases(rec: np.ndarray, pipelined: bool) -> dict[str, float]:
    """Stall and phase lengths (microseconds, medians over blocks) from one variant's trace."""
    stalls, fills, drains, spans = [], [], [], []
    for block in rec:
        n = int(np.count_nonzero(block[:, 3]))
        if n == 0:
            continue
        b = block[:n].astype(np.int64)
        stalls.append(np.median(b[:, 2] - b[:, 1]))
        spans.append(b[-1, 3] - b[0, 0])
        fills.append(b[0, 2] - b[0, 0])
        last_issue = b[:, 0].max()
        drains.append(b[-1, 3] - last_issue if pipelined else 0)
    med = lambda v: float(np.median(v)) / 1e3 if v else float("nan")  # noqa: E731
    return {"stall_us": med(stalls), "fill_us": med(fills), "drain_us": med(drains), "block_span_us": med(spans)}


def plot_timeline(traces: dict[str, tuple[np.ndarray, int, bool]], path, title: str, blocks: int = 3) -> None:
    """One panel per variant (records, stages, pipelined), one row per block: copies in flight (issued -> ready,
    thin, stacked by slot), waits (wait -> ready, red) and compute (ready -> done, thick); fill and drain shaded
    for the pipelined variants."""
    from ..figures import pyplot as _pyplot, save_figure

    plt = _pyplot()
    fig, axes = plt.subplots(len(traces), 1, figsize=(12, 2.2 + 1.6 * len(traces)), squeeze=False)
    for ax, (label, (rec, stages, pipelined)) in zip(axes[:, 0], traces.items()):
        written = [b for b in range(rec.shape[0]) if rec[b, 0, 3]]
        chosen = written[:: max(1, len(written) // blocks)][:blocks]
        t0 = min(int(rec[b, 0, 0]) for b in chosen) if chosen else 0
        for row, b in enumerate(chosen):
            n = int(np.count_nonzero(rec[b, :, 3]))
            r = (rec[b, :n].astype(np.int64) - t0) / 1e3
            y = row * (stages + 2)
            for k in range(n):
                ax.plot([r[k, 0], r[k, 2]], [y + 1 + k % stages] * 2, color="tab:blue", lw=1)
                ax.barh(y, r[k, 2] - r[k, 1], left=r[k, 1], height=0.8, color="tab:red", lw=0)
                ax.barh(y, r[k, 3] - r[k, 2], left=r[k, 2], height=0.8, color="tab:green", lw=0)
            if pipelined and n:
                ax.axvspan(r[0, 0], r[0, 2], ymin=0, ymax=1, color="gold", alpha=0.08)
                ax.axvspan(r[:, 0].max(), r[-1, 3], color="purple", alpha=0.06)
        ax.set_yticks([])
        ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    axes[0, 0].set_title(title)
    axes[-1, 0].set_xlabel("time since the traced blocks' first issue (us)")
    from matplotlib.patches import Patch

    axes[0, 0].legend(handles=[Patch(color="tab:blue", label="copy in flight (issued -> ready), row = slot"),
                               Patch(color="tab:red", label="waiting for data"),
                               Patch(color="tab:green", label="compute"),
                               Patch(color="gold", alpha=0.3, label="fill"),
                               Patch(color="purple", alpha=0.2, label="drain")],
                      loc="upper right", fontsize=7, ncol=5)
    save_figure(fig, path)


class PipelineLab:
    name = "pipeline"
    title = "Async copies into shared memory: a 5-point stencil, synchronous vs memcpy_async pipelines"

    def supported(self, caps) -> str | None:
        if caps.compute_capability < (8, 0):
            return (f"cuda::memcpy_async into shared memory (cp.async) needs compute capability >= 8.0 "
                    f"(got {caps.cc_string()}); fallback: the synchronous variants (plain loads)")
        return None

    def build(self, arch: str):
        return [shipped("pipeline.cu", arch=arch, name_expressions=stencil_expressions(arch), name="pipeline")]

    def smoke(self) -> None:
        """Every kernel (both copy alignments, vector and scalar stores) on small shapes, and a traced run."""
        stencil = Stencil()
        validate(stencil, shapes=((1, 1), (17, 131), (33, 300), (40, 301), (3, 1030)))
        import cupy as cp

        x = cp.asarray(np.random.default_rng().standard_normal((64, 1024), dtype=np.float32))
        out = cp.empty_like(x)
        for variant in (tile("mbar", 4), strip("mbar", 512, 8, 4), *(v for v in stencil.variants if v.kind == "tma")):
            trace = Trace()
            stencil(variant, x, out, trace=trace)
            if not np.array_equal(readback(out), reference(readback(x))):
                raise ValidationError(f"stencil {variant.label} with tracing: wrong result")

    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        from ..timing import time_gpu

        result = LabResult(self.name, self.title)
        stencil = Stencil()
        candidates = [v for v in stencil.variants if stencil.fits(v)]
        for v in stencil.variants:
            if v not in candidates:
                result.notes.append(f"not measured: {v.label} does not fit ({stencil.blocks_per_sm(v, 16)} blocks "
                                    f"per SM fit with {v.shared_bytes} B shared memory)")
        ctx.progress("pipeline: validating every variant")
        result.checks += validate(stencil, variants=candidates)
        peer = peer_kernel()
        repeats = 10 if ctx.quick else 30
        side = 8192 if ctx.quick else 16384
        shapes = [(side, side, "square"), (side, side - 1, "odd width: rows not 16-byte aligned")]
        if not ctx.quick:
            shapes.insert(1, (8192, 8192, "square"))
        sms = ctx.caps.sm_count
        rows_out = []
        rng = cp.random.default_rng()
        for rows, cols, what in shapes:
            x = rng.standard_normal((rows, cols), dtype=cp.float32)
            out = cp.empty_like(x)
            nbytes = 2 * 4 * rows * cols  # the formula: every input read once, every output written once
            size = f"{rows} x {cols} ({what})"
            ctx.progress(f"pipeline: {size}: checking the peer against NumPy")
            expected_dev = cp.empty_like(x)
            run_peer(peer, x, expected_dev)
            if not np.array_equal(readback(expected_dev), reference(readback(x))):
                raise ValidationError(f"CuPy peer stencil differs from NumPy at {size}")
            peer_ms = Spread.of(time_gpu(lambda: run_peer(peer, x, out), repeats=repeats).samples)
            align = Grid2D.of(x, "x").copy_alignment
            loadable = Grid2D.of(x, "x").tma_loadable
            measured = {}
            if not loadable and any(v.kind == "tma" for v in candidates):
                result.notes.append(f"not measured at {size}: the TMA variants (TMA needs rows that start 16-byte "
                                    "aligned; the cp.async variants fall back to 4-byte copies)")
            for variant in candidates:
                if variant.kind == "tma" and not loadable:
                    continue
                ctx.progress(f"pipeline: {size}: {variant.label}")
                t = time_gpu(lambda: stencil(variant, x, out), repeats=repeats)
                out.fill(cp.nan)
                grid = stencil(variant, x, out)
                if not bool(cp.array_equal(out, expected_dev)):
                    raise ValidationError(f"stencil {variant.label} wrong at {size}")
                measured[variant] = (Spread.of(t.samples), grid)
            base_ms = min(ms for v, (ms, _) in measured.items() if v.kind == "sync")
            for variant, (ms, grid) in measured.items():
                gbps, pct = rates(ms, nbytes, ctx.ceiling)
                per_sm = variant.blocks_per_sm or stencil.blocks_per_sm(variant, align)
                copy = "TMA" if variant.kind == "tma" else f"{align} B"
                rows_out.append([size, variant.label, copy, grid, per_sm, variant.shared_bytes / 1024,
                                 ms, gbps, pct, base_ms / ms, peer_ms / ms])
                key = f"pipeline_{variant.key}_{rows}x{cols}"
                result.figures[key + "_pct_ceiling"] = pct
                result.figures[key + "_x_sync"] = base_ms / ms
            peer_gbps, peer_pct = rates(peer_ms, nbytes, ctx.ceiling)
            rows_out.append([size, "CuPy ElementwiseKernel (global loads)", "-", "-", "-", "-", peer_ms,
                             peer_gbps, peer_pct, base_ms / peer_ms, 1.0])
            result.figures[f"pipeline_cupy_{rows}x{cols}_pct_ceiling"] = peer_pct
        result.checks.append("at every measured size every variant's output equals the CuPy peer's, which equals "
                             "NumPy's (outputs poisoned with NaN before the checked run)")
        result.tables.append(Table(
            "2-D 5-point stencil (float32), staged through shared memory",
            ["size", "variant", "copy", "blocks", "blocks/SM", "shared KiB/block", "median ms", "GB/s",
             "% of copy ceiling", "x best sync", "x CuPy"],
            rows_out,
            note=f"bytes = 8 per element (read + write; halo re-reads not counted); copy ceiling "
                 f"{ctx.ceiling.tb_per_s:.2f} TB/s measured in this run; {THREADS} threads per block (tma: plus one "
                 f"producer warp); {sms} SMs. "
                 f"tile: {TILE_H} x {TILE_W} output tiles (tma: 16, 32 or 64 x {TILE_W}, each tile and its halo one "
                 "TMA box) +1 halo row and 4 halo columns each side, blocks = occupancy x SMs striding over the "
                 "tiles ('claimed by ticket': each block claims its next chunk of tiles from a shared counter "
                 "instead). strip: each block streams an equal share of the (strip, row) pairs, R rows per stage, rows "
                 "above/below reused from the ring of stages. 'x best sync': the "
                 "fastest synchronous (plain-load) variant at that size over this one's time. Medians of "
                 f"{repeats} CUDA-event timings (each queued behind a 150 us spin so host launch time is not "
                 "timed). 'copy' is the alignment the copies claim (4 B when the row pitch is not a multiple of "
                 "16 B), or TMA"))
        self._summary(result, measured_at=f"{side}x{side}")
        compare_stencil(ctx, result)  # the public stencil vs Triton's tensor-descriptor stencils, same rounds
        self._timeline(ctx, stencil, result)
        return result

    def _summary(self, result: LabResult, measured_at: str) -> None:
        """The best pipelined and the best synchronous variant at the largest square size, by measurement."""
        def pct(v: Variant) -> float:
            return result.figures.get(f"pipeline_{v.key}_{measured_at}_pct_ceiling", float("nan"))

        measured = [v for v in VARIANTS if pct(v) == pct(v)]
        best = max((v for v in measured if v.kind != "sync"), key=pct)
        best_sync = max((v for v in measured if v.kind == "sync"), key=pct)
        result.figures["pipeline_best_pct_ceiling"] = pct(best)
        result.figures["pipeline_best_x_sync"] = result.figures[f"pipeline_{best.key}_{measured_at}_x_sync"]
        result.figures["pipeline_best_sync_pct_ceiling"] = pct(best_sync)
        cupy = result.figures.get(f"pipeline_cupy_{measured_at}_pct_ceiling")
        result.notes.append(
            f"best pipelined variant at {measured_at.replace('x', ' x ')}: {best.label}, {pct(best):.1f}% of the copy "
            f"ceiling, {result.figures['pipeline_best_x_sync']:.2f}x the best synchronous variant ({best_sync.label}, "
            f"{pct(best_sync):.1f}%)" + (f", {pct(best) / cupy:.2f}x CuPy" if cupy else ""))

    def _timeline(self, ctx: RunContext, stencil: Stencil, result: LabResult) -> None:
        import cupy as cp

        ctx.progress("pipeline: traced runs for the timeline")
        x = cp.random.default_rng().standard_normal((8192, 4096), dtype=cp.float32)
        out = cp.empty_like(x)
        expected = cp.empty_like(x)
        run_peer(peer_kernel(), x, expected)
        traces, rows = {}, []
        for variant in TIMELINE_VARIANTS:
            if variant not in stencil.variants or not stencil.fits(variant):
                continue
            trace = Trace()
            stencil(variant, x, out, trace=trace)
            if not bool(cp.array_equal(out, expected)):
                raise ValidationError(f"stencil {variant.label} with tracing: wrong result")
            rec = trace.records()
            pipelined = variant.kind != "sync"
            traces[variant.label] = (rec, variant.stages, pipelined)
            ph = trace_phases(rec, pipelined)
            rows.append([variant.label, trace.blocks, trace.capacity, ph["stall_us"], ph["fill_us"], ph["drain_us"],
                         ph["block_span_us"]])
            result.figures[f"pipeline_{variant.key}_median_stall_us"] = ph["stall_us"]
            deltas = np.diff(np.unique(rec[rec > 0]))
            if len(deltas):
                result.figures["globaltimer_resolution_ns"] = float(deltas.min())
        name = "pipeline_timeline.png"
        plot_timeline(traces, ctx.plot_path(name), "Stencil 8192 x 4096: per-stage stamps of thread 0 (3 blocks "
                      "per variant)")
        result.plots.append(name)
        result.tables.append(Table(
            "Where the time goes (thread 0 of each block, %globaltimer, medians over blocks)",
            ["variant", "blocks", "stages per block (max)", "stall per stage us", "fill us", "drain us",
             "block span us"],
            rows,
            note="stall = waiting for a stage's data (wait -> ready); fill = first issue -> first stage ready; "
                 "drain = last issue -> last stage done (pipelined variants). For the sync variant 'issued' is "
                 "after its plain loads returned. A traced launch; the timings above are untraced"))
        res = result.figures.get("globaltimer_resolution_ns")
        if res is not None:
            result.notes.append(f"smallest %globaltimer step seen: {res:.0f} ns (stamps finer than that are "
                                "quantised)")
