"""cuadv.histogram / cuadv.bincount without a GPU: every bad input raises before any GPU call (the
fakes below carry only ``__cuda_array_interface__``: reaching the GPU would raise something else),
the plan classes, and the binning rule of binning.cu mirrored in NumPy against numpy.histogram."""

from dataclasses import replace

import numpy as np
import pytest

from cuadv.errors import KernelArgumentError
from cuadv.histograms import (ClusterPlan, ExchangePlan, GlobalPlan, HistogramPlan, HotPlan, SharedPlan, bincount,
                              histogram, plan_histogram)
from cuadv.histograms import api
from cuadv.histograms.api import keep_window, quick_estimate
from cuadv.testing.histograms import around_values


class Fake:
    """A device array as far as the checks can tell; its memory is never touched."""

    def __init__(self, shape=(100,), typestr="<i4", ptr=1 << 20, strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3}


class FakeCupy(Fake):
    """As CuPy's arrays: the library the output of a non-torch input lives in."""


FakeCupy.__module__ = "cupy"


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    """Any attempt to reach the device fails the test with a recognisable error."""
    def boom(*a, **k):
        raise AssertionError("a check reached the GPU")

    monkeypatch.setattr(api, "engine", boom)
    monkeypatch.setattr(api, "_order_after_producer", boom)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(x=np.zeros(10, np.int32)), KernelArgumentError, "x: a NumPy array lives in host memory; copy it to the GPU"),
    (dict(x=[1, 2, 3]), KernelArgumentError, "device array"),
    (dict(x=Fake(typestr="<f2")), TypeError, "dtype float16"),
    (dict(x=Fake(typestr="<i2")), TypeError, "int32, int64, uint8, uint16, float32, float64"),
    (dict(x=Fake(typestr="<c8")), TypeError, "complex64"),
    (dict(x=Fake(shape=(10,), strides=(8,))), KernelArgumentError, "C-contiguous"),
    (dict(x=Fake(shape=(4, 5), strides=(4, 16))), KernelArgumentError, "C-contiguous"),
    (dict(x=Fake(ptr=(1 << 20) + 2)), KernelArgumentError, "not aligned to its 4-byte elements"),
    (dict(bins=0), ValueError, r"bins = 0 is outside \[1, 1073741824\]"),
    (dict(bins=-3), ValueError, "outside"),
    (dict(bins=(1 << 30) + 1), ValueError, "outside"),
    (dict(bins=2.5), TypeError, "bins must be an int"),
    (dict(bins=True), TypeError, "bins must be an int"),
    (dict(bins=np.arange(4)), TypeError, "arrays of edges are not supported"),
    (dict(range=(1, 1)), ValueError, "lo must be less than hi"),
    (dict(range=(2.0, 1.0)), ValueError, "lo must be less than hi"),
    (dict(range=(0, float("inf"))), ValueError, "not finite"),
    (dict(range=(float("nan"), 1)), ValueError, "not finite"),
    (dict(range=(0,)), ValueError, "pair"),
    (dict(range=("a", "b")), TypeError, "real numbers"),
    (dict(variant="magic"), ValueError, "variant must be one of auto, global, shared, dsm, hot, exchange"),
    (dict(out=np.zeros(10, np.int64)), KernelArgumentError, "out: a NumPy array lives in host memory"),
    (dict(out=FakeCupy(shape=(10,), typestr="<i4")), TypeError, "out must have dtype int64"),
    (dict(out=FakeCupy(shape=(11,), typestr="<i8")), ValueError, r"out must have shape \(10,\), got \(11,\)"),
    (dict(out=Fake(shape=(10,), typestr="<i8")), TypeError, "out is a other array"),
])
def test_histogram_bad_input_raises_before_the_gpu(kwargs, error, text):
    args = dict(x=Fake(), bins=10)
    args.update(kwargs)
    x = args.pop("x")
    with pytest.raises(error, match=text):
        histogram(x, **args)


