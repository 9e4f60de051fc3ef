"""Vector-scalar multiply v := alpha * v, the example of the CUDA Programming Guide 4.12, under each scheduling policy.

Needs: compute capability 9.0 for 'steal' (any CUDA GPU for the other policies).
Key insight: a memory-bound body hides the scheduler: every policy should run at the copy ceiling,
so whatever a policy costs per tile shows here as lost bandwidth.
Run: ``cuadv bench vecscale``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import ValidationError
from ..report.results import LabResult, Spread, Table
from ..work_stealing import DEFAULT_QUANTUM_US, TileKernel
from .base import RunContext, import_torch, interleaved_rounds, missed_by, rates, readback
from .profile_notes import PROFILED, VECSCALE


@dataclass(frozen=True)
class Shape:
    """How a tile is cut: rows of threads x vec float4 per tile, and the occupancy hint that caps
    registers. Several shapes are measured because the best one differs between a block that lives
    for one tile, one that strides over many (whose last round is partly idle unless tiles are
    small) and one that syncs between tiles (which needs more bytes in flight around each sync).
    prefetch: a row's loads are issued before the previous row's stores, so a tile of many rows
    keeps vec float4 per thread in flight from its first row to its last (a large tile then costs
    no more latency than a small one, and steal's full grid has fewer blocks); it holds 2 x vec float4
    in registers, so it needs a register cap (min_blocks) that leaves room for them and the scheduler."""

    vec: int = 2  # float4 loads in flight per thread
    rows: int = 1  # rows per tile
    min_blocks: int = 2  # __launch_bounds__ occupancy hint
    prefetch: bool = False
    threads: int = 768  # per block; the body's accesses take it as a compile-time constant

    @property
    def tile_elems(self) -> int:
        return self.threads * 4 * self.vec * self.rows

    @property
    def label(self) -> str:
        prefetched = ", prefetched" if self.prefetch else ""
        return f"{self.threads} threads x {self.vec} float4, {self.rows} rows{prefetched}, {self.min_blocks} blocks/SM"


# The default: 768 threads x 2 float4 (24 KB tiles), 2 blocks per SM. More threads with fewer bytes each stream
# closer to the copy ceiling: on the H200 (2026-12-02 18:13, 1 GiB, scripts/vecscale_inplace_probe.py) steal
# reached 97.7% with it, 95.0% with 1024 threads, 96.2% with 384 threads x 2 float4 at 4 blocks/SM, and 94.1%
# with the previous default, 256 threads x 8 float4 at 5 blocks/SM (160 KB in flight per SM against 48 KB; 91.6%
# since the scheduler's exit path changed at 18:24, which left the default's code as it was: docs/work_stealing.md);
# torch's in-place mul_ (128-thread blocks of 2 float4, 16 per SM) reached 98.8%, fixed_work with that shape
# 98.7%, but steal 77%, paying a claim per 4 KB tile. Streaming cache hints (__ldcs / __stcs) changed nothing.
DEFAULT_SHAPE = Shape()
# Every kernel of every shape fits its register cap (65536 / (threads x min_blocks), in steps of 8) without
# spilling (tests/test_vecscale_cpu.py): a prefetched row holds 2 x vec float4, 64 registers at vec 8, so those
# shapes run 2 blocks/SM (or vec 4 at 3).
SHAPES = (DEFAULT_SHAPE, Shape(2, 1, 2, threads=1024), Shape(2, 1, 4, threads=384),
          Shape(2, 1, 16, threads=128),  # torch's elementwise kernel: many small blocks
          Shape(8, 1, 5, threads=256),  # the default until 2026-12-02 18:13
          Shape(8, 2, 5, threads=256), Shape(8, 1, 3, threads=256), Shape(16, 1, 2, threads=256),
          Shape(4, 4, 3, True, threads=256), Shape(8, 2, 2, True, threads=256))
ROUNDS = 3  # every kernel is timed once per round, the rounds one after another; its time is the median round
LEARNED_CHECK_ELEMS = (1 << 26) + 5  # 256 MiB and a tail: enough tiles per resident block for a learned min_tiles

PARAMS = "float* data, unsigned long long n, float alpha, unsigned long long prologue_ns"
PROLOGUE = r"""
    // The CUDA Programming Guide 4.12 example's compute_scalar(): a prologue whose cost does not depend on the tile.
    float a = alpha;
    if (prologue_ns != 0) {
      const unsigned long long t0 = cuadv::ptx::globaltimer_ns();
      while (cuadv::ptx::globaltimer_ns() - t0 < prologue_ns) {}
    }
"""
BODY = r"""
      // A tile: kRows rows of kThreads x kVec float4. The block size is a compile-time constant (the
      // kernel's block), so every access of a row is one base address plus an immediate offset
      // (k * kThreads * 16 bytes), not a 64-bit address of its own in registers.
      constexpr int kVec = CUADV_VEC, kRows = CUADV_ROWS, kThreads = CUADV_THREADS;
      constexpr unsigned kRowElems = kThreads * 4 * kVec;  // floats per row
      const unsigned long long first = tile.index * (kRows * (unsigned long long)kRowElems);
      // Full rows of this tile (kVec 16-byte accesses per thread each); the rest is the tail row.
      const long long left = (long long)n - (long long)first;
      const int full = left <= 0 ? 0 : (left >= kRows * (long long)kRowElems ? kRows : (int)(left / kRowElems));
      float4* p = reinterpret_cast<float4*>(data + first) + threadIdx.x;
      // Every register array below is written whole before it is read, on every path: a load under a
      // condition (if (full > 0) v = ...) would keep the array's previous contents live, so after the
      // body is inlined into a scheduler's tile loop its registers would stay taken across the whole loop.
      if (CUADV_PREFETCH && full > 0) {  // each row's loads go out before the previous row's stores
        float4 v[kVec];
        #pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = p[k * kThreads];
        #pragma unroll 1  // a loop: the compiler cannot hoist later rows' loads and take more registers than the shape says
        for (int r = 1; r < full; ++r, p += kRowElems / 4) {
          float4 next[kVec];
          #pragma unroll
          for (int k = 0; k < kVec; ++k) next[k] = p[kRowElems / 4 + k * kThreads];
          #pragma unroll
          for (int k = 0; k < kVec; ++k) {
            v[k].x *= a; v[k].y *= a; v[k].z *= a; v[k].w *= a;
            p[k * kThreads] = v[k];
            v[k] = next[k];
          }
        }
        #pragma unroll
        for (int k = 0; k < kVec; ++k) {
          v[k].x *= a; v[k].y *= a; v[k].z *= a; v[k].w *= a;
          p[k * kThreads] = v[k];
        }
      } else if (!CUADV_PREFETCH) {  // row by row: a row's loads go out after the previous row's stores
        // Within a row, the first kEarly stores go out before the last kEarly loads. On the H200 (2026-12-02,
        // scripts/sched_trace_breakdown.py --fit) steal's 5-blocks/SM kernel streamed 1.001x its 4-blocks/SM one
        // (which issues all 8 loads first) before, and 1.023x after this order. ptxas may still hoist the late
        // loads where registers allow (fixed_work's kernel does) or issue one more after the stores.
        constexpr int kEarly = kVec >= 8 ? 2 : 0;
        #pragma unroll 1  // a loop: the compiler cannot hoist the next row's loads above this row's stores
        for (int r = 0; r < full; ++r, p += kRowElems / 4) {
          float4 v[kVec];
          #pragma unroll
          for (int k = 0; k < kVec - kEarly; ++k) v[k] = p[k * kThreads];
          #pragma unroll
          for (int k = 0; k < kEarly; ++k) {
            v[k].x *= a; v[k].y *= a; v[k].z *= a; v[k].w *= a;
            p[k * kThreads] = v[k];
          }
          #pragma unroll
          for (int k = kVec - kEarly; k < kVec; ++k) v[k] = p[k * kThreads];
          #pragma unroll
          for (int k = kEarly; k < kVec; ++k) {
            v[k].x *= a; v[k].y *= a; v[k].z *= a; v[k].w *= a;
            p[k * kThreads] = v[k];
          }
        }
      }
      if (full < kRows && left > full * (long long)kRowElems) {  // the last, partial row: one element per thread per step
        float* q = data + first + full * (unsigned long long)kRowElems;
        const int rest = (int)(left - full * (long long)kRowElems);  // < kRowElems
        // Not unrolled: once per launch, and unrolled its first indices (threadIdx.x + k * kThreads) were
        // hoisted out of the scheduler's tile loop, three registers kept across every tile.
        #pragma unroll 1
        for (int j = threadIdx.x; j < rest; j += kThreads) q[j] *= a;
      }
"""


def shape_preamble(shape: Shape) -> str:
    """The macros BODY reads its tile shape from."""
    return (f"#define CUADV_VEC {shape.vec}\n#define CUADV_ROWS {shape.rows}\n"
            f"#define CUADV_PREFETCH {int(shape.prefetch)}\n#define CUADV_THREADS {shape.threads}\n")


def vecscale_kernel(policy: str, quantum_us: float | None = None, shape: Shape = DEFAULT_SHAPE,
                    min_tiles: int | None = None) -> TileKernel:
    return TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=shape.threads, quantum_us=quantum_us,
                      preamble=shape_preamble(shape),
                      name=f"vecscale_{policy}_t{shape.threads}_{shape.vec}x{shape.rows}{'p' * shape.prefetch}"
                           f"_b{shape.min_blocks}"
                           + ("_k1" if min_tiles == 1 else ""),
                      min_blocks_per_sm=shape.min_blocks, min_tiles=min_tiles)


def tiles_for(n: int, shape: Shape = DEFAULT_SHAPE) -> int:
    return math.ceil(n / shape.tile_elems)


# Policies shown in the lab: name, policy, quantum in microseconds and min_tiles (None: the defaults).
VARIANTS: list[tuple[str, str, float | None, int | None]] = [
    ("fixed_work", "fixed_work", None, None),
    ("fixed_blocks", "fixed_blocks", None, None),
    ("steal", "steal", None, None),
    ("steal full grid", "steal", None, 1),
    ("steal Q=inf", "steal", math.inf, None),
]


def validate(kernels: dict[tuple[str, Shape], TileKernel], sizes) -> None:
    """Every element against NumPy's float32 product, on fresh random data, for every kernel."""
    import cupy as cp

    alpha = np.float32(1.0001)
    rng = np.random.default_rng()
    for n in sizes:
        host = rng.standard_normal(n, dtype=np.float32)
        for (label, shape), k in kernels.items():
            dev = cp.asarray(host)
            k(tiles_for(n, shape), dev, n, alpha, 0)
            if not np.array_equal(readback(dev), host * alpha):
                raise ValidationError(f"vecscale {label} ({shape.label}): wrong result at n={n}")


def all_kernels() -> dict[tuple[str, Shape], TileKernel]:
    return {(label, shape): vecscale_kernel(policy, q, shape, k)
            for shape in SHAPES for label, policy, q, k in VARIANTS}


STEAL_TARGET_PCT = 95.0  # steal with its defaults at 1 GiB, % of the copy ceiling


class VecScaleLab:
    name = "vecscale"
    title = "Vector-scalar multiply (CUDA Programming Guide 4.12) under each scheduling policy"

    def supported(self, caps) -> str | None:
        return None

    def build(self, arch: str):
        return [vecscale_kernel(p, shape=shape).compile(arch) for shape in SHAPES
                for p in ("fixed_work", "fixed_blocks", "steal")]

    def smoke(self) -> None:
        validate(all_kernels(), (DEFAULT_SHAPE.tile_elems * 3 + 5,))

    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        from ..timing import time_gpu

        result = LabResult(self.name, self.title)
        kernels = all_kernels()
        alpha = np.float32(1.0001)
        validate(kernels, (0, 1, 3, 4099, DEFAULT_SHAPE.tile_elems * 7 + 5, 1_000_003))
        result.checks.append("every element equals NumPy's float32 product at n = 0, 1, 3, 4099, 7 tiles + 5, "
                             "1,000,003 for every policy and tile shape")
        sizes = [1 << 28] if ctx.quick else [1 << 28, 1 << 30]  # elements: 1 GiB, 4 GiB
        torch_label, time_torch = _torch_peer()
        if time_torch is None:
            result.notes.append(f"torch peer not run: {torch_label}")
        rows, best, torch_pct = [], {}, {}
        for n in sizes:
            size = f"{4 * n / 2**30:.0f} GiB"
            data = cp.random.standard_normal(n, dtype=cp.float32)
            nbytes = 2 * 4 * n  # read + write
            peer = Spread.of(time_gpu(lambda: data.__imul__(alpha), repeats=10).samples)
            torch_ms = None if time_torch is None else time_torch(data, alpha)
            times = self._time_rounds(ctx, kernels, data, n, alpha, size)
            base_ms = min(ms for (label, _), ms in times.items() if label == "fixed_work")
            for (label, shape), ms in times.items():
                gbps, pct = rates(ms, nbytes, ctx.ceiling)
                text = shape.label + (_learned(kernels[(label, shape)], n, shape) if label == "steal" else "")
                rows.append([size, label, text, ms, gbps, pct, base_ms / ms, peer / ms, _ratio(torch_ms, ms)])
                best[(size, label)] = max(best.get((size, label), (0.0, "")), (pct, text))
            rows.append([size, "CuPy data *= alpha", "-", peer, *rates(peer, nbytes, ctx.ceiling), base_ms / peer, 1.0,
                         _ratio(torch_ms, peer)])
            if torch_ms is not None:
                gbps, torch_pct[size] = rates(torch_ms, nbytes, ctx.ceiling)
                how = "its elementwise kernel (torch 2.11: 128 threads x 2 float4 per block)"
                rows.append([size, torch_label, how, torch_ms, gbps, torch_pct[size], base_ms / torch_ms,
                             peer / torch_ms, 1.0])
            if n == sizes[0]:  # steal now launches the grids it learned from these timings: check them too
                validate({key: k for key, k in kernels.items() if key[0] == "steal"}, (LEARNED_CHECK_ELEMS,))
                result.checks.append(f"and at n = {LEARNED_CHECK_ELEMS:,} for steal with the min_tiles it learned")
            if n == sizes[-1]:
                shape = min(SHAPES, key=lambda sh: times[("fixed_blocks", sh)])
                self._sm_finish(ctx, result, kernels, shape, data, n, size)
            del data
        for (size, label), (pct, _) in best.items():
            result.figures[f"vecscale_{label.replace(' ', '_')}_{size.replace(' ', '')}_best_pct_ceiling"] = pct
        result.tables.append(Table(
            "v := alpha * v (float32, in place), every tile shape per policy",
            ["size", "policy", "tile shape", "median ms", "GB/s", "% of copy ceiling", "x best fixed_work", "x CuPy",
             "x torch"],
            rows, note=f"bytes = 8 per element (read + write); copy ceiling {ctx.ceiling.tb_per_s:.2f} TB/s "
                       f"measured in this run; each time: the median of {ROUNDS} rounds (every kernel once per "
                       "round), each round's the median of 10 CUDA-event timings after warm-up. steal: the "
                       f"defaults ({DEFAULT_QUANTUM_US:.0f} us slice, min_tiles learned: each block runs what one "
                       "slice held in the kernel's previous launch, so the grid is tiles / min_tiles, about as many "
                       "blocks as find work); steal full grid: min_tiles 1, one block per tile, each launching also "
                       "after the work is gone"))
        steal = float(best.get(("1 GiB", "steal"), (math.nan, ""))[0])  # steal with its defaults, best shape
        why = "" if steal >= STEAL_TARGET_PCT else \
            f", {missed_by(steal, STEAL_TARGET_PCT, points=True)}; why ({PROFILED}): {VECSCALE}"
        if "1 GiB" in torch_pct:
            why += f"; the strongest peer, {torch_label}, {torch_pct['1 GiB']:.1f}%"
        result.tables.append(Table(
            "best tile shape per policy", ["size", "policy", "tile shape", "% of copy ceiling"],
            [[size, label, shape, pct] for (size, label), (pct, shape) in best.items()],
            note="targets: 90% of the copy ceiling or better for every policy at 1 GiB and up; steal with its defaults "
                 f">= {STEAL_TARGET_PCT:.0f}% at 1 GiB: {steal:.1f}% in this run{why}"))
        return result

    @staticmethod
    def _time_rounds(ctx: RunContext, kernels, data, n: int, alpha, size: str) -> dict[tuple[str, Shape], Spread]:
        """Median ms per kernel over ROUNDS interleaved rounds (every kernel once per round); each round's
        sample is the median of 10 CUDA-event timings."""
        from ..timing import time_gpu

        def one_round(k: TileKernel, shape: Shape):
            return lambda: [time_gpu(lambda: k(tiles_for(n, shape), data, n, alpha, 0), repeats=10).median_ms]

        return interleaved_rounds(
            {(label, shape): one_round(k, shape) for (label, shape), k in kernels.items()}, ROUNDS,
            lambda r: ctx.progress(f"vecscale at {size}: round {r + 1} of {ROUNDS}, {len(kernels)} kernels"))

    def _sm_finish(self, ctx: RunContext, result: LabResult, kernels, shape: Shape, data, n: int, size: str) -> None:
        """When each SM ran out of work, from block traces: a static split (fixed_blocks) gives every SM the
        same share, so SMs that stream more slowly finish last while the others idle; a ticket (steal) hands
        the last tiles to whichever SMs are free."""
        from ..figures import pyplot as _pyplot

        finish, rates, counts, early = {}, {}, {}, []
        for label in ("fixed_blocks", "steal"):
            trace = kernels[(label, shape)](tiles_for(n, shape), data, n, np.float32(1.0), 0, trace=True)
            rec = trace.records[trace.written]
            t0, sm = int(rec["start_ns"].min()), rec["smid"].astype(np.int64)
            end = np.zeros(ctx.caps.sm_count)
            np.maximum.at(end, sm, (rec["end_ns"] - t0).astype(np.float64))
            busy = end > 0
            finish[label] = np.sort(end[busy] / end[busy].max())
            if label == "fixed_blocks":  # which SMs idle before the end: the same ones run by run (GPC layout)
                early = np.flatnonzero(busy & (end < 0.9 * end.max())).tolist()
            counts[label] = np.bincount(sm, minlength=ctx.caps.sm_count)[busy]
            rates[label] = counts[label] / end[busy]  # tiles per ns while the SM had work
            result.figures[f"vecscale_{label}_first_sm_done_pct"] = 100 * float(finish[label][0])
            result.figures[f"vecscale_{label}_sm_rate_spread"] = float(rates[label].max() / rates[label].min())
        fb, st, c = finish["fixed_blocks"], finish["steal"], counts["fixed_blocks"]
        result.notes.append(
            f"per-SM finish at {size} ({shape.label}, block traces): under fixed_blocks the first SM ran out of tiles "
            f"at {100 * fb[0]:.1f}% of the makespan and the median SM at {100 * np.median(fb):.1f}%, with "
            f"{c.min()} to {c.max()} tiles per SM; {len(early)} SMs were done before 90% of it (smid "
            f"{_ranges(early)}); SMs streamed at different rates (fastest / slowest "
            f"{rates['fixed_blocks'].max() / rates['fixed_blocks'].min():.2f}x) and a static split cannot move work "
            f"to the fast ones. Under steal the first SM ran out at {100 * st[0]:.1f}% and the median at "
            f"{100 * np.median(st):.1f}% ({counts['steal'].min()} to {counts['steal'].max()} tiles per SM)")
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(7, 3.8))
        for label, f in finish.items():
            ax.plot(np.arange(1, f.size + 1), 100 * f, label=label)
        ax.set_xlabel("SMs, sorted by when they ran out of tiles")
        ax.set_ylabel("last tile ended (% of makespan)")
        ax.set_title(f"v := alpha * v at {size}: when each SM ran out of work")
        ax.grid(alpha=0.3)
        ax.legend()
        ctx.save_figure(fig, "vecscale_sm_finish.png", result)


