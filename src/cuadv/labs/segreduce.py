"""Segmented sum (one float32 sum per segment of an array, segments given by offsets) through ``cuadv.TileKernel``,
against CUB's ``DeviceSegmentedReduce::Sum``, ``torch.segment_reduce`` and torch's scatter-add.

Needs: compute capability 9.0 (policy 'steal', which 'auto' is on Hopper); CuPy; nvcc for the CUB peer and torch
for the torch peers (each skipped with the reason where absent).
Key insight: the same ragged work as SpMV without the gather, so the memory's read rate is its ceiling, and the
scheduling decides how close it gets. A library that gives each segment a block of its own leaves the longest
segment of a power-law array on one SM; cutting long segments into slices and grouping short ones into tiles
by their weight gives every tile a bounded cost, and the scheduler balances what is left.
Run: ``cuadv bench segreduce`` (``--quick``: 2**19 segments, about 16M values; full: 2**22, about 134M: 512 MiB).

The segments (``segreduce_support``, seeded): power-law lengths (Pareto(1.3), the longest capped at segments / 8),
the out-degrees of an R-MAT multigraph and uniform lengths (the mean +- 25%), all with mean 32, values uniform in
[-1, 1]. The kernel is the spmv lab's tile body compiled without the gather (``spmv.cuh``, kGather = false) on the
spmv lab's tile lists (short segments grouped by weight, a segment longer than 512 its own tile, "split": longer
than 8192 cut into slices summed by the last slice, so nothing is zeroed, no float atomics are used and the result
is the same every run), in blocks of 128 threads, 16 per SM, under each policy.

Checks: every result, cuadv's under every policy and tiling and every peer's, against float64 sums, segment by
segment within 4 float32 epsilons x (log2(length) + 2) x the sum of magnitudes; cuadv's sums are poisoned (NaN)
before its checked launch. Bytes for GB/s: the values, the offsets and one sum per segment; % of the read-only
ceiling measured in this run (``cuadv.timing.read_ceiling``).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..report.results import LabResult, Table, spread_map
from ..work_stealing import resolve_policy
from .base import RunContext, gb_per_s
from .peers.cub_segmented_reduce import load_cub_segmented_sum
from .segreduce_support import KINDS, generate_segments, peers, reference, segment_bytes
from .spmv import SpmvLab, figure_slug, smoke_matrix
from .spmv_support import GROUP_NNZ, DeviceCsr, check, checked_timings, spmv_kernel, to_host, tolerance

MEAN = 32  # values per segment
SEED = 19
REPEATS = 10
QUEUE_AHEAD_US = 500.0  # hides the host side of each call (torch's peers allocate their output per call)
POLICIES = ("fixed_work", "fixed_blocks", "auto")
TILINGS = {"whole": "whole segments", "split": "split segments"}
# Why cuadv's sums stay well under the read-only ceiling (the register body is the spmv lab's, built for gathers)
BELOW_CEILING = ("below the ceiling: Nsight Compute (an H100, 2026-12-05, uniform segments under fixed_work, 6 blocks "
                 "of 256 threads per SM) found the body latency-bound, DRAM at 60% of its peak and issue at 57%, 60% "
                 "of the warps' stalls waiting on loads: each batch of rows loads its two offsets, then the values "
                 "that depend on them, 4 per lane, so few loads are in flight per warp; the whole SM's threads (8 "
                 "blocks of 256) gained 12-22% under fixed_work and steal, blocks of 128 (now, 16 per SM) 8-19% more "
                 "on the skewed kinds. Steal trails fixed_work on the skewed kinds because up to a fifth of its "
                 "resident warps wait at the barrier that ends each tile for the block's slowest warp, so fewer loads "
                 "are in flight (Nsight Compute, an H100, 2026-12-06: 7.0 warps on loads per sub-partition against "
                 "fixed_work's 8.5 on R-MAT segments)")
# Blocks of THREADS threads and MIN_BLOCKS of them per SM, the kernel's __launch_bounds__: the whole SM's 2048
# threads at 32 registers, no spills. With 256 threads, 8 blocks per SM streamed 12-22% faster than the spmv lab's 6
# under fixed_work and steal (the body is latency-bound); 16 blocks of 128 threads then took another 11% off steal's
# time on power-law segments and 19% on R-MAT (8% and 14% off fixed_work's), uniform segments unchanged (H100,
# 2026-12-05 15:43 and 22:39, scripts/segreduce_probe.py)
THREADS = 128
MIN_BLOCKS = 16
PEER_COLUMNS = {"cub": "x CUB", "torch": "x torch.segment_reduce", "index_add": "x torch index_add_"}
PEER_SHORT = {"cub": "CUB DeviceSegmentedReduce", "torch": "torch.segment_reduce", "index_add": "torch index_add_"}


def throughput_figure(rates: dict[str, dict[str, float]], ceiling_gbps: float):
    """One panel per kind of segments: GB/s of every variant and peer (kind -> label -> GB/s), cuadv's bars in one
    colour and the peers' in another, the read-only ceiling as a line."""
    from ..figures import pyplot

    plt = pyplot()
    labels = list(dict.fromkeys(l for by_label in rates.values() for l in by_label))  # one order for every panel
    peer_names = set(PEER_SHORT.values())
    fig, axes = plt.subplots(1, max(len(rates), 1), figsize=(4 + 4 * max(len(rates), 1), 1.5 + 0.35 * len(labels)),
                             sharey=True, squeeze=False)
    for ax, (kind, by_label) in zip(axes[0], rates.items()):
        ax.barh(range(len(labels)), [by_label.get(l, 0.0) for l in labels],
                color=["tab:gray" if l in peer_names else "tab:blue" for l in labels])
        ax.axvline(ceiling_gbps, color="k", lw=0.8, ls=":", label="read-only ceiling")
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlabel("GB/s (values, offsets and sums)")
        ax.set_title(f"{kind} segments")
        ax.grid(True, axis="x", alpha=0.3)
    axes[0][0].invert_yaxis()  # shared: the first label on top in every panel
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Segmented sum: cuadv (blue) against its peers (gray)")
    return fig