def test_histogram_out_library_and_shape():
    src = api.check_input(Fake())
    with pytest.raises(TypeError, match="out is a other array, but a other input gives cupy output"):
        api.check_out(Fake(shape=(10,), typestr="<i8"), 10, src)
    with pytest.raises(ValueError, match=r"out must have shape \(10,\), got \(11,\)"):
        api.check_out(FakeCupy(shape=(11,), typestr="<i8"), 10, src)
    with pytest.raises(ValueError, match=r"shape \(10,\)"):
        api.check_out(FakeCupy(shape=(2, 5), typestr="<i8"), 10, src)
    assert api.check_out(FakeCupy(shape=(10,), typestr="<i8", ptr=1 << 21), 10, src).size == 10

    class FakeTorch(Fake):
        pass

    FakeTorch.__module__ = "torch"
    with pytest.raises(TypeError, match="out is a cupy array, but a torch input gives torch output"):
        api.check_out(FakeCupy(shape=(10,), typestr="<i8"), 10, api.check_input(FakeTorch()))


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(x=np.zeros(10, np.int64)), KernelArgumentError, "x: a NumPy array lives in host memory; copy it to the GPU"),
    (dict(x=Fake(typestr="<f4")), TypeError, "non-negative integers of dtype int32, int64, uint8, uint16"),
    (dict(x=Fake(typestr="<f8")), TypeError, "float64"),
    (dict(x=Fake(shape=(4, 5))), ValueError, r"1-D array, got shape \(4, 5\)"),
    (dict(x=Fake(shape=(10,), strides=(8,))), KernelArgumentError, "C-contiguous"),
    (dict(minlength=-1), ValueError, "'minlength' must not be negative"),
    (dict(minlength=1.5), TypeError, "minlength must be an int"),
    (dict(minlength=(1 << 30) + 1), ValueError, "exceeds the most bins"),
    (dict(variant="fast"), ValueError, "variant must be one of"),
    (dict(out=FakeCupy(shape=(10,), typestr="<f8")), TypeError, "out must have dtype int64"),
    (dict(out=np.zeros(10, np.int64)), KernelArgumentError, "out: a NumPy array lives in host memory"),
])
def test_bincount_bad_input_raises_before_the_gpu(kwargs, error, text):
    args = dict(x=Fake())
    args.update(kwargs)
    x = args.pop("x")
    with pytest.raises(error, match=text):
        bincount(x, **args)


def test_one_plan_class_per_variant():
    assert isinstance(HistogramPlan("global", "int32", 10), GlobalPlan)
    assert type(plan_histogram(100)) is SharedPlan
    assert type(plan_histogram(65_536)) is SharedPlan  # 16-bit counters
    assert type(plan_histogram(65_536, variant="dsm")) is ClusterPlan
    assert type(plan_histogram(1 << 20)) is ExchangePlan
    assert type(plan_histogram(1 << 20, variant="hot")) is HotPlan
    assert type(plan_histogram(4 << 20)) is GlobalPlan
    with pytest.raises(ValueError, match="variant must be one of"):
        HistogramPlan("magic", "int32", 10)
    a, b = HistogramPlan("dsm", "int32", 5, cluster=2), ClusterPlan("dsm", "int32", 5, cluster=2)
    assert a == b and hash(a) == hash(b) and a.kernel_expr == "hist_cluster<int, false, false>"


def bin_index_model(x: np.ndarray, edges: np.ndarray, quick: bool = True, computed: bool = False) -> np.ndarray:
    """cuadv::bins::EvenBins (histogram_bins.cuh), step by step in the edges' precision: where quick_estimate gives
    a margin below QUICK_MARGIN_LIMIT (``quick=False``: never; ``computed``: edges the GPU computes), the edge
    nearest the quick estimate decides (from a table, read only where the estimate lies within the margin of it);
    else numpy's estimate and one step against the edges."""
    e = edges.dtype.type
    bins = edges.size - 1
    v = x.astype(edges.dtype)
    lo, span = edges[0], e(edges[-1] - edges[0])
    inv, margin = quick_estimate(edges[0], edges[-1], bins, computed) if quick else (e(0), e(1))
    out = np.full(x.size, -1, dtype=np.int64)
    keep = (v >= edges[0]) & (v <= edges[-1])
    vk = v[keep]
    if margin < api.QUICK_MARGIN_LIMIT:
        f = (vk - lo) * inv
        n = np.rint(f).astype(np.int64)
        assert ((n >= 0) & (n <= bins)).all()  # the kernel reads edge n: the host's bound keeps it in range
        above = vk >= edges[n]
        if not computed:  # a table: the side of edge n from the estimate where it lies beyond the margin
            d = f - n.astype(edges.dtype)
            assert np.array_equal(d.astype(np.float64), f.astype(np.float64) - n)  # exact, as the kernel takes it
            far = (d > margin) | (d < -margin)
            above[far] = d[far] > 0
        out[keep] = np.minimum(np.where(above, n, n - 1), bins - 1)
        return out
    with np.errstate(invalid="ignore", over="ignore"):
        f = (vk - lo) / span * e(bins)
    k = np.where(f >= bins, bins - 1, np.where(f > 0, f, 0).astype(np.int64))
    down = (k > 0) & (vk < edges[k])
    up = ~down & (k + 1 < bins) & (vk >= edges[np.minimum(k + 1, bins)])
    out[keep] = k - down + up
    return out


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "uint16", "float32", "float64"])
@pytest.mark.parametrize("bins", [1, 7, 256, 4096, 65536])
def test_the_binning_rule_is_numpys(dtype, bins):
    rng = np.random.default_rng(bins)
    if dtype.startswith("float"):
        x = (rng.standard_normal(20_000) * 3).astype(dtype)
        x[:50] = np.linspace(-1, 1, 50)  # values on and next to edges
        ranges = [None, (-1.0, 1.0), (-2.5, 7.25)]
    else:
        info = np.iinfo(dtype)
        x = rng.integers(max(info.min, -1000), min(info.max, 70_000), size=20_000).astype(dtype)
        ranges = [None, (0, bins), (3, 1000.5)]
    for r in ranges:
        want, edges = np.histogram(x, bins=bins, range=r)
        lo, hi = (x.min(), x.max()) if r is None else r
        mine = np.histogram_bin_edges(np.empty(0, dtype=x.dtype), bins, range=(lo, hi))
        assert mine.dtype == edges.dtype and np.array_equal(mine, edges)
        idx = bin_index_model(x, mine)
        got = np.bincount(idx[idx >= 0], minlength=bins)
        assert np.array_equal(got, want), (dtype, bins, r)


