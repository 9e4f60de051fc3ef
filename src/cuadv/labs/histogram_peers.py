"""The histogram lab's peer comparison (issue 18, item 1): ``cuadv.histogram`` through its public API, as a
user calls it, against the histogram peers users already have, timed in the same interleaved rounds:
CUB's ``DeviceHistogram::HistogramEven`` called directly (int32 counters; ``peers/cub_histogram``),
``torch.bincount`` (``torch.histc`` for float input) on the same memory through DLPack, ``cupy.histogram``
and ``cupy.bincount``. Cases: int32 uniform and Zipf(1.3) at 256 to 16M bins, uint8 at 256 bins, float32
in [0, 1) at 4,096 even bins; 1 GiB of input (256 MiB with ``--quick``). Every timed output is first
checked against one reference (``cupy.bincount``; ``cupy.histogram`` for float input), and every rate is
divided by the read-only ceiling measured in the same run (``cuadv.timing.read_ceiling``): a histogram
reads its input once and writes almost nothing.

Run: ``cuadv bench histogram`` (this part runs after the variant sweep of ``labs/histogram.py``).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ValidationError
from ..report.results import LabResult, Table, spread_map
from .base import import_torch, missed_by
from .profile_notes import histogram_note

BINS = (256, 4096, 65536, 262144, 1 << 20, 1 << 24)
BINS_QUICK = (256, 4096, 65536, 1 << 20)
FLOAT_BINS = 4096  # a power of two: every peer's float arithmetic places [0, 1) values exactly as numpy
CUADV, CUADV_PREPARED = "cuadv.histogram (auto)", "cuadv.prepare_histogram (auto)"
MEMORY_MARGIN = 512 << 20  # free memory CUB's workspace must leave
# A spin of this length is queued before each timed call so that the host's time to make the call (a one-shot
# cuadv call builds its plan object in Python; the default 150 us left its p90 at twice its median) is hidden
# for every provider alike: the table compares GPU time.
QUEUE_AHEAD_US = 1000.0


@dataclass(frozen=True)
class Case:
    dtype: str  # int32 | uint8 | float32
    dist: str  # uniform | zipf
    bins: int

    @property
    def range(self) -> tuple[Any, Any]:
        return (0.0, 1.0) if self.dtype == "float32" else (0, self.bins)

    @property
    def key(self) -> str:
        return f"{self.dtype}_{self.dist}_{self.bins}"

    @property
    def group(self) -> str:
        return f"{self.dtype} {'Zipf(1.3)' if self.dist == 'zipf' else 'uniform'}"


def cases(quick: bool) -> list[Case]:
    bins = BINS_QUICK if quick else BINS
    out = [Case("int32", dist, b) for dist in ("uniform", "zipf") for b in bins]
    return out + [Case("uint8", "uniform", 256), Case("float32", "uniform", FLOAT_BINS)]


def targets(case: Case) -> list[tuple[str, str, float]]:
    """(what, figure, least value) the issue sets for ``cuadv.histogram`` in auto on this case."""
    out = []
    if case.dtype == "int32" and case.dist == "uniform":
        if case.bins == 256:
            out.append((">= 2.5x CUB", "x_cub", 2.5))
        elif 4096 <= case.bins <= 1 << 20:
            out.append((">= 10x CUB", "x_cub", 10.0))
        if case.bins <= 65536:
            out.append((">= 95% of the read-only ceiling", "pct_read", 95.0))
    elif case.dtype == "int32" and case.bins == 1 << 20:
        out.append((">= 10x CUB (Zipf, no variant named)", "x_cub", 10.0))
    elif case.dtype == "uint8":
        out.append((">= 2x CUB", "x_cub", 2.0))
    return out


def verdict(value: float, least: float, points: bool = False) -> str:
    """met / missed for a value against its least; ``points``: a % target (of a ceiling), missed by points."""
    if value != value:  # NaN: the peer it divides by was not measured
        return "not measured"
    return f"met ({value / least:.2f}x the target)" if value >= least else missed_by(value, least, points)


def ceiling_bound(read_gbps: float, cub_gbps: float, pct_read: float, least: float) -> str | None:
    """Why a ratio to CUB of ``least`` cannot be met on this GPU, where it cannot: a histogram that reads its input
    once runs at most at about the read-only ceiling (a streaming kernel measured in the run, so within its noise),
    so its ratio to CUB is at most about that ceiling over CUB's rate; else None."""
    bound = read_gbps / cub_gbps
    if bound >= least:
        return None
    return (f"bound by this GPU's memory: at the read-only ceiling measured in this run ({read_gbps / 1e3:.2f} "
            f"TB/s) a histogram that reads its input once is at most about {bound:.3g}x CUB, whose kernel reads "
            f"{100 * cub_gbps / read_gbps:.1f}% of that ceiling; cuadv reads {pct_read:.1f}%")