def segsum_kernel(threads: int = THREADS, min_blocks: int = MIN_BLOCKS):
    """The segmented-sum TileKernel: the spmv lab's register body without the gather, in blocks of ``threads``
    threads, ``min_blocks`` per SM (the lab's: THREADS, MIN_BLOCKS); any policy at launch."""
    return spmv_kernel(name="segreduce", gather=False, threads=threads, min_blocks=min_blocks)


def segment_tiles(m, group: int = GROUP_NNZ, slots: int | None = None, threads: int = THREADS,
                  **tiling) -> DeviceCsr:
    """The segments ``m`` (a Csr with no columns) and their tile lists on the GPU, for segsum_kernel of blocks of
    ``threads``: the tiles' model counts its block's warps, and the guided windows narrow for the blocks it keeps
    resident (``slots``, default this GPU's SMs x MIN_BLOCKS). ``tiling``: DeviceCsr's other options (lanes_log2,
    dynamic, guided)."""
    if slots is None:
        from ..device import current_device

        slots = current_device().caps.sm_count * MIN_BLOCKS
    return DeviceCsr(m, None, group, threads=threads, slots=slots, **tiling)


def _label(tiling: str, policy: str, cc) -> str:
    name = f"auto ({resolve_policy('auto', cc)})" if policy == "auto" else policy
    return f"{TILINGS[tiling]}, {name}"


