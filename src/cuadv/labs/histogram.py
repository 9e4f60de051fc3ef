"""Histogram with distributed shared memory (seed 002, exercise 2): the bins sharded over a cluster.

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
- CuPy's ``cupy.histogram`` (CUB) as the peer, and ``cupy.bincount``.

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

Run: ``cuadv bench histogram`` (``--quick`` for 256 MiB); from Python::

    from cuadv.labs.histogram import histogram
    counts = histogram(x, bins=65536)                     # auto: shared, else dsm, else exchange, else global
    counts = histogram(x, bins=1 << 20, variant="dsm", cluster=16)
    counts = histogram(x, bins=1 << 20, variant="exchange", sort="atomic")   # cluster of 16, 16-bit
    counts = histogram(x, bins=1 << 20, variant="hot", hot=16384)            # skew-aware
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

from .._cuda import check, driver
from ..errors import KernelArgumentError, LaunchConfigError, UnsupportedFeatureError, ValidationError
from ..results import LabResult, Selection, Table
from .base import RunContext

# ---------------------------------------------------------------------------------------------
# Plans: which kernel, how much shared memory, how many threads. Pure: no GPU.

DTYPES = {"int32": ("int", np.dtype(np.int32)), "uint8": ("unsigned char", np.dtype(np.uint8))}
VARIANTS = ("global", "shared", "dsm", "hot", "exchange")
CLUSTERED = ("dsm", "exchange")  # variants launched in clusters (bins sharded over DSM)
CLUSTER_SIZES = (1, 2, 4, 8, 16)
EXCHANGE_CLUSTER_SIZES = (2, 4, 8, 16)  # the exchange needs an owner other than the block itself
EXCHANGE_VECTORS = (1, 2)  # 16-byte loads per thread per round: 4K or 8K int32 elements per block per round
EXCHANGE_MAX_LOCAL = 1 << 16  # mailbox entries are 16-bit local indices
EXCHANGE_SLACK = (5, 4)  # a run holds 1.25x a uniform chunk's share per owner before it overflows
EXCHANGE_HOT = 4096  # low bins privatised per block by the measured "+hot" exchange configurations
EXCHANGE_SORTS = ("ballot", "atomic")  # how a warp sorts its elements by owner (Exchange::partition)
MAX_BINS = 1 << 30
MAX_ELEMENTS = 2**32 - 1  # counters are uint32
REPLICA_BUDGET = 72 * 1024  # replicas fill up to this much shared memory per block (3 blocks fit an SM)
MAX_REPLICAS = 32  # one per lane: conflict-free banks
H200_SHARED_PER_BLOCK = 232_448  # opt-in limit (227 KB); the default when no GPU is asked
H200_SHARED_PER_SM = 233_472
BLOCK_RESERVED = 1024  # shared memory the system reserves per resident block
THREADS = 1024  # per block, every variant (the kernels' __launch_bounds__)


def _counter_bytes(slots: int, bits: int) -> int:
    return 4 * (slots if bits == 32 else (slots + 1) // 2)


def _replicas(words_bytes: int) -> int:
    """Largest power of two <= 32 replicas whose total stays within REPLICA_BUDGET (at least 1)."""
    r = 1
    while r < MAX_REPLICAS and words_bytes * r * 2 <= REPLICA_BUDGET:
        r *= 2
    return r


@dataclass(frozen=True)
class HistogramPlan:
    """One histogram launch shape. ``cluster`` is 1 except for dsm; ``counter_bits`` 0 for global."""

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
    vectors: int = 0  # exchange: 16-byte loads per thread per round
    cap: int = 0  # exchange: entries per (sender, owner) run before the run overflows to remote atomics
    sort: str = ""  # exchange: "ballot" (one shared atomic per warp and owner) or "atomic" (one per element)

    @property
    def clustered(self) -> bool:
        return self.variant in CLUSTERED

    @property
    def kernel_expr(self) -> str:
        ctype = DTYPES[self.dtype][0]
        packed = "true" if self.counter_bits == 16 else "false"
        if self.variant == "global":
            return f"hist_global<{ctype}>"
        if self.variant == "shared":
            return f"hist_block<{ctype}>"
        if self.variant == "hot":
            return f"hist_hot<{ctype}>"
        if self.variant == "exchange":
            return f"hist_exchange<{packed}, {self.cluster}, {self.vectors}>"
        return f"hist_cluster<{ctype}, {packed}, {'true' if self.aggregate else 'false'}>"

    @property
    def label(self) -> str:
        if self.variant == "global":
            return "global atomics"
        if self.variant == "shared":
            return f"shared (1 block, x{self.replicas})"
        if self.variant == "hot":
            return f"skew-aware: shared [0, {self.hot}) + global"
        if self.variant == "exchange":
            hot = f" +hot {self.hot}" if self.hot else ""
            return (f"dsm exchange c={self.cluster} ({self.counter_bits}-bit, "
                    f"{exchange_chunk(self.vectors) // 1024}K/round, {self.sort} sort){hot}")
        agg = " +agg" if self.aggregate else ""
        return f"dsm c={self.cluster} ({self.counter_bits}-bit){agg}"

    def scalar_args(self) -> tuple[int, ...]:
        """The kernel's parameters after (in, n, out, bins)."""
        log2r = self.replicas.bit_length() - 1
        if self.variant == "global":
            return ()
        if self.variant == "shared":
            return (log2r,)
        if self.variant == "hot":
            return (self.hot,)
        if self.variant == "exchange":
            return (self.hot, self.cap, int(self.sort == "atomic"))
        return (self.cluster.bit_length() - 1, log2r)


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
    from ..compiler import parse_arch

    exprs = []
    for dtype in DTYPES:
        ctype = DTYPES[dtype][0]
        exprs += [f"hist_global<{ctype}>", f"hist_block<{ctype}>"]
        if dtype == "int32":
            exprs.append(f"hist_hot<{ctype}>")
        if parse_arch(arch) < (9, 0):
            continue
        for packed in (("false", "true") if dtype == "int32" else ("false",)):
            for agg in ("false", "true"):
                exprs.append(f"hist_cluster<{ctype}, {packed}, {agg}>")
        if dtype == "int32":
            exprs += [f"hist_exchange<{packed}, {c}, {v}>" for packed in ("false", "true")
                      for c in EXCHANGE_CLUSTER_SIZES for v in EXCHANGE_VECTORS]
    return exprs