@pytest.mark.parametrize("bins", [1, 7, 100_000])
def test_int64_beyond_2_53_is_kept_by_the_window_numpy_compares_in(bins):
    """numpy keeps int64 input by comparing it with integer range ends exactly, with float ends as float64s, then
    bins it as float64: keep_window's integer window before the rule (hist_bin_index) counts as numpy does, and
    without it values just past an integer end, which round onto it, would be counted."""
    top = np.iinfo(np.int64).max
    around = np.arange(-3000, 3001, dtype=np.int64)
    for lo, hi, x in ((-3062579159392472241, -2215994921906757937,
                       np.concatenate([-3062579159392472241 + around, -2215994921906757937 + around])),
                      (2**62, top - 1000, np.concatenate([2**62 + around, top - np.arange(6001, dtype=np.int64)]))):
        for r in ((lo, hi), (np.int64(lo), np.int64(hi)), (np.uint64(lo), np.uint64(hi)) if lo > 0 else (lo, hi),
                  (float(lo), float(hi)), (lo, float(hi)), (float(lo), hi)):
            want, edges = np.histogram(x, bins, range=r)
            keep_lo, keep_hi = keep_window(x.dtype, r)
            assert keep_lo.dtype == keep_hi.dtype == np.int64
            inside = (x >= keep_lo) & (x <= keep_hi)
            idx = np.where(inside, bin_index_model(x, edges), -1)
            assert np.array_equal(np.bincount(idx[idx >= 0], minlength=bins), want), (lo, r)
            rule_alone = bin_index_model(x, edges)
            if isinstance(r[1], (int, np.integer)):  # the window is what leaves out those past the end
                assert np.count_nonzero(rule_alone >= 0) > want.sum(), r
    none_lo, none_hi = keep_window(np.dtype(np.int64), (2**63, 2**64 - 1))  # past int64, within check_range's ends
    assert none_lo > none_hi
    for dtype in ("int32", "uint8", "uint16", "float32", "float64"):  # values exact in the edges' type: no window
        info = np.finfo(dtype) if dtype.startswith("float") else np.iinfo(dtype)
        lo, hi = keep_window(np.dtype(dtype), (0, 5))
        assert lo.dtype == hi.dtype == dtype and lo <= info.min and hi >= info.max


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
@pytest.mark.parametrize("bins", [1, 7, 256, 4096, 65536])
def test_the_binning_rule_is_numpys_with_float32_edges_of_integers(dtype, bins):
    """float32 range bounds give uint8 and uint16 input float32 edges (hist_bin_index<T, float>), which numpy bins
    against in float32 too."""
    rng = np.random.default_rng(bins)
    x = rng.integers(0, np.iinfo(dtype).max, size=20_000, endpoint=True).astype(dtype)
    for r in [(0, 256), (3.3, 1000.7), (-5, 60000.5), (0.1, 0.9)]:
        r = (np.float32(r[0]), np.float32(r[1]))
        want, edges = np.histogram(x, bins=bins, range=r)
        mine = np.histogram_bin_edges(np.empty(0, dtype=dtype), bins, range=r)
        assert mine.dtype == edges.dtype == np.float32 and np.array_equal(mine, edges)
        idx = bin_index_model(x, mine)
        assert np.array_equal(np.bincount(idx[idx >= 0], minlength=bins), want), (dtype, bins, r)


def edges_on_the_gpu(dtype: str, bins: int, r) -> bool:
    """Whether cuadv computes these even edges on the GPU (numpy.linspace's arithmetic in float64) rather than
    taking numpy's: the binning rule's bound depends on it (quick_estimate's ``computed``)."""
    return r is not None and api.device_edge_spec(np.dtype(dtype), bins, *r) is not None


