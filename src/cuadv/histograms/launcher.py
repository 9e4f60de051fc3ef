"""The histogram engine: the compiled kernels of histogram.cu on the current GPU, grid sizes from the
occupancy API, and one checked launch (``PreparedHistogram``) of a plan on int32 or uint8 bin indices.

``count_bins(x, bins)`` is the raw form the lab measures: counts of the values of ``x`` in
[0, bins) as uint32, values outside ignored. ``cuadv.histogram`` / ``cuadv.bincount`` (api.py) are
built on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import interop
from .._cuda import check, device_ordinal, driver
from ..dims import is_int
from ..errors import KernelArgumentError, LaunchConfigError, UnsupportedFeatureError
from ..features import require
from ..interop import DeviceArray, overlaps, writable
from ..memo import BoundedMemo
from .plans import (CLUSTER_SIZES, CLUSTERED, DTYPES, EXCHANGE_CLUSTER_SIZES, EXCHANGE_HOT, EXCHANGE_SORTS,
                    EXCHANGE_VECTORS, MAX_ELEMENTS, TMA_RINGS, HistogramPlan, _one_block_holds, hot_max,
                    kernel_expressions, plan_histogram)


def device_array(obj: Any, what: str) -> DeviceArray:
    """Pointer, element count and dtype of a C-contiguous device array (CUDA array interface or DLPack,
    read by ``cuadv.interop``) in the memory of cuadv's GPU as far as the array says (CuPy, DLPack). Pure: no GPU
    call, so every check runs before anything is launched."""
    if isinstance(obj, np.ndarray):
        raise KernelArgumentError(f"{what}: a NumPy array lives in host memory; copy it to the GPU (cupy.asarray or "
                                  "torch.as_tensor(..., device='cuda'))")
    if interop.cuda_array_interface(obj) is None and not hasattr(obj, "__dlpack__"):
        raise KernelArgumentError(f"{what} must be a device array with __cuda_array_interface__ or __dlpack__ (CuPy, "
                                  f"PyTorch, Numba, cuda.core), got {type(obj).__name__}")
    arr = interop.device_array(obj, what=what)  # a big-endian array raises there, naming ``what``
    interop.require_on_gpu(obj, arr.ptr, device_ordinal(), f"{what} is", "cuadv runs", ask_driver=False)
    dtype = arr.dtype
    if dtype is None:
        raise TypeError(f"{what} has element type {arr.type_name}, which NumPy does not know")  # as any dtype it lacks
    if not arr.contiguous:
        raise KernelArgumentError(f"{what} must be C-contiguous (strides {arr.strides} for shape {arr.shape})")
    if arr.size and arr.ptr % dtype.itemsize:
        raise KernelArgumentError(f"{what} at address {arr.ptr:#x} is not aligned to its {dtype.itemsize}-byte "
                                  "elements")
    return arr


def _dtype_name(dtype: np.dtype) -> str:
    for name, (_ctype, np_dtype) in DTYPES.items():
        if dtype == np_dtype:
            return name
    raise TypeError(f"histogram input must be int32 or uint8, got {dtype} (cuadv.histogram takes the other types)")


PLAN_MEMO = 512  # plans (and grid sizes) an engine keeps; past this the oldest is dropped


class HistogramEngine:
    """The compiled histogram kernels on the current GPU, with per-plan occupancy (grid sizes). ``caps``: the
    capabilities to plan for (default: the current GPU's; given, plans are made without a GPU)."""

    def __init__(self, caps=None):
        if caps is None:
            from ..device import current_device

            caps = current_device().caps
        self.caps = caps
        self._module = None
        # Bounded, so that a caller sweeping bin counts in a long-lived process keeps bounded memos.
        self._resident = BoundedMemo(PLAN_MEMO)  # plan -> its resident blocks (clusters)
        self._plans = BoundedMemo(PLAN_MEMO)  # plan()'s arguments, each with its type -> its plan
        # (plan, grid) -> its LaunchConfig: one object, so launch() skips lookups
        self._configs = BoundedMemo(PLAN_MEMO)

    @property
    def module(self):
        if self._module is None:
            self._module = build_module(self.caps.arch)
        return self._module

    def kernel(self, plan: HistogramPlan):
        return self.module.kernel(plan.kernel_expr)  # one object per name, kept by the module

    def plan(self, bins: int, dtype: str, variant: str = "auto", cluster: int | None = None, aggregate: bool = False,
             counter_bits: int | None = None, hot: int | None = None, vectors: int | None = None,
             sort: str | None = None, stages: int | None = None) -> HistogramPlan:
        """The plan for these options on this GPU (plans are frozen: each is made once per engine, so a
        one-shot call, which makes up to three, does not spend tens of microseconds of Python on them
        each time)."""
        args = (bins, dtype, variant, cluster, aggregate, counter_bits, hot, vectors, sort, stages)
        # Each value with its type: 256.0 or True must still be refused where 256 or 1 made a plan. An argument
        # that cannot be hashed (a list) goes straight to the checks, which name it.
        key = tuple((type(v), v) for v in args)
        try:
            plan = self._plans.get(key)
        except TypeError:
            return self._make_plan(*args)
        if plan is None:
            plan = self._plans.put(key, self._make_plan(*args))
        return plan

    def _make_plan(self, bins: int, dtype: str, variant: str, cluster: int | None, aggregate: bool,
                   counter_bits: int | None, hot: int | None, vectors: int | None, sort: str | None,
                   stages: int | None) -> HistogramPlan:
        caps = self.caps
        limits = dict(shared_limit=caps.shared_mem_per_block_optin, shared_per_sm=caps.shared_mem_per_sm)
        if stages and not caps.tma:
            require("tma", caps.as_dict(), name="the TMA-fed shared histogram (stages > 0)",
                    fallback="stages=0 (register loads)")
        if not caps.cluster_launch:
            # a cluster size, aggregation or counter width asks for clusters whatever the variant
            self.require_variant("dsm" if cluster is not None or aggregate or counter_bits is not None else variant)
            if variant == "auto":  # no clusters: the whole histogram in one block, else global atomics
                variant = "shared" if _one_block_holds(bins + 1, dtype, caps.shared_mem_per_block_optin) else "global"
            return plan_histogram(bins, dtype, variant, hot=hot, vectors=vectors, sort=sort, stages=stages, **limits)
        return plan_histogram(bins, dtype, variant, cluster, aggregate, counter_bits, hot=hot, vectors=vectors,
                              sort=sort, stages=stages, largest_cluster=caps.max_cluster_size_nonportable,
                              tma=caps.tma, **limits)

    def require_variant(self, variant: str) -> None:
        """UnsupportedFeatureError naming the fallback where this GPU cannot run ``variant`` at any bin count (the
        clustered ones without clusters): a check that needs no data, for callers to make before any launch."""
        if variant in CLUSTERED and not self.caps.cluster_launch:
            require("cluster_launch", self.caps.as_dict(), name="the DSM histogram (thread block clusters)",
                    fallback="variant='shared', 'hot' or 'global'")

    def options(self, bins: int, dtype: str, aggregate: bool = True, extras: bool = True) -> list[dict]:
        """Every variant that can hold ``bins`` bins here: global, shared (with sm_90 also fed by TMA rings of
        each size), dsm at each cluster size (+agg);
        with ``extras`` (int32) also the skew-aware hybrid and the DSM exchange at each cluster size, in
        configurations that exercise both of their paths (a hot range of bins // 3 at most)."""
        opts: list[dict] = [{"variant": "global"}]
        if self.caps.tma:  # register loads, then each TMA ring
            candidates = [{"variant": "shared", "stages": 0}]
            candidates += [{"variant": "shared", "stages": s, "vectors": v} for s, v in TMA_RINGS]
        else:
            candidates = [{"variant": "shared"}]
        candidates += [{"variant": "dsm", "cluster": c, **extra} for c in CLUSTER_SIZES
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
            from ..kernel import max_active_blocks_per_sm, max_active_clusters

            k = self.kernel(plan)
            if plan.clustered:
                n = max_active_clusters(k, plan.threads, plan.cluster, plan.shared_bytes)
            else:
                n = max_active_blocks_per_sm(k, plan.threads, plan.shared_bytes) * self.caps.sm_count
            if n < 1:
                unit = f"a cluster of {plan.cluster} blocks" if plan.clustered else "a block"
                raise LaunchConfigError(
                    f"{unit} of {plan.threads} threads with {plan.shared_bytes} B shared memory each cannot be "
                    f"resident on this GPU (occupancy query returned 0); use a larger cluster or fewer bins per block")
            self._resident.put(plan, n)
        return n

    def prepare(self, x: Any, bins: int, *, variant: str = "auto", cluster: int | None = None,
                aggregate: bool = False, counter_bits: int | None = None, hot: int | None = None,
                vectors: int | None = None, sort: str | None = None, stages: int | None = None, out: Any = None,
                stream: Any = None, units: int | None = None) -> "PreparedHistogram":
        src = device_array(x, "x")
        dtype = _dtype_name(src.dtype)
        if src.size > MAX_ELEMENTS:
            raise ValueError(f"x has {src.size} elements; the uint32 counters allow at most {MAX_ELEMENTS}")
        plan = self.plan(bins, dtype, variant, cluster, aggregate, counter_bits, hot, vectors, sort, stages)
        given = out
        if out is None:  # in x's library, on the stream the count will run on
            out = interop.empty(src.library, (bins,), np.uint32, like=x, stream=interop.stream_handle(stream, x))
        dst = writable(device_array(out, "out"), "out")
        if dst.dtype != np.uint32 or dst.size != bins:
            raise KernelArgumentError(f"out must be a uint32 array of {bins} elements, got {dst.dtype} x {dst.size}")
        if len(dst.shape) != 1:
            raise ValueError(f"out must be 1-D (one count per bin), got shape {dst.shape}")
        if overlaps(dst, src):
            raise ValueError(f"out (bytes {dst.ptr:#x} + {dst.nbytes}) overlaps x (bytes {src.ptr:#x} + {src.nbytes}): "
                             "the counts would overwrite the data being counted; pass a separate array")
        handle = interop.stream_handle(stream, out)  # pure (None: out's library decides), before the occupancy query
        grid = self._grid(plan, src.size, units)
        for arr in (x,) if given is None else (x, given):  # the producers' pending work (CAI v3 / DLPack) first
            interop.device_array(arr, stream=handle)
        return PreparedHistogram(plan, src, dst, out, handle, grid, self.kernel(plan), self.config_for(plan, grid))

    def launch_config(self, plan: HistogramPlan, n: int, units: int | None = None):
        """The kernel and the LaunchConfig of ``plan`` for ``n`` elements (the persistent grid)."""
        return self.kernel(plan), self.config_for(plan, self._grid(plan, n, units))

    def config_for(self, plan: HistogramPlan, grid: int):
        """The LaunchConfig of ``plan`` over ``grid`` blocks, made once per (plan, grid)."""
        from ..launching import LaunchConfig

        config = self._configs.get((plan, grid))
        if config is None:
            cluster = plan.cluster if plan.clustered else None
            config = self._configs.put((plan, grid), LaunchConfig(grid=grid, block=plan.threads, cluster=cluster,
                                                                  shared_mem=plan.shared_bytes))
        return config

    def _grid(self, plan: HistogramPlan, n: int, units: int | None) -> int:
        _check_units(units)  # pure: before the occupancy query
        resident = self.resident_units(plan)
        per_unit = plan.cluster
        if units is None:
            blocks_needed = max(1, -(-n // (plan.threads * 32)))  # about one batch per block
            units = min(resident, max(1, -(-blocks_needed // per_unit)))
        elif plan.clustered and units > resident:
            raise LaunchConfigError(f"{units} clusters exceed the {resident} that can be resident (persistent grid)")
        return int(units) * per_unit


def _check_units(units: Any) -> None:
    """``units`` is None or an int >= 1 (pure: before the occupancy query)."""
    if units is None:
        return
    if not is_int(units):
        raise LaunchConfigError(f"units must be an int number of blocks (clusters for dsm and exchange), got "
                                f"{type(units).__name__} {units!r}")
    if units < 1:
        raise LaunchConfigError(f"units must be >= 1, got {units}")


@dataclass
class PreparedHistogram:
    """One histogram call with every check done (``HistogramEngine.prepare``): calling it zeroes ``out`` and
    launches on ``stream``, a handle (no sync)."""

    plan: HistogramPlan
    src: DeviceArray
    dst: DeviceArray
    out: Any
    stream: int
    grid: int
    kernel: Any = field(repr=False)
    config: Any = field(repr=False)

    def __post_init__(self):
        self._args = self.plan.kernel_args(self.src.ptr, self.src.size, self.dst.ptr)

    def __call__(self):
        from ..launching import launch

        check(driver().cuMemsetD32Async(self.dst.ptr, 0, self.plan.bins, self.stream), "cuMemsetD32Async")
        launch(self.kernel, self.config, *self._args, stream=self.stream)
        return self.out


_engine: HistogramEngine | None = None


def engine() -> HistogramEngine:
    global _engine
    if _engine is None:
        _engine = HistogramEngine()
    return _engine


def count_bins(x: Any, bins: int, *, variant: str = "auto", cluster: int | None = None, aggregate: bool = False,
               counter_bits: int | None = None, hot: int | None = None, vectors: int | None = None,
               sort: str | None = None, stages: int | None = None, out: Any = None, stream: Any = None,
               units: int | None = None):
    """Counts of the values of ``x`` (int32 or uint8 device array) in [0, bins), as uint32.

    Values outside [0, bins) are ignored (like ``numpy.bincount`` of the in-range values). The call
    is asynchronous on ``stream``. ``variant``: 'auto', 'global', 'shared', 'dsm', 'hot' (skew-aware:
    the low ``hot`` bins privatised per block, the rest by global atomics; int32) or 'exchange' (DSM
    mailboxes: elements sent to the owning block in 16-byte vectors, ``vectors`` 1 or 2 loads per
    thread per round, ``sort`` 'ballot' or 'atomic', optionally ``hot`` low bins privatised; int32);
    ``cluster``: blocks per cluster for 'dsm' (1, 2, 4, 8, 16) and 'exchange' (2, 4, 8, 16), default
    the smallest that holds the bins; ``aggregate``: warp-aggregated increments for 'dsm' (for skewed
    data); ``stages``: for 'shared' (sm_90), 2-6 chunks of the input in flight per block in a ring that the
    TMA unit fills (each chunk ``vectors`` 16-byte vectors per thread: 1, or 2 with 2-3 stages), 0 register loads,
    default the measured ring (``plans.AUTO_TMA_RINGS``); ``units``: blocks (clusters for dsm and exchange) to
    launch, default the persistent grid from the occupancy API.
    """
    return engine().prepare(x, bins, variant=variant, cluster=cluster, aggregate=aggregate, counter_bits=counter_bits,
                            hot=hot, vectors=vectors, sort=sort, stages=stages, out=out, stream=stream, units=units)()


def build_module(arch: str):
    """The one cached build of histogram.cu for ``arch`` with every kernel the plans can ask for."""
    from ..compiler import shipped

    return shipped("histogram.cu", arch=arch, name_expressions=kernel_expressions(arch), name="histogram")
