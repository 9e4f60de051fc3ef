"""cuadv.histogram / cuadv.bincount on a GPU: exact against NumPy for every input type, bin count,
size, distribution and variant; CuPy and torch in and out; out=; prepared calls; the stream rule."""

import numpy as np
import pytest

import cuadv.launching as launch_module
from cuadv.errors import LaunchConfigError, UnsupportedFeatureError
from cuadv.histograms import bincount, histogram, prepare_bincount, prepare_histogram
from cuadv.testing.histograms import around_values, zipf_cdf

pytestmark = pytest.mark.gpu

DTYPES = ["int32", "int64", "uint8", "uint16", "float32", "float64"]
BINS = [1, 7, 256, 4096, 65536, 1 << 20]
SIZES = [0, 1, 1_000_003]
VARIANTS = ["auto", "global", "shared", "dsm", "hot", "exchange"]


def data(rng, n, dtype, dist, bins):
    """Uniform over the type's useful range, or Zipf(1.3) over [0, bins) (the lab's skewed data)."""
    if dist == "zipf":
        v = np.minimum(np.searchsorted(zipf_cdf(max(bins, 2)), rng.random(n), side="right"), bins - 1)
        if dtype.startswith("float"):
            return (v + rng.random(n)).astype(dtype)  # inside bin v of range (0, bins)
        return np.minimum(v, np.iinfo(dtype).max).astype(dtype)
    if dtype.startswith("float"):
        return (rng.standard_normal(n) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -(1 << 20)), min(info.max, 1 << 21), size=n).astype(dtype)


def expect_named(fn, variant):
    """Run ``fn``; None where a named variant cannot hold these bins or lacks clusters (it refuses by the
    rules, before launch); auto never refuses."""
    try:
        return fn()
    except (LaunchConfigError, UnsupportedFeatureError):
        if variant == "auto":
            raise
        return None
    except ValueError as exc:
        if variant == "auto" or "is for int32 input" not in str(exc) and "16-bit" not in str(exc):
            raise
        return None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bins", BINS)
@pytest.mark.parametrize("dist", ["uniform", "zipf"])
def test_histogram_matches_numpy_auto(cp, dtype, bins, dist):
    rng = np.random.default_rng(bins)
    for n in SIZES:
        host = data(rng, n, dtype, dist, bins)
        ranges = [None, (0, bins)] if dist == "zipf" else [None, (-50.5, 75.25)]
        for r in ranges:
            try:
                want, want_edges = np.histogram(host, bins=bins, range=r)
            except ValueError as exc:  # e.g. float32 cannot make 2^20 finite bins over this range
                with pytest.raises(ValueError, match=str(exc)[:30]):
                    histogram(cp.asarray(host), bins, range=r)
                continue
            hist, edges = histogram(cp.asarray(host), bins, range=r)
            assert isinstance(hist, cp.ndarray) and hist.dtype == cp.int64 and hist.shape == (bins,)
            assert edges.dtype == want_edges.dtype and np.array_equal(cp.asnumpy(edges), want_edges)
            assert np.array_equal(cp.asnumpy(hist), want), (dtype, bins, dist, n, r)


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
@pytest.mark.parametrize("bins", [7, 256, 4096])
def test_float32_range_bounds_bin_small_integers_against_float32_edges(cp, dtype, bins):
    """NumPy makes float32 edges for uint8 and uint16 input with float32 bounds, and bins against them."""
    host = np.random.default_rng(bins).integers(0, np.iinfo(dtype).max, size=300_007, endpoint=True).astype(dtype)
    for r in [(np.float32(3.3), np.float32(200.7)), (np.float32(-5), np.float32(60000.5))]:
        want, want_edges = np.histogram(host, bins=bins, range=r)
        hist, edges = histogram(cp.asarray(host), bins, range=r)
        assert edges.dtype == want_edges.dtype == np.float32 and np.array_equal(cp.asnumpy(edges), want_edges)
        assert np.array_equal(cp.asnumpy(hist), want), (dtype, bins, r)


@pytest.mark.parametrize("variant", VARIANTS[1:])
@pytest.mark.parametrize("bins", BINS)
@pytest.mark.parametrize("dtype", ["int32", "float32", "uint16"])
def test_histogram_every_named_variant(cp, variant, bins, dtype):
    rng = np.random.default_rng(7)
    for dist in ("uniform", "zipf"):
        host = data(rng, 1_000_003, dtype, dist, bins)
        want, _ = np.histogram(host, bins=bins, range=(0, bins))
        got = expect_named(lambda: histogram(cp.asarray(host), bins, range=(0, bins), variant=variant), variant)
        if got is None:
            continue
        hist, _ = got
        assert np.array_equal(cp.asnumpy(hist), want), (variant, bins, dtype, dist)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "uint16"])
