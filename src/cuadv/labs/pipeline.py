"""Asynchronous copies into shared memory: a 2-D 5-point stencil, synchronous vs ``cuda::memcpy_async`` pipelines.

Shows (seed 002, exercise 1): the same tiled stencil staged through shared memory with plain loads and one
buffer (the baseline), with a two-stage ``cuda::memcpy_async`` pipeline (the seed's skeleton, made correct),
and with N-stage ``cuda::pipeline`` objects, block-scoped (``pipeline_shared_state``) or per thread, each with
an explicit fill, steady state and drain. Tails that are not a multiple of the 16-byte copy are copied
element by element; a row pitch or base that is not 16-byte aligned gets 4-byte copies throughout: the
alignment a copy claims is always one that was checked. In-kernel ``%globaltimer`` stamps per tile are drawn
as a fill / steady / drain timeline.

Needs: compute capability 8.0 (cp.async); built for sm_90a and sm_100a.
Key insight: a staged kernel that waits for its loads idles the SM for the memory latency once per tile;
with S stages S-1 tiles are in flight while one is computed, so the wait disappears from the steady state
and the kernel streams at close to the copy ceiling. Extra stages help only until the in-flight bytes
cover the latency; after that they cost occupancy.
Run: ``cuadv bench pipeline`` (``--quick`` for a smaller problem).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compiler import compile_source, kernel_source
from ..errors import LaunchConfigError, ValidationError
from ..launch import LaunchConfig, launch
from ..results import LabResult, Table
from .base import RunContext

# Mirrors kernels/pipeline.cu.
THREADS = 256
TILE_W, TILE_H, HALO = 128, 16, 4
STAGE_W, STAGE_H = TILE_W + 2 * HALO, TILE_H + 2
STAGE_BYTES = STAGE_W * STAGE_H * 4
PARAMS_BYTES = 72
TRACE_FIELDS = ("issued", "wait", "ready", "done")

C_CENTER, C_NEIGHBOUR = np.float32(0.5), np.float32(0.125)


@dataclass(frozen=True)
class Variant:
    """One way of staging the tiles: 'sync' (plain loads), 'thread' or 'block' scoped cuda::pipeline."""

    kind: str
    stages: int

    def __post_init__(self):
        if self.kind not in ("sync", "thread", "block"):
            raise ValueError(f"variant kind must be sync, thread or block; got {self.kind!r}")
        if self.kind == "sync" and self.stages != 1:
            raise ValueError("the synchronous baseline has exactly one buffer")
        if self.kind != "sync" and not 2 <= self.stages <= 8:
            raise ValueError(f"a pipeline has 2 to 8 stages; got {self.stages}")

    @property
    def label(self) -> str:
        if self.kind == "sync":
            return "sync (plain loads, 1 buffer)"
        return f"{self.stages}-stage {self.kind}-scope pipeline"

    @property
    def shared_bytes(self) -> int:
        return self.stages * STAGE_BYTES

    def expression(self, align: int) -> str:
        if self.kind == "sync":
            return f"stencil_sync<{align}>"
        return f"stencil_pipeline_{self.kind}<{self.stages}, {align}>"


SYNC = Variant("sync", 1)
VARIANTS = (SYNC, Variant("thread", 2), Variant("block", 2), Variant("thread", 4), Variant("block", 4),
            Variant("block", 8))
TIMELINE_VARIANTS = (SYNC, Variant("thread", 2), Variant("block", 4))
ALIGNS = (16, 4)


def stencil_expressions() -> list[str]:
    return [v.expression(a) for v in VARIANTS for a in ALIGNS]


@dataclass(frozen=True)
class StencilParams:
    """The kernels' parameter struct (72 bytes; the layout is asserted in pipeline.cu)."""

    in_ptr: int
    out_ptr: int
    rows: int
    cols: int
    in_pitch: int  # elements
    out_pitch: int  # elements
    c_center: float
    c_neighbour: float
    trace_ptr: int = 0
    trace_capacity: int = 0

    def kernel_param_bytes(self) -> bytes:
        return struct.pack("<QQqqqqffQII", self.in_ptr, self.out_ptr, self.rows, self.cols, self.in_pitch,
                           self.out_pitch, self.c_center, self.c_neighbour, self.trace_ptr, self.trace_capacity, 0)