def check_bins(bins: int, dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"histogram input must be int32 or uint8, got {dtype}")
    if not isinstance(bins, (int, np.integer)) or isinstance(bins, bool):
        raise ValueError(f"bins must be an int, got {type(bins).__name__}")
    if not 1 <= bins <= MAX_BINS:
        raise ValueError(f"bins = {bins} is outside [1, {MAX_BINS}]")
    if dtype == "uint8" and bins > 256:
        raise ValueError(f"uint8 input holds values 0..255, so bins must be <= 256 (got {bins})")


def check_cluster(cluster: int, largest: int = 16) -> None:
    if cluster not in CLUSTER_SIZES:
        if isinstance(cluster, int) and cluster > 16:
            raise LaunchConfigError(f"cluster size {cluster} exceeds the largest cluster size 16")
        raise LaunchConfigError(f"the histogram's cluster size must be a power of two in 1..16, got {cluster!r}")
    if cluster > largest:
        raise LaunchConfigError(f"cluster size {cluster} exceeds this GPU's largest cluster {largest}")


def _threads(shared_bytes: int, shared_per_sm: int) -> int:
    """Threads per block for the shared-memory kernels: always 1024 (the most per block). Fewer,
    larger blocks mean fewer private histograms to zero and flush; the occupancy API then decides
    how many fit an SM (two on Hopper when the registers and shared memory allow)."""
    return THREADS


