"""Histogram plans: which kernel, how much shared memory, how many threads. Pure: no GPU.

A plan is a frozen value (it keys the occupancy cache). There is one class per variant, as CUB keeps
one block algorithm per specialisation behind one dispatch: ``GlobalPlan`` (every element a global
atomic), ``SharedPlan`` (the whole histogram privatised per block), ``ClusterPlan`` (``dsm``: the bins
sharded over a cluster's distributed shared memory, remote atomics), ``HotPlan`` (skew-aware: the low
bins privatised, the rest global atomics) and ``ExchangePlan`` (DSM mailboxes). ``plan_histogram``
chooses among them (``variant="auto"``) from the bins, the input type and the GPU's limits;
``HistogramPlan(variant, ...)`` builds the class of that variant.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import LaunchConfigError

DTYPES = {"int32": ("int", np.dtype(np.int32)), "uint8": ("unsigned char", np.dtype(np.uint8))}
VARIANTS = ("global", "shared", "dsm", "hot", "exchange")
CLUSTERED = ("dsm", "exchange")  # variants launched in clusters (bins sharded over DSM)
CLUSTER_SIZES = (1, 2, 4, 8, 16)
EXCHANGE_CLUSTER_SIZES = (2, 4, 8, 16)  # the exchange needs an owner other than the block itself
EXCHANGE_VECTORS = (1, 2)  # 16-byte loads per thread per round: 4K or 8K int32 elements per block per round
EXCHANGE_MAX_LOCAL = 1 << 16  # mailbox entries are 16-bit local indices
EXCHANGE_SLACK = (5, 4)  # a run holds 1.25x a uniform chunk's share per owner before it overflows
EXCHANGE_HOT = 4096  # low bins privatised per block by the measured "+hot" exchange configurations
TMA_STAGES = (2, 3, 4, 5, 6)  # chunks in flight per block of the TMA-fed shared variant
TMA_VECTORS = (1, 2)  # 16-byte vectors per thread in one chunk of the ring: 16 or 32 KB per 1024-thread block
TMA_WIDE_STAGES = (2, 3)  # rings of 2-vector chunks take at most 3 (96 KB)
TMA_RINGS = tuple((s, 1) for s in TMA_STAGES) + tuple((s, 2) for s in TMA_WIDE_STAGES)  # (stages, vectors) built
# hist_block_tma_float's binning rules, a kernel each (histogram.cu's FloatRule): the quick estimate and one edge,
# computed or from numpy's table; numpy's estimate and a step (where the quick estimate's margin reaches one bin,
# api.QUICK_MARGIN_LIMIT)
FLOAT_RULES = {"quick, computed edges": 0, "quick, edges from a table": 1, "numpy's estimate": 2}
PACKED_RING_VECTORS = 2  # 16-bit counters take rings of 2-vector chunks only (1-vector chunks read 78-81%)
# The rings 'shared' takes without ``stages``, in order: the first of at least MIN_SHARED_RING bytes that lets two
# blocks share an SM, else the first that fits one block (16-bit counters: 2-vector rings only). H200, 2026-12-03,
# the ring probe in docs/results/h200-2026-12-03-0655/, % of the read-only ceiling: uint8 at 256 bins 94.2% with
# 2 chunks of 2 vectors, 91.4% with 4 of 1 (one shared atomic per byte: the fewer waits and releases per byte the
# better); int32 at 256 bins 97.5% with 3 x 2 and 97.1% with 6 x 1, at 4K bins 96.5% and 96.1%; 16-bit counters
# at 64K bins 91.6% with 3 x 2 against 87.8% for register loads and 77.9% with 6 chunks of 1 vector.
AUTO_TMA_RINGS = {"int32": ((3, 2), (2, 2), (2, 1)), "uint8": ((2, 2),)}
# At 16K int32 bins a ring of 32 KB at two blocks per SM read 93.3%, rings of 2-vector chunks (64-96 KB) at one
# block 95.1-95.4% (scripts/hist_feed_sweep.py, 07:14, same folder).
MIN_SHARED_RING = 64 * 1024
EXCHANGE_SORTS = ("ballot", "atomic")  # how a warp sorts its elements by owner (Exchange::partition)
MAX_BINS = 1 << 30
MAX_ELEMENTS = 2**32 - 1  # counters are uint32
REPLICA_BUDGET = 72 * 1024  # replicas fill up to this much shared memory per block (3 blocks fit an SM)
MAX_REPLICAS = 32  # one per lane: conflict-free banks
H200_SHARED_PER_BLOCK = 232_448  # opt-in limit (227 KB); the default when no GPU is asked
H200_SHARED_PER_SM = 233_472
BLOCK_RESERVED = 1024  # shared memory the system reserves per resident block
# Threads per block, every variant (the kernels' __launch_bounds__): the most per block. Fewer, larger blocks mean
# fewer private histograms to zero and flush; the occupancy API then decides how many fit an SM.
THREADS = 1024


def _counter_bytes(slots: int, bits: int) -> int:
    return 4 * (slots if bits == 32 else (slots + 1) // 2)


def _replicas(words_bytes: int, shared_limit: int = H200_SHARED_PER_BLOCK) -> int:
    """Largest power of two <= 32 replicas whose total stays within REPLICA_BUDGET and the per-block limit (at
    least 1)."""
    r = 1
    while r < MAX_REPLICAS and words_bytes * r * 2 <= min(REPLICA_BUDGET, shared_limit):
        r *= 2
    return r



@dataclass(frozen=True)
class HistogramPlan:
    """One histogram launch shape. ``cluster`` is 1 except for dsm; ``counter_bits`` 0 for global.

    ``HistogramPlan(variant, ...)`` returns the subclass of that variant (``PLANS[variant]``), which
    names its kernel, its label and the kernel's scalar parameters."""

    variant: str
    dtype: str
    bins: int
    cluster: int = 1
    counter_bits: int = 0
    replicas: int = 1
    aggregate: bool = False
    threads: int = THREADS
    shared_bytes: int = 0
    hot: int = 0  # hot, exchange: the low bins [0, hot) privatised in every block
    vectors: int = 0  # exchange: 16-byte loads per thread per round; shared with a TMA ring: per thread per chunk
    cap: int = 0  # exchange: entries per (sender, owner) run before the run overflows to remote atomics
    sort: str = ""  # exchange: "ballot" (one shared atomic per warp and owner) or "atomic" (one per element)
    closed: bool = False  # exchange: v == bins counts in bin bins - 1 (int32 over range (0, bins), counted in place)
    stages: int = 0  # shared: 0 loads the input into registers; > 0 the TMA unit feeds a ring of that many chunks
    binned: bool = False  # shared with a TMA ring: float input binned as it is read (hist_block_tma_float)
    float_rule: int = 0  # binned: the binning rule's kernel, one of FLOAT_RULES (each call's own: its edges')

    def __new__(cls, variant: str = "", *args, **kwargs):
        if cls is HistogramPlan:
            try:
                cls = PLANS[variant]
            except KeyError:
                raise ValueError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}") from None
        return object.__new__(cls)

    def __getnewargs__(self):  # copy and pickle rebuild through __new__ with the variant
        return (self.variant,)

    @property
    def clustered(self) -> bool:
        return self.variant in CLUSTERED

    @property
    def ctype(self) -> str:
        return DTYPES[self.dtype][0]

    @property
    def packed(self) -> str:
        """The kernels' Packed template argument: 16-bit counters two per word."""
        return "true" if self.counter_bits == 16 else "false"

    @property
    def kernel_expr(self) -> str:
        raise NotImplementedError

    @property
    def label(self) -> str:
        raise NotImplementedError

    def scalar_args(self) -> tuple[int, ...]:
        """The kernel's parameters after (in, n, out, bins)."""
        raise NotImplementedError

    def kernel_args(self, src_ptr: int, n: int, out_ptr: int, gate: int = 0, want: int = 0) -> tuple[int, ...]:
        """Every parameter of the kernel: (in, n, out, bins), its own, then the gate: 0 counts always, else the
        launch counts only where the uint32 at ``gate`` equals ``want`` (hist_sample's verdict)."""
        return (src_ptr, n, out_ptr, self.bins) + self.scalar_args() + (gate, want)

    @property
    def log2r(self) -> int:
        return self.replicas.bit_length() - 1