AT_CEILING = 95.0  # % of the read-only ceiling from which a kernel counts as at it (the issue's own target)


@dataclass
class Row:
    case: Case
    label: str  # provider, with its version
    ms: float  # a Spread when measured: the median with its spread
    gbps: float  # GB/s of input (a Spread, as ms)
    kind: str  # cuadv | cub | peer
    plan: str = ""  # cuadv: the plan auto chose


def peer_tables(rows: list[Row], read_gbps: float, n_bytes: int) -> tuple[list[Table], dict[str, float], list[str]]:
    """One table per input type and distribution, the figures and the target lines, from measured rows."""
    figures: dict[str, float] = {}
    lines: list[str] = []
    tables: dict[str, list[list[Any]]] = {}
    for case in dict.fromkeys(r.case for r in rows):
        mine = [r for r in rows if r.case == case]
        cub = next((r for r in mine if r.kind == "cub"), None)
        peers = [r for r in mine if r.kind != "cuadv"]
        best = max(peers, key=lambda r: r.gbps, default=None)
        for r in mine:
            x_cub = r.gbps / cub.gbps if cub else float("nan")
            x_best = r.gbps / best.gbps if best and r.kind == "cuadv" else float("nan")
            pct = spread_map(lambda g: 100 * g / read_gbps, r.gbps)
            goal, met = "-", "-"
            if r.label == CUADV:
                values = {"x_cub": x_cub, "pct_read": pct}
                figures[f"peers_{case.key}_gbps"] = r.gbps
                figures[f"peers_{case.key}_pct_read_ceiling"] = pct
                if cub:
                    figures[f"peers_{case.key}_x_cub"] = x_cub
                if best:
                    figures[f"peers_{case.key}_x_best_peer"] = x_best
                checks = targets(case)
                goal = "; ".join(t[0] for t in checks) or "-"
                met = "; ".join(verdict(values[t[1]], t[2], t[1] == "pct_read") for t in checks) or "-"
                note = histogram_note(case.dtype, case.dist, case.bins)
                for what, key, least in checks:
                    bound = ceiling_bound(read_gbps, cub.gbps, pct, least) if key == "x_cub" and cub else None
                    # a kernel at the ceiling: the bound is the whole reason; below it the profile says the rest
                    why = bound if bound and pct >= AT_CEILING else "; ".join(filter(None, (bound, note))) or None
                    line = (f"{case.group} {case.bins} bins: {values[key]:.4g} ({what}): "
                            f"{verdict(values[key], least, key == 'pct_read')}")
                    lines.append(line + (f"; {why}" if why and values[key] < least else ""))
            tables.setdefault(case.group, []).append([
                case.bins, r.label + (f" [{r.plan}]" if r.plan else ""), r.ms, r.gbps, pct, x_cub,
                x_best, best.label if best and r.kind == "cuadv" else "-", goal, met])
    columns = ["bins", "provider", "median ms", "GB/s", "% read-only ceiling", "x CUB", "x strongest peer",
               "strongest peer", "target", "met"]
    note = (f"GB/s of input ({n_bytes >> 20} MiB per histogram / median of CUDA-event timings over interleaved "
            f"rounds, every provider once per round, each call behind a {QUEUE_AHEAD_US / 1e3:g} ms spin that hides "
            f"the host's time to make it); % of the read-only ceiling {read_gbps / 1e3:.2f} TB/s "
            "(a kernel streaming 1 GiB with 16-byte loads, measured in this run); x CUB and x strongest peer: "
            "the same run; cuadv rows name the plan auto chose")
    out = [Table(f"Histogram peers: {group}", columns, body, note=note) for group, body in tables.items()]
    return out, figures, lines


