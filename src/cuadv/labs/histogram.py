"""Histogram with distributed shared memory: the bins sharded over a cluster.

What it shows: one histogram, six ways, measured in one run on 1 GiB of bin indices (256 MiB with
``--quick``), uniform and Zipf(1.3)-skewed, int32 and uint8:

- ``global``: every element does an atomicAdd on the global bins;
- ``shared``: each block privatises the whole histogram in its shared memory (32-bit counters,
  up to 32 lane-interleaved replicas so a warp's atomics never meet on a bank), flushed once;
- ``dsm``: the bins sharded over the C blocks of a cluster (C = 1, 2, 4, 8, 16), bin b in block
  b % C, remote atomics through ``cluster.map_shared_rank``; 16-bit counters packed two per word
  when 32-bit ones do not fit (1M bins over 16 blocks), with exact wrap handling; optional
  warp aggregation (``__match_any_sync``) for skewed data;
- ``exchange`` (int32): the same sharding, but without one remote atomic per element: per round each
  block sorts a chunk (4K or 8K elements) by owner block in its shared memory (warp ballots or
  shared atomics on per-owner cursors), sends the runs to the owners' mailboxes with 16-byte remote
  stores, one split cluster barrier per round (double-buffered stage and mailboxes), and each owner
  applies its mailbox with local shared atomics; optionally the low 4096 bins privatised per block;
- ``hot`` (int32, skew-aware): the low bins [0, hot) privatised per block (16K, or as many as one
  block holds), every other bin by a global atomic: for data whose mass sits in the low bins (the
  lab's Zipf), measured on uniform data too, where it is mostly global atomics;
- CuPy's ``cupy.histogram`` (CUB) as the peer, and ``cupy.bincount``;
- then ``cuadv.histogram`` itself, called as a user calls it, against CUB's ``HistogramEven`` (built with
  nvcc), ``torch.bincount``, ``cupy.histogram`` and ``cupy.bincount``, int32 at 256 to 16M bins, uint8,
  float32, as ratios to CUB, to the strongest peer and to the read-only ceiling (``histogram_peers.py``).

Every variant is checked element by element against ``numpy.bincount`` at sizes 0, 1, primes and
non-multiples of the vector width, misaligned starts, out-of-range values, both dtypes, both
distributions and every cluster size; the measured outputs against ``cupy.bincount``.

Needs: compute capability 9.0 for ``dsm`` and ``exchange`` (clusters and DSM); ``global``,
``shared`` and ``hot`` run on any CUDA GPU (the lab itself asks for 9.0).

Key insight: a histogram is an atomic-throughput problem until the bins live in shared memory;
when they no longer fit one block, a cluster pools the shared memory of up to 16 SMs. Remote
shared-memory atomics are themselves throughput-bound (one DSM transaction per element), so the
exchange moves elements to their owner in bulk (8 per 16-byte store) and keeps every atomic local.
Design: persistent grid sized from the occupancy API, 1024-thread blocks, 16-byte loads with the
next batch in flight, a trash slot for out-of-range values (no branch in the hot loop), zero /
cluster.sync / count / cluster.sync / flush once per block (the four lifetime rules), flushes
staggered over the bins. 1M bins: 16 blocks x 65,537 slots x 2 B = 128 KB per block with 16-bit
counters, chosen over a DSM + global-atomics hybrid so that every bin stays in shared memory; a
counter wrap costs one or two global atomics per 65,536 increments and is exact (the thread whose
atomic wrapped the counter sees the old value and posts the correction). The exchange's run
capacity is 1.25x a uniform chunk's share per owner; longer runs (skewed data) overflow to remote
atomics, one per distinct value per warp, so any input stays exact.

Run: ``cuadv bench histogram`` (``--quick`` for 256 MiB). The mechanism lives in the library
(``cuadv.histograms``; this module only measures and reports); from Python::

    import cuadv
    hist, edges = cuadv.histogram(x, bins=65536)          # numpy/cupy semantics, variant chosen for you
    from cuadv.histograms import count_bins               # the raw uint32 counts this lab measures
    counts = count_bins(x, bins=1 << 20, variant="dsm", cluster=16)
    counts = count_bins(x, bins=1 << 20, variant="exchange", sort="atomic")   # cluster of 16, 16-bit
    counts = count_bins(x, bins=1 << 20, variant="hot", hot=16384)            # skew-aware
"""