@dataclass(frozen=True)
class GlobalPlan(HistogramPlan):
    """Every element an atomicAdd on the global bins: any GPU, any bin count."""

    @property
    def kernel_expr(self) -> str:
        return f"hist_global<{self.ctype}>"

    @property
    def label(self) -> str:
        return "global atomics"

    def scalar_args(self) -> tuple[int, ...]:
        return ()


@dataclass(frozen=True)
class SharedPlan(HistogramPlan):
    """The whole histogram privatised per block in shared memory (32-bit counters, ``replicas``
    lane-interleaved copies, or for int32 bins that one block holds only so 16-bit counters packed two per word),
    flushed once: where the bins fit one block."""

    @property
    def kernel_expr(self) -> str:
        if self.binned:
            return f"hist_block_tma_float<{self.stages}, {self.vectors}, {self.packed}, {self.float_rule}>"
        if self.stages:
            return f"hist_block_tma<{self.ctype}, {self.stages}, {self.vectors}, {self.packed}>"
        return f"hist_block<{self.ctype}, {self.packed}>"

    @property
    def label(self) -> str:
        bits = ", 16-bit" if self.counter_bits == 16 else ""
        ring = f", TMA ring of {self.stages} x {16 * self.vectors * self.threads // 1024} KB" if self.stages else ""
        return f"shared (1 block{bits}, x{self.replicas}{ring}{', binned as read' if self.binned else ''})"

    def scalar_args(self) -> tuple[int, ...]:
        return (self.log2r,)


