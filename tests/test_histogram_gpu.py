"""The DSM histogram on a GPU: every variant exact against numpy.bincount, the error cases."""

import numpy as np
import pytest

from cuadv import current_device
from cuadv.errors import KernelArgumentError, LaunchConfigError
from cuadv.histograms.plans import TMA_RINGS
from cuadv.labs import histogram as h

pytestmark = pytest.mark.gpu

SIZES = (0, 1, 7, 4099, 1_000_003)  # empty, one, primes; 4099 and 1,000,003 are not multiples of 4 or 16


def _largest():
    return current_device().caps.max_cluster_size_nonportable


@pytest.mark.parametrize("dtype, bins", [("int32", 1), ("int32", 256), ("int32", 4097), ("int32", 70_001),
                                         ("int32", 1 << 20), ("uint8", 1), ("uint8", 200), ("uint8", 256)])
@pytest.mark.parametrize("dist", ["uniform", "zipf"])
def test_every_variant_matches_bincount(cp, dtype, bins, dist):
    rng = np.random.default_rng()
    options = h.engine().options(bins, dtype)
    assert {"variant": "global"} in options
    for n in SIZES:
        host = h.host_data(rng, n, bins, dist, dtype, out_of_range=True)
        want = h.reference_counts(host, bins)
        for offset in (0, 1):  # 1: the data starts one element past a 16-byte boundary
            dev = h.on_device(cp, host, offset)
            for opts in options:
                h.check_variant(cp, host, bins, offset, dev=dev, want=want, **opts)


@pytest.mark.parametrize("stages, vectors", TMA_RINGS)
@pytest.mark.parametrize("dtype, bins", [("int32", 256), ("int32", 4097), ("int32", 33_000), ("int32", 65_536),
                                         ("uint8", 256), ("uint8", 97)])
def test_tma_fed_shared_histogram_over_many_turns_of_its_ring(cp, stages, vectors, dtype, bins):
    """One block takes hundreds of chunks (the ring wraps, the barriers' parity flips and every named barrier
    completes many times), a few blocks, and the persistent grid; data 0 or 1 element past a 16-byte boundary,
    with a tail. At 33,000 bins one block per SM holds 32-bit counters (one replica), at 65,536 bins 16-bit halves,
    which Zipf data's hot bins wrap many times."""
    if not current_device().caps.tma:
        pytest.skip("the TMA-fed histogram needs compute capability 9.0")
    try:
        h.engine().plan(bins, dtype, "shared", stages=stages, vectors=vectors)
    except LaunchConfigError:
        pytest.skip(f"{bins} bins take no ring of {stages} chunks of {vectors} vectors")
    rng = np.random.default_rng()
    host = h.host_data(rng, 3_000_017, bins, "zipf", dtype, out_of_range=True)
    want = h.reference_counts(host, bins)
    for offset in (0, 1):
        dev = h.on_device(cp, host, offset)
        for units in (1, 3, None):
            h.check_variant(cp, host, bins, offset, dev=dev, want=want, variant="shared", stages=stages,
                            vectors=vectors, units=units)