def plan_histogram(bins: int, dtype: str = "int32", variant: str = "auto", cluster: int | None = None,
                   aggregate: bool = False, counter_bits: int | None = None, *, hot: int | None = None,
                   vectors: int | None = None, sort: str | None = None, shared_limit: int = H200_SHARED_PER_BLOCK,
                   shared_per_sm: int = H200_SHARED_PER_SM, largest_cluster: int = 16) -> HistogramPlan:
    """The launch shape for ``bins`` bins of ``dtype`` input; raises naming the rule, value and limit.

    variant 'auto': 'shared' when the whole histogram fits one block (32-bit counters); else 'dsm'
    over the smallest cluster that holds it, except that for int32 input, when that takes more than
    one block and no dsm option is given, 'exchange' over the smallest cluster that holds the bins
    with 32-bit counters, then 16-bit ones (measured 2-3x remote atomics); 'global' when no cluster
    holds them. ``counter_bits`` (dsm, exchange) forces 32- or 16-bit counters. 'hot' (skew-aware,
    int32): ``hot`` low bins privatised per block (default: as many as one block holds, at most
    ``bins``), the rest by global atomics. 'exchange' (int32): the bins sharded over the smallest
    cluster of 2-16 blocks that holds them with 16-bit mailbox entries, ``vectors`` (1 or 2, default
    2) loads per thread per round, ``hot`` low bins (default 0) privatised per block, ``sort`` (how
    warps sort elements by owner block): 'atomic' (default; faster on the H200) or 'ballot'.
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
    if vectors is not None and variant != "exchange":
        raise ValueError(f"vectors applies to variant 'exchange' only, not {variant!r}")
    if sort is not None and variant != "exchange":
        raise ValueError(f"sort applies to variant 'exchange' only, not {variant!r}")
    if variant in ("hot", "exchange"):
        if dtype != "int32":
            raise ValueError(f"variant {variant!r} is for int32 input (uint8 input has at most 256 bins, which one "
                             "block holds: use variant 'shared')")
        if hot is not None and (not isinstance(hot, (int, np.integer)) or isinstance(hot, bool)
                                or not 0 <= hot <= bins):
            raise ValueError(f"hot must be an int in [0, bins = {bins}], got {hot!r}")
    slots = bins + 1  # the real bins and the trash slot for out-of-range values
    if variant == "auto":
        if cluster is None and not aggregate and counter_bits is None and _counter_bytes(slots, 32) <= shared_limit:
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
                free = cluster is None and not aggregate and counter_bits is None
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
        if need > shared_limit:
            raise LaunchConfigError(
                f"bins = {bins} need {need} B of shared memory in one block (32-bit counters); the per-block limit "
                f"is {shared_limit} B (at most {shared_limit // 4 - 1} bins): use variant 'dsm' or 'global'")
        r = _replicas(need)
        return HistogramPlan("shared", dtype, bins, counter_bits=32, replicas=r,
                             threads=_threads(need * r, shared_per_sm), shared_bytes=need * r)
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
                r = _replicas(need)
                return HistogramPlan("dsm", dtype, bins, cluster=c, counter_bits=bits, replicas=r, aggregate=aggregate,
                                     threads=_threads(need * r, shared_per_sm), shared_bytes=need * r)
    c = sizes[-1]
    shard = -(-slots // c)
    bits = widths[-1]
    most = (shared_limit // 4 * (2 if bits == 16 else 1)) * c - 1
    raise LaunchConfigError(
        f"bins = {bins} over a cluster of {c} blocks need {_counter_bytes(shard, bits)} B of shared memory per block "
        f"({bits}-bit counters); the per-block limit is {shared_limit} B, so at most {most} bins with {c} blocks")


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
        raise LaunchConfigError(f"the exchange variant needs a cluster of {sizes} blocks (an owner other than the block "
                                f"itself), got {cluster}")
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


# ---------------------------------------------------------------------------------------------
# Running on the GPU.


@dataclass(frozen=True)
class DeviceArray:
    """What the histogram needs of an input or output array."""

    ptr: int
    size: int
    dtype: np.dtype


def device_array(obj: Any, what: str) -> DeviceArray:
    """Pointer, element count and dtype of a C-contiguous device array (CUDA array interface)."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        raise KernelArgumentError(f"{what} must be a device array with __cuda_array_interface__ (CuPy, PyTorch, "
                                  f"Numba), got {type(obj).__name__}")
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    size = math.prod(shape)
    strides = cai.get("strides")
    if strides is not None and size > 1:
        expected, step = [], dtype.itemsize
        for dim in reversed(shape):
            expected.append(step)
            step *= dim
        if tuple(s for s, d in zip(strides, shape) if d > 1) != tuple(
                s for s, d in zip(reversed(expected), shape) if d > 1):
            raise KernelArgumentError(f"{what} must be C-contiguous (strides {strides} for shape {shape})")
    ptr = int(cai["data"][0])
    if size and ptr % dtype.itemsize:
        raise KernelArgumentError(f"{what} at address {ptr:#x} is not aligned to its {dtype.itemsize}-byte elements")
    return DeviceArray(ptr, size, dtype)


def _dtype_name(dtype: np.dtype) -> str:
    for name, (_ctype, np_dtype) in DTYPES.items():
        if dtype == np_dtype:
            return name
    raise ValueError(f"histogram input must be int32 or uint8, got {dtype}")