from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import LaunchConfigError, ValidationError
from ..histograms import occupancy as _occupancy
from ..histograms.api import binning_module
from ..testing.histograms import (check_variant, host_data, make_data, on_device, reference_counts, validate,
                                 validate_packed_wraps, zipf_cdf)
from ..histograms.launcher import (DeviceArray, HistogramEngine, PreparedHistogram, _dtype_name, build_module,
                                   count_bins as histogram, device_array, engine)
from ..histograms.plans import (CLUSTER_SIZES, CLUSTERED, DTYPES, EXCHANGE_CLUSTER_SIZES, EXCHANGE_HOT,
                                EXCHANGE_SORTS, EXCHANGE_VECTORS, H200_SHARED_PER_BLOCK, H200_SHARED_PER_SM, MAX_BINS,
                                THREADS, VARIANTS, HistogramPlan, exchange_cap, exchange_chunk, exchange_layout,
                                hot_max, kernel_expressions, plan_histogram)
from ..report.results import LabResult, Selection, Spread, Table, spread_map
from .base import RunContext, gb_per_s, readback
from .histogram_peers import run_peer_comparison, start_cub

# Some names above (the plans' helpers, device_array, reference_counts) are not used here: they stay
# importable from the lab for older callers and the lab's tests.  # noqa: F401

OCCUPANCY_SHARED_KB = _occupancy.OCCUPANCY_SHARED_KB


def occupancy_table(block: int = 1024) -> Table:
    """The library's cluster occupancy table (``cuadv.histograms.occupancy.occupancy_table``) as a report Table."""
    t = _occupancy.occupancy_table(block)
    return Table(t.title, t.columns, t.rows, note=t.note)


# ---------------------------------------------------------------------------------------------
# The lab.


@dataclass
class Measurement:
    dtype: str
    dist: str
    bins: int
    label: str
    variant: str  # global | shared | dsm | hot | exchange | cupy | bincount
    cluster: int
    ms: float  # median of the timings (a Spread: with their spread)
    gbps: float  # GB/s of input (a Spread, as ms)
    grid: int = 0


def _peer_fns(cp, data, bins: int) -> dict[str, Callable[[], Any]]:
    return {"cupy.histogram (CUB)": lambda: cp.histogram(data, bins=bins, range=(0, bins)),
            "cupy.bincount": lambda: cp.bincount(data, minlength=bins)}