@dataclass(frozen=True)
class ClusterPlan(HistogramPlan):
    """``dsm``: the bins sharded over the ``cluster`` blocks of a cluster, remote shared atomics
    (optionally warp-aggregated, 16-bit counters packed two per word)."""

    @property
    def kernel_expr(self) -> str:
        return f"hist_cluster<{self.ctype}, {self.packed}, {'true' if self.aggregate else 'false'}>"

    @property
    def label(self) -> str:
        agg = " +agg" if self.aggregate else ""
        return f"dsm c={self.cluster} ({self.counter_bits}-bit){agg}"

    def scalar_args(self) -> tuple[int, ...]:
        return (self.cluster.bit_length() - 1, self.log2r)


@dataclass(frozen=True)
class HotPlan(HistogramPlan):
    """Skew-aware: the low bins [0, hot) privatised per block, every other bin by a global atomic."""

    @property
    def kernel_expr(self) -> str:
        return f"hist_hot<{self.ctype}>"

    @property
    def label(self) -> str:
        return f"skew-aware: shared [0, {self.hot}) + global"

    def scalar_args(self) -> tuple[int, ...]:
        return (self.hot,)


@dataclass(frozen=True)
class ExchangePlan(HistogramPlan):
    """DSM mailboxes (int32): each block sorts a chunk by owner block and sends it in 16-byte remote
    stores; owners count with local shared atomics."""

    @property
    def kernel_expr(self) -> str:
        return f"hist_exchange<{self.packed}, {self.cluster}, {self.vectors}>"

    @property
    def label(self) -> str:
        hot = f" +hot {self.hot}" if self.hot else ""
        closed = ", closed last bin" if self.closed else ""
        return (f"dsm exchange c={self.cluster} ({self.counter_bits}-bit, "
                f"{exchange_chunk(self.vectors) // 1024}K/round, {self.sort} sort{closed}){hot}")

    def scalar_args(self) -> tuple[int, ...]:
        return (self.hot, self.cap, int(self.sort == "atomic"), int(self.closed))


PLANS: dict[str, type[HistogramPlan]] = {"global": GlobalPlan, "shared": SharedPlan, "dsm": ClusterPlan,
                                         "hot": HotPlan, "exchange": ExchangePlan}


def tma_ring_bytes(counter_bytes: int, stages: int, vectors: int = 1, threads: int = THREADS) -> int:
    """Dynamic shared memory of hist_block_tma: the counters rounded up to 128 B, ``stages`` chunks of
    ``vectors`` x 16 bytes per thread, and one 8-byte mbarrier per stage."""
    return _round_up(counter_bytes, 128) + stages * vectors * 16 * threads + 8 * stages


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def exchange_chunk(vectors: int, threads: int = THREADS) -> int:
    """int32 elements one block takes per round of the exchange."""
    return threads * vectors * 4