@pytest.mark.parametrize("dist", ["uniform", "zipf"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_bincount_matches_numpy(cp, dtype, dist, variant):
    rng = np.random.default_rng(3)
    for bins in BINS:
        if dtype == "uint8" and bins > 256:
            continue
        for n in SIZES:
            host = np.abs(data(rng, n, dtype, dist, bins).astype(np.int64)) % bins
            host = host.astype(dtype)
            for minlength in (0, bins + 3):
                want = np.bincount(host, minlength=minlength)
                got = expect_named(lambda: bincount(cp.asarray(host), minlength, variant=variant), variant)
                if got is None:
                    continue
                assert got.dtype == cp.int64 and np.array_equal(cp.asnumpy(got), want), (dtype, bins, n, variant)


def test_bincount_negative_raises_and_leaves_input(cp):
    x = cp.asarray(np.array([3, 1, -2, 5], dtype=np.int32))
    with pytest.raises(ValueError, match="no negative elements"):
        bincount(x)
    assert cp.asnumpy(x).tolist() == [3, 1, -2, 5]
    assert cp.asnumpy(bincount(cp.zeros(0, dtype=cp.int64), minlength=4)).tolist() == [0, 0, 0, 0]


def test_auto_takes_the_skew_aware_path_for_skewed_data(cp):
    from cuadv.histograms.launcher import engine

    if engine().plan(1 << 20, "int32").variant == "shared":
        pytest.skip("one block holds 1M bins here")
    rng = np.random.default_rng(1)
    bins = 1 << 20
    skewed = data(rng, 4_000_037, "int32", "zipf", bins)
    uniform = rng.integers(0, bins, size=4_000_037).astype(np.int32)
    p = prepare_bincount(cp.asarray(skewed), minlength=bins)
    assert np.array_equal(cp.asnumpy(p()), np.bincount(skewed, minlength=bins))
    assert p.plan(bins).variant == "hot"
    q = prepare_histogram(cp.asarray(uniform), bins, range=(0, bins))
    hist, _ = q()
    assert np.array_equal(cp.asnumpy(hist), np.histogram(uniform, bins, range=(0, bins))[0])
    assert q.plan.variant != "hot"
    s = prepare_histogram(cp.asarray(skewed), bins, range=(0, bins))
    s()
    assert s.plan.variant == "hot"


@pytest.mark.parametrize("bins", [262_144, 1 << 20])
@pytest.mark.parametrize("dist", ["zipf", "uniform"])
def test_one_shot_auto_chooses_on_the_gpu_without_a_wait(cp, monkeypatch, bins, dist):
    """A one-shot call launches both candidates gated on the sample's verdict: exact, and no copy to the host
    (the sample is never read back); with v == bins and out-of-range values in the data."""
    from cuadv.histograms import api

    if api.engine().plan(bins, "int32").variant == "shared":
        pytest.skip("one block holds these bins here")
    rng = np.random.default_rng(bins + len(dist))
    host = data(rng, 2_000_029, "int32", dist, bins) if dist == "zipf" else rng.integers(0, bins, 2_000_029)
    host = host.astype(np.int32)
    host[rng.choice(host.size, 64, replace=False)] = [bins, -1, bins + 1, 2 * bins] * 16
    x = cp.asarray(host)

    def no_host_copy(*args, **kwargs):
        raise AssertionError("the one-shot call read the skew sample on the host")

    launch, gated = launch_module.launch, []

    def recording_launch(kernel, config, *args, **kwargs):
        if getattr(kernel, "name", "").startswith("hist_") and "sample" not in kernel.name:
            gated.append((kernel.name, args[-2] != 0, args[-1]))  # (kernel, gate set, verdict it counts on)
        return launch(kernel, config, *args, **kwargs)

    monkeypatch.setattr(api, "copy_to_host", no_host_copy)
    monkeypatch.setattr(launch_module, "launch", recording_launch)
    hist, _ = histogram(x, bins, range=(0, bins))
    assert np.array_equal(cp.asnumpy(hist), np.histogram(host, bins, range=(0, bins))[0])
    counting = [g for g in gated if "widen" not in g[0]]
    assert len(counting) == 2 and all(g[1] for g in counting), gated  # both candidates, both gated
    assert {g[2] for g in counting} == {0, 1} and "hist_hot" in dict((w, k) for k, _, w in counting)[1]
    hist, _ = histogram(x, bins, range=(0, bins), out=cp.full(bins, -1, dtype=cp.int64))
    assert np.array_equal(cp.asnumpy(hist), np.histogram(host, bins, range=(0, bins))[0])


@pytest.mark.parametrize("dist, skewed", [("zipf", 1), ("uniform", 0), ("out of range", 0)])
def test_the_skew_samples_verdict(cp, dist, skewed):
    from cuadv.histograms import api

    bins = 1 << 20
    rng = np.random.default_rng(23)
    host = {"zipf": lambda: data(rng, 100_003, "int32", "zipf", bins),
            "uniform": lambda: rng.integers(0, bins, 100_003),
            "out of range": lambda: np.full(100_003, -1)}[dist]().astype(np.int32)
    x, verdict = cp.asarray(host), cp.full(1, 7, dtype=cp.uint32)
    counter = api._Counter(api.engine(), bins, "int32", "auto", keep=True)
    hot = api.engine().plan(bins, "int32", "hot").hot
    counter._sample(x.data.ptr, host.size, hot, verdict.data.ptr, cp.cuda.get_current_stream().ptr)
    assert int(verdict[0]) == skewed


@pytest.mark.parametrize("variant", ["global", "shared", "dsm", "hot", "exchange"])
def test_a_gated_launch_counts_only_on_its_verdict(cp, variant):
    from cuadv.histograms.launcher import engine
    from cuadv.launching import launch

    eng, bins = engine(), 70_001
    rng = np.random.default_rng(17)
    host = rng.integers(-5, bins + 5, size=300_007).astype(np.int32)
    want = np.bincount(host[(host >= 0) & (host < bins)], minlength=bins)
    try:
        plan = eng.plan(bins if variant != "shared" else 4096, "int32", variant)
    except (LaunchConfigError, UnsupportedFeatureError):
        pytest.skip(f"{variant} does not hold these bins here")
    if variant == "shared":
        want = np.bincount(host[(host >= 0) & (host < 4096)], minlength=4096)
    x, verdict = cp.asarray(host), cp.asarray(np.array([1], dtype=np.uint32))
    kernel, config = eng.launch_config(plan, host.size)
    for gate_value, counted in ((0, False), (1, True)):
        out = cp.zeros(plan.bins, dtype=cp.uint32)
        launch(kernel, config, *plan.kernel_args(x.data.ptr, host.size, out.data.ptr, verdict.data.ptr, gate_value))
        got = cp.asnumpy(out).astype(np.int64)
        assert np.array_equal(got, want) if counted else not got.any(), (variant, gate_value)


def test_out_and_prepared_calls(cp):
    rng = np.random.default_rng(5)
    host = rng.integers(0, 4096, size=100_003).astype(np.int32)
    out = cp.full(4096, -7, dtype=cp.int64)
    hist, _ = histogram(cp.asarray(host), 4096, range=(0, 4096), out=out)
    assert hist is out and np.array_equal(cp.asnumpy(out), np.histogram(host, 4096, range=(0, 4096))[0])
    with pytest.raises(ValueError, match="shape"):
        histogram(cp.asarray(host), 4096, out=cp.zeros(4095, dtype=cp.int64))
    with pytest.raises(TypeError, match="int64"):
        histogram(cp.asarray(host), 4096, out=cp.zeros(4096, dtype=cp.int32))
    p = prepare_histogram(cp.asarray(host), 64, range=(0, 4096))
    for _ in range(3):
        x = rng.integers(0, 4096, size=100_003).astype(np.int32)
        h, _ = p(cp.asarray(x))
        assert np.array_equal(cp.asnumpy(h), np.histogram(x, 64, range=(0, 4096))[0])
    with pytest.raises(ValueError, match="made for"):
        p(cp.zeros(5, dtype=cp.int32))
    b = prepare_bincount(cp.asarray(host))
    counts = cp.zeros(4096, dtype=cp.int64)
    if host.max() == 4095:
        assert b(out=counts) is counts and np.array_equal(cp.asnumpy(counts), np.bincount(host))


def count_memsets(monkeypatch) -> list:
    """The arguments of every cuMemsetD32Async the histogram calls make from now on (the calls still made)."""
    from cuadv.histograms import api

    drv, memsets = api.driver(), []

    class CountingDriver:
        def __getattr__(self, name):
            return getattr(drv, name)

        def cuMemsetD32Async(self, *args):
            memsets.append(args)
            return drv.cuMemsetD32Async(*args)

    monkeypatch.setattr(api, "driver", CountingDriver)
    return memsets


@pytest.mark.parametrize("bins, dtype", [(256, "uint8"), (4096, "int32"), (1 << 20, "int32")])
def test_prepared_in_place_calls_find_their_counts_zeroed(cp, monkeypatch, bins, dtype):
    """hist_widen zeroes the counts it reads, so only a prepared call's first count clears them (one memset);
    every call exact over several chunks, with the edges (written by the widening pass) numpy's."""
    from cuadv.histograms import api

    memsets = count_memsets(monkeypatch)
    monkeypatch.setattr(api, "DIRECT_CHUNK", 1 << 18)  # three chunks, each counted and widened (accumulating)
    rng = np.random.default_rng(bins)
    xs = [rng.integers(0, bins + (dtype == "int32"), size=700_001).astype(dtype) for _ in range(3)]
    p = prepare_histogram(cp.asarray(xs[0]), bins, range=(0, bins))
    for x in xs:
        hist, edges = p(cp.asarray(x))
        want, want_edges = np.histogram(x, bins, range=(0, bins))
        assert np.array_equal(cp.asnumpy(hist), want) and np.array_equal(cp.asnumpy(edges), want_edges)
    assert len(memsets) == 1


def test_kept_counts_outlive_their_stream(cp, monkeypatch):
    """Counts a one-shot call leaves in the pool are never freed on their stream, which may be destroyed before the
    pool lets them go (the test below released its pool after its streams, and the free each kept buffer then
    enqueued on a destroyed stream's handle crashed its worker on the H200, 2026-12-03). Taken again, a buffer is its
    new call's, freed on that call's stream if the call raises."""
    import gc

    from cuadv.histograms import api, zeroed

    pool = zeroed.ZeroedCounts()
    monkeypatch.setattr(api, "ZEROED", pool)
    x = cp.arange(10_000, dtype=cp.int32) % 300
    cp.cuda.Device().synchronize()  # x is made on CuPy's default stream, which the streams below do not wait for
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        hist, _ = histogram(x, 300, range=(0, 300))
    s.synchronize()
    assert len(pool) == 1 and np.array_equal(cp.asnumpy(hist), np.full(300, 10_000 // 300) + (np.arange(300) < 100))
    (kept,) = [buf for bufs in pool._kept.values() for buf in bufs]
    assert kept.ptr and kept.stream is None
    del s
    gc.collect()  # the stream is destroyed
    monkeypatch.setattr(api, "ZEROED", zeroed.ZeroedCounts())
    del pool, kept
    gc.collect()  # the kept buffer goes: nothing is enqueued on the destroyed stream
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        histogram(x, 300, range=(0, 300))
        histogram(x, 300, range=(0, 300))  # takes the first call's buffer back: it is this stream's again
    s.synchronize()
    (kept,) = [buf for bufs in api.ZEROED._kept.values() for buf in bufs]
    assert kept.stream is None


@pytest.mark.parametrize("call", ["histogram", "bincount"])
def test_a_one_shot_call_that_raises_frees_its_scratch_at_once(cp, monkeypatch, call):
    """A one-shot call that raises half-way (here its widening pass) frees every scratch buffer it made at once, on
    its own stream, which is alive then: none is left for the garbage collector to free on a stream its owner may
    have destroyed since. The next call is exact."""
    from cuadv.histograms import api, zeroed

    monkeypatch.setattr(api, "ZEROED", zeroed.ZeroedCounts())
    made, freed_on = [], []

    class Recorded(api.Scratch):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

        def release(self, stream):
            if self.ptr:
                freed_on.append(stream)
            super().release(stream)

    monkeypatch.setattr(api, "Scratch", Recorded)
    real = api._aux_launch

    def widening_fails(name, *args, **kwargs):
        if name.startswith("hist_widen"):
            raise RuntimeError("injected failure")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(api, "_aux_launch", widening_fails)
    # binned or narrowed first: an index buffer beside the counts (float64: float32 is binned as it is read)
    x = (cp.arange(10_000) % 300).astype(cp.float64 if call == "histogram" else cp.int64)
    cp.cuda.Device().synchronize()
    fn = (lambda: histogram(x, 300, range=(0, 300))) if call == "histogram" else (lambda: bincount(x))
    s = cp.cuda.Stream(non_blocking=True)
    with s, pytest.raises(RuntimeError, match="injected failure"):
        fn()
    assert len(made) >= 2 and all(buf.ptr == 0 for buf in made)
    assert freed_on == [s.ptr] * len(made)
    s.synchronize()
    monkeypatch.setattr(api, "_aux_launch", real)
    got = fn()
    got = got[0] if call == "histogram" else got
    assert np.array_equal(cp.asnumpy(got), np.full(300, 10_000 // 300) + (np.arange(300) < 100))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_default_range_is_the_min_and_max_of_every_part_of_a_view(cp, dtype):
    """range=None takes x.min() and x.max() in one pass (hist_minmax: 16-byte vectors, and by themselves the
    elements before the first and after the last whole one): the extremes placed in a view's head, its vectors and
    its tail, at every offset within 16 bytes and at lengths below one vector give numpy's edges; a NaN in any of
    those parts raises as numpy does."""
    per_vector = 16 // np.dtype(dtype).itemsize
    host = np.random.default_rng(7).integers(10, 100, size=4096).astype(dtype)
    low, high = np.array([1, 120], dtype=dtype)
    for offset in range(per_vector):
        for n in sorted({1, max(per_vector - 1, 1), per_vector + 3, 3 * per_vector + 2, 1000}):
            for at_low, at_high in sorted({(0, n - 1), (n - 1, 0), (n // 2, 0), (0, n // 2)}):
                if at_low == at_high and n > 1:
                    continue
                ref = host[offset:offset + n].copy()
                ref[at_low], ref[at_high] = low, high
                full = host.copy()
                full[offset:offset + n] = ref
                view = cp.asarray(full)[offset:offset + n]
                got = cp.asnumpy(histogram(view, 3)[1])
                want = np.histogram(ref, 3)[1]
                assert np.array_equal(got, want), (offset, n, at_low, at_high, got, want)
                if dtype.startswith("float"):
                    ref[at_high] = np.nan
                    full[offset:offset + n] = ref
                    with pytest.raises(ValueError, match="autodetected range of .* is not finite"):
                        histogram(cp.asarray(full)[offset:offset + n], 3)
    # 16 MiB: past four vectors per thread of the largest grid (4 blocks of 256 threads per SM), so the extremes and
    # the NaN lie where each thread keeps four loads in flight
    big = np.random.default_rng(8).integers(10, 100, size=(16 << 20) // np.dtype(dtype).itemsize).astype(dtype)
    for at in (5, big.size // 3, big.size - 2):
        ref = big.copy()
        ref[at], ref[big.size // 2 + 1] = low, high
        assert np.array_equal(cp.asnumpy(histogram(cp.asarray(ref[1:]), 3)[1]), np.histogram(ref[1:], 3)[1]), at
        if dtype.startswith("float"):
            ref[at] = np.nan
            with pytest.raises(ValueError, match="autodetected range of .* is not finite"):
                histogram(cp.asarray(ref[1:]), 3)


@pytest.mark.parametrize("bins, lo, hi", [(4096, 0.0, 1.0), (65_536, -50.5, 75.25), (256, 0.1, 0.9)])
def test_float32_is_binned_as_read_exactly(cp, monkeypatch, bins, lo, hi):
    """float32 over bins one block holds behind a TMA ring takes the one-pass kernel (hist_block_tma_float): exact
    against numpy over several chunks, a misaligned view (the ring's scalar head), NaN and infinities, edges the
    GPU computes and edges numpy computes (no range), repeated prepared calls and a graph replay; one scratch
    buffer (the counts), no index buffer."""
    from cuadv.graphs import Graph
    from cuadv.histograms import api

    monkeypatch.setattr(api, "DIRECT_CHUNK", 1 << 19)  # several chunks, each counted and widened (accumulating)
    rng = np.random.default_rng(bins)
    host = (rng.random(2_000_003) * (hi - lo) * 1.1 + lo - 0.05 * (hi - lo)).astype(np.float32)
    host[:7] = [np.nan, np.inf, -np.inf, lo, hi, np.nextafter(np.float32(hi), np.float32(0)), (lo + hi) / 2]
    x = cp.asarray(host)
    p = prepare_histogram(x, bins, range=(lo, hi))
    for view, ref in ((x, host), (x[1:], host[1:]), (x[3:-2], host[3:-2])):
        for r in ((lo, hi), None):
            want, want_edges = np.histogram(ref[np.isfinite(ref)] if r is None else ref, bins, range=r)
            hist, edges = histogram(view[cp.isfinite(view)] if r is None else view, bins, range=r)
            assert np.array_equal(cp.asnumpy(hist), want) and np.array_equal(cp.asnumpy(edges), want_edges), (r,)
        if view is x:
            for _ in range(2):
                hist, edges = p(view)
                assert np.array_equal(cp.asnumpy(hist), np.histogram(host, bins, range=(lo, hi))[0])
    assert p.plan.binned and p._index is None
    s = cp.cuda.Stream(non_blocking=True)
    captured = []
    graph = Graph.capture(s, lambda: captured.append(histogram(x, bins, range=(lo, hi), stream=s)))
    graph.launch(s.ptr)
    s.synchronize()
    assert np.array_equal(cp.asnumpy(captured[0][0]), np.histogram(host, bins, range=(lo, hi))[0])
    graph.close()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bins", [7, 4096, 65536, 1 << 20])
@pytest.mark.parametrize("lo, hi", [(0.0, 1.0), (-3.5, 1000.25), (997.0, 1003.0), (-200.0, -199.0)])
def test_values_on_and_beside_every_edge_are_binned_as_numpy_bins_them(cp, dtype, bins, lo, hi):
    """Every edge and the 4 values of the type either side of it, among uniform values: the edge nearest the quick
    estimate decides each value, or numpy's estimate and a step against the edges (histogram_bins.cuh), in the
    one pass (float32 up to 65,536 bins) and the binning pass; exact against numpy, with the range (Python floats:
    edges the GPU computes; float32 scalars: numpy's, computed in float32) and without (numpy's edges of the data's
    min and max)."""
    for r in ((lo, hi), (np.float32(lo), np.float32(hi)), None):
        try:
            edges = np.histogram_bin_edges(np.array([lo, hi], dtype=dtype), bins, range=r)
        except ValueError:
            continue  # numpy: too many bins for this range (float32 near 1000 at 1M bins)
        near = around_values(edges, dtype)
        rng = np.random.default_rng(bins)
        host = np.concatenate([rng.uniform(lo, hi, 300_001).astype(dtype), *near])
        host = np.clip(host, np.array(lo, dtype), np.array(hi, dtype)) if r is None else host
        want, want_edges = np.histogram(host, bins, range=r)
        hist, got_edges = histogram(cp.asarray(host), bins, range=r)
        assert np.array_equal(cp.asnumpy(got_edges), want_edges), r
        assert np.array_equal(cp.asnumpy(hist), want), r


@pytest.mark.parametrize("bins", [7, 100_000])
def test_int64_beyond_2_53_is_kept_as_numpy_compares_it(cp, bins):
    """int64 values within 3,000 of the range's ends, far beyond 2**53: numpy compares them with integer ends
    exactly (a value just past an end is left out, though it rounds onto the end as a float64) and with float
    ends as float64s; cuadv counts what numpy counts for either kind of end, and for a range of each kind."""
    top = np.iinfo(np.int64).max
    around = np.arange(-3000, 3001, dtype=np.int64)
    cases = []
    for lo, hi, host in ((-3062579159392472241, -2215994921906757937,
                          np.concatenate([-3062579159392472241 + around, -2215994921906757937 + around])),
                         (2**62, top - 1000, np.concatenate([2**62 + around, top - np.arange(6001, dtype=np.int64)]))):
        cases += [(host, r) for r in ((lo, hi), (np.int64(lo), np.int64(hi)), (float(lo), float(hi)), (lo, float(hi)))]
    for host, r in cases:
        want, want_edges = np.histogram(host, bins, range=r)
        hist, got_edges = histogram(cp.asarray(host), bins, range=r)
        assert np.array_equal(cp.asnumpy(got_edges), want_edges), r
        assert np.array_equal(cp.asnumpy(hist), want), r


def test_one_shot_calls_take_zeroed_counts_from_their_stream(cp, monkeypatch):
    """A one-shot call's counts outlive it, zeroed by its widening pass: the next one-shot call on the same stream
    takes them without a memset, another stream has its own; a call being captured into a graph takes none (a
    replay may run beside later work on the stream); every result exact, the replay's too."""
    from cuadv.graphs import Graph
    from cuadv.histograms import api, zeroed

    memsets = count_memsets(monkeypatch)
    pool = zeroed.ZeroedCounts()
    monkeypatch.setattr(api, "ZEROED", pool)
    bins, rng = 4096, np.random.default_rng(5)
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]

    def one_shot(s, **kw):
        x = rng.integers(-3, bins + 3, size=300_007).astype(np.int32)
        with s:
            hist, edges = histogram(cp.asarray(x), bins, range=(0, bins), **kw)
        s.synchronize()  # the checks read on CuPy's default stream, which does not wait for s
        return x, hist, edges

    def exact(x, hist, edges):
        want, want_edges = np.histogram(x, bins, range=(0, bins))
        assert np.array_equal(cp.asnumpy(hist), want) and np.array_equal(cp.asnumpy(edges), want_edges)

    for _ in range(3):
        for s in streams:
            exact(*one_shot(s))
    assert len(memsets) == 2 and len(pool) == 2  # the first call on each stream cleared its counts
    x = rng.integers(0, bins + 1, size=500_009).astype(np.int32)
    x_gpu, out = cp.asarray(x), cp.zeros(bins, dtype=cp.int64)
    cp.cuda.Device().synchronize()  # x_gpu and out are made on CuPy's default stream, which streams[0] ignores
    captured = []  # keeps the edges the replays write alive
    graph = Graph.capture(streams[0], lambda: captured.append(
        histogram(x_gpu, bins, range=(0, bins), out=out, stream=streams[0])))
    assert len(memsets) == 3 and len(pool) == 2  # captured: a memset node, nothing taken
    for _ in range(2):
        graph.launch(streams[0].ptr)
        exact(*one_shot(streams[0]))
        streams[0].synchronize()
        assert np.array_equal(cp.asnumpy(out), np.histogram(x, bins, range=(0, bins))[0])
    assert len(memsets) == 3 and len(pool) == 2
    # Buffers of one size for different slot counts (1 to 3 bins in place count 2 to 4 slots; 2 and 3 slots take 16
    # bytes): a buffer is zero only in the slots it was given back with, so it is taken for those only.
    for tiny in (1, 2, 3, 1, 3, 2):
        x = rng.integers(-1, tiny + 2, size=1_001).astype(np.int32)
        with streams[1]:
            hist, _ = histogram(cp.asarray(x), tiny, range=(0, tiny))
        streams[1].synchronize()
        assert np.array_equal(cp.asnumpy(hist), np.histogram(x, tiny, range=(0, tiny))[0]), tiny


def test_non_contiguous_input_raises(cp):
    x = cp.arange(100, dtype=cp.int32)[::2]
    with pytest.raises(TypeError, match="C-contiguous"):
        histogram(x, 10)
    with pytest.raises(TypeError, match="C-contiguous"):
        bincount(x)


def test_cupy_non_blocking_stream_orders_with_surrounding_work(cp):
    n, bins = 8_000_003, 1000
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.empty(n, dtype=cp.int32)
        x.fill(7)  # on s; no synchronize before the histogram reads it
        x[: n // 2] = cp.arange(n // 2, dtype=cp.int32) % bins
        hist, _ = histogram(x, bins, range=(0, bins))
        counts = bincount(x, minlength=bins)
        total = int(hist.sum())  # CuPy work on s after ours
        peak = int(counts[7])
    want = np.bincount(np.concatenate([np.arange(n // 2) % bins, np.full(n - n // 2, 7)]), minlength=bins)
    assert total == n and peak == want[7]
    assert np.array_equal(cp.asnumpy(hist), want)


SPIN = r"""
#include <cuadv/timer.cuh>
extern "C" __global__ void spin(unsigned long long ns) { cuadv::timer::spin_ns(ns); }
"""


@pytest.mark.parametrize("op", ["bincount", "histogram"])
def test_a_given_out_is_ordered_after_its_producers_stream(cp, op):
    """out is filled with 7s on one non-blocking stream behind a 30 ms spin and counted into on another: the count
    waits for the stream out's CAI v3 names before it zeroes out, so the fill cannot land over the counts. (x is
    handed over without a stream, CAI v2: CuPy names its current stream for every array, so x would order the
    count after the fill by itself.)"""
    from cuadv import LaunchConfig, compile_source, launch

    n, bins = 1_000_003, 1000
    host = np.arange(n, dtype=np.int32) % bins
    x_cupy = cp.asarray(host)
    cp.cuda.Device().synchronize()  # x is ready on every stream
    cai = {k: v for k, v in x_cupy.__cuda_array_interface__.items() if k != "stream"}
    x = type("NoStream", (), {"__cuda_array_interface__": {**cai, "version": 2}})()
    spin = compile_source(SPIN, name="histogram_api_spin").kernel("spin")
    fill, count = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with fill:
        out = cp.empty(bins, dtype=cp.int64)
        launch(spin, LaunchConfig(grid=1, block=32), np.uint64(30_000_000), stream=fill)
        out.fill(7)  # on fill, after the spin
        got = (bincount(x, minlength=bins, out=out, stream=count) if op == "bincount"
               else histogram(x, bins, range=(0, bins), out=out, stream=count)[0])
    count.synchronize()
    assert got is out and np.array_equal(cp.asnumpy(out), np.bincount(host, minlength=bins))


def test_torch_in_torch_out_and_side_stream():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    host = rng.integers(0, 300, size=1_000_003).astype(np.int64)
    x = torch.as_tensor(host, device="cuda")
    counts = bincount(x, minlength=10)
    assert isinstance(counts, torch.Tensor) and counts.dtype == torch.int64 and counts.is_cuda
    assert np.array_equal(counts.cpu().numpy(), np.bincount(host, minlength=10))
    assert torch.equal(counts, torch.bincount(x, minlength=10))
    hist, edges = histogram(x.float(), 16)
    want, want_edges = np.histogram(host.astype(np.float32), 16)
    assert isinstance(hist, torch.Tensor) and np.array_equal(hist.cpu().numpy(), want)
    assert isinstance(edges, torch.Tensor) and np.array_equal(edges.cpu().numpy(), want_edges)
    out = torch.full((16,), -1, dtype=torch.int64, device="cuda")
    assert histogram(x.float(), 16, out=out)[0] is out and np.array_equal(out.cpu().numpy(), want)

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = torch.full((4_000_001,), 3, dtype=torch.int32, device="cuda")  # filled on the side stream
        y[::2] = 5
        c = bincount(y)  # stream=None: torch's current stream, the side stream
        s = int(c.sum())  # torch work after ours on the same stream
    assert s == 4_000_001 and c[5].item() == 2_000_001 and c[3].item() == 2_000_000


def test_named_cluster_variant_without_clusters_names_the_fallback(cp):
    from cuadv.histograms.launcher import engine

    if engine().caps.cluster_launch:
        pytest.skip("this GPU has clusters")
    with pytest.raises(UnsupportedFeatureError, match="variant='shared', 'hot' or 'global'"):
        histogram(cp.zeros(10, dtype=cp.int32), 1 << 20, range=(0, 1 << 20), variant="exchange")


def test_calls_that_read_min_max_refuse_a_capture_and_leave_the_stream_usable(cp):
    """histogram without range and bincount read x's min and max back to the host, which a stream being captured
    into a CUDA graph cannot wait for: they raise naming the way out, the capture ends cleanly (Graph.capture), and
    the stream then counts as before; with range the same histogram is captured and replayed exactly."""
    from cuadv.graphs import Graph

    s = cp.cuda.Stream(non_blocking=True)
    x_host = np.random.default_rng(9).integers(0, 300, size=100_003).astype(np.int32)
    x = cp.asarray(x_host)
    cp.cuda.Device().synchronize()
    with pytest.raises(UnsupportedFeatureError, match=r"cuadv.histogram without range needs x's min and max read "
                                                      r"back to the host.*fallback: pass range=\(lo, hi\)"):
        Graph.capture(s, lambda: histogram(x, 64, stream=s))
    with pytest.raises(UnsupportedFeatureError, match=r"cuadv.bincount .*fallback: cuadv.histograms.count_bins"):
        Graph.capture(s, lambda: bincount(x, stream=s))
    with s:
        assert np.array_equal(cp.asnumpy(bincount(x)), np.bincount(x_host))
    captured = []
    graph = Graph.capture(s, lambda: captured.append(histogram(x, 64, range=(0, 300), stream=s)))
    graph.launch(s.ptr)
    s.synchronize()
    assert np.array_equal(cp.asnumpy(captured[0][0]), np.histogram(x_host, 64, range=(0, 300))[0])
    graph.close()