# ---------------------------------------------------------------------------------------------
# Measuring (GPU).


def start_cub(sm: str) -> Future:
    """Load or build the CUB peer in the background (nvcc takes about 30 s the first time). A daemon thread:
    a lab that fails before it asks for the result does not keep the process alive until nvcc is done."""
    import threading

    from .peers.cub_histogram import load_cub

    future: Future = Future()

    def build() -> None:
        try:
            future.set_result(load_cub(sm))
        except BaseException as exc:  # handed to whoever waits on the result
            future.set_exception(exc)

    threading.Thread(target=build, name="cuadv-cub-build", daemon=True).start()
    return future


PROBE_BINS = 1 << 22  # from here on, a peer runs once in a child process before this process calls it
_PROBE = r'''
import sys
import cupy as cp
from cuadv.labs.histogram_peers import Case, _data, _providers
case = Case(sys.argv[1], sys.argv[2], int(sys.argv[3]))
label, n = sys.argv[4], int(sys.argv[5])
cub = None
if label.startswith("CUB"):
    from cuadv.labs.peers.cub_histogram import load_cub
    cub = load_cub(sys.argv[6])[0]
try:
    data = _data(cp, case, n)
    calls, _ = _providers(cp, case, data, cub, [])
    calls[label][0]()
    cp.cuda.Device().synchronize()
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    import os
    os._exit(1)  # no interpreter teardown: with a faulted CUDA context it only adds noise
'''


def probe_peer(case: Case, label: str, n: int, sm: str, timeout_s: float = 120.0) -> str | None:
    """None if ``label`` computes ``case`` over n elements in a child process, else why not. A peer that
    faults (an illegal address leaves a process's CUDA context unusable) must not take the lab down with it:
    at 16M bins CUB's privatized histograms need tens of GB, which a peer may not address."""
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, case.dtype, case.dist, str(case.bins), label, str(n), sm],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"did not finish within {timeout_s:.0f} s in a probe process"
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or ["no message"])[-1]
    return f"failed in a probe process (exit {done.returncode}: {last[:200]}), so not run here"


def _free_pools(cp) -> None:
    import sys

    cp.get_default_memory_pool().free_all_blocks()
    torch = sys.modules.get("torch")  # only a torch the peers imported holds cached memory (never import it here)
    if torch is not None:
        try:
            torch.cuda.empty_cache()
        except Exception:  # torch without CUDA
            pass


def _data(cp, case: Case, n: int):
    from ..testing.histograms import make_data

    if case.dtype == "float32":
        return cp.random.random(n, dtype=cp.float32)
    return make_data(cp, n, case.bins, case.dist, case.dtype)