@pytest.mark.parametrize("x, bins, r", [
    (np.array([0.33333334]), 3, (np.float32(0), np.float32(1))),  # float32 linspace, float64 edges
    (np.array([20283144], np.int32), 3, (np.float32(738465), np.float32(59372504))),
    (np.array([7.5e-39], np.float32), 100, (0.0, 1e-38)),  # bins / span beyond float32: no quick estimate
    (np.array([3e-306]), 10000, (0.0, 1e-305)),
    (np.array([7.5e-39, 0, 1e-38], np.float32), 100, None),
    (np.array([1.1310150321949505e-38]), 1000, (np.float32(0), np.float32(3e-38))),  # float32 linspace, subnormal
    (np.array([0], np.int32), 4096, (np.float32(-2.9631e-40), np.float32(1.460331e-39))),
])
def test_the_quick_estimate_keeps_numpys_bin_where_linspace_ran_coarser_or_bins_are_tiny(x, bins, r):
    """Cases two reviews found misbinned by earlier versions of quick_estimate (the edges' type's roundoff where
    numpy computed float64 edges in float32, an inv that overflowed, and float32 arithmetic gone subnormal)."""
    want, edges = np.histogram(x, bins, range=r)
    idx = bin_index_model(x, edges, computed=edges_on_the_gpu(x.dtype, bins, r))
    assert np.array_equal(np.bincount(idx[idx >= 0], minlength=bins), want)


def test_the_rule_takes_the_roundoff_of_where_its_edges_were_computed():
    """_rule_args, what both binning launches pass: edges the GPU computes (an EdgeSpec, no table) bound the quick
    estimate with float64's roundoff; numpy's own float64 edges, which it may have computed in float32, with
    float32's, so their margin is 2**29 times wider."""
    first, last, bins = np.float64(0), np.float64(1), 4096
    spec = api.EdgeSpec(0, np.dtype(np.float64), bins, 0.0, 1.0 / bins, 1.0)
    table, gpu = api._rule_args(first, last, bins, 1 << 20, spec)
    assert table == 0 and gpu[2:4] == (4096.0, 16 * 2.0**-53 * (bins + 1) * 2)
    table, host = api._rule_args(first, last, bins, 1 << 20, None)
    assert table == 1 << 20 and host[2:4] == (4096.0, 16 * 2.0**-24 * (bins + 1) * 2) and host[4:] == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint16"])
def test_the_quick_estimate_stays_within_its_bound_of_every_bin(dtype):
    """Values on every edge and beside it (up to 4 ulps for floats, 1 for integers), over ranges near zero, offset
    from it and across it, of Python numbers, of float32 scalars (numpy.linspace then computes in float32) and none:
    the quick estimate of each value lies within margin / 2 of the bin numpy.histogram puts it in, so the edge
    nearest it, which the kernel reads, is one of that bin's two, and the whole rule counts as numpy does. With a
    margin 16 times smaller the check fails, so it tests the bound."""
    rng = np.random.default_rng(sum(map(ord, dtype)))
    is_int = dtype[0] in "iu"
    tight, used = [], []
    for trial in range(120):
        bins = int(rng.choice([1, 2, 7, 100, 256, 4096, 65536, 83_000]))
        kind = trial % 4
        lo = [0.0, float(rng.uniform(-10, 10)), float(rng.uniform(-1e4, 1e4)), -float(10 ** rng.uniform(-3, 5))][kind]
        hi = [1.0, lo + float(10 ** rng.uniform(-3, 3)), lo + float(10 ** rng.uniform(-1, 4)),
              float(10 ** rng.uniform(-3, 5))][kind]
        if is_int:  # whole ends, at least one apart; uint16 from a non-negative start
            lo, hi = float(np.floor(lo)), float(np.floor(lo)) + float(np.ceil(hi - lo)) + 1
            lo, hi = (lo % 1000, lo % 1000 + hi - lo) if dtype == "uint16" else (lo, hi)
        r = [(lo, hi), (np.float32(lo), np.float32(hi)), None][trial % 3]
        x = rng.uniform(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), 4000)
        x = (np.clip(np.round(x), 0, None) if dtype == "uint16" else np.round(x) if is_int else x).astype(dtype)
        try:
            edges = np.histogram_bin_edges(x if r is None else np.empty(0, dtype), bins, range=r)
        except ValueError:  # numpy: too many bins for this range
            continue
        pick = edges[rng.integers(0, edges.size, min(edges.size, 2000))]
        if is_int:
            near = [np.round(pick + d) for d in (-1, 0, 1)]
        else:
            near = around_values(pick, dtype)
        xx = np.concatenate([x, *(np.clip(n, 0, None) if dtype == "uint16" else n for n in near)]).astype(dtype)
        if r is None:  # x's edges: the values added stay within x's min and max
            xx = np.clip(xx, x.min(), x.max())
        want, numpy_edges = np.histogram(xx, bins=bins, range=r)
        assert np.array_equal(numpy_edges, edges)
        computed = edges_on_the_gpu(dtype, bins, r)
        idx = bin_index_model(xx, edges, computed=computed)
        assert np.array_equal(np.bincount(idx[idx >= 0], minlength=bins), want), (dtype, bins, r)
        inv, margin = quick_estimate(edges[0], edges[-1], bins, computed)
        v = xx.astype(edges.dtype)
        v = v[(v >= edges[0]) & (v <= edges[-1])]
        truth = np.minimum(np.searchsorted(edges, v, side="right") - 1, bins - 1)  # the last bin closed
        used.append(margin < api.QUICK_MARGIN_LIMIT)
        if not margin < api.QUICK_MARGIN_LIMIT:  # no quick estimate: numpy's estimate and a step for every value
            continue
        f = (v - edges[0]) * inv
        assert ((np.rint(f) == truth) | (np.rint(f) == truth + 1)).all(), (dtype, bins, r)
        for scale in (1, 16):
            half = margin / scale / 2
            outside = (f <= truth - half) | (f >= truth + 1 + half)
            outside &= v != edges[-1]  # the last edge closes bin bins - 1: its estimate is bins
            if scale == 1:
                assert not outside.any(), (dtype, bins, r, v[outside][:3])
            tight.append(outside.any())
    if not is_int:  # integers sit on whole numbers, rarely near a float edge: the smaller margin may hold there
        assert any(tight)  # a margin 16 times smaller fails somewhere: the check can fail
    assert np.mean(used) > 0.8  # and the quick estimate bins most of these cases