def _ratio(peer_ms, ms):
    """peer time / this time (above 1: this is faster), or '-' where the peer did not run."""
    return "-" if peer_ms is None else peer_ms / ms


def _torch_peer() -> tuple[str, Callable[[Any, Any], Spread] | None]:
    """The strongest in-place peer, torch's mul_: (its label, a function giving its median ms on an array, on the
    same memory through a DLPack view), or (why it is not run, None)."""
    torch, why = import_torch()
    if torch is None:
        return why, None
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no CUDA device", None
    from ..timing import time_gpu

    def median_ms(data, alpha) -> Spread:
        t = torch.from_dlpack(data)
        return Spread.of(time_gpu(lambda: t.mul_(float(alpha)), stream=torch.cuda.current_stream(),
                                  repeats=10).samples)

    return f"torch {torch.__version__} data.mul_(alpha)", median_ms


def _learned(kernel: TileKernel, n: int, shape: Shape) -> str:
    """The min_tiles a steal kernel with the defaults used at n elements, and the tile time it was learned from."""
    report = kernel.slice_report
    if report is None:
        return ", full grid (no report yet)"
    k = kernel.min_units(kernel.kernel()[0], "steal", tiles_for(n, shape))
    return f", min_tiles learned {k} ({report.ns_per_unit / 1000:.1f} us per tile)"


def _ranges(ids: list[int]) -> str:
    """[32, 33, 34, 40] -> '32-34, 40'."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs) or "none"