def _providers(cp, case: Case, data, cub, skipped: list[str]) -> tuple[dict[str, tuple[Callable, str]], dict]:
    """label -> (call returning the counts, kind); and the workspace facts (CUB's temp bytes, cuadv's scratch)."""
    import numpy as np

    import cuadv

    lo, hi = case.range
    n = data.size
    calls: dict[str, tuple[Callable, str]] = {CUADV: (lambda: cuadv.histogram(data, bins=case.bins, range=(lo, hi))[0],
                                                      "cuadv")}
    prepared = cuadv.prepare_histogram(data, bins=case.bins, range=(lo, hi))
    out = cp.full(case.bins, -7, dtype=cp.int64)  # poisoned: the checked call must write every bin
    calls[CUADV_PREPARED] = (lambda: prepared(data, out=out)[0], "cuadv")
    facts: dict[str, Any] = {"prepared": prepared}
    if cub is not None:
        hist32 = cp.full(case.bins, -1, dtype=cp.int32)  # poisoned likewise
        if hasattr(cub, "run"):
            try:
                temp = cub.temp_bytes(case.dtype, case.bins, lo, hi, n, data.data.ptr, hist32.data.ptr)
            except RuntimeError as exc:  # CUB refused the case: say so in the report
                skipped.append(f"{case.group} {case.bins} bins: {exc}")
                temp = None
            facts["cub_temp_bytes"] = "-" if temp is None else temp
            _free_pools(cp)
            free = cp.cuda.runtime.memGetInfo()[0]
            if temp is None:
                pass
            elif temp + MEMORY_MARGIN > free:
                skipped.append(f"{case.group} {case.bins} bins: CUB HistogramEven needs {temp} B of workspace, "
                               f"{free} B are free (no out-of-memory: CUB not run)")
            else:
                buf = cp.empty(max(temp, 1), dtype=cp.uint8)
                h = cp.cuda.get_current_stream().ptr
                calls[cub.name] = (lambda: (cub.run(buf.data.ptr, temp, data.data.ptr, case.dtype, hist32.data.ptr,
                                                    case.bins, lo, hi, n, h), hist32)[1], "cub")
        else:  # the cuda-cccl Python package: levels in the samples' type
            level = np.float32 if case.dtype == "float32" else np.int32
            calls[cub.name] = (lambda: (cub.run_arrays(data, hist32, case.bins, level(lo), level(hi), n), hist32)[1],
                               "cub")
    torch, why = import_torch()
    if torch is None:
        skipped.append(f"torch.bincount: {why}")
    else:
        try:
            t = torch.from_dlpack(data)  # the same memory, no copy
            if case.dtype == "float32":
                calls[f"torch.histc (torch {torch.__version__})"] = (
                    lambda: torch.histc(t, bins=case.bins, min=lo, max=hi), "peer")
            else:
                calls[f"torch.bincount (torch {torch.__version__})"] = (
                    lambda: torch.bincount(t, minlength=case.bins), "peer")
        except Exception as exc:  # torch without CUDA, or refusing the DLPack capsule
            skipped.append(f"torch: {type(exc).__name__}: {exc}")
    calls[f"cupy.histogram (CuPy {cp.__version__})"] = (lambda: cp.histogram(data, bins=case.bins, range=(lo, hi))[0],
                                                        "peer")
    if case.dtype != "float32":
        calls[f"cupy.bincount (CuPy {cp.__version__})"] = (lambda: cp.bincount(data, minlength=case.bins), "peer")
    return calls, facts


def _as_int64(cp, counts):
    return cp.asarray(counts if isinstance(counts, cp.ndarray) else cp.from_dlpack(counts)).astype(cp.int64)