def test_the_quick_estimate_is_cached_apart_for_each_type_of_edge():
    """quick_estimate is memoised (a prepared call with a fixed range asks again each call), but equal ends of
    float32 and float64 hash alike: each gets its own entry, its values in its own type and bound."""
    for first, last in ((np.float32(0.5), np.float32(1.0)), (np.float64(0.5), np.float64(1.0))) * 2:
        inv, margin = quick_estimate(first, last, 100, False)
        assert inv.dtype == margin.dtype == first.dtype
        assert margin == first.dtype.type(16 * 2.0**-24 * 101 * 3)  # numpy's float32 roundoff either way


@pytest.mark.parametrize("bins", [256, 1024, 4096, 65536])
def test_margins_up_to_a_bin_still_bin_as_numpy_does(bins):
    """Ranges offset from zero so that numpy's float32 edges give the quick estimate a margin between half a bin and
    QUICK_MARGIN_LIMIT (one bin), the widest it takes, and just past it: every edge and 4 float32s either side of it,
    among uniform values, binned by the rule's model (the edge nearest the estimate, read only within the margin)
    exactly as numpy.histogram bins them, with and without a range."""
    rng = np.random.default_rng(bins)
    seen = []
    for ratio in (0.55, 0.75, 0.9, 0.99, 1.1):  # the margin sought, in bins
        span = 2.0 ** int(rng.integers(-6, 6))
        m = ratio / (16 * 2.0**-24 * (bins + 1)) - 1  # M / span for that margin
        for lo in (m * span - span, -m * span):  # positive and negative ranges whose larger end is about m spans
            r = (np.float32(lo), np.float32(lo + span))
            edges = np.histogram_bin_edges(np.empty(0, np.float32), bins, range=r)
            x = np.concatenate([rng.uniform(r[0], r[1], 50_000).astype(np.float32),
                                *around_values(edges, np.float32)])
            for rr in (r, None):
                want, numpy_edges = np.histogram(x if rr else np.clip(x, *r), bins, range=rr)
                margin = quick_estimate(numpy_edges[0], numpy_edges[-1], bins, computed=False)[1]
                seen.append(float(margin))
                idx = bin_index_model(x if rr else np.clip(x, *r), numpy_edges)
                assert np.array_equal(np.bincount(idx[idx >= 0], minlength=bins), want), (bins, r, rr, margin)
    assert any(0.5 <= m < api.QUICK_MARGIN_LIMIT for m in seen) and max(seen) >= api.QUICK_MARGIN_LIMIT