class SegReduceLab:
    name = "segreduce"
    title = "Segmented sum over power-law segments through TileKernel against CUB DeviceSegmentedReduce and torch"

    supported = SpmvLab.supported  # the same needs: policy 'steal'

    def build(self, arch: str):
        return [segsum_kernel().compile(arch, p) for p in ("fixed_work", "fixed_blocks", "steal")]

    def smoke(self) -> None:
        """The spmv lab's smoke rows (an empty one, rows longer than a tile, one split into slices) as segments,
        under every policy and tile list, with small tiles so every path of the body runs; checked against float64
        sums."""
        m, _ = smoke_matrix()
        ref, abs_sum = reference(m)
        tol = tolerance(m.lengths, abs_sum)
        k = segsum_kernel()
        for group in (32, 256, 2048):
            dev = segment_tiles(m, group, slots=1)
            for tiling in dev.tilings:
                for policy in ("fixed_work", "fixed_blocks", "steal"):
                    dev.y.fill(np.nan)
                    dev.run(k, tiling, policy)
                    check(f"smoke, {tiling} segments of {group}, {policy}", to_host(dev.y), ref, tol, lab=self.name)

    # -- the lab ----------------------------------------------------------------------------------
    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        from ..timing import read_ceiling

        result = LabResult(self.name, self.title)
        segments = 1 << (19 if ctx.quick else 22)
        rounds = 2 if ctx.quick else 3
        read = read_ceiling()
        result.figures["read_ceiling_tb_s"] = read.tb_per_s
        kernels = {tiling: segsum_kernel() for tiling in TILINGS}  # steal learns its grid per tile list
        cc = ctx.caps.compute_capability
        ctx.progress("segreduce: loading CUB's DeviceSegmentedReduce (built with nvcc once, then cached)")
        cub_peer = load_cub_segmented_sum(f"sm_{cc[0]}{cc[1]}")
        seg_rows, rows, best_rows = [], [], []
        rates: dict[str, dict[str, float]] = {}  # kind -> short label -> GB/s, for the figure
        for kind in KINDS:
            ctx.progress(f"segreduce: generating {kind} segments ({segments:,})")
            t0 = time.perf_counter()
            m = generate_segments(kind, segments, MEAN, SEED)
            gen_s = time.perf_counter() - t0
            ref, abs_sum = reference(m)
            tol = tolerance(m.lengths, abs_sum)
            dev = segment_tiles(m)
            st = m.stats()
            whole, split = dev.tilings["whole"][0], dev.tilings["split"][0]
            ideal_ms = segment_bytes(m) / (read.tb_per_s * 1e12) * 1e3
            seg_rows.append([kind, st["rows"], st["nnz"], st["max_row"], st["max_over_mean"], st["gini"],
                             st["empty_rows"], f"{whole.count:,} ({whole.kinds()['long rows']:,} long)",
                             f"{split.count:,} ({split.kinds()['slices']:,} slices)", ideal_ms, gen_s])
            times, labels, missing, worst = self._measure(ctx, kind, dev, kernels, cub_peer, ref, tol, rounds)
            result.checks.append(f"{kind}: every segment of every variant and peer within tolerance of float64 "
                                 f"sums (largest error {worst:.2f} of its tolerance), before and after timing")
            self._rows(result, kind, m, times, labels, missing, ideal_ms, rows, best_rows)
            rates[kind] = {PEER_SHORT.get(labels[l][1], l) if labels[l][0] == "peer" else l:
                           float(gb_per_s(ms, segment_bytes(m))) for l, ms in times.items()}
            del dev
            cp.get_default_memory_pool().free_all_blocks()
        ctx.save_figure(throughput_figure(rates, read.bytes_per_s / 1e9), "segreduce_throughput.png", result)
        result.tables.append(Table(
            "the segments", ["segments", "count", "values", "longest", "max / mean", "Gini", "empty",
                             "tiles, whole segments", "tiles, split segments", "ideal ms", "generated in s"], seg_rows,
            note=f"seed {SEED}, mean {MEAN} values per segment; the spmv lab's tile lists; ideal: the bytes below at "
                 f"the read-only ceiling measured in this run ({read.tb_per_s:.2f} TB/s)"))
        result.tables.append(Table(
            "segmented sum, float32: each policy and tiling against the peers",
            ["segments", "policy / peer", "median ms", "GB/s", "% of read-only ceiling", *PEER_COLUMNS.values(),
             "x fixed_blocks"], rows,
            note=f"same values and offsets on the GPU for every row; {rounds} interleaved rounds (every variant once "
                 f"per round), each the median of {REPEATS} CUDA-event timings after warm-up, with a "
                 f"{QUEUE_AHEAD_US:.0f} us kernel queued ahead so host set-up is not timed; bytes = 4 per value + 4 "
                 "per offset + 4 per sum; x peer / x fixed_blocks = their time / this time (above 1: this is faster), "
                 "fixed_blocks of the same tiling; CUB: cub::DeviceSegmentedReduce::Sum called directly with its "
                 "workspace made once (built with nvcc); torch index_add_: each value added into its segment's sum "
                 "with atomics (segment ids made once), the scatter-add users write"))
        result.tables.append(Table(
            "cuadv (split segments, auto) against the strongest peer",
            ["segments", "x CUB", "strongest peer", "x strongest peer", "% of read-only ceiling"], best_rows,
            note=f"x: the peer's time / cuadv's (above 1: cuadv is faster), same run; {BELOW_CEILING}"))
        return result

    def _measure(self, ctx, kind: str, dev: DeviceCsr, kernels, cub_peer, ref, tol, rounds: int):
        """Validate every variant and peer, time them in interleaved rounds, validate cuadv's again (steal then
        runs the grid it learned). Returns label -> ms, label -> ("cuadv", (tiling, policy)) or ("peer", kind),
        the peers absent (name -> why) and the largest error over its tolerance."""
        cc = ctx.caps.compute_capability
        fns, labels = {}, {}
        for tiling in TILINGS:
            for policy in POLICIES:
                label = _label(tiling, policy, cc)
                fns[label] = (lambda t=tiling, p=policy: dev.run(kernels[t], t, p))
                labels[label] = ("cuadv", (tiling, policy))
        found = peers(dev, cub_peer)
        times, worst = checked_timings(ctx, self.name, kind, dev, fns, labels, found, ref, tol, rounds, REPEATS,
                                       QUEUE_AHEAD_US)
        return times, labels, found[1], worst

    @staticmethod
    def _rows(result: LabResult, kind: str, m, times, labels, missing, ideal_ms: float, rows, best_rows) -> None:
        """The table rows, figures and summary row of one kind of segments."""
        nbytes = segment_bytes(m)
        peer_ms = {labels[l][1]: ms for l, ms in times.items() if labels[l][0] == "peer"}
        peer_name = {labels[l][1]: l for l in times if labels[l][0] == "peer"}
        fixed = {labels[l][1][0]: ms for l, ms in times.items()
                 if labels[l][0] == "cuadv" and labels[l][1][1] == "fixed_blocks"}
        for label, ms in times.items():
            what, key = labels[label]
            pct = spread_map(lambda t: 100 * ideal_ms / t, ms)
            versus = [peer_ms.get(p, math.nan) / ms for p in PEER_COLUMNS]
            fb = fixed[key[0]] / ms if what == "cuadv" else math.nan
            rows.append([kind, label, ms, gb_per_s(ms, nbytes), pct, *versus, fb])
            if what == "cuadv":
                slug = f"segreduce_{figure_slug(kind)}_{key[0]}_{key[1]}"
                result.figures[f"{slug}_pct_read_ceiling"] = pct
                result.figures[f"{slug}_x_fixed_blocks"] = fb
                for p, x in zip(PEER_COLUMNS, versus):
                    if not math.isnan(x):
                        result.figures[f"{slug}_x_{p}"] = x
        for name, why in missing.items():
            rows.append([kind, f"{name}: skipped ({why})", *[math.nan] * (4 + len(PEER_COLUMNS))])
        head = next(ms for l, ms in times.items() if labels[l] == ("cuadv", ("split", "auto")))
        strongest = min(peer_ms, key=lambda p: peer_ms[p], default=None)
        best_rows.append([kind, peer_ms.get("cub", math.nan) / head,
                          "none measured" if strongest is None else peer_name[strongest],
                          math.nan if strongest is None else peer_ms[strongest] / head,
                          spread_map(lambda t: 100 * ideal_ms / t, head)])