@pytest.mark.parametrize("cluster", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("bins, bits", [(5000, 32), (5000, 16), (1 << 20, 16)])
def test_dsm_cluster_sizes_over_many_clusters(cp, cluster, bins, bits):
    if cluster > _largest():
        pytest.skip(f"cluster of {cluster} exceeds this GPU's largest cluster")
    try:
        h.engine().plan(bins, "int32", "dsm", cluster, counter_bits=bits)
    except LaunchConfigError:
        pytest.skip(f"{bins} bins do not fit a cluster of {cluster} with {bits}-bit counters")
    rng = np.random.default_rng()
    host = h.host_data(rng, 3_000_017, bins, "zipf", "int32", out_of_range=True)
    want = h.reference_counts(host, bins)
    dev = h.on_device(cp, host)
    for aggregate in (False, True):
        # default grid (several clusters) and the full persistent grid
        h.check_variant(cp, host, bins, dev=dev, want=want, variant="dsm", cluster=cluster, counter_bits=bits,
                        aggregate=aggregate)
        resident = h.engine().resident_units(h.engine().plan(bins, "int32", "dsm", cluster, aggregate, bits))
        h.check_variant(cp, host, bins, dev=dev, want=want, variant="dsm", cluster=cluster, counter_bits=bits,
                        aggregate=aggregate, units=resident)


@pytest.mark.parametrize("cluster", [2, 4, 8, 16])
@pytest.mark.parametrize("bins, bits", [(5000, 32), (5000, 16), (70_001, 16), (262_144, 16), (262_144, 32),
                                        (1 << 20, 16)])
def test_exchange_configs_over_many_clusters(cp, cluster, bins, bits):
    if cluster > _largest():
        pytest.skip(f"cluster of {cluster} exceeds this GPU's largest cluster")
    try:
        h.engine().plan(bins, "int32", "exchange", cluster, counter_bits=bits)
    except LaunchConfigError:
        pytest.skip(f"{bins} bins do not fit the exchange over {cluster} blocks with {bits}-bit counters")
    rng = np.random.default_rng()
    for dist in ("uniform", "zipf"):
        host = h.host_data(rng, 3_000_017, bins, dist, "int32", out_of_range=True)
        want = h.reference_counts(host, bins)
        dev = h.on_device(cp, host, 1)
        for vectors, sort, hot in ((1, "ballot", 0), (2, "ballot", 0), (1, "atomic", 0), (2, "atomic", 0),
                                   (2, "ballot", 1), (1, "atomic", 4095), (2, "ballot", 4095)):
            opts = dict(variant="exchange", cluster=cluster, counter_bits=bits, vectors=vectors, hot=hot, sort=sort)
            try:
                plan = h.engine().plan(bins, "int32", **opts)
            except LaunchConfigError:
                continue  # the private range does not fit beside this shard
            # default grid (several clusters), the full persistent grid, one cluster (many rounds)
            for units in (None, h.engine().resident_units(plan), 1):
                h.check_variant(cp, host, bins, 1, dev=dev, want=want, units=units, **opts)


@pytest.mark.parametrize("cluster", [2, 4, 16])
@pytest.mark.parametrize("bits", [32, 16])
def test_exchange_overflowing_runs(cp, cluster, bits):
    """Runs longer than their capacity take the remote-atomic path: one value everywhere (every element
    of a chunk to one owner), two values of one owner, and Zipf without a private range."""
    if cluster > _largest():
        pytest.skip(f"cluster of {cluster} exceeds this GPU's largest cluster")
    rng = np.random.default_rng()
    bins = 40_000
    n = 2_000_003
    cases = [np.full(n, 12_345, dtype=np.int32),
             np.where(rng.random(n) < 0.5, 7, 7 + cluster).astype(np.int32),
             h.host_data(rng, n, bins, "zipf", "int32", out_of_range=True)]
    for host in cases:
        host[rng.integers(0, n, size=500)] = rng.integers(-3, bins + 3, size=500)
        want = h.reference_counts(host, bins)
        dev = h.on_device(cp, host)
        for vectors, sort in ((1, "ballot"), (2, "atomic")):
            h.check_variant(cp, host, bins, dev=dev, want=want, variant="exchange", cluster=cluster,
                            counter_bits=bits, vectors=vectors, sort=sort, units=2)


def test_hot_range_edges(cp):
    rng = np.random.default_rng()
    for bins in (1, 300, 70_001, 1 << 20):
        for dist in ("uniform", "zipf"):
            host = h.host_data(rng, 1_000_003, bins, dist, "int32", out_of_range=True)
            want = h.reference_counts(host, bins)
            dev = h.on_device(cp, host, 1)
            most = h.hot_max(current_device().caps.shared_mem_per_block_optin)
            for hot in sorted({1, max(1, min(bins - 1, most)), min(bins, most), min(bins, 4097)}):
                h.check_variant(cp, host, bins, 1, dev=dev, want=want, variant="hot", hot=hot)
                if bins > 1:
                    h.check_variant(cp, host, bins, 1, dev=dev, want=want, variant="hot", hot=hot, units=3)


def test_packed_counters_wrap_exactly(cp):
    h.validate_packed_wraps(cp)


def test_more_blocks_than_work(cp):
    # Blocks with no whole batch still zero, synchronise and flush their (empty) shards.
    rng = np.random.default_rng()
    host = h.host_data(rng, 5000, 300, "uniform", "int32", out_of_range=False)
    for opts, units in (({"variant": "global"}, 64), ({"variant": "shared"}, 64),
                        ({"variant": "dsm", "cluster": 4}, 32), ({"variant": "hot", "hot": 100}, 64),
                        ({"variant": "exchange", "cluster": 4}, 16),
                        ({"variant": "exchange", "cluster": 2, "vectors": 1, "hot": 50}, 32)):
        h.check_variant(cp, host, 300, units=units, **opts)  # 32 clusters of 4 (16 of 4 with 1 block per SM) fit


def test_auto_and_large_inputs(cp):
    x = h.make_data(cp, (64 << 20) + 3, 65_536, "zipf", "int32")
    got = h.histogram(x, 65_536)
    assert bool(cp.array_equal(got.astype(cp.int64), cp.bincount(x, minlength=65_536)))
    y = h.make_data(cp, (256 << 20) + 5, 256, "uniform", "uint8")
    got = h.histogram(y, 256)
    assert bool(cp.array_equal(got.astype(cp.int64), cp.bincount(y, minlength=256)))


def test_prepared_call_repeats_and_streams(cp):
    x = h.make_data(cp, 1 << 20, 1000, "uniform", "int32")
    want = cp.bincount(x, minlength=1000)
    cp.cuda.Device().synchronize()  # the input is ready before another stream reads it
    s = cp.cuda.Stream(non_blocking=True)
    call = h.engine().prepare(x, 1000, variant="dsm", cluster=2, stream=s)
    for _ in range(3):  # each call zeroes its output first
        out = call()
    s.synchronize()
    assert bool(cp.array_equal(out.astype(cp.int64), want))


def test_errors(cp):
    x = cp.zeros(100, dtype=cp.int32)
    with pytest.raises(TypeError, match="int32 or uint8"):
        h.histogram(cp.zeros(10, dtype=cp.float32), 10)
    with pytest.raises(ValueError, match=r"uint8 input holds values 0..255, so bins must be <= 256 \(got 1000\)"):
        h.histogram(cp.zeros(10, dtype=cp.uint8), 1000)
    with pytest.raises(KernelArgumentError, match="uint32 array of 100 elements"):
        h.histogram(x, 100, out=cp.zeros(100, dtype=cp.int32))
    with pytest.raises(KernelArgumentError, match="uint32 array of 100 elements"):
        h.histogram(x, 100, out=cp.zeros(99, dtype=cp.uint32))
    with pytest.raises(KernelArgumentError, match="C-contiguous"):
        h.histogram(cp.zeros(200, dtype=cp.int32)[::2], 100)
    with pytest.raises(LaunchConfigError, match="cluster size 32 exceeds the largest cluster size 16"):
        h.histogram(x, 100, variant="dsm", cluster=32)
    with pytest.raises(LaunchConfigError, match="at most 929791 bins with 8 blocks"):
        h.histogram(x, 1 << 20, variant="dsm", cluster=8)
    with pytest.raises(LaunchConfigError, match="can be resident"):
        h.histogram(x, 100, variant="dsm", cluster=2, units=10**6)
    with pytest.raises(LaunchConfigError, match="can be resident"):
        h.histogram(x, 100, variant="exchange", cluster=4, units=10**6)
    with pytest.raises(ValueError, match="variant 'exchange' is for int32 input"):
        h.histogram(cp.zeros(10, dtype=cp.uint8), 100, variant="exchange")
    with pytest.raises(ValueError, match=r"hot must be an int in \[0, bins = 100\], got 101"):
        h.histogram(x, 100, variant="hot", hot=101)
    with pytest.raises(LaunchConfigError, match="mailbox entries are 16-bit"):
        h.histogram(x, 1 << 20, variant="exchange", cluster=4)


def test_exchange_and_hot_on_a_large_input(cp):
    """1 GiB-scale shapes (fewer elements): the exchange's many rounds and the hybrid's global path."""
    for dist in ("uniform", "zipf"):
        x = h.make_data(cp, (48 << 20) + 3, 1 << 20, dist, "int32")
        want = cp.bincount(x, minlength=1 << 20)
        for opts in ({"variant": "exchange"}, {"variant": "exchange", "hot": 4096, "vectors": 1},
                     {"variant": "hot"}, {"variant": "hot", "hot": 16384}):
            got = h.histogram(x, 1 << 20, **opts)
            assert bool(cp.array_equal(got.astype(cp.int64), want)), (dist, opts)


def test_occupancy_table():
    table = h.occupancy_table()
    assert len(table.rows) == len(h.OCCUPANCY_SHARED_KB)
    caps = current_device().caps
    first = table.rows[0]  # no dynamic shared memory
    assert 1 <= first[1] <= 8 <= caps.max_cluster_size_portable and first[2] >= first[1]
    assert all(v >= 0 for row in table.rows for v in row[3:])


def test_smoke():
    h.HistogramLab().smoke()
