"""Sparse matrix-vector product y = A x (CSR, float32) through ``cuadv.TileKernel``, against cuSPARSE and torch.

Needs: compute capability 9.0 (policy 'steal', which 'auto' is on Hopper); CuPy; torch optional (a peer).
Key insight: the work of a row is its length, and power-law matrices have rows 10,000x longer than the
mean, so a tile of whole rows can weigh as much as a slot's share of the whole matrix: a static split
(fixed_blocks) or an unlucky order then sets the makespan, however the rest is balanced. Splitting the
long rows into slices bounds every tile's weight and the scheduler balances what is left.
Run: ``cuadv bench spmv`` (``--quick``: 2**19 rows, about 4M non-zeros; full: 2**22 rows, about 32M).

The matrices (``spmv_support``, seeded, generated on the host with NumPy): power-law rows (Pareto(1.3)
lengths, the longest capped at rows / 8), an R-MAT graph (a, b, c = 0.57, 0.19, 0.19, labels scrambled)
and a uniform one (every row the mean +- 25%, about 0.4% of rows one shorter for the exact total), all with mean 8
non-zeros per row, columns sorted and unique within each row, values and x uniform in [-1, 1].

The design (one tile body, ``spmv.cuh``; the tile list built on the host, CSR-adaptive style):
  - Short rows (at most 512 non-zeros) are grouped into tiles by their running weight (non-zeros + 2 per
    row) in guided windows: 8192 wide while the weight left is more than two such windows per resident block,
    then narrowing to 2048 at the end of the list, so a block that loops over tiles pays a tile's costs (its
    claim, the wait for its slowest warp) on fewer tiles and the last tiles still even out the blocks. The
    block is groups of 2 to 32 lanes, a power of two the host picks per tile from a model of the kernel's SASS
    (the width with the fewest instructions over the block and its busiest warp); each group owns rows of the
    tile in turn: it reads the row's two offsets from global memory, loads its columns and values in slots of 4
    per lane (8 loads, then 4 gathers of x through the read-only cache, in flight per thread) for at most 2
    rounds, the whole warp sums what a longer row has left, and the lanes combine in registers with warp
    shuffles. No barrier; under the policies with a barrier between tiles
    the warps of a tile the host flags claim its batches from a counter in shared memory. The variant "staged short
    rows" keeps the body this replaced: the products staged in shared memory with coalesced loads, then
    summed from there by the groups of lanes after a barrier; the lab measures it beside the default on
    split rows in fixed windows of 2048 under auto (its stage holds no wider tiles).
  - A row longer than 512 is a tile of its own, streamed by the whole block (6 loads in flight per thread
    and array) and reduced with shuffles and shared memory, so one long row is never serialised on a warp.
  - "whole rows": such a row is one tile however long, so tile weights span 512 to hundreds of thousands
    of non-zeros: the imbalance the scheduling policies face. "split rows": a row longer than 8192 is cut
    into slices of 8192; each slice writes its sum to a scratch slot and the last slice to finish (an
    acq_rel counter, reset by that slice) adds the slots in slice order and writes y. So y needs no memset,
    no float atomics are used and the result is the same every run.
  - Every row is written by exactly one tile, empty rows included (0).
The policies (fixed_work, fixed_blocks, steal, and auto = steal on Hopper) run this one body; steal also
with the tiles handed out heaviest first (``TileOrder.heaviest_first`` by non-zeros).

Checks: every result, cuadv's under every policy and tiling and every peer's, against SciPy's
csr_matrix @ x in float64, row by row within 4 float32 epsilons x (log2(row length) + 2) x sum_j |a_ij x_j|
(``spmv_support.tolerance``); cuadv's y is poisoned (NaN) before its checked launch.
Bytes for GB/s: values + columns (8 per non-zero), the row offsets, x once and y once (``Csr.effective_bytes``).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..report.results import LabResult, Table, spread_map
from ..work_stealing import TileOrder, resolve_policy
from .base import RunContext, gb_per_s
from .profile_notes import PROFILED, SPMV
from .spmv_support import (GROUP_NNZ, LONG_NNZ, MATRICES, SHORT_ROWS, SLICE_NNZ, WIDEST_NNZ, Csr, DeviceCsr, check,
                           checked_timings, generate, peers, reference, spmv_kernel, to_host, tolerance)

MEAN = 8  # non-zeros per row
SEED = 18
REPEATS = 10
QUEUE_AHEAD_US = 500.0  # hides the host side of each call (cupyx and torch build descriptors per call)
TARGETS = {"power-law": 1.0, "R-MAT": 1.0, "uniform": 0.9}  # x cuSPARSE for cuadv with split rows and 'auto'
POLICIES = ("fixed_work", "fixed_blocks", "auto")
TILINGS = {"whole": "whole rows", "split": "split rows"}  # every policy runs both (guided windows)
LISTS = {**TILINGS, "split_fixed": "split rows in fixed windows"}  # and auto this one too, with both short-row bodies
DEFAULT_SHORT = "registers"  # the short-row body of every variant but the one that measures the other beside it


def _variants() -> list[tuple[str, str, bool, str]]:
    """(tile list, policy, heaviest first, short-row body) of every cuadv variant measured: each policy on both
    tile lists, auto on whole rows heaviest first, and both short-row bodies under auto on split rows in fixed
    windows (the staged body's stage holds no wider tiles)."""
    out = [(t, p, False, DEFAULT_SHORT) for t in TILINGS for p in POLICIES]
    out.insert(3, ("whole", "auto", True, DEFAULT_SHORT))
    out += [("split_fixed", "auto", False, short) for short in (DEFAULT_SHORT, "staged")]
    return out


def _label(tiling: str, policy: str, heaviest: bool, short: str, cc) -> str:
    name = f"auto ({resolve_policy('auto', cc)})" if policy == "auto" else policy
    return (f"{LISTS[tiling]}, {name}" + (", heaviest first" if heaviest else "")
            + ("" if short == DEFAULT_SHORT else f", {short} short rows"))


def figure_slug(text: str) -> str:
    """A matrix's (or segments') name as it appears in figure names: "R-MAT" -> "r_mat"."""
    return text.lower().replace("-", "_").replace(" ", "_")


class SpmvLab:
    name = "spmv"
    title = "Sparse matrix-vector product (CSR, power-law rows) through TileKernel against cuSPARSE and torch.sparse"

    def supported(self, caps) -> str | None:
        if caps.compute_capability < (9, 0):
            return (f"needs compute capability 9.0 for policy 'steal' (got {caps.cc_string()}); fallback: "
                    "fixed_work")
        return None

    def build(self, arch: str):
        return [spmv_kernel(short_rows=short).compile(arch, p) for short in SHORT_ROWS
                for p in ("fixed_work", "fixed_blocks", "steal")]

    def smoke(self) -> None:
        """A few hundred rows (an empty one, rows longer than a tile, one split into slices) under every policy
        and every tile list (guided windows that widen, fixed ones), with small tiles so every path of the body runs,
        both short-row bodies where their stage holds the tiles, and every lane width of the register body; checked
        against NumPy in float64."""
        m, x = smoke_matrix()
        ref, abs_sum, _ = reference(m, x, use_scipy=False)
        tol = tolerance(m.lengths, abs_sum)
        kernels = {short: spmv_kernel(short_rows=short) for short in SHORT_ROWS}
        # 1 slot: guided windows widen on this matrix (at 256, short-row tiles of up to 637 non-zeros, past the 512
        # fixed windows allow; at 32 most rows are long)
        for group in (32, 256, GROUP_NNZ):
            dev = DeviceCsr(m, x, group, slots=1)
            for tiling in dev.tilings:
                for policy in ("fixed_work", "fixed_blocks", "steal"):
                    for short, k in kernels.items():
                        if not dev.holds(k, tiling):
                            continue
                        dev.y.fill(np.nan)
                        dev.run(k, tiling, policy)
                        check(f"smoke, {tiling} rows of {group}, {policy}, {short}", to_host(dev.y), ref, tol)
        for lanes_log2 in range(6):
            dev = DeviceCsr(m, x, GROUP_NNZ, lanes_log2=lanes_log2)
            dev.y.fill(np.nan)
            dev.run(kernels["registers"], "whole", "fixed_work")
            check(f"smoke, {1 << lanes_log2} lanes per row", to_host(dev.y), ref, tol)

    # -- the lab ----------------------------------------------------------------------------------
    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        result = LabResult(self.name, self.title)
        n_rows = 1 << (19 if ctx.quick else 22)
        rounds = 2 if ctx.quick else 3
        # one TileKernel per tile list and short-row body, so steal's grid is learned from launches over the same tiles
        kernels = {(tiling, short): spmv_kernel(short_rows=short) for tiling, _, _, short in _variants()}
        mat_rows, rows, targets = [], [], []
        for kind in MATRICES:
            ctx.progress(f"spmv: generating the {kind} matrix ({n_rows:,} rows)")
            t0 = time.perf_counter()
            m = generate(kind, n_rows, MEAN, SEED)
            gen_s = time.perf_counter() - t0
            x = np.random.default_rng(SEED + 1).uniform(-1, 1, m.n_cols).astype(np.float32)
            ref, abs_sum, ref_name = reference(m, x)
            tol = tolerance(m.lengths, abs_sum)
            dev = DeviceCsr(m, x)
            st = m.stats()
            whole, split = dev.tilings["whole"][0], dev.tilings["split"][0]
            ideal_ms = m.effective_bytes() / (ctx.ceiling.tb_per_s * 1e12) * 1e3
            mat_rows.append([kind, st["rows"], st["nnz"], st["max_row"], st["max_over_mean"], st["gini"],
                             st["empty_rows"], f"{whole.count:,} ({whole.kinds()['long rows']:,} long rows)",
                             f"{split.count:,} ({split.kinds()['slices']:,} slices)", ideal_ms, gen_s])
            times, labels, missing, worst = self._measure(ctx, kind, dev, kernels, ref, tol, rounds)
            result.checks.append(f"{kind}: every row of every variant and peer within tolerance of {ref_name} "
                                 f"(largest error {worst:.2f} of its tolerance), before and after timing")
            self._rows(result, kind, m, times, labels, missing, ideal_ms, rows, targets)
            self._trace_notes(result, kind, dev, kernels)
            del dev
            cp.get_default_memory_pool().free_all_blocks()
        result.tables.append(Table(
            "the matrices", ["matrix", "rows", "nnz", "longest row", "max / mean", "Gini", "empty rows",
                             "tiles, whole rows", "tiles, split rows", "ideal ms", "generated in s"], mat_rows,
            note=f"seed {SEED}, mean {MEAN} non-zeros per row; short rows grouped by weight (non-zeros + 2 per row) "
                 f"in guided windows, {WIDEST_NNZ} wide while the weight left is more than two such windows per "
                 f"resident block, then narrowing to {GROUP_NNZ}; "
                 f"rows longer than {LONG_NNZ} on their own, split rows cut into slices of {SLICE_NNZ}; "
                 f"ideal: the bytes below at the copy ceiling measured in this run ({ctx.ceiling.tb_per_s:.2f} TB/s)"))
        result.tables.append(Table(
            "y = A x, float32 CSR: each policy and tiling against cuSPARSE and torch",
            ["matrix", "policy / peer", "median ms", "GB/s", "% of copy ceiling", "x cuSPARSE", "x torch",
             "x fixed_blocks"], rows,
            note=f"same matrix, x and device arrays for every row; {rounds} interleaved rounds (every variant once "
                 f"per round), each the median of {REPEATS} CUDA-event timings after warm-up, with a "
                 f"{QUEUE_AHEAD_US:.0f} us kernel queued ahead so host set-up is not timed; bytes = 8 per non-zero "
                 "+ 4 per row offset + 4 per x element + 4 per y element; x cuSPARSE / x torch / x fixed_blocks = "
                 "their time / this time (above 1: this is faster), fixed_blocks of the same tiling; cuSPARSE: "
                 "cusparseSpMV with descriptors and workspace made once; split rows in fixed windows: short rows in "
                 f"windows of {GROUP_NNZ} throughout, under auto with the register body and with the staged body "
                 "(products staged in shared memory, the body the register body replaced; its stage holds no wider "
                 "tiles)"))
        result.tables.append(Table(
            "targets: cuadv with split rows and policy auto against cuSPARSE",
            ["matrix", "x cuSPARSE", "target", "met", "by", "best cuadv variant", "its x cuSPARSE"], targets,
            note="by: the ratio over the target, minus 1"
                 + ("" if all(row[3] == "met" for row in targets)
                    else f"; why the targets are missed ({PROFILED}): {SPMV}")))
        return result

    def _measure(self, ctx, kind: str, dev: DeviceCsr, kernels, ref, tol, rounds: int):
        """Validate every variant and peer, time them in interleaved rounds, validate cuadv's again (steal then
        runs the grid it learned). Returns label -> ms, label -> ("cuadv", (tiling, policy, heaviest first, short-row
        body)) or ("peer", kind), the peers absent (name -> why) and the largest error over its tolerance."""
        cc = ctx.caps.compute_capability
        order = TileOrder.heaviest_first(dev.tilings["whole"][0].nnz())
        fns, labels = {}, {}
        for tiling, policy, heaviest, short in _variants():
            label = _label(tiling, policy, heaviest, short, cc)
            o = order if heaviest else None
            fns[label] = (lambda t=tiling, p=policy, o=o, k=kernels[tiling, short]: dev.run(k, t, p, order=o))
            labels[label] = ("cuadv", (tiling, policy, heaviest, short))
        found = peers(dev)
        times, worst = checked_timings(ctx, self.name, kind, dev, fns, labels, found, ref, tol, rounds, REPEATS,
                                       QUEUE_AHEAD_US)
        return times, labels, found[1], worst

    @staticmethod
    def _rows(result: LabResult, kind: str, m: Csr, times, labels, missing, ideal_ms: float, rows, targets) -> None:
        """The table rows, figures and target row of one matrix."""
        nbytes = m.effective_bytes()
        peer_ms = {labels[l][1]: ms for l, ms in times.items() if labels[l][0] == "peer"}
        cus, torch_ms = peer_ms["cusparse"], peer_ms.get("torch", math.nan)
        fixed = {labels[l][1][0]: ms for l, ms in times.items()
                 if labels[l][0] == "cuadv" and labels[l][1][1:] == ("fixed_blocks", False, DEFAULT_SHORT)}
        for label, ms in times.items():
            what, key = labels[label]
            fb = fixed[key[0]] / ms if what == "cuadv" and key[0] in fixed and key[3] == DEFAULT_SHORT else math.nan
            pct = spread_map(lambda t: 100 * ideal_ms / t, ms)
            rows.append([kind, label, ms, gb_per_s(ms, nbytes), pct, cus / ms, torch_ms / ms, fb])
            if what == "cuadv":
                slug = (f"spmv_{figure_slug(kind)}_{key[0]}_{key[1]}" + ("_heaviest_first" if key[2] else "")
                        + ("" if key[3] == DEFAULT_SHORT else f"_{key[3]}"))
                result.figures[f"{slug}_x_cusparse"] = cus / ms
                if not math.isnan(fb):
                    result.figures[f"{slug}_x_fixed_blocks"] = fb
                result.figures[f"{slug}_pct_ceiling"] = pct
                if not math.isnan(torch_ms):
                    result.figures[f"{slug}_x_torch"] = torch_ms / ms
        for name, why in missing.items():
            rows.append([kind, f"{name}: skipped ({why})", math.nan, math.nan, math.nan, math.nan, math.nan, math.nan])
        ms_of = {labels[l][1]: ms for l, ms in times.items() if labels[l][0] == "cuadv"}
        head = ms_of["split", "auto", False, DEFAULT_SHORT]
        fixed_windows = ms_of["split_fixed", "auto", False, DEFAULT_SHORT]
        staged = ms_of["split_fixed", "auto", False, "staged"]
        result.figures[f"spmv_{figure_slug(kind)}_split_fixed_auto_x_staged"] = staged / fixed_windows
        result.figures[f"spmv_{figure_slug(kind)}_split_auto_x_fixed_windows"] = fixed_windows / head
        result.notes.append(f"{kind}, split rows, auto: the register short-row body against the staged one "
                            f"(same tiles, fixed windows): {staged / fixed_windows:.2f}x; guided windows against "
                            f"fixed ones (register body): {fixed_windows / head:.3f}x (their time / its time; above "
                            "1: the first faster)")
        best = min((ms, l) for l, ms in times.items() if labels[l][0] == "cuadv")
        target = TARGETS[kind]
        ratio = cus / head
        targets.append([kind, ratio, f">= {target:.1f}x", "met" if ratio >= target else "missed",
                        f"{100 * (ratio / target - 1):+.1f}%", best[1], cus / best[0]])

    @staticmethod
    def _trace_notes(result: LabResult, kind: str, dev: DeviceCsr, kernels) -> None:
        """Block traces of steal on both tilings: the makespan against the ideal max(sum of tile times / slots,
        longest tile) of that very launch, the slots being the blocks steal's kernel keeps resident at once."""
        for tiling in TILINGS:
            k = kernels[tiling, DEFAULT_SHORT]
            slots = k.resident_units("steal")
            trace = dev.run(k, tiling, "steal", trace=True)
            rec = trace.records
            if not trace.written.all():
                from ..errors import ValidationError

                raise ValidationError(f"spmv {kind} {tiling}: {int((~trace.written).sum())} tiles not traced")
            dur = (rec["end_ns"] - rec["start_ns"]).astype(np.float64)
            ideal = max(dur.sum() / slots, dur.max())
            longest = int(np.argmax(dur))
            result.figures[f"spmv_{figure_slug(kind)}_{tiling}_steal_traced_x_ideal"] = trace.makespan_ns / ideal
            result.notes.append(
                f"{kind}, {TILINGS[tiling]}, steal (block traces, {slots} slots): makespan "
                f"{trace.makespan_ns / 1e3:.1f} us against an ideal of {ideal / 1e3:.1f} us "
                f"({trace.makespan_ns / ideal:.2f}x); the longest tile took {dur.max() / 1e3:.1f} us "
                f"({int(dev.tilings[tiling][0].nnz()[longest]):,} non-zeros), the mean {dur.mean() / 1e3:.2f} us")


def smoke_matrix() -> tuple[Csr, np.ndarray]:
    """300 rows of 0 to 20 non-zeros, row 5 empty, row 17 of 300 and row 100 of 1000 non-zeros, 1200 columns."""
    from .spmv_support import _rows_to_csr

    rng = np.random.default_rng(7)
    lens = rng.integers(0, 21, 300)
    lens[5], lens[17], lens[100] = 0, 300, 1000
    m = _rows_to_csr("smoke", lens, 1200, rng)
    return m, rng.uniform(-1, 1, 1200).astype(np.float32)
