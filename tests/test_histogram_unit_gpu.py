"""cuadv.histogram of int32 over range=(0, bins) counts the input in place (no binning pass), exactly as
numpy: out-of-range and negative values dropped, v == bins in the closed last bin; lo != 0 keeps the
binning path; auto still samples the data and takes the skew-aware plan for Zipf data."""

import numpy as np
import pytest

from cuadv.errors import LaunchConfigError, UnsupportedFeatureError
from cuadv.histograms import histogram, prepare_histogram
from cuadv.histograms.launcher import engine
from cuadv.testing.histograms import zipf_cdf

pytestmark = pytest.mark.gpu


def edgy(rng, n, bins):
    """Uniform in-range values plus the values at and around every edge."""
    x = rng.integers(0, bins, size=n).astype(np.int64)
    special = np.array([0, bins - 1, bins, bins + 1, -1, -bins, 2 * bins, np.iinfo(np.int32).min,
                        np.iinfo(np.int32).max] * 97, dtype=np.int64)
    x[rng.choice(n, special.size, replace=False)] = special
    return x.astype(np.int32)


@pytest.mark.parametrize("bins", [1, 7, 256, 4096, 58_111, 65_536, 262_144, 1 << 20, 1 << 22])
@pytest.mark.parametrize("variant", ["auto", "global", "shared", "dsm", "hot", "exchange"])
def test_unit_width_counts_in_place_exactly(cp, bins, variant):
    rng = np.random.default_rng(bins)
    host = edgy(rng, 1_000_003, bins)
    want, want_edges = np.histogram(host, bins, range=(0, bins))
    try:
        p = prepare_histogram(cp.asarray(host), bins, range=(0, bins), variant=variant)
        hist, edges = p()
    except (LaunchConfigError, UnsupportedFeatureError) as exc:  # a named variant that cannot hold these bins
        assert variant != "auto", exc
        return
    assert np.array_equal(cp.asnumpy(hist), want), (bins, variant)
    assert np.array_equal(cp.asnumpy(edges), want_edges)
    if p.unit is not None and p._unit_ok:
        assert p._index is None  # no index buffer: no binning pass ran
    if variant == "auto" and engine().plan(bins + 1, "int32").variant == engine().plan(bins, "int32").variant:
        assert p._unit_ok and p._index is None
    # one-shot form, twice (scratch released and taken again), and into out=
    out = cp.full(bins, -3, dtype=cp.int64)
    for _ in range(2):
        h2, _ = histogram(cp.asarray(host), bins, range=(0, bins), variant=variant, out=out)
        assert h2 is out and np.array_equal(cp.asnumpy(out), want)


@pytest.mark.parametrize("variant", ["auto", "exchange"])
def test_exchange_closes_the_last_bin_where_the_extra_slot_does_not_fit(cp, variant):
    bins = 1 << 20  # bins + 1 slots over 16 blocks: 65,537 local bins, past the 16-bit mailbox entries
    if engine().plan(bins, "int32").variant != "exchange":
        pytest.skip("the exchange does not hold 1M bins here")
    rng = np.random.default_rng(5)
    host = edgy(rng, 2_000_011, bins)
    p = prepare_histogram(cp.asarray(host), bins, range=(0, bins), variant=variant)
    hist, _ = p()
    assert np.array_equal(cp.asnumpy(hist), np.histogram(host, bins, range=(0, bins))[0])
    assert p.plan.variant == "exchange" and p.plan.closed and p.plan.bins == bins and p._index is None


def test_chunks_accumulate_the_folded_edge(cp, monkeypatch):
    from cuadv.histograms import api

    monkeypatch.setattr(api, "DIRECT_CHUNK", 1 << 16)  # several launches, each folding v == bins
    rng = np.random.default_rng(3)
    host = edgy(rng, 300_007, 4096)
    hist, _ = histogram(cp.asarray(host), 4096, range=(0, 4096))
    assert np.array_equal(cp.asnumpy(hist), np.histogram(host, 4096, range=(0, 4096))[0])


@pytest.mark.parametrize("rng_", [(5, 5 + 4096), (0, 4095), (0.5, 4096.5), (-4096, 0)])
def test_other_ranges_keep_the_binning_path(cp, rng_):
    rng = np.random.default_rng(11)
    host = edgy(rng, 200_003, 4096)
    p = prepare_histogram(cp.asarray(host), 4096, range=rng_)
    hist, edges = p()
    want, want_edges = np.histogram(host, 4096, range=rng_)
    assert p.unit is None and p._index is not None  # the index pass ran
    assert np.array_equal(cp.asnumpy(hist), want) and np.array_equal(cp.asnumpy(edges), want_edges)


def test_auto_takes_the_hot_plan_in_place_for_zipf(cp):
    bins = 1 << 20
    if engine().plan(bins, "int32").variant == "shared":
        pytest.skip("one block holds 1M bins here")
    rng = np.random.default_rng(2)
    host = np.minimum(np.searchsorted(zipf_cdf(bins), rng.random(4_000_037), side="right"), bins - 1).astype(np.int32)
    p = prepare_histogram(cp.asarray(host), bins, range=(0, bins))
    hist, _ = p()
    assert np.array_equal(cp.asnumpy(hist), np.histogram(host, bins, range=(0, bins))[0])
    assert p.plan.variant == "hot" and p._index is None
    uniform = rng.integers(0, bins, size=4_000_037).astype(np.int32)
    q = prepare_histogram(cp.asarray(uniform), bins, range=(0, bins))
    q()
    assert q.plan.variant != "hot"


@pytest.mark.parametrize("dtype, rng_", [("float32", (-50.5, 75.25)), ("float32", (0.0, 1.0)), ("float64", (-3, 7)),
                                         ("int32", (0, 65536)), ("uint16", (1, 1000))])
def test_edges_written_on_the_gpu_equal_numpy(cp, dtype, rng_):
    x = cp.zeros(10, dtype=dtype)
    for bins in (1, 10, 4096, 1 << 20):
        _, edges = histogram(x, bins, range=rng_)
        want = np.histogram_bin_edges(np.zeros(10, dtype=dtype), bins, range=rng_)
        assert edges.dtype == want.dtype and np.array_equal(cp.asnumpy(edges).view(np.uint8), want.view(np.uint8))