@dataclass(frozen=True)
class Grid2D:
    """A 2-D float32 device array as the kernels see it."""

    address: int
    rows: int
    cols: int
    pitch: int  # elements between rows

    @classmethod
    def of(cls, array: Any, what: str) -> "Grid2D":
        from ..tensormap import describe_array

        address, dtype, shape, strides = describe_array(array)
        if dtype != "float32" or len(shape) != 2:
            raise LaunchConfigError(f"{what} must be a 2-D float32 array; got {dtype} of shape {shape}")
        if strides[1] != 4 or strides[0] % 4 or strides[0] < 4 * shape[1]:
            raise LaunchConfigError(f"{what} must have contiguous rows (strides {strides} bytes)")
        return cls(address, shape[0], shape[1], strides[0] // 4)

    @property
    def copy_alignment(self) -> int:
        """16 when every row starts 16-byte aligned (base and pitch), else 4: what a copy may claim."""
        return 16 if self.address % 16 == 0 and (self.pitch * 4) % 16 == 0 else 4


def tile_count(rows: int, cols: int) -> int:
    return -(-rows // TILE_H) * -(-cols // TILE_W)


def reference(x: np.ndarray, c_center=C_CENTER, c_neighbour=C_NEIGHBOUR) -> np.ndarray:
    """NumPy float32, zero outside the array, operations in the kernels' order."""
    x = np.asarray(x, dtype=np.float32)
    p = np.pad(x, 1)
    total = ((p[:-2, 1:-1] + p[2:, 1:-1]) + p[1:-1, :-2]) + p[1:-1, 2:]
    return np.float32(c_center) * x + np.float32(c_neighbour) * total


class Stencil:
    """The stencil kernels for one target, launched on CuPy / PyTorch / any CUDA-array-interface arrays."""

    def __init__(self, arch: str | None = None):
        self.module = compile_source(kernel_source("pipeline.cu"), name="pipeline", arch=arch,
                                     name_expressions=stencil_expressions())
        self._grids: dict[tuple[Variant, int], int] = {}

    def kernel(self, variant: Variant, align: int):
        return self.module.kernel(variant.expression(align))

    def grid(self, variant: Variant, align: int, tiles: int) -> int:
        """A fixed number of blocks: as many as fit on the GPU at once (each then runs a long tile sequence)."""
        key = (variant, align)
        if key not in self._grids:
            from ..device import current_device
            from ..occupancy import max_active_blocks_per_sm

            per_sm = max_active_blocks_per_sm(self.kernel(variant, align), THREADS, variant.shared_bytes)
            if per_sm < 1:
                raise LaunchConfigError(f"{variant.label} does not fit on an SM ({variant.shared_bytes} B shared)")
            self._grids[key] = per_sm * current_device().caps.sm_count
        return max(1, min(self._grids[key], tiles))

    def __call__(self, variant: Variant, x: Any, out: Any, c_center=C_CENTER, c_neighbour=C_NEIGHBOUR, *,
                 trace: "Trace | None" = None, stream: Any = None) -> int:
        """out = stencil(x); returns the grid used (0: empty array, nothing launched)."""
        src, dst = Grid2D.of(x, "x"), Grid2D.of(out, "out")
        if (src.rows, src.cols) != (dst.rows, dst.cols):
            raise LaunchConfigError(f"out has shape {(dst.rows, dst.cols)} but x has {(src.rows, src.cols)}")
        tiles = tile_count(src.rows, src.cols)
        if tiles == 0:
            return 0
        align = src.copy_alignment
        grid = self.grid(variant, align, tiles)
        trace_ptr = capacity = 0
        if trace is not None:
            trace.prepare(grid, -(-tiles // grid))
            trace_ptr, capacity = trace.buffer.ptr, trace.capacity
        params = StencilParams(src.address, dst.address, src.rows, src.cols, src.pitch, dst.pitch,
                               float(c_center), float(c_neighbour), trace_ptr, capacity)
        launch(self.kernel(variant, align), LaunchConfig(grid=grid, block=THREADS, shared_mem=variant.shared_bytes),
               params, stream=stream)
        return grid


class Trace:
    """Per-tile %globaltimer stamps of thread 0 of every block: issued, wait, ready, done (nanoseconds)."""

    def __init__(self):
        self.buffer = None
        self.blocks = self.capacity = 0

    def prepare(self, blocks: int, capacity: int) -> None:
        from ..memory import DeviceBuffer

        self.blocks, self.capacity = blocks, capacity
        self.buffer = DeviceBuffer(blocks * capacity * len(TRACE_FIELDS) * 8, fill=0)

    def records(self) -> np.ndarray:
        """uint64 array [block, tile, field]; a tile a block did not run is all zeros."""
        return self.buffer.to_host(np.uint64).reshape(self.blocks, self.capacity, len(TRACE_FIELDS))


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
# partial last chunk, pitches that are not multiples of 16 bytes, a misaligned base, a tile grid with remainders.
VALIDATION_SHAPES = ((1, 1), (1, 7), (7, 1), (2, 3), (17, 131), (16, 128), (33, 300), (129, 257), (1000, 1001),
                     (257, 1031))


def validate(stencil: Stencil, shapes=VALIDATION_SHAPES, variants=VARIANTS) -> list[str]:
    """Every element of every variant against NumPy, on fresh random data; outputs poisoned with NaN first.
    Also a pitched view (16-byte pitch, odd width) and a view whose base is 4 bytes past a 16-byte boundary."""
    import cupy as cp

    rng = np.random.default_rng()
    cases = []
    for rows, cols in shapes:
        host = rng.standard_normal((rows, cols), dtype=np.float32)
        cases.append((f"{rows}x{cols}", cp.asarray(host), host))
    storage = cp.asarray(rng.standard_normal((61, 260), dtype=np.float32))
    cases.append(("61x253 pitched (pitch 260)", storage[:, :253], cp.asnumpy(storage[:, :253])))
    cases.append(("61x259 base +4 B", storage[:, 1:], cp.asnumpy(storage[:, 1:])))
    for name, x, host in cases:
        expected = reference(host)
        for variant in variants:
            out = cp.full(x.shape, cp.nan, dtype=cp.float32)
            stencil(variant, x, out)
            got = cp.asnumpy(out)
            if not np.array_equal(got, expected):
                bad = np.argwhere(got != expected)
                raise ValidationError(f"stencil {variant.label}, {name} (copy alignment "
                                      f"{Grid2D.of(x, 'x').copy_alignment} B): {len(bad)} wrong elements, first at "
                                      f"{tuple(bad[0])}: {got[tuple(bad[0])]} != {expected[tuple(bad[0])]}")
    empty = cp.zeros((0, 5), dtype=cp.float32)
    if stencil(SYNC, empty, empty) != 0:
        raise ValidationError("an empty array launched a kernel")
    return [f"every element of {len(variants)} variants equals NumPy's float32 stencil (bit for bit) on "
            f"{len(cases)} shapes: {', '.join(n for n, _, _ in cases)}; 16-byte copies where base and pitch "
            "allow, 4-byte copies otherwise; an empty array launches nothing"]


def trace_phases(rec: np.ndarray, stages: int) -> dict[str, float]:
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
        drains.append(b[-1, 3] - last_issue if stages > 1 else 0)
    med = lambda v: float(np.median(v)) / 1e3 if v else float("nan")  # noqa: E731
    return {"stall_us": med(stalls), "fill_us": med(fills), "drain_us": med(drains), "block_span_us": med(spans)}


def plot_timeline(traces: dict[str, tuple[np.ndarray, int]], path, title: str, blocks: int = 3) -> None:
    """One panel per variant, one row per block: copies in flight (issued -> ready, thin, stacked by slot),
    waits (wait -> ready, red) and compute (ready -> done, thick); fill and drain shaded."""
    from ..plots import _pyplot, save_figure

    plt = _pyplot()
    fig, axes = plt.subplots(len(traces), 1, figsize=(12, 2.2 + 1.6 * len(traces)), squeeze=False)
    for ax, (label, (rec, stages)) in zip(axes[:, 0], traces.items()):
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
            if stages > 1 and n:
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
                    f"(got {caps.cc_string()}); fallback: the synchronous variant (plain loads)")
        return None

    def build(self, arch: str):
        return [compile_source(kernel_source("pipeline.cu"), name="pipeline", arch=arch,
                               name_expressions=stencil_expressions())]

    def smoke(self) -> None:
        stencil = Stencil()
        validate(stencil, shapes=((1, 1), (17, 131), (33, 300), (40, 301)))
        import cupy as cp

        x = cp.asarray(np.random.default_rng().standard_normal((64, 512), dtype=np.float32))
        out = cp.empty_like(x)
        trace = Trace()
        stencil(Variant("block", 4), x, out, trace=trace)
        if not np.array_equal(cp.asnumpy(out), reference(cp.asnumpy(x))):
            raise ValidationError("stencil with tracing: wrong result")

    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        from ..timing import time_gpu

        result = LabResult(self.name, self.title)
        stencil = Stencil()
        ctx.progress("pipeline: validating every variant")
        result.checks += validate(stencil)
        peer = peer_kernel()
        repeats = 10 if ctx.quick else 30
        side = 8192 if ctx.quick else 16384
        shapes = [(side, side, "square"), (side, side - 1, "odd width: rows not 16-byte aligned")]
        if not ctx.quick:
            shapes.insert(1, (8192, 8192, "square"))
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
            if not np.array_equal(cp.asnumpy(expected_dev), reference(cp.asnumpy(x))):
                raise ValidationError(f"CuPy peer stencil differs from NumPy at {size}")
            peer_t = time_gpu(lambda: run_peer(peer, x, out), repeats=repeats)
            align = Grid2D.of(x, "x").copy_alignment
            base_ms = None
            for variant in VARIANTS:
                ctx.progress(f"pipeline: {size}: {variant.label}")
                t = time_gpu(lambda: stencil(variant, x, out), repeats=repeats)
                out.fill(cp.nan)
                grid = stencil(variant, x, out)
                if not bool(cp.array_equal(out, expected_dev)):
                    raise ValidationError(f"stencil {variant.label} wrong at {size}")
                base_ms = base_ms or t.median_ms
                bw = t.rate(nbytes)
                pct = 100 * ctx.ceiling.fraction(bw)
                rows_out.append([size, variant.label, f"{align} B", grid, t.median_ms, bw / 1e9, pct,
                                 base_ms / t.median_ms, peer_t.median_ms / t.median_ms])
                key = f"pipeline_{variant.kind}{variant.stages}_{rows}x{cols}"
                result.figures[key + "_pct_ceiling"] = pct
                result.figures[key + "_x_sync"] = base_ms / t.median_ms
            peer_bw = peer_t.rate(nbytes)
            rows_out.append([size, "CuPy ElementwiseKernel (global loads)", "-", "-", peer_t.median_ms,
                             peer_bw / 1e9, 100 * ctx.ceiling.fraction(peer_bw), base_ms / peer_t.median_ms, 1.0])
        result.checks.append("at every measured size every variant's output equals the CuPy peer's, which equals "
                             "NumPy's (outputs poisoned with NaN before the checked run)")
        result.tables.append(Table(
            "2-D 5-point stencil (float32), staged through shared memory",
            ["size", "variant", "copy", "blocks", "median ms", "GB/s", "% of copy ceiling", "x sync", "x CuPy"],
            rows_out,
            note=f"bytes = 8 per element (read + write; halo re-reads not counted); copy ceiling "
                 f"{ctx.ceiling.tb_per_s:.2f} TB/s measured in this run; tile {TILE_H} x {TILE_W}, {THREADS} threads, "
                 f"blocks = occupancy x SMs, each striding over the tiles; medians of {repeats} CUDA-event timings (each queued behind a "
                 "150 us spin so host launch time is not timed). "
                 "'copy' is the alignment the copies claim (4 B when the row pitch is not a multiple of 16 B)"))
        self._timeline(ctx, stencil, result)
        best = max((v for v in VARIANTS if v.kind != "sync"),
                   key=lambda v: result.figures[f"pipeline_{v.kind}{v.stages}_{side}x{side}_pct_ceiling"])
        result.figures["pipeline_best_pct_ceiling"] = result.figures[
            f"pipeline_{best.kind}{best.stages}_{side}x{side}_pct_ceiling"]
        result.notes.append(f"best pipelined variant at {side} x {side}: {best.label}, "
                            f"{result.figures['pipeline_best_pct_ceiling']:.1f}% of the copy ceiling, "
                            f"{result.figures[f'pipeline_{best.kind}{best.stages}_{side}x{side}_x_sync']:.2f}x the "
                            "synchronous baseline")
        return result

    def _timeline(self, ctx: RunContext, stencil: Stencil, result: LabResult) -> None:
        import cupy as cp

        ctx.progress("pipeline: traced runs for the timeline")
        x = cp.random.default_rng().standard_normal((8192, 4096), dtype=cp.float32)
        out = cp.empty_like(x)
        traces, rows = {}, []
        for variant in TIMELINE_VARIANTS:
            trace = Trace()
            stencil(variant, x, out, trace=trace)
            rec = trace.records()
            traces[variant.label] = (rec, variant.stages)
            ph = trace_phases(rec, variant.stages)
            rows.append([variant.label, trace.blocks, trace.capacity, ph["stall_us"], ph["fill_us"], ph["drain_us"],
                         ph["block_span_us"]])
            result.figures[f"pipeline_{variant.kind}{variant.stages}_median_stall_us"] = ph["stall_us"]
            deltas = np.diff(np.unique(rec[rec > 0]))
            if len(deltas):
                result.figures["globaltimer_resolution_ns"] = float(deltas.min())
        name = "pipeline_timeline.png"
        plot_timeline(traces, ctx.plot_path(name), "Stencil 8192 x 4096: per-tile stamps of thread 0 (3 blocks per "
                      "variant)")
        result.plots.append(name)
        result.tables.append(Table(
            "Where the time goes (thread 0 of each block, %globaltimer, medians over blocks)",
            ["variant", "blocks", "tiles per block", "stall per tile us", "fill us", "drain us", "block span us"],
            rows,
            note="stall = waiting for a tile's data (wait -> ready); fill = first issue -> first tile ready; "
                 "drain = last issue -> last tile done. A traced launch; the timings above are untraced"))
        res = result.figures.get("globaltimer_resolution_ns")
        if res is not None:
            result.notes.append(f"smallest %globaltimer step seen: {res:.0f} ns (stamps finer than that are "
                                "quantised)")