class HistogramEngine:
    """The compiled histogram kernels on the current GPU, with per-plan occupancy (grid sizes)."""

    def __init__(self):
        from ..device import current_device

        self.caps = current_device().caps
        self._module = None
        self._resident: dict[HistogramPlan, int] = {}

    @property
    def module(self):
        if self._module is None:
            self._module = build_module(self.caps.arch)
        return self._module

    def kernel(self, plan: HistogramPlan):
        return self.module.kernel(plan.kernel_expr)  # one object per name, kept by the module

    def plan(self, bins: int, dtype: str, variant: str = "auto", cluster: int | None = None, aggregate: bool = False,
             counter_bits: int | None = None, hot: int | None = None, vectors: int | None = None,
             sort: str | None = None) -> HistogramPlan:
        caps = self.caps
        limits = dict(shared_limit=caps.shared_mem_per_block_optin, shared_per_sm=caps.shared_mem_per_sm)
        if not caps.cluster_launch:
            if variant in CLUSTERED or cluster is not None or aggregate or counter_bits is not None:
                raise UnsupportedFeatureError("the DSM histogram (thread block clusters)", "compute capability >= 9.0",
                                              caps.cc_string(), "variant='shared', 'hot' or 'global'")
            if variant == "auto":  # no clusters: the whole histogram in one block, else global atomics
                fits = _counter_bytes(bins + 1, 32) <= caps.shared_mem_per_block_optin
                variant = "shared" if fits else "global"
            return plan_histogram(bins, dtype, variant, hot=hot, vectors=vectors, sort=sort, **limits)
        return plan_histogram(bins, dtype, variant, cluster, aggregate, counter_bits, hot=hot, vectors=vectors,
                              sort=sort, largest_cluster=caps.max_cluster_size_nonportable, **limits)

    def options(self, bins: int, dtype: str, aggregate: bool = True, extras: bool = True) -> list[dict]:
        """Every variant that can hold ``bins`` bins here: global, shared, dsm at each cluster size (+agg);
        with ``extras`` (int32) also the skew-aware hybrid and the DSM exchange at each cluster size, in
        configurations that exercise both of their paths (a hot range of bins // 3 at most)."""
        opts: list[dict] = [{"variant": "global"}]
        candidates = [{"variant": "shared"}] + [
            {"variant": "dsm", "cluster": c, **extra} for c in CLUSTER_SIZES
            for extra in ([{}, {"aggregate": True}] if aggregate else [{}])]
        if extras and dtype == "int32":
            candidates.append({"variant": "hot", "hot": max(1, min(bins // 3, 16384))})
            candidates += [{"variant": "exchange", "cluster": c} for c in EXCHANGE_CLUSTER_SIZES]
        opts += self._feasible(bins, dtype, candidates)
        if extras and dtype == "int32":
            # The other exchange paths: 4K elements per round, the atomic sort and a private low range, at
            # the largest cluster.
            legal = [o["cluster"] for o in opts if o["variant"] == "exchange"]
            if legal:
                extra = {"variant": "exchange", "cluster": legal[-1], "vectors": 1, "sort": "atomic",
                         "hot": max(1, min(bins // 3, 4096))}
                try:
                    self.plan(bins, dtype, **extra)
                    opts.append(extra)
                except LaunchConfigError:
                    pass
        return opts

    def sweep(self, bins: int, dtype: str) -> list[dict]:
        """The configurations of the skew-aware hybrid and the DSM exchange the lab measures where no
        single block holds the bins: hot ranges of 16K and the most one block holds; the exchange at
        every cluster size that holds the bins, with either sort, 4K and 8K elements per round, and 8K
        with a private range of EXCHANGE_HOT low bins."""
        if dtype != "int32":
            return []
        candidates = [{"variant": "hot", "hot": h} for h in dict.fromkeys(
            (16384, hot_max(self.caps.shared_mem_per_block_optin))) if h < bins]
        for c in EXCHANGE_CLUSTER_SIZES:
            for sort in EXCHANGE_SORTS:
                candidates += [{"variant": "exchange", "cluster": c, "vectors": v, "sort": sort}
                               for v in EXCHANGE_VECTORS]
                candidates.append({"variant": "exchange", "cluster": c, "vectors": 2, "sort": sort,
                                   "hot": min(EXCHANGE_HOT, bins)})
        return self._feasible(bins, dtype, candidates)

    def _feasible(self, bins: int, dtype: str, candidates: list[dict]) -> list[dict]:
        """The candidates this GPU can run for these bins (their plans raise no error)."""
        opts = []
        for candidate in candidates:
            try:
                self.plan(bins, dtype, **candidate)
            except (LaunchConfigError, UnsupportedFeatureError):
                continue
            opts.append(candidate)
        return opts

    def resident_units(self, plan: HistogramPlan) -> int:
        """Blocks (shared, global, hot) or clusters (dsm, exchange) that fit on the GPU at once: the
        persistent grid."""
        n = self._resident.get(plan)
        if n is None:
            from ..occupancy import max_active_blocks_per_sm, max_active_clusters

            k = self.kernel(plan)
            if plan.clustered:
                n = max_active_clusters(k, plan.threads, plan.cluster, plan.shared_bytes)
            else:
                n = max_active_blocks_per_sm(k, plan.threads, plan.shared_bytes) * self.caps.sm_count
            if n < 1:
                unit = f"a cluster of {plan.cluster} blocks" if plan.clustered else "a block"
                raise LaunchConfigError(
                    f"{unit} of {plan.threads} threads with {plan.shared_bytes} B shared memory each cannot be resident "
                    f"on this GPU (occupancy query returned 0); use a larger cluster or fewer bins per block")
            self._resident[plan] = n
        return n

    def prepare(self, x: Any, bins: int, *, variant: str = "auto", cluster: int | None = None,
                aggregate: bool = False, counter_bits: int | None = None, hot: int | None = None,
                vectors: int | None = None, sort: str | None = None, out: Any = None, stream: Any = None,
                units: int | None = None) -> "PreparedHistogram":
        src = device_array(x, "x")
        dtype = _dtype_name(src.dtype)
        if src.size > MAX_ELEMENTS:
            raise ValueError(f"x has {src.size} elements; the uint32 counters allow at most {MAX_ELEMENTS}")
        plan = self.plan(bins, dtype, variant, cluster, aggregate, counter_bits, hot, vectors, sort)
        if out is None:
            import cupy as cp

            out = cp.empty(bins, dtype=cp.uint32)
        dst = device_array(out, "out")
        if dst.dtype != np.uint32 or dst.size != bins:
            raise KernelArgumentError(f"out must be a uint32 array of {bins} elements, got {dst.dtype} x {dst.size}")
        return PreparedHistogram(self, plan, src, dst, out, stream, self._grid(plan, src.size, units))

    def _grid(self, plan: HistogramPlan, n: int, units: int | None) -> int:
        resident = self.resident_units(plan)
        per_unit = plan.cluster
        if units is None:
            blocks_needed = max(1, -(-n // (plan.threads * 32)))  # about one batch per block
            units = min(resident, max(1, -(-blocks_needed // per_unit)))
        elif not 1 <= units:
            raise LaunchConfigError(f"units must be >= 1, got {units}")
        elif plan.clustered and units > resident:
            raise LaunchConfigError(f"{units} clusters exceed the {resident} that can be resident (persistent grid)")
        return units * per_unit


@dataclass
class PreparedHistogram:
    """One histogram call with every check done: calling it zeroes ``out`` and launches (no sync)."""

    engine: HistogramEngine
    plan: HistogramPlan
    src: DeviceArray
    dst: DeviceArray
    out: Any
    stream: Any
    grid: int
    _config: Any = field(default=None, repr=False)

    def __post_init__(self):
        from ..launch import LaunchConfig, stream_handle

        self._stream = stream_handle(self.stream)
        cluster = self.plan.cluster if self.plan.clustered else None
        self._config = LaunchConfig(grid=self.grid, block=self.plan.threads, cluster=cluster,
                                    shared_mem=self.plan.shared_bytes)
        self._kernel = self.engine.kernel(self.plan)
        self._args = (self.src.ptr, self.src.size, self.dst.ptr, self.plan.bins) + self.plan.scalar_args()

    def __call__(self):
        from ..launch import launch

        check(driver().cuMemsetD32Async(self.dst.ptr, 0, self.plan.bins, self._stream), "cuMemsetD32Async")
        launch(self._kernel, self._config, *self._args, stream=self._stream)
        return self.out


_engine: HistogramEngine | None = None


def engine() -> HistogramEngine:
    global _engine
    if _engine is None:
        _engine = HistogramEngine()
    return _engine


def histogram(x: Any, bins: int, *, variant: str = "auto", cluster: int | None = None, aggregate: bool = False,
              counter_bits: int | None = None, hot: int | None = None, vectors: int | None = None,
              sort: str | None = None, out: Any = None, stream: Any = None, units: int | None = None):
    """Counts of the values of ``x`` (int32 or uint8 device array) in [0, bins), as uint32.

    Values outside [0, bins) are ignored (like ``numpy.bincount`` of the in-range values). The call
    is asynchronous on ``stream``. ``variant``: 'auto', 'global', 'shared', 'dsm', 'hot' (skew-aware:
    the low ``hot`` bins privatised per block, the rest by global atomics; int32) or 'exchange' (DSM
    mailboxes: elements sent to the owning block in 16-byte vectors, ``vectors`` 1 or 2 loads per
    thread per round, ``sort`` 'ballot' or 'atomic', optionally ``hot`` low bins privatised; int32);
    ``cluster``: blocks per cluster for 'dsm' (1, 2, 4, 8, 16) and 'exchange' (2, 4, 8, 16), default
    the smallest that holds the bins; ``aggregate``: warp-aggregated increments for 'dsm' (for skewed
    data); ``units``: blocks (clusters for dsm and exchange) to launch, default the persistent grid
    from the occupancy API.
    """
    return engine().prepare(x, bins, variant=variant, cluster=cluster, aggregate=aggregate, counter_bits=counter_bits,
                            hot=hot, vectors=vectors, sort=sort, out=out, stream=stream, units=units)()


@lru_cache(maxsize=None)
def build_module(arch: str):
    from ..compiler import compile_source, kernel_source

    return compile_source(kernel_source("histogram.cu"), name="histogram", arch=arch,
                          name_expressions=kernel_expressions(arch))


# ---------------------------------------------------------------------------------------------
# Data and validation.

ZIPF_A = 1.3


def zipf_cdf(bins: int, a: float = ZIPF_A) -> np.ndarray:
    """CDF of the Zipf(a) law truncated to [0, bins): P(k) proportional to (k + 1)^-a."""
    p = np.arange(1, bins + 1, dtype=np.float64) ** -a
    cdf = np.cumsum(p)
    return cdf / cdf[-1]


def make_data(cp, n: int, bins: int, dist: str, dtype: str, chunk: int = 1 << 25):
    """n fresh random bin indices on the GPU: 'uniform' over [0, bins) or 'zipf' (Zipf(1.3) truncated)."""
    out = cp.empty(n, dtype=DTYPES[dtype][1])
    cdf = cp.asarray(zipf_cdf(bins)) if dist == "zipf" else None
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        if dist == "uniform":
            part = cp.random.randint(0, bins, size=m, dtype=cp.int32)
        elif dist == "zipf":
            part = cp.minimum(cp.searchsorted(cdf, cp.random.random(m, dtype=cp.float64), side="right"), bins - 1)
        else:
            raise ValueError(f"distribution must be 'uniform' or 'zipf', got {dist!r}")
        out[start:start + m] = part.astype(out.dtype)
    return out


def host_data(rng: np.random.Generator, n: int, bins: int, dist: str, dtype: str, out_of_range: bool) -> np.ndarray:
    """Host-side test data; with out_of_range, about 5% of int32 values fall outside [0, bins)."""
    if dist == "uniform":
        x = rng.integers(0, bins, size=n)
    elif dist == "zipf":
        x = np.minimum(np.searchsorted(zipf_cdf(bins), rng.random(n), side="right"), bins - 1)
    elif dist == "constant":
        x = np.full(n, rng.integers(0, bins))
    else:
        raise ValueError(dist)
    if out_of_range and dtype == "int32" and n:
        mask = rng.random(n) < 0.05
        x = np.where(mask, rng.integers(-bins - 2, 2 * bins + 2, size=n), x)
    if dtype == "uint8" and out_of_range and n:
        mask = rng.random(n) < 0.05
        x = np.where(mask, rng.integers(bins, 256, size=n) if bins < 256 else x, x)
    return x.astype(DTYPES[dtype][1])


def reference_counts(x: np.ndarray, bins: int) -> np.ndarray:
    v = x.astype(np.int64)
    v = v[(v >= 0) & (v < bins)]
    return np.bincount(v, minlength=bins)[:bins]


def on_device(cp, host: np.ndarray, offset: int = 0):
    """A device copy of ``host`` starting ``offset`` elements into its allocation (offset 1: off 16 B)."""
    full = cp.asarray(np.concatenate([np.zeros(offset, dtype=host.dtype), host]))
    return full[offset:]


def check_variant(cp, host: np.ndarray, bins: int, offset: int = 0, *, dev=None, want=None, **options) -> None:
    """One histogram of ``host`` against numpy.bincount; the output is poisoned first, so a bin the
    kernel never writes shows. ``dev`` / ``want``: the device copy and the reference, if already made."""
    dev = on_device(cp, host, offset) if dev is None else dev
    want = reference_counts(host, bins) if want is None else want
    out = cp.full(bins, 0xDEADBEEF, dtype=cp.uint32)
    histogram(dev, bins, out=out, **options)
    got = cp.asnumpy(out).astype(np.int64)
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        raise ValidationError(
            f"histogram {options} bins={bins} n={host.size} offset={offset} dtype={host.dtype}: {bad.size} wrong bins, "
            f"first {bad[0]}: got {got[bad[0]]}, want {want[bad[0]]}")


def validate(cp, bins_list: Sequence[int], sizes: Sequence[int], dtypes=("int32", "uint8"),
             dists=("uniform", "zipf")) -> int:
    """Every variant x bins x size x dtype x distribution against numpy.bincount; returns the count checked.

    Inputs carry 5% out-of-range values; every other variant reads from 1 element off the 16-byte boundary.
    """
    rng = np.random.default_rng()
    checked = 0
    for dtype in dtypes:
        for bins in bins_list:
            if dtype == "uint8" and bins > 256:
                continue
            options = engine().options(bins, dtype)
            for n in sizes:
                for dist in dists:
                    host = host_data(rng, n, bins, dist, dtype, out_of_range=True)
                    want = reference_counts(host, bins)
                    devs = [on_device(cp, host, 0), on_device(cp, host, 1)]
                    for i, opts in enumerate(options):
                        check_variant(cp, host, bins, i % 2, dev=devs[i % 2], want=want, **opts)
                        checked += 1
    return checked


def validate_packed_wraps(cp) -> None:
    """16-bit counters that wrap many times (both halves, odd bin counts, aggregated adds of up to 32), in
    the DSM kernel and in the exchange (mailbox entries applied locally, and the overflow of full runs
    by remote atomics: every element of a chunk goes to one owner)."""
    rng = np.random.default_rng()
    n = (1 << 22) + 3
    for bins, value in ((3, 0), (3, 1), (3, 2), (2, 1), (33, 17), (4097, 4096)):
        host = np.full(n, value, dtype=np.int32)
        host[rng.integers(0, n, size=1000)] = rng.integers(-5, bins + 5, size=1000)  # a few others, some out of range
        for cluster in (1, 2, 16):
            for aggregate in (False, True):
                check_variant(cp, host, bins, variant="dsm", cluster=cluster, counter_bits=16, aggregate=aggregate,
                              units=1)
            if cluster > 1:
                for vectors in EXCHANGE_VECTORS:
                    check_variant(cp, host, bins, variant="exchange", cluster=cluster, counter_bits=16,
                                  vectors=vectors, units=1)


# ---------------------------------------------------------------------------------------------
# Occupancy table (report and `cuadv caps --occupancy`).

OCCUPANCY_SHARED_KB = (0, 16, 64, 112, 128, 200, 227)


def occupancy_table(block: int = 1024) -> Table:
    """Active clusters of the DSM histogram kernel for each cluster size and shared-memory size."""
    from ..device import current_device
    from ..occupancy import max_active_clusters, max_cluster_size

    caps = current_device().caps
    k = engine().kernel(HistogramPlan("dsm", "int32", 1, counter_bits=32))
    rows = []
    for kb in OCCUPANCY_SHARED_KB:
        smem = min(kb * 1024, caps.shared_mem_per_block_optin)
        portable = max_cluster_size(k, block, smem, non_portable=False)
        nonportable = max_cluster_size(k, block, smem, non_portable=True)
        row: list[Any] = [f"{smem // 1024} KB", portable, nonportable]
        for c in CLUSTER_SIZES:
            row.append(max_active_clusters(k, block, c, smem) if c <= nonportable else 0)
        rows.append(row)
    return Table(f"Cluster occupancy of the DSM histogram kernel ({block} threads per block)",
                 ["shared mem / block", "largest cluster (portable)", "largest (non-portable)"]
                 + [f"active clusters c={c}" for c in CLUSTER_SIZES], rows,
                 note="cuOccupancyMaxPotentialClusterSize and cuOccupancyMaxActiveClusters for hist_cluster<int>; "
                      "active clusters x cluster size = blocks resident at once (the persistent grid)")


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
    ms: float
    gbps: float
    grid: int = 0


def _peer_fns(cp, data, bins: int) -> dict[str, Callable[[], Any]]:
    return {"cupy.histogram (CUB)": lambda: cp.histogram(data, bins=bins, range=(0, bins)),
            "cupy.bincount": lambda: cp.bincount(data, minlength=bins)}


class HistogramLab:
    name = "histogram"
    title = "Histogram with distributed shared memory (seed 002, exercise 2)"

    def supported(self, caps) -> str | None:
        if caps.compute_capability < (9, 0) or not caps.cluster_launch:
            return (f"the DSM histogram needs thread block clusters: compute capability >= 9.0 (got {caps.cc_string()}); "
                    "fallback: histogram(..., variant='shared') where the bins fit one block, else variant='global'")
        return None

    def build(self, arch: str):
        return [build_module(arch)]

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
        check_variant(cp, host, 70_000, variant="hot", hot=4097, units=2)
        # The exchange with 16-bit counters and a private range, and with overflowing runs (one value).
        check_variant(cp, host, 70_000, variant="exchange", cluster=4, counter_bits=16, hot=1000, units=1)
        one = host_data(rng, n, 70_000, "constant", "int32", out_of_range=False)
        check_variant(cp, one, 70_000, variant="exchange", cluster=2, counter_bits=16, vectors=1, units=1)

    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        result = LabResult(self.name, self.title)
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
                             "cluster, low and high halves, odd bin counts, cluster sizes 1, 2, 16, aggregated "
                             "adds of up to 32; in the exchange, through its mailboxes and its overflowing runs")

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
        self._judge(result, ctx, measurements)
        try:
            result.tables.append(occupancy_table())
        except Exception as exc:  # the table is evidence, not a result: report why it is missing
            result.notes.append(f"occupancy table unavailable: {exc}")
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
            rows.append(Measurement(dtype, dist, bins, call.plan.label, call.plan.variant, call.plan.cluster,
                                    t.median_ms, t.rate(n_bytes) / 1e9, call.grid))
        for label, fn in _peer_fns(cp, data, bins).items():
            t = time_gpu(fn, warmup=2, repeats=repeats)
            rows.append(Measurement(dtype, dist, bins, label, "cupy" if "histogram" in label else "bincount", 0,
                                    t.median_ms, t.rate(n_bytes) / 1e9))
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
        rows, summary = [], []
        for (dtype, dist, bins), case in self._cases(ms):
            peer = next(m for m in case if m.variant == "cupy")
            glob = next(m for m in case if m.variant == "global")
            for m in case:
                rows.append([dtype, dist, bins, m.label, m.grid or "-", m.ms, m.gbps, 100 * m.gbps / ceiling,
                             m.gbps / peer.gbps, m.gbps / glob.gbps])
                key = f"hist_{dtype}_{dist}_{bins}_{m.label.replace(' ', '_')}_gbps"
                result.figures[key] = m.gbps
            ours = [m for m in case if m.variant in VARIANTS]
            best = max(ours, key=lambda m: m.gbps)
            dsm = [m for m in case if m.variant in CLUSTERED]  # DSM-based: remote atomics or the exchange
            best_dsm = max(dsm, key=lambda m: m.gbps) if dsm else None
            summary.append([dtype, dist, bins, best.label, best.gbps, 100 * best.gbps / ceiling, best.gbps / peer.gbps,
                            peer.gbps, (best_dsm.gbps / glob.gbps) if best_dsm else float("nan"),
                            best_dsm.label if best_dsm else "-"])
            result.figures[f"hist_{dtype}_{dist}_{bins}_best_gbps"] = best.gbps
            result.figures[f"hist_{dtype}_{dist}_{bins}_best_x_cupy"] = best.gbps / peer.gbps
            result.figures[f"hist_{dtype}_{dist}_{bins}_best_pct_ceiling"] = 100 * best.gbps / ceiling
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
        from ..plots import _pyplot

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

    def _judge(self, result: LabResult, ctx, ms: list[Measurement]) -> None:
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
        evidence = (f"{big} bins, 1 GiB uniform int32: {top.label} {top.gbps:.0f} GB/s vs global atomics "
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