class HistogramLab:
    name = "histogram"
    title = "Histogram with distributed shared memory"

    def supported(self, caps) -> str | None:
        if caps.compute_capability < (9, 0) or not caps.cluster_launch:
            return ("the DSM histogram needs thread block clusters: compute capability >= 9.0 "
                    f"(got {caps.cc_string()}); "
                    "fallback: histogram(..., variant='shared') where the bins fit one block, else variant='global'")
        return None

    def build(self, arch: str):
        return [build_module(arch), binning_module(arch)]  # the count kernels and the public calls' binning passes

    def smoke(self) -> None:
        import cupy as cp

        rng = np.random.default_rng()
        n = 100_003
        for dtype, bins in (("int32", 1000), ("uint8", 256)):
            host = host_data(rng, n, bins, "zipf", dtype, out_of_range=True)
            for opts in engine().options(bins, dtype):  # every variant, the hot and exchange ones included
                check_variant(cp, host, bins, offset=1, units=2 if opts["variant"] in CLUSTERED else 4, **opts)
        host = host_data(rng, n, 70_000, "uniform", "int32", out_of_range=True)
        for c in (1, 16):  # 16-bit counters over one block, 32-bit over 16
            check_variant(cp, host, 70_000, variant="dsm", cluster=c, units=1)
        check_variant(cp, host, 70_000, variant="shared", units=2)  # 16-bit counters without clusters
        check_variant(cp, host, 70_000, variant="hot", hot=4097, units=2)
        # The exchange with 16-bit counters and a private range, and with overflowing runs (one value).
        check_variant(cp, host, 70_000, variant="exchange", cluster=4, counter_bits=16, hot=1000, units=1)
        one = host_data(rng, n, 70_000, "constant", "int32", out_of_range=False)
        check_variant(cp, one, 70_000, variant="exchange", cluster=2, counter_bits=16, vectors=1, units=1)
        # The public call's own passes: int32 over (0, bins) counted in place (edge folded), the binning
        # pass, the edges written on the GPU.
        from ..histograms.api import histogram as public_histogram, prepare_histogram

        for r in ((0, 1000), (-3.5, 999.25)):
            x = host_data(rng, n, 1000, "uniform", "int32", out_of_range=True)
            x[:7] = 1000  # values on the closed right edge
            hist, edges = public_histogram(cp.asarray(x), 1000, range=r)
            want, want_edges = np.histogram(x, 1000, range=r)
            if not (np.array_equal(readback(hist), want) and np.array_equal(readback(edges), want_edges)):
                raise ValidationError(f"cuadv.histogram over range {r} differs from numpy.histogram")
        # Over bins one block does not hold, a one-shot call launches two plans gated on the skew sample's
        # verdict, which the GPU writes (Zipf: the skew-aware plan counts; uniform: the exchange, or on older
        # GPUs global atomics); the other plan's blocks leave at once. Prepared calls reuse the counts that
        # the widening pass zeroed.
        wide = 1 << 20
        for dist in ("zipf", "uniform"):
            x = host_data(rng, n, wide, dist, "int32", out_of_range=True)
            hist, _ = public_histogram(cp.asarray(x), wide, range=(0, wide))
            if not np.array_equal(readback(hist), np.histogram(x, wide, range=(0, wide))[0]):
                raise ValidationError(f"cuadv.histogram of {dist} data over {wide} bins differs from numpy.histogram")
        x = host_data(rng, n, 1000, "uniform", "int32", out_of_range=True)
        prepared = prepare_histogram(cp.asarray(x), 1000, range=(0, 1000))
        for _ in range(2):
            if not np.array_equal(readback(prepared()[0]), np.histogram(x, 1000, range=(0, 1000))[0]):
                raise ValidationError("a repeated prepared cuadv.histogram differs from numpy.histogram")

    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        result = LabResult(self.name, self.title)
        cc = ctx.caps.compute_capability
        cub = start_cub(f"sm_{cc[0]}{cc[1]}")  # nvcc builds the CUB peer while the variants are validated
        largest = ctx.caps.max_cluster_size_nonportable
        ctx.progress("histogram: validating every variant")
        bins_list = (1, 256, 4097, 70_001, 1 << 20)
        sizes = (0, 1, 4099, 1_000_003) if ctx.quick else (0, 1, 7, 4099, 65_537, 1_000_003)
        checked = validate(cp, bins_list, sizes)
        result.checks.append(
            f"{checked} histograms equal numpy.bincount element by element (outputs poisoned first): every variant "
            f"(global, shared, dsm at cluster sizes {', '.join(str(c) for c in CLUSTER_SIZES if c <= largest)}, with "
            "and without warp aggregation; int32: the skew-aware hot range + global atomics, the DSM exchange at "
            f"cluster sizes {', '.join(str(c) for c in EXCHANGE_CLUSTER_SIZES if c <= largest)} and with a private "
            f"low range), bins {', '.join(map(str, bins_list))}, n = {', '.join(map(str, sizes))}, "
            "int32 and uint8, uniform and Zipf(1.3), 5% out-of-range values, half of them starting 1 element "
            "off the 16-byte boundary")
        validate_packed_wraps(cp)
        result.checks.append("16-bit packed counters stay exact through many wraps: 4M+3 equal values into one "
                             "block (one bin past what 32-bit counters hold: both halves of the first word, the "
                             "last two bins) or one cluster, low and high halves, odd bin counts, cluster sizes 1, "
                             "2, 16, aggregated adds of up to 32; in the exchange, through its mailboxes and its "
                             "overflowing runs")

        n_bytes = (256 << 20) if ctx.quick else (1 << 30)
        bins_sweep = [256, 4096, 65536, 1 << 20] if ctx.quick else [256, 1024, 4096, 16384, 65536, 262144, 1 << 20]
        repeats = 7 if ctx.quick else 15
        measurements: list[Measurement] = []
        skipped: list[str] = []
        for dtype in ("int32", "uint8"):
            for dist in ("uniform", "zipf"):
                for bins in (bins_sweep if dtype == "int32" else [256]):
                    ctx.progress(f"histogram: {dtype} {dist} {bins} bins")
                    measurements += self._measure_case(cp, ctx, dtype, dist, bins, n_bytes, repeats, skipped)
        result.checks.append(f"every measured output equals cupy.bincount of the same {n_bytes >> 20} MiB input")
        result.notes += [f"not measured: {s}" for s in dict.fromkeys(skipped)]

        self._tables(result, ctx, measurements, n_bytes)
        self._plot(result, ctx, measurements)
        self._judge(result, ctx, measurements, n_bytes)
        try:
            result.tables.append(occupancy_table())
        except Exception as exc:  # the table is evidence, not a result: report why it is missing
            result.notes.append(f"occupancy table unavailable: {exc}")
        run_peer_comparison(result, ctx, cub)  # issue 18.1: the public call against CUB, torch and CuPy
        return result

    # -- measuring ------------------------------------------------------------------------------

    @staticmethod
    def _plans(dtype: str, dist: str, bins: int) -> list[dict]:
        """Zipf: every cluster size with and without warp aggregation; uniform: aggregation only at the
        default cluster size (what it costs where it cannot help). Where no single block holds the bins
        (not even with 16-bit counters): the skew-aware hybrid and the DSM exchange configurations too."""
        eng = engine()
        opts = eng.options(bins, dtype, aggregate=dist == "zipf", extras=False)
        if dist == "uniform":
            opts.append({"variant": "dsm", "aggregate": True})
        if bins + 1 > 2 * (eng.caps.shared_mem_per_block_optin // 4):
            opts += eng.sweep(bins, dtype)
        return opts

    def _measure_case(self, cp, ctx, dtype, dist, bins, n_bytes, repeats, skipped: list[str]) -> list[Measurement]:
        from ..timing import time_gpu

        n = n_bytes // DTYPES[dtype][1].itemsize
        data = make_data(cp, n, bins, dist, dtype)
        want = cp.bincount(data, minlength=bins)
        out = cp.empty(bins, dtype=cp.uint32)
        rows = []
        for opts in self._plans(dtype, dist, bins):
            try:
                call = engine().prepare(data, bins, out=out, **opts)
            except LaunchConfigError as exc:  # e.g. a cluster shape this GPU cannot make resident
                skipped.append(f"{bins} bins {opts}: {exc}")
                continue
            out.fill(0xFF)  # poison: the measured call must rewrite every bin
            t = time_gpu(call, warmup=2, repeats=repeats)
            if not bool(cp.array_equal(out.astype(cp.int64), want)):
                raise ValidationError(f"histogram {call.plan.label} at {bins} bins ({dtype}, {dist}) differs from "
                                      "cupy.bincount")
            ms = Spread.of(t.samples)
            rows.append(Measurement(dtype, dist, bins, call.plan.label, call.plan.variant, call.plan.cluster,
                                    ms, gb_per_s(ms, n_bytes), call.grid))
        for label, fn in _peer_fns(cp, data, bins).items():
            ms = Spread.of(time_gpu(fn, warmup=2, repeats=repeats).samples)
            rows.append(Measurement(dtype, dist, bins, label, "cupy" if "histogram" in label else "bincount", 0,
                                    ms, gb_per_s(ms, n_bytes)))
        del data, want
        return rows

    # -- reporting ------------------------------------------------------------------------------

    @staticmethod
    def _cases(ms: list[Measurement]):
        keys = []
        for m in ms:
            k = (m.dtype, m.dist, m.bins)
            if k not in keys:
                keys.append(k)
        return [(k, [m for m in ms if (m.dtype, m.dist, m.bins) == k]) for k in keys]

    def _tables(self, result: LabResult, ctx, ms: list[Measurement], n_bytes: int) -> None:
        ceiling = ctx.ceiling.bytes_per_s / 1e9

        def pct_ceiling(m: Measurement) -> float:
            return spread_map(lambda g: 100 * g / ceiling, m.gbps)

        rows, summary = [], []
        for (dtype, dist, bins), case in self._cases(ms):
            peer = next(m for m in case if m.variant == "cupy")
            glob = next(m for m in case if m.variant == "global")
            for m in case:
                rows.append([dtype, dist, bins, m.label, m.grid or "-", m.ms, m.gbps, pct_ceiling(m),
                             m.gbps / peer.gbps, m.gbps / glob.gbps])
                key = f"hist_{dtype}_{dist}_{bins}_{m.label.replace(' ', '_')}_gbps"
                result.figures[key] = m.gbps
            ours = [m for m in case if m.variant in VARIANTS]
            best = max(ours, key=lambda m: m.gbps)
            dsm = [m for m in case if m.variant in CLUSTERED]  # DSM-based: remote atomics or the exchange
            best_dsm = max(dsm, key=lambda m: m.gbps) if dsm else None
            summary.append([dtype, dist, bins, best.label, best.gbps, pct_ceiling(best), best.gbps / peer.gbps,
                            peer.gbps, (best_dsm.gbps / glob.gbps) if best_dsm else float("nan"),
                            best_dsm.label if best_dsm else "-"])
            result.figures[f"hist_{dtype}_{dist}_{bins}_best_gbps"] = best.gbps
            result.figures[f"hist_{dtype}_{dist}_{bins}_best_x_cupy"] = best.gbps / peer.gbps
            result.figures[f"hist_{dtype}_{dist}_{bins}_best_pct_ceiling"] = pct_ceiling(best)
            if best_dsm:
                result.figures[f"hist_{dtype}_{dist}_{bins}_dsm_x_global"] = best_dsm.gbps / glob.gbps
            exchange = [m for m in case if m.variant == "exchange"]
            if exchange:
                result.figures[f"hist_{dtype}_{dist}_{bins}_exchange_x_global"] = \
                    max(m.gbps for m in exchange) / glob.gbps
        note = (f"GB/s of input ({n_bytes >> 20} MiB per histogram; bytes of input / median of the CUDA-event "
                f"timings after warm-up; each call zeroes its output); % of the copy ceiling "
                f"{ctx.ceiling.tb_per_s:.2f} TB/s (read + write) measured in this run; Zipf(1.3) truncated to "
                "[0, bins); grid = blocks launched (persistent, from the occupancy API)")
        result.tables.append(Table("Histogram: best cuadv variant per case",
                                   ["input", "data", "bins", "best variant", "GB/s", "% copy ceiling", "x CuPy",
                                    "CuPy GB/s", "best DSM x global", "best DSM variant"], summary,
                                   note=note + "; DSM variants: dsm (remote atomics) and dsm exchange (mailboxes)"))
        result.tables.append(Table("Histogram: every variant",
                                   ["input", "data", "bins", "variant", "grid", "median ms", "GB/s", "% copy ceiling",
                                    "x CuPy", "x global"], rows, note=note))

    def _plot(self, result: LabResult, ctx, ms: list[Measurement]) -> None:
        from ..figures import pyplot as _pyplot

        plt = _pyplot()
        fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
        for ax, dist in zip(axes, ("uniform", "zipf")):
            sel = [m for m in ms if m.dtype == "int32" and m.dist == dist]
            series: dict[str, dict[int, float]] = {}  # the best of each family per bin count
            for m in sel:
                if "+agg" in m.label:
                    continue
                name = m.label.split(" (")[0] if m.variant == "dsm" else m.label
                if m.variant == "shared":
                    name = "shared (1 block)"
                elif m.variant == "exchange":
                    name = "dsm exchange (best)"
                elif m.variant == "hot":
                    name = "skew-aware hot + global (best)"
                pts_of = series.setdefault(name, {})
                pts_of[m.bins] = max(pts_of.get(m.bins, 0.0), m.gbps)
            for name, best_of in series.items():
                pts = sorted(best_of.items())
                style = "--" if name.startswith("cupy") else "-"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=name)
            ax.axhline(ctx.ceiling.bytes_per_s / 1e9, color="k", lw=0.8, ls=":", label="copy ceiling (read+write)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("bins")
            ax.set_title(f"int32 input, {dist}{' (Zipf 1.3)' if dist == 'zipf' else ''}")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("GB/s of input")
        axes[1].legend(fontsize=8, loc="best")
        fig.suptitle("Histogram throughput by variant")
        ctx.save_figure(fig, "histogram_throughput.png", result)

    def _judge(self, result: LabResult, ctx, ms: list[Measurement], n_bytes: int = 1 << 30) -> None:
        """Targets of the issue, reported (not asserted), and the selection-matrix cell."""
        f = result.figures
        shared_bins = ctx.caps.shared_mem_per_block_optin // 4 - 1

        def best(dtype, dist, bins, key):
            return f.get(f"hist_{dtype}_{dist}_{bins}_{key}")

        lines = []
        for bins in sorted({m.bins for m in ms if m.dtype == "int32"}):
            pct = best("int32", "uniform", bins, "best_pct_ceiling")
            if bins <= 4096 and pct is not None:
                lines.append(f"uniform int32 {bins} bins: {pct:.0f}% of the copy ceiling (target >= 70%)")
            xc = best("int32", "uniform", bins, "best_x_cupy")
            if bins in (65536, 1 << 20) and xc is not None:
                lines.append(f"uniform int32 {bins} bins: {xc:.1f}x CuPy (target >= {10 if bins == 65536 else 3}x)")
            xz = best("int32", "zipf", bins, "best_x_cupy")
            if xz is not None:
                lines.append(f"Zipf int32 {bins} bins: {xz:.1f}x CuPy (target >= 3x)")
            if bins > shared_bins:
                for dist in ("uniform", "zipf"):
                    r = best("int32", dist, bins, "dsm_x_global")
                    if r is not None:
                        case = [m for m in ms if (m.dtype, m.dist, m.bins) == ("int32", dist, bins)
                                and m.variant in CLUSTERED]
                        top = max(case, key=lambda m: m.gbps).label if case else "?"
                        lines.append(f"{dist} {bins} bins (more than one block holds): best DSM ({top}) {r:.2f}x "
                                     "global atomics (target > 1)")
        pct8 = best("uint8", "uniform", 256, "best_pct_ceiling")
        if pct8 is not None:
            lines.append(f"uniform uint8 256 bins: {pct8:.0f}% of the copy ceiling (target >= 50%)")
        result.notes += ["measured against the issue's targets: " + "; ".join(lines)] if lines else []

        big = max((m.bins for m in ms if m.dtype == "int32" and m.bins > shared_bins), default=None)
        if big is None:
            return
        case = [m for m in ms if m.dtype == "int32" and m.dist == "uniform" and m.bins == big]
        dsm = [m for m in case if m.variant in CLUSTERED]
        glob = next(m for m in case if m.variant == "global")
        peer = next(m for m in case if m.variant == "cupy")
        if not dsm:
            return
        top = max(dsm, key=lambda m: m.gbps)
        zipf = [m for m in ms if m.dtype == "int32" and m.dist == "zipf" and m.bins == big]
        ztop = max((m for m in zipf if m.variant in CLUSTERED), key=lambda m: m.gbps, default=None)
        zglob = next((m for m in zipf if m.variant == "global"), None)
        choice = (f"DSM histogram: bins sharded over a cluster ({top.label})" if top.gbps > glob.gbps
                  else "global atomics (DSM measured slower here)")
        size = f"{n_bytes >> 30} GiB" if n_bytes >= 1 << 30 else f"{n_bytes >> 20} MiB"
        evidence = (f"{big} bins, {size} uniform int32: {top.label} {top.gbps:.0f} GB/s vs global atomics "
                    f"{glob.gbps:.0f} GB/s ({top.gbps / glob.gbps:.1f}x) and cupy.histogram {peer.gbps:.0f} GB/s")
        if ztop and zglob:
            evidence += f"; Zipf(1.3): {ztop.label} {ztop.gbps:.0f} vs global {zglob.gbps:.0f} GB/s"
        zhot = max((m for m in zipf if m.variant == "hot"), key=lambda m: m.gbps, default=None)
        if zhot:
            evidence += f", skew-aware {zhot.label} {zhot.gbps:.0f} GB/s"
        result.selection.append(Selection(
            "data exchange between blocks", choice, evidence,
            fallback="before compute capability 9.0 (no clusters): a single-block shared-memory histogram where the "
                     "bins fit one block; beyond, the skew-aware hybrid (hot low bins in shared memory, the rest by "
                     "global atomics) for skewed data, global atomics otherwise"))