def test_a_one_shot_counter_leaves_the_skew_choice_to_the_gpu():
    """choose() of a one-shot auto counter over bins one block does not hold makes no GPU call: it keeps the
    usual plan and sets the skew-aware one beside it, for count() to launch both gated on the sample's verdict.
    A named variant, uint8 input and bins one block holds have one plan and nothing to gate."""
    from test_histogram_cpu import FakeCaps

    eng = api.HistogramEngine(FakeCaps())  # plans only; a GPU call would fail (no driver here)
    bins = 1 << 20
    one_shot = api._Counter(eng, bins, "int32", "auto", keep=False)
    plan = one_shot.choose(idx_ptr=1 << 20, n=1000, stream=0)
    assert plan.variant == "exchange" and one_shot.plan is plan
    assert one_shot.skewed.variant == "hot" and one_shot.skewed.bins == bins
    for counter in (api._Counter(eng, bins, "int32", "global", keep=False),
                    api._Counter(eng, 256, "uint8", "auto", keep=False),
                    api._Counter(eng, 4096, "int32", "auto", keep=False)):
        counter.plan = None if counter.variant == "auto" else eng.plan(counter.bins, "int32", counter.variant)
        counter.choose(idx_ptr=1 << 20, n=1000, stream=0)
        assert counter.skewed is None, counter
    empty = api._Counter(eng, bins, "int32", "auto", keep=False)
    empty.choose(idx_ptr=1 << 20, n=0, stream=0)
    assert empty.skewed is None  # nothing to count: nothing to sample


def test_a_one_shot_histogram_in_place_at_the_exchanges_limit_gates_the_closed_exchange(monkeypatch):
    """int32 over range=(0, 2^20): bins + 1 slots leave the exchange, so the one-shot call gates the exchange over
    bins with a closed last bin against the skew-aware plan over bins + 1 slots (the last folded into bin
    bins - 1), both in place, without a GPU call to choose."""
    from test_histogram_cpu import FakeCaps

    bins = 1 << 20
    eng = api.HistogramEngine(FakeCaps())
    monkeypatch.setattr(api, "engine", lambda: eng)
    p = api.PreparedHistogram(FakeCupy((4_000_000,)), bins, range=(0, bins), keep=False)
    assert p._counts_in_place(1 << 20, 4_000_000, 0)
    assert p.unit.bins == bins + 1 and p.unit.fold_last
    assert p.unit.plan.variant == "exchange" and p.unit.plan.closed and p.unit.plan.bins == bins
    assert p.unit.skewed.variant == "hot" and p.unit.skewed.bins == bins + 1


def test_the_edge_spec_kept_per_range_tells_every_range_apart():
    """device_edge_spec is cached per (dtype, bins, lo, hi): 0.0 and -0.0 (equal, same hash) and 1 and 1.0 must
    stay apart, and each cached answer is what numpy's edges give."""
    import math

    neg = api.device_edge_spec(np.dtype("float64"), 10, -0.0, 1.0)
    pos = api.device_edge_spec(np.dtype("float64"), 10, 0.0, 1.0)
    assert math.copysign(1.0, neg[0]) == -1.0 and math.copysign(1.0, pos[0]) == 1.0
    for dtype in ("float32", "float64", "int32", "uint8"):
        for lo, hi in ((0, 1), (0.0, 1.0), (-4.0, 4.0), (0, 256)):
            start, step, stop, edtype = api.device_edge_spec(np.dtype(dtype), 256, lo, hi)
            want = np.histogram_bin_edges(np.empty(0, dtype=dtype), 256, range=(lo, hi))
            assert edtype == want.dtype and start == want[0] and stop == want[-1]


def test_the_widening_pass_writes_the_edges_it_is_given(monkeypatch):
    """count() with an EdgeSpec: hist_widen<E> of the edges' type gets the counts, then the edges' own parameters
    (as hist_edges would), and is sized to cover the bins + 1 edges; without one, hist_widen<double> and null
    edges. A prepared counter clears a new buffer once and then trusts the zeros hist_widen leaves; the widening
    pass is a programmatic dependent of the counting kernel on a GPU with PDL."""
    from test_histogram_cpu import FakeCaps

    class FakeScratch:
        size = staticmethod(api.Scratch.size)

        def __init__(self, nbytes, stream, keep):
            self.ptr, self.nbytes = 0x1000, nbytes

    class FakeDriver:
        memsets = 0

        def cuMemsetD32Async(self, ptr, value, count, stream):
            FakeDriver.memsets += 1
            return (0,)

    launches = []
    monkeypatch.setattr(api, "Scratch", FakeScratch)
    monkeypatch.setattr(api, "driver", FakeDriver)
    monkeypatch.setattr(api, "capturing", lambda stream: False)
    monkeypatch.setattr(api, "_aux_launch",
                        lambda name, n, args, *rest, **kw: launches.append((name, n, args, kw.get("pdl"))))
    caps = FakeCaps()
    caps.arch, caps.sm_count = "sm_90a", 132  # passed through to the (recorded) launch
    eng = api.HistogramEngine(caps)
    counter = api._Counter(eng, 1000, "int32", "auto", keep=True)
    spec = api.EdgeSpec(0x2000, np.dtype(np.float32), 1000, -1.5, 0.25, 248.5)
    assert spec.ctype == "float" and spec.args() == (0x2000, 1000, -1.5, 0.25, 248.5)
    counter.count(0, 0, 0x3000, 1000, False, 7, edges=spec)
    counter.count(0, 0, 0x3000, 1000, False, 7)
    (name, n, args, pdl), (plain, _, plain_args, _) = launches
    assert pdl  # a programmatic dependent of the counting kernel where the GPU has PDL
    assert name == "hist_widen<float>" and n == 1001 and args[:7] == (0x1000, 1000, 1000, 0x3000, 1000, 0, api.NO_FOLD)
    assert args[7:] == spec.args()
    assert plain == "hist_widen<double>" and plain_args[7:] == (0, 0, 0.0, 0.0, 0.0)
    assert FakeDriver.memsets == 1
    caps.pdl = False  # a GPU without PDL (compute capability < 9.0): plain stream order
    counter.count(0, 0, 0x3000, 1000, False, 7)
    assert launches[-1][0] == "hist_widen<double>" and launches[-1][3] is False