def exchange_cap(cluster: int, vectors: int, threads: int = THREADS) -> int:
    """Entries per (sender, owner) run: 1.25x the uniform share of a chunk, a multiple of 8 (16-byte vectors)."""
    num, den = EXCHANGE_SLACK
    return _round_up(-(-num * exchange_chunk(vectors, threads) // (den * cluster)), 8)


def exchange_layout(bins: int, cluster: int, bits: int, hot: int, cap: int) -> dict[str, int]:
    """Byte offsets of the exchange kernel's arrays in one block's shared memory: ExchangeLayout in
    histogram.cu, line for line (the kernel traps when given less than ``bytes``)."""
    shard = -(-bins // cluster)
    counter_words = shard if bits == 32 else (shard + 1) // 2
    cap_words = cap // 2
    stride = 2 * (cap_words + ((4 - cap_words) & 31))  # consecutive runs start 4 banks apart
    counters_off = 4 * _round_up(hot, 4)
    stage_off = counters_off + 4 * _round_up(counter_words, 4)
    mbox_off = stage_off + 2 * 2 * cluster * stride
    mcount_off = mbox_off + 2 * 2 * cluster * cap
    cursor_off = mcount_off + 4 * 2 * cluster
    return {"shard": shard, "stride": stride, "counters_off": counters_off, "stage_off": stage_off,
            "mbox_off": mbox_off, "mcount_off": mcount_off, "cursor_off": cursor_off,
            "bytes": _round_up(cursor_off + 4 * 3 * cluster, 16)}


def hot_max(shared_limit: int = H200_SHARED_PER_BLOCK) -> int:
    """The most low bins the skew-aware variant privatises: its 32-bit counters fill one block's shared
    memory (a multiple of 1024)."""
    return shared_limit // 4 // 1024 * 1024


def kernel_expressions(arch: str = "sm_90a") -> list[str]:
    """Every kernel instantiation the plans can ask for (no hist_cluster below sm_90: no clusters)."""
    from ..arch import parse_arch

    exprs = []
    for dtype in DTYPES:
        ctype = DTYPES[dtype][0]
        exprs += [f"hist_global<{ctype}>", f"hist_block<{ctype}, false>"]
        if dtype == "int32":  # 16-bit counters (int32 bins past what 32-bit ones hold) and the skew-aware kernel
            exprs += [f"hist_block<{ctype}, true>", f"hist_hot<{ctype}>"]
        if parse_arch(arch) < (9, 0):
            continue
        exprs += [f"hist_block_tma<{ctype}, {s}, {v}, false>" for s, v in TMA_RINGS]
        if dtype == "int32":  # 16-bit counters behind 2-vector rings; float input binned as read, on the same rings
            exprs += [f"hist_block_tma<{ctype}, {s}, {PACKED_RING_VECTORS}, true>" for s in TMA_WIDE_STAGES]
            for rule in FLOAT_RULES.values():
                exprs += [f"hist_block_tma_float<{s}, {v}, false, {rule}>" for s, v in TMA_RINGS]
                exprs += [f"hist_block_tma_float<{s}, {PACKED_RING_VECTORS}, true, {rule}>" for s in TMA_WIDE_STAGES]
        for packed in (("false", "true") if dtype == "int32" else ("false",)):
            for agg in ("false", "true"):
                exprs.append(f"hist_cluster<{ctype}, {packed}, {agg}>")
        if dtype == "int32":
            exprs += [f"hist_exchange<{packed}, {c}, {v}>" for packed in ("false", "true")
                      for c in EXCHANGE_CLUSTER_SIZES for v in EXCHANGE_VECTORS]
    return exprs


def check_bins(bins: Any, dtype: str | None = None) -> int:
    """``bins`` as an int in [1, MAX_BINS]: TypeError where it is no int (bool included), ValueError outside. The
    one check of a bin count (``cuadv.histogram``'s too). With ``dtype`` also the input type the count kernels read
    (int32 or uint8) and uint8's 256 values."""
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"histogram input must be int32 or uint8, got {dtype}")
    if not isinstance(bins, numbers.Integral) or isinstance(bins, (bool, np.bool_)):
        raise TypeError(f"bins must be an int (even bins; arrays of edges are not supported), got "
                        f"{type(bins).__name__} {bins!r}")
    bins = int(bins)
    if not 1 <= bins <= MAX_BINS:
        raise ValueError(f"bins = {bins} is outside [1, {MAX_BINS}]")
    if dtype == "uint8" and bins > 256:
        raise ValueError(f"uint8 input holds values 0..255, so bins must be <= 256 (got {bins})")
    return bins


def check_cluster(cluster: int, largest: int = 16) -> None:
    if cluster not in CLUSTER_SIZES:
        if isinstance(cluster, int) and cluster > 16:
            raise LaunchConfigError(f"cluster size {cluster} exceeds the largest cluster size 16")
        raise LaunchConfigError(f"the histogram's cluster size must be a power of two in 1..16, got {cluster!r}")
    if cluster > largest:
        raise LaunchConfigError(f"cluster size {cluster} exceeds this GPU's largest cluster {largest}")


def plan_histogram(bins: int, dtype: str = "int32", variant: str = "auto", cluster: int | None = None,
                   aggregate: bool = False, counter_bits: int | None = None, *, hot: int | None = None,
                   vectors: int | None = None, sort: str | None = None, stages: int | None = None,
                   shared_limit: int = H200_SHARED_PER_BLOCK, shared_per_sm: int = H200_SHARED_PER_SM,
                   largest_cluster: int = 16, tma: bool = False) -> HistogramPlan:
    """The launch shape for ``bins`` bins of ``dtype`` input; raises naming the rule, value and limit.

    variant 'auto': 'shared' when the whole histogram fits one block (32-bit counters, or for int32 input 16-bit
    ones packed two per word: 58,112 to 116,223 bins on the H200); else 'dsm'
    over the smallest cluster that holds it, except that for int32 input, when that takes more than
    one block and no dsm option is given, 'exchange' over the smallest cluster that holds the bins
    with 32-bit counters, then 16-bit ones (measured 2-3x remote atomics); 'global' when no cluster
    holds them. ``counter_bits`` (dsm, exchange) forces 32- or 16-bit counters. 'hot' (skew-aware,
    int32): ``hot`` low bins privatised per block (default: as many as one block holds, at most
    ``bins``), the rest by global atomics. 'exchange' (int32): the bins sharded over the smallest
    cluster of 2-16 blocks that holds them with 16-bit mailbox entries, ``vectors`` (1 or 2, default
    2) loads per thread per round, ``hot`` low bins (default 0) privatised per block, ``sort`` (how
    warps sort elements by owner block): 'atomic' (default; faster on the H200) or 'ballot'. ``stages``
    ('shared', sm_90): 0 loads the input into registers (hist_block); 2-6 let the TMA unit copy that many
    chunks of ``vectors`` x 16 B per thread (``vectors`` 1, the default, or 2 with 2 or 3 stages) into a ring in
    shared memory (hist_block_tma), the replicas halved where needed so that two blocks still fit an SM.
    16-bit counters take rings of 2-vector chunks only. ``tma``: the GPU has the TMA unit; then 'shared' without
    ``stages`` takes the first ring of AUTO_TMA_RINGS[dtype] of at least 64 KB that lets two blocks share an SM,
    else the first that fits one block beside the counters, else register loads (on the H200 the rings read
    91.6-97.5% of the read-only ceiling where register loads read 87.8-88.3%). 'auto' with a ring that 16-bit
    counters cannot take (1-vector chunks, or too large to fit beside them) takes 'dsm' over one block there
    instead.
    """
    check_bins(bins, dtype)
    if variant not in ("auto",) + VARIANTS:
        raise ValueError(f"variant must be one of auto, {', '.join(VARIANTS)}; got {variant!r}")
    if cluster is not None:
        check_cluster(cluster, largest_cluster)
        if variant not in ("auto",) + CLUSTERED:
            raise LaunchConfigError(f"a cluster size applies to variants 'dsm' and 'exchange' only, not {variant!r}")
    if aggregate and variant not in ("auto", "dsm"):
        raise ValueError(f"aggregate applies to variant 'dsm' only, not {variant!r}")
    if counter_bits is not None and variant not in ("auto",) + CLUSTERED:
        raise ValueError(f"counter_bits applies to variants 'dsm' and 'exchange' only, not {variant!r}")
    if counter_bits not in (None, 16, 32):
        raise ValueError(f"counter_bits must be 16 or 32, got {counter_bits!r}")
    if counter_bits == 16 and dtype == "uint8":
        raise ValueError("16-bit counters are for int32 input (uint8 bins always fit 32-bit counters)")
    if hot is not None and variant not in ("hot", "exchange"):
        raise ValueError(f"hot applies to variants 'hot' and 'exchange' only, not {variant!r}")
    ring_vectors = vectors is not None and variant in ("auto", "shared") and bool(stages)
    if vectors is not None and variant != "exchange" and not ring_vectors:
        raise ValueError(f"vectors applies to variant 'exchange', or 'shared' with stages > 0, not {variant!r}"
                         + ("" if variant not in ("auto", "shared") else " without stages"))
    if sort is not None and variant != "exchange":
        raise ValueError(f"sort applies to variant 'exchange' only, not {variant!r}")
    if stages is not None:
        if variant not in ("auto", "shared"):
            raise ValueError(f"stages applies to variant 'shared' only, not {variant!r}")
        if stages not in (0,) + TMA_STAGES:
            raise ValueError(f"stages must be 0 (register loads) or one of {', '.join(map(str, TMA_STAGES))} "
                             f"(chunks in the TMA ring), got {stages!r}")
        if ring_vectors and (stages, vectors) not in TMA_RINGS:
            if vectors not in TMA_VECTORS:
                raise ValueError(f"vectors must be one of {', '.join(map(str, TMA_VECTORS))} (16-byte vectors per "
                                 f"thread in a chunk of the TMA ring), got {vectors!r}")
            raise ValueError(f"a TMA ring of 2-vector chunks takes stages {' or '.join(map(str, TMA_WIDE_STAGES))} "
                             f"(at most 96 KB), got stages={stages}")
    if variant in ("hot", "exchange"):
        if dtype != "int32":
            raise ValueError(f"variant {variant!r} is for int32 input (uint8 input has at most 256 bins, which one "
                             "block holds: use variant 'shared')")
        if hot is not None and (not isinstance(hot, (int, np.integer)) or isinstance(hot, bool)
                                or not 0 <= hot <= bins):
            raise ValueError(f"hot must be an int in [0, bins = {bins}], got {hot!r}")
    slots = bins + 1  # the real bins and the trash slot for out-of-range values
    if variant == "auto":
        free = cluster is None and not aggregate and counter_bits is None
        # 16-bit counters in one block: register loads, or a 2-vector ring that fits beside them; else dsm
        packed_ok = _one_block_holds(slots, dtype, shared_limit) and (
            not stages or (_ring_takes(16, vectors) and _ring_fits(_counter_bytes(slots, 16), stages, vectors,
                                                                   shared_limit)))
        if free and (_counter_bytes(slots, 32) <= shared_limit or packed_ok):
            variant = "shared"
        else:
            try:
                dsm = plan_histogram(bins, dtype, "dsm", cluster, aggregate, counter_bits, shared_limit=shared_limit,
                                     shared_per_sm=shared_per_sm, largest_cluster=largest_cluster)
            except LaunchConfigError:
                if cluster is not None or aggregate or counter_bits is not None:
                    raise
                variant = "global"
            else:
                if dsm.cluster == 1 or dtype != "int32" or not free:
                    return dsm
                # Sharded over several blocks: the exchange measured 2-3x remote atomics on the H200
                # (256K and 1M bins), 32-bit counters over a larger cluster first (faster at 256K).
                for bits in (32, None):
                    try:
                        return _plan_exchange(bins, None, bits, 0, 2, "atomic", shared_limit, largest_cluster)
                    except LaunchConfigError:
                        pass
                return dsm
    if variant == "global":
        return HistogramPlan("global", dtype, bins)
    if variant == "shared":
        need = _counter_bytes(slots, 32)
        bits = 32
        if need > shared_limit:
            if not _one_block_holds(slots, dtype, shared_limit):
                most16 = f"; int32 input up to {2 * (shared_limit // 4) - 1} bins with 16-bit counters" \
                    if dtype == "int32" else ""
                raise LaunchConfigError(
                    f"bins = {bins} need {need} B of shared memory in one block (32-bit counters); the per-block "
                    f"limit is {shared_limit} B (at most {shared_limit // 4 - 1} bins{most16}): use variant 'dsm' "
                    "or 'global'")
            need, bits = _counter_bytes(slots, 16), 16
        if stages is None and tma:
            rings = [r for r in AUTO_TMA_RINGS[dtype] if _ring_takes(bits, r[1])]
            plans = [_plan_shared_tma(bins, dtype, need, bits, ring, shared_limit, shared_per_sm)
                     for ring in rings if _ring_fits(need, *ring, shared_limit)]
            two = [p for p in plans if 2 * (p.shared_bytes + BLOCK_RESERVED) <= shared_per_sm
                   and p.stages * p.vectors * 16 * THREADS >= MIN_SHARED_RING]
            if two or plans:
                return (two or plans)[0]
        if stages:
            return _plan_shared_tma(bins, dtype, need, bits, (stages, vectors or 1), shared_limit, shared_per_sm)
        r = _replicas(need, shared_limit)
        return HistogramPlan("shared", dtype, bins, counter_bits=bits, replicas=r, shared_bytes=need * r)
    if variant == "hot":
        return _plan_hot(bins, hot, shared_limit)
    if variant == "exchange":
        return _plan_exchange(bins, cluster, counter_bits, hot or 0, 2 if vectors is None else vectors,
                              "atomic" if sort is None else sort, shared_limit, largest_cluster)
    # dsm
    sizes = [cluster] if cluster is not None else [c for c in CLUSTER_SIZES if c <= largest_cluster]
    widths = [counter_bits] if counter_bits else [32, 16]
    for c in sizes:
        shard = -(-slots // c)
        for bits in widths:
            need = _counter_bytes(shard, bits)
            if need <= shared_limit:
                r = _replicas(need, shared_limit)
                return HistogramPlan("dsm", dtype, bins, cluster=c, counter_bits=bits, replicas=r, aggregate=aggregate,
                                     shared_bytes=need * r)
    c = sizes[-1]
    shard = -(-slots // c)
    bits = widths[-1]
    most = (shared_limit // 4 * (2 if bits == 16 else 1)) * c - 1
    raise LaunchConfigError(
        f"bins = {bins} over a cluster of {c} blocks need {_counter_bytes(shard, bits)} B of shared memory per block "
        f"({bits}-bit counters); the per-block limit is {shared_limit} B, so at most {most} bins with {c} blocks")


def _one_block_holds(slots: int, dtype: str, shared_limit: int) -> bool:
    """One block holds ``slots`` counters: 32-bit ones, or for int32 input 16-bit ones packed two per word."""
    return _counter_bytes(slots, 32 if dtype == "uint8" else 16) <= shared_limit


def _ring_takes(counter_bits: int, vectors: int | None) -> bool:
    """Counters of ``counter_bits`` may be fed by a TMA ring of chunks of ``vectors``: 32-bit ones any, 16-bit
    ones PACKED_RING_VECTORS only."""
    return counter_bits == 32 or vectors == PACKED_RING_VECTORS


def _ring_fits(counter_bytes: int, stages: int, vectors: int, shared_limit: int) -> bool:
    """One block holds the counters (one replica) beside a TMA ring of ``stages`` chunks of ``vectors``."""
    return tma_ring_bytes(counter_bytes, stages, vectors) <= shared_limit


def _plan_shared_tma(bins: int, dtype: str, need: int, bits: int, ring: tuple[int, int], shared_limit: int,
                     shared_per_sm: int) -> HistogramPlan:
    """The shared plan fed by a TMA ring of ``ring`` = (stages, vectors): as many replicas as the counters take
    without a ring (at most 32) while two blocks still share an SM, else one; raises where 16-bit counters are
    given 1-vector chunks, or where even one replica and the ring exceed a block."""
    stages, vectors = ring
    if not _ring_takes(bits, vectors):
        raise LaunchConfigError(
            f"bins = {bins} fit one block only as 16-bit counters, which take TMA rings of 2-vector chunks "
            "(vectors=2, stages 2 or 3; on the H200 1-vector chunks read 78-81% of the read-only ceiling, register "
            "loads 88%, 2-vector chunks 91-92%)")
    r = _replicas(need, shared_limit)
    while r > 1 and 2 * (tma_ring_bytes(need * r, stages, vectors) + BLOCK_RESERVED) > shared_per_sm:
        r //= 2
    smem = tma_ring_bytes(need * r, stages, vectors)
    if smem > shared_limit:
        raise LaunchConfigError(
            f"bins = {bins} with a TMA ring of {stages} chunks need {smem} B of shared memory in one block (counters "
            f"{need} B, ring {stages * vectors * 16 * THREADS} B); the per-block limit is {shared_limit} B: use fewer "
            f"stages{', vectors=1' if vectors > 1 else ''} or stages=0 (register loads)")
    return HistogramPlan("shared", dtype, bins, counter_bits=bits, replicas=r, shared_bytes=smem, stages=stages,
                         vectors=vectors)


def _plan_hot(bins: int, hot: int | None, shared_limit: int) -> HistogramPlan:
    hot = min(bins, hot_max(shared_limit)) if hot is None else hot
    if hot < 1:
        raise ValueError(f"variant 'hot' needs at least one privatised bin (hot >= 1), got hot = {hot}")
    if 4 * hot > shared_limit:
        raise LaunchConfigError(f"hot = {hot} low bins need {4 * hot} B of shared memory per block (32-bit counters); "
                                f"the per-block limit is {shared_limit} B (at most {shared_limit // 4} bins)")
    return HistogramPlan("hot", "int32", bins, counter_bits=32, hot=hot, shared_bytes=4 * hot)


def _plan_exchange(bins: int, cluster: int | None, counter_bits: int | None, hot: int, vectors: int, sort: str,
                   shared_limit: int, largest_cluster: int) -> HistogramPlan:
    if vectors not in EXCHANGE_VECTORS:
        raise ValueError(f"vectors must be one of {', '.join(map(str, EXCHANGE_VECTORS))}, got {vectors!r}")
    if sort not in EXCHANGE_SORTS:
        raise ValueError(f"sort must be one of {', '.join(EXCHANGE_SORTS)}, got {sort!r}")
    if cluster is not None and cluster not in EXCHANGE_CLUSTER_SIZES:
        sizes = ", ".join(map(str, EXCHANGE_CLUSTER_SIZES))
        raise LaunchConfigError(f"the exchange variant needs a cluster of {sizes} blocks (an owner other than the "
                                f"block itself), got {cluster}")
    sizes = [cluster] if cluster is not None else [c for c in EXCHANGE_CLUSTER_SIZES if c <= largest_cluster]
    widths = [counter_bits] if counter_bits else [32, 16]
    errors = []
    for c in sizes:
        shard = -(-bins // c)
        if shard > EXCHANGE_MAX_LOCAL:
            least = next((s for s in EXCHANGE_CLUSTER_SIZES if -(-bins // s) <= EXCHANGE_MAX_LOCAL), None)
            errors.append(f"bins = {bins} over a cluster of {c} blocks leave {shard} local bins per block; mailbox "
                          f"entries are 16-bit, so at most {EXCHANGE_MAX_LOCAL}"
                          + (f" (use a cluster of {least} or more)" if least else ""))
            continue
        cap = exchange_cap(c, vectors)
        for bits in widths:
            need = exchange_layout(bins, c, bits, hot, cap)["bytes"]
            if need <= shared_limit:
                return HistogramPlan("exchange", "int32", bins, cluster=c, counter_bits=bits, hot=hot,
                                     vectors=vectors, cap=cap, sort=sort, shared_bytes=need)
            errors.append(f"bins = {bins} over a cluster of {c} blocks ({bits}-bit counters, hot = {hot}, "
                          f"{exchange_chunk(vectors)} elements per round) need {need} B of shared memory per block; "
                          f"the per-block limit is {shared_limit} B")
    raise LaunchConfigError("exchange: " + errors[-1])