def measure_case(cp, case: Case, n_bytes: int, cub, rounds: int, repeats: int, skipped: list[str],
                 workspace: list[list[Any]], sm: str = "sm_90") -> list[Row]:
    from ..timing import time_gpu
    from .base import gb_per_s, interleaved_rounds

    n = n_bytes // {"int32": 4, "uint8": 1, "float32": 4}[case.dtype]
    data = _data(cp, case, n)
    lo, hi = case.range
    want = (cp.histogram(data, bins=case.bins, range=(lo, hi))[0] if case.dtype == "float32"
            else cp.bincount(data, minlength=case.bins)[:case.bins]).astype(cp.int64)
    calls, facts = _providers(cp, case, data, cub, skipped)
    if case.bins >= PROBE_BINS:
        for label, (_, kind) in list(calls.items()):
            why = None if kind == "cuadv" else probe_peer(case, label, n, sm)
            if why:
                skipped.append(f"{label} at {case.bins} bins ({case.group}): {why}")
                del calls[label]
    for label, (fn, kind) in list(calls.items()):  # every output checked once, before any timing
        try:
            got = _as_int64(cp, fn())
        except Exception as exc:  # a peer that refuses this case (a dtype, a size) is reported, not fatal
            if kind == "cuadv":
                raise
            skipped.append(f"{label} at {case.bins} bins ({case.group}): {type(exc).__name__}: {exc}")
            del calls[label]
            continue
        if not bool(cp.array_equal(got, want)):
            if kind == "cuadv":
                raise ValidationError(f"{label} at {case.bins} bins ({case.group}) differs from the reference")
            skipped.append(f"{label} at {case.bins} bins ({case.group}): differs from the reference in "
                           f"{int(cp.count_nonzero(got != want))} bins, not timed")
            del calls[label]
    h = cp.cuda.get_current_stream().ptr
    ms = interleaved_rounds({label: (lambda fn=fn: [time_gpu(fn, stream=h, warmup=1, repeats=repeats,
                                                           queue_ahead_us=QUEUE_AHEAD_US).median_ms])
                             for label, (fn, _) in calls.items()}, rounds)
    prepared = facts["prepared"]
    plan = prepared.plan.label if prepared.plan else "?"
    scratch = sum(s.nbytes for s in (prepared.counter._counts, getattr(prepared.unit, "_counts", None),
                                     prepared._index) if s is not None and s.ptr)
    path = ("binned as read" if getattr(prepared.plan, "binned", False) else
            "in place" if prepared._index is None else "binning pass + count")
    workspace.append([case.group, case.bins, facts.get("cub_temp_bytes", "-"), scratch, plan, path])
    rows = [Row(case, label, ms[label], gb_per_s(ms[label], n_bytes), kind,
                plan if kind == "cuadv" else "") for label, (_, kind) in calls.items()]
    del calls, facts, prepared, data, want
    _free_pools(cp)
    return rows


def run_peer_comparison(result: LabResult, ctx, cub_future: Future | None = None) -> None:
    """Measure every case, append the tables, figures, notes and checks to ``result``."""
    import cupy as cp

    from ..timing import read_ceiling

    sm = f"sm_{ctx.caps.compute_capability[0]}{ctx.caps.compute_capability[1]}"
    ctx.progress("histogram peers: read-only ceiling")
    read = read_ceiling()
    result.figures["read_ceiling_tb_s"] = read.tb_per_s
    cub, how = (cub_future or start_cub(sm)).result()
    skipped: list[str] = [] if cub is not None else [how]
    n_bytes = (256 << 20) if ctx.quick else (1 << 30)
    rounds, repeats = (3, 3) if ctx.quick else (5, 5)
    rows: list[Row] = []
    workspace: list[list[Any]] = []
    for case in cases(ctx.quick):
        ctx.progress(f"histogram peers: {case.group} {case.bins} bins")
        rows += measure_case(cp, case, n_bytes, cub, rounds, repeats, skipped, workspace, sm)
    tables, figures, lines = peer_tables(rows, read.bytes_per_s / 1e9, n_bytes)
    result.tables += tables
    result.tables.append(Table(
        "Histogram peers: workspace", ["input", "bins", "CUB temp storage B", "cuadv scratch B", "cuadv plan (auto)",
                                       "cuadv path"], workspace,
        note="CUB's temp storage from its size query (HistogramEven with no workspace); cuadv's scratch: the "
             "uint32 counters and, where the input is not the bin index, the int32 index buffer of one pass "
             "(allocated stream-ordered per call, kept by the prepared form), none where the path is 'binned as "
             "read' (float32 counted in one pass); cuadv supports up to 2^30 bins, "
             "so 16M bins run (global atomics or the skew-aware plan)"))
    result.figures.update(figures)
    result.notes.append("peer comparison against the issue's targets: " + "; ".join(lines))
    if cub is not None:
        result.notes.append(f"CUB peer: {cub.name}, obtained through {how}")
    result.notes += [f"peer not measured: {s}" for s in dict.fromkeys(skipped)]
    result.checks.append(f"every timed histogram of the peer comparison (cuadv one-shot and prepared, "
                         f"{'CUB, ' if cub is not None else ''}torch, CuPy) equals the reference "
                         "(cupy.bincount; cupy.histogram for float32) before it is timed")