def test_zeroed_counts_are_taken_per_stream_and_slots_and_refused_past_the_cap(monkeypatch):
    from types import SimpleNamespace

    from cuadv.histograms import zeroed

    monkeypatch.setattr(zeroed, "stream_key", lambda stream: (1, stream))  # no driver here: streams are their ids
    pool = zeroed.ZeroedCounts()
    assert pool.take(3, 1) is None
    a, b = SimpleNamespace(nbytes=16), SimpleNamespace(nbytes=16)
    assert pool.give(a, 3, 1) and pool.give(b, 3, 2)
    # Another stream, or another count of slots in a buffer of the same size (2 slots: the verdict word is slot 2 of 3).
    assert pool.take(3, 3) is None and pool.take(2, 1) is None
    assert pool.take(3, 1) is a and pool.take(3, 1) is None and len(pool) == 1
    assert zeroed.ZeroedCounts.eligible(64, captured=False)
    assert not zeroed.ZeroedCounts.eligible(64, captured=True)  # being captured
    assert not zeroed.ZeroedCounts.eligible(zeroed.MAX_BUFFER_BYTES + 1, captured=False)
    big = SimpleNamespace(nbytes=zeroed.MAX_KEPT_BYTES - 16)
    assert pool.give(big, 1000, 3)  # the pool is full now: b and big
    assert not pool.give(SimpleNamespace(nbytes=16), 3, 4) and len(pool) == 2  # refused, the caller frees it
    assert pool.take(1000, 3) is big and pool.give(SimpleNamespace(nbytes=16), 3, 4) and len(pool) == 2


def test_counts_kept_for_a_stream_are_never_freed_on_it(monkeypatch):
    """A one-shot call's counts given to the pool of zeroed counts stop naming their stream: the pool may let them
    go after the stream is destroyed, and a free enqueued on a destroyed stream's handle crashes the process. Counts
    the pool does not take are freed on the call's stream, and any other scratch on its own (the driver faked)."""
    frees = []

    class Driver:
        def cuMemAllocAsync(self, nbytes, stream):
            return 0, 0x1000 + len(frees)

        def cuMemFreeAsync(self, ptr, stream):
            frees.append((ptr, stream))
            return (0,)

    class Pool:
        def __init__(self, takes):
            self.takes, self.kept = takes, []

        def give(self, buf, slots, stream):
            assert buf.stream is None  # already: another thread may take it from the pool at once
            if self.takes:
                self.kept.append(buf)
            return self.takes

    monkeypatch.setattr(api, "driver", Driver)
    for takes in (True, False):
        pool = Pool(takes)
        monkeypatch.setattr(api, "ZEROED", pool)
        counter = api._Counter(eng=None, bins=300, index_dtype="int32", variant="auto", keep=False)
        counter._counts, counter._pooled, counter._zeroed = api.Scratch(1208, 7, keep=False), True, True
        counter.release(9)
        assert counter._counts is None
        if takes:
            (kept,) = pool.kept
            assert kept.ptr and kept.stream is None
            del kept, pool
            assert frees == []  # the kept buffer went without a free
        else:
            assert frees == [(0x1000, 9)]  # freed on the stream of the call that gave it back
    scratch = api.Scratch(16, 5, keep=False)
    del scratch
    assert frees[-1] == (0x1001, 5)  # any other scratch: freed on its own stream when it goes


def _raw_engine(monkeypatch):
    """count_bins' engine for a fake H200 whose occupancy query and kernel build fail the test."""
    from test_histogram_cpu import FakeCaps

    from cuadv.histograms import launcher

    eng = launcher.HistogramEngine(FakeCaps())

    def reached(*a, **k):
        raise AssertionError("reached the GPU before the arguments were checked")

    monkeypatch.setattr(launcher, "_engine", eng)
    monkeypatch.setattr(eng, "resident_units", reached)
    monkeypatch.setattr(eng, "kernel", reached)
    return eng


@pytest.mark.parametrize("kwargs, text", [
    (dict(stream="default"), "cannot use str as a stream"),
    (dict(stream=-1), "stream handle -1 is not a CUstream"),
    (dict(units=0), "units must be >= 1, got 0"),
    (dict(units=-3), "units must be >= 1, got -3"),
    (dict(units="4"), "units must be an int number of blocks .*got str '4'"),
    (dict(units=2.5), "units must be an int number of blocks .*got float 2.5"),
    (dict(units=True), "units must be an int number of blocks .*got bool True"),
])
def test_count_bins_with_out_checks_stream_and_units_before_the_occupancy_query(monkeypatch, kwargs, text):
    """With out given no array is made, so the stream was first read after the occupancy query (which builds the
    kernels), and units after it too: both are pure checks and raise first."""
    from cuadv.errors import CuadvError
    from cuadv.histograms import count_bins

    _raw_engine(monkeypatch)
    with pytest.raises(CuadvError, match=text):
        count_bins(FakeCupy((100,), "<i4"), 10, out=FakeCupy((10,), "<u4", ptr=1 << 21), **kwargs)


def test_count_bins_orders_the_producers_of_x_and_out(monkeypatch):
    """The count zeroes and writes out on the call's stream: after the pending work of out's producer (CAI v3
    stream) as well as x's, as every other op orders its arrays."""
    from cuadv import interop, launching
    from cuadv.histograms import count_bins, launcher

    eng = _raw_engine(monkeypatch)
    monkeypatch.setattr(eng, "resident_units", lambda plan: 132)
    monkeypatch.setattr(eng, "kernel", lambda plan: object())
    events = []

    class Driver:
        def cuMemsetD32Async(self, ptr, value, count, stream):
            events.append(("memset", stream))
            return (0,)

    monkeypatch.setattr(launcher, "driver", Driver)
    monkeypatch.setattr(launching, "launch", lambda *a, stream=None, **k: events.append(("launch", stream)))
    monkeypatch.setattr(interop, "capturing", lambda stream: False)
    monkeypatch.setattr(interop, "wait_for_stream", lambda waiter, producer: events.append(("wait", waiter, producer)))
    x, out = FakeCupy((100,), "<i4"), FakeCupy((10,), "<u4", ptr=1 << 21)
    x.__cuda_array_interface__["stream"], out.__cuda_array_interface__["stream"] = 5, 9
    assert count_bins(x, 10, out=out, stream=3) is out
    assert events == [("wait", 3, 5), ("wait", 3, 9), ("memset", 3), ("launch", 3)]


def test_float32_input_is_binned_as_read_where_one_block_holds_the_bins_behind_a_tma_ring(monkeypatch):
    """float32 over bins one block's shared histogram holds behind a TMA ring: the counter's plan binned as it reads
    (hist_block_tma_float, one pass); anything else keeps the binning pass (a named other variant, other input,
    bins past one block)."""
    from test_histogram_cpu import FakeCaps

    eng = api.HistogramEngine(FakeCaps())  # plans only
    monkeypatch.setattr(api, "engine", lambda: eng)
    p = api.PreparedHistogram(FakeCupy((4_000_000,), typestr="<f4"), 4096, range=(0.0, 1.0), keep=False)
    binned = p._binned_plan(p.src, np.float32(0.0))
    assert isinstance(binned, SharedPlan) and binned.binned and binned.stages
    assert binned == replace(eng.plan(4096, "int32"), binned=True)
    assert binned.kernel_expr == f"hist_block_tma_float<{binned.stages}, {binned.vectors}, false, 0>"
    assert binned.label.endswith("binned as read)")
    assert p._binned_plan(p.src, np.float32(0.0)) is binned  # asked once
    assert p._binned_plan(p.src, np.float64(0.0)) is None  # float64 edges: the pass
    for x, bins, variant in [(FakeCupy((1000,), typestr="<f8"), 4096, "auto"), (FakeCupy((1000,)), 4096, "auto"),
                             (FakeCupy((1000,), typestr="<f4"), 4096, "global"),
                             (FakeCupy((1000,), typestr="<f4"), 1 << 20, "auto")]:
        q = api.PreparedHistogram(x, bins, range=(0.0, 1.0), variant=variant, keep=False)
        assert q._binned_plan(q.src, np.float32(0.0)) is None, (x.__cuda_array_interface__["typestr"], bins, variant)


def test_the_binned_kernels_are_built_on_tma_targets_only():
    from cuadv.histograms.plans import TMA_RINGS, kernel_expressions

    hopper = kernel_expressions("sm_90a")
    assert all(f"hist_block_tma_float<{s}, {v}, false, {r}>" in hopper for s, v in TMA_RINGS for r in (0, 1, 2))
    assert not any("hist_block_tma_float" in e for e in kernel_expressions("sm_80"))
