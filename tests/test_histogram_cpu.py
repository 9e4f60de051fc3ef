"""The DSM histogram without a GPU: kernels for sm_90a and sm_100a, plans, argument checks, the
16-bit counter arithmetic, test data."""

import numpy as np
import pytest

from cuadv.errors import KernelArgumentError, LaunchConfigError
from cuadv.histograms import launcher
from cuadv.histograms.plans import (BLOCK_RESERVED, H200_SHARED_PER_BLOCK, H200_SHARED_PER_SM, TMA_RINGS,
                                    tma_ring_bytes)
from cuadv.labs import histogram as h


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_every_kernel_compiles_without_spills(arch):
    module = h.build_module(arch)
    assert f".target {arch}" in module.ptx
    for expr in h.kernel_expressions():
        res = module.resources_for(expr)
        assert res.registers <= 64, (expr, res)  # __launch_bounds__(1024): 1024 threads per SM at least
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_bytes == 0, (expr, res)
    # DSM atomics and the cluster barrier are really there.
    assert "barrier.cluster.arrive" in module.ptx and "mapa" in module.ptx
    assert "ld.global.nc.L1::no_allocate.L2::256B.v4.u32" in module.ptx
    # The exchange: 16-byte remote stores into the owners' mailboxes and the split cluster barrier.
    assert "st.shared::cluster.v4.u32" in module.ptx
    assert "barrier.cluster.arrive.release;" in module.ptx and "barrier.cluster.wait.acquire;" in module.ptx


def test_lab_protocol():
    lab = h.HistogramLab()
    assert lab.name == "histogram" and lab.title

    class Caps:
        compute_capability = (8, 0)
        cluster_launch = False

        def cc_string(self):
            return "8.0"

    reason = lab.supported(Caps())
    assert "9.0" in reason and "8.0" in reason and "variant='shared'" in reason


@pytest.mark.parametrize("bins, variant, cluster, bits", [
    (1, "shared", 1, 32),
    (256, "shared", 1, 32),
    (4096, "shared", 1, 32),
    (58_111, "shared", 1, 32),  # the most one block holds with 32-bit counters (plus the trash slot)
    (58_112, "shared", 1, 16),  # 16-bit counters, two per word, still one block
    (65_536, "shared", 1, 16),
    (116_223, "shared", 1, 16),
    (116_224, "exchange", 4, 32),
    (131_072, "exchange", 4, 32),  # several blocks: the exchange (measured 2-3x remote atomics)
    (262_144, "exchange", 8, 32),
    (1 << 20, "exchange", 16, 16),
    (4 << 20, "global", 1, 0),
])
def test_auto_plan(bins, variant, cluster, bits):
    plan = h.plan_histogram(bins)
    assert (plan.variant, plan.cluster, plan.counter_bits) == (variant, cluster, bits)
    if plan.variant != "global":
        assert plan.shared_bytes <= h.H200_SHARED_PER_BLOCK
        assert plan.replicas & (plan.replicas - 1) == 0 and 1 <= plan.replicas <= 32
        assert plan.threads == h.THREADS
        assert plan.kernel_expr in h.kernel_expressions()


def test_replicas_for_small_bin_counts():
    assert h.plan_histogram(256).replicas == 32  # one per lane: conflict-free
    assert h.plan_histogram(256, "uint8").replicas == 32
    assert h.plan_histogram(4096).replicas == 4
    assert h.plan_histogram(16384).replicas == 1
    assert h.plan_histogram(256, variant="dsm", cluster=16).replicas == 32


def test_dsm_plans_at_every_cluster_size():
    for c in h.CLUSTER_SIZES:
        plan = h.plan_histogram(5000, variant="dsm", cluster=c)
        assert plan.cluster == c and plan.counter_bits == 32 and plan.scalar_args()[0] == c.bit_length() - 1
    assert h.plan_histogram(1 << 20, variant="dsm", cluster=16, counter_bits=16).kernel_expr == \
        "hist_cluster<int, true, false>"
    assert h.plan_histogram(100, variant="dsm", aggregate=True).kernel_expr == "hist_cluster<int, false, true>"
    assert h.plan_histogram(5, variant="dsm", cluster=2, counter_bits=16).counter_bits == 16


def test_plan_sizes_match_the_kernel_layout():
    # counter_words in histogram.cu: ceil((bins + 1) / C) slots, packed two per word, times R.
    for bins in (1, 2, 3, 255, 256, 4097, 65_536, 1 << 20):
        for c in h.CLUSTER_SIZES:
            for bits in (32, 16):
                try:
                    plan = h.plan_histogram(bins, variant="dsm", cluster=c, counter_bits=bits)
                except LaunchConfigError:
                    continue
                shard = -(-(bins + 1) // c)
                words = (shard if bits == 32 else (shard + 1) // 2) * plan.replicas
                assert plan.shared_bytes == 4 * words


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(bins=0), ValueError, r"bins = 0 is outside \[1, 1073741824\]"),
    (dict(bins=(1 << 30) + 1), ValueError, "outside"),
    (dict(bins=2.5), TypeError, "bins must be an int"),  # TypeError as cuadv.histogram's (one check_bins)
    (dict(bins=257, dtype="uint8"), ValueError, r"uint8 input holds values 0..255, so bins must be <= 256 \(got 257\)"),
    (dict(bins=10, dtype="float32"), ValueError, "int32 or uint8"),
    (dict(bins=10, variant="magic"), ValueError, "variant must be one of"),
    (dict(bins=10, variant="dsm", cluster=32), LaunchConfigError,
     "cluster size 32 exceeds the largest cluster size 16"),
    (dict(bins=10, variant="dsm", cluster=3), LaunchConfigError, "power of two in 1..16, got 3"),
    (dict(bins=10, variant="dsm", cluster=0), LaunchConfigError, "power of two"),
    (dict(bins=10, variant="global", cluster=2), LaunchConfigError, "applies to variants 'dsm' and 'exchange' only"),
    (dict(bins=10, variant="hot", cluster=2), LaunchConfigError, "applies to variants 'dsm' and 'exchange' only"),
    (dict(bins=10, variant="shared", aggregate=True), ValueError, "aggregate applies to variant 'dsm' only"),
    (dict(bins=10, variant="exchange", aggregate=True), ValueError, "aggregate applies to variant 'dsm' only"),
    (dict(bins=10, variant="shared", counter_bits=16), ValueError, "counter_bits applies to variants 'dsm' and"),
    (dict(bins=10, variant="dsm", hot=5), ValueError, "hot applies to variants 'hot' and 'exchange' only, not 'dsm'"),
    (dict(bins=10, variant="hot", vectors=1), ValueError, "vectors applies to variant 'exchange', or 'shared'"),
    (dict(bins=10, variant="hot", hot=11), ValueError, r"hot must be an int in \[0, bins = 10\], got 11"),
    (dict(bins=10, variant="hot", hot=-1), ValueError, r"hot must be an int in \[0, bins = 10\]"),
    (dict(bins=10, variant="hot", hot=0), ValueError, r"at least one privatised bin \(hot >= 1\)"),
    (dict(bins=10, variant="exchange", hot=2.0), ValueError, "hot must be an int"),
    (dict(bins=100_000, variant="hot", hot=60_000), LaunchConfigError,
     r"hot = 60000 low bins need 240000 B .* limit is 232448 B \(at most 58112 bins\)"),
    (dict(bins=200, dtype="uint8", variant="hot"), ValueError, "variant 'hot' is for int32 input"),
    (dict(bins=200, dtype="uint8", variant="exchange"), ValueError, "variant 'exchange' is for int32 input"),
    (dict(bins=10, variant="exchange", cluster=1), LaunchConfigError,
     "the exchange variant needs a cluster of 2, 4, 8, 16 blocks"),
    (dict(bins=10, variant="exchange", vectors=4), ValueError, "vectors must be one of 1, 2, got 4"),
    (dict(bins=10, variant="exchange", sort="radix"), ValueError, "sort must be one of ballot, atomic, got 'radix'"),
    (dict(bins=10, variant="dsm", sort="atomic"), ValueError, "sort applies to variant 'exchange' only"),
    (dict(bins=1 << 20, variant="exchange", cluster=8), LaunchConfigError,
     r"cluster of 8 blocks leave 131072 local bins per block; mailbox entries are 16-bit, so at most 65536 "
     r"\(use a cluster of 16 or more\)"),
    (dict(bins=1 << 20, variant="exchange", largest_cluster=8), LaunchConfigError, "cluster of 8 blocks leave 131072"),
    (dict(bins=262_144, variant="exchange", cluster=4, counter_bits=32), LaunchConfigError,
     r"cluster of 4 blocks \(32-bit counters, hot = 0, 8192 elements per round\) need \d+ B .* limit is 232448 B"),
    (dict(bins=1 << 20, variant="exchange", hot=8192), LaunchConfigError, "need 246592 B of shared memory per block"),
    (dict(bins=10, variant="dsm", counter_bits=8), ValueError, "counter_bits must be 16 or 32"),
    (dict(bins=10, dtype="uint8", variant="dsm", counter_bits=16), ValueError, "16-bit counters are for int32"),
    (dict(bins=70_000, variant="shared", stages=2), LaunchConfigError,
     r"bins = 70000 fit one block only as 16-bit counters, which take TMA rings of 2-vector chunks \(vectors=2, "
     r"stages 2 or 3"),
    (dict(bins=100_000, variant="shared", stages=2, vectors=2), LaunchConfigError,
     r"bins = 100000 with a TMA ring of 2 chunks need 265616 B .* \(counters 200004 B, ring 65536 B\); the per-block "
     r"limit is 232448 B: use fewer stages, vectors=1 or stages=0"),
    (dict(bins=256, variant="shared", stages=4, vectors=2), ValueError,
     r"a TMA ring of 2-vector chunks takes stages 2 or 3 \(at most 96 KB\), got stages=4"),
    (dict(bins=256, variant="shared", stages=2, vectors=4), ValueError,
     r"vectors must be one of 1, 2 \(16-byte vectors per thread in a chunk of the TMA ring\), got 4"),
    (dict(bins=256, variant="shared", vectors=2), ValueError,
     r"vectors applies to variant 'exchange', or 'shared' with stages > 0, not 'shared' without stages"),
    (dict(bins=200_000, variant="shared"), LaunchConfigError,
     r"need 800004 B .* \(at most 58111 bins; int32 input up to 116223 bins with 16-bit counters\): use variant 'dsm'"),
    (dict(bins=256, dtype="uint8", variant="shared", shared_limit=1000), LaunchConfigError,
     r"need 1028 B .* \(at most 249 bins\): use variant 'dsm'"),
    (dict(bins=1 << 20, variant="dsm", cluster=8), LaunchConfigError,
     r"over a cluster of 8 blocks need 262148 B .* at most 929791 bins with 8 blocks"),
    (dict(bins=4_000_000, variant="dsm"), LaunchConfigError, "cluster of 16 blocks"),
    (dict(bins=10, variant="dsm", cluster=16, largest_cluster=8), LaunchConfigError, "largest cluster 8"),
])
def test_plan_errors_name_rule_value_and_limit(kwargs, error, text):
    with pytest.raises(error, match=text):
        h.plan_histogram(**kwargs)


class FakeArray:
    def __init__(self, ptr=1 << 20, shape=(100,), typestr="<i4", strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3}


def test_device_array_checks():
    a = h.device_array(FakeArray(), "x")
    assert (a.size, a.dtype) == (100, np.dtype(np.int32))
    assert h.device_array(FakeArray(shape=(4, 5), strides=(20, 4)), "x").size == 20
    with pytest.raises(KernelArgumentError, match="C-contiguous"):
        h.device_array(FakeArray(shape=(10,), strides=(8,)), "x")
    with pytest.raises(KernelArgumentError, match="not aligned to its 4-byte elements"):
        h.device_array(FakeArray(ptr=(1 << 20) + 2), "x")
    with pytest.raises(KernelArgumentError, match="x: a NumPy array lives in host memory"):
        h.device_array(np.zeros(4, dtype=np.int32), "x")
    with pytest.raises(KernelArgumentError, match="__cuda_array_interface__ or __dlpack__"):
        h.device_array(object(), "x")
    with pytest.raises(TypeError, match="int32 or uint8"):  # a wrong type, as cuadv.histogram's dtype check
        h._dtype_name(np.dtype(np.float32))


def packed_model(bins, c, increments, pairs=False):
    """A Python mirror of the packed 16-bit counters of one block's shard (one replica): a 32-bit word per
    two slots, wrap corrections into the 32-bit global bins, then the flush. Returns the final counts of every
    bin. ``pairs`` (one block, c = 1): the updates of two adjacent bins both in range are 64-bit adds to their
    two words (histogram.cu's global_pairs): the corrections' combined values, the high half wrapping within its
    word, and the last bin of an odd count left to 32-bit adds. (A carry out of the low bin would show in the high
    one, but from zeroed bins and fewer than 2^32 increments there is none: that is the precondition.)"""
    out = [0] * bins

    def add(lo_bin, hi_bin, lo, hi):  # lo to bin lo_bin, hi to bin hi_bin (bins past the end are dropped)
        if pairs and hi_bin == lo_bin + 1 and hi_bin < bins:
            both = (out[lo_bin] | (out[hi_bin] << 32)) + (lo | (hi << 32))
            out[lo_bin], out[hi_bin] = both & 0xFFFFFFFF, (both >> 32) & 0xFFFFFFFF
            return
        for b, v in ((lo_bin, lo), (hi_bin, hi)):
            if v and b < bins:
                out[b] = (out[b] + v) & 0xFFFFFFFF

    words = {}
    for slot, count in increments:
        local = slot // c
        rank = slot % c
        shift = (local & 1) * 16
        key = (rank, local >> 1)
        old = words.get(key, 0)
        delta = count << shift
        words[key] = (old + delta) & 0xFFFFFFFF
        lo_carry = shift == 0 and (old & 0xFFFF) + count > 0xFFFF
        word_wrap = old + delta > 0xFFFFFFFF
        lo_bin = ((local & ~1) * c) + rank
        if lo_carry or word_wrap:
            add(lo_bin, lo_bin + c, 0x10000 if lo_carry else 0,
                ((0xFFFFFFFF if lo_carry else 0) + (0x10000 if word_wrap else 0)) & 0xFFFFFFFF)
    for (rank, w), word in words.items():
        add(2 * w * c + rank, (2 * w + 1) * c + rank, word & 0xFFFF, word >> 16)
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("bins, c, pairs", [(1, 1, False), (3, 1, False), (4, 2, False), (5, 4, False), (7, 16, False),
                                            (2, 1, True), (3, 1, True), (4, 1, True)])
def test_packed_counter_corrections_are_exact(bins, c, pairs):
    rng = np.random.default_rng(5)
    slots = np.concatenate([np.zeros(300_000, dtype=np.int64), rng.integers(0, bins + 1, size=200_000)])
    if bins > 1:
        slots = np.concatenate([slots, np.ones(250_000, dtype=np.int64)])
    rng.shuffle(slots)
    counts = rng.integers(1, 33, size=slots.size)  # aggregated adds of up to 32 lanes
    got = packed_model(bins, c, zip(slots.tolist(), counts.tolist()), pairs=pairs)
    want = np.bincount(slots, weights=counts, minlength=bins + 1)[:bins].astype(np.int64)  # slot `bins`: trash
    assert np.array_equal(got, want)


def test_zipf_cdf_and_host_data():
    cdf = h.zipf_cdf(1000)
    assert cdf[-1] == pytest.approx(1.0) and np.all(np.diff(cdf) > 0)
    assert cdf[0] == pytest.approx(1 / sum(k ** -1.3 for k in range(1, 1001)))
    rng = np.random.default_rng(0)
    x = h.host_data(rng, 100_000, 1000, "zipf", "int32", out_of_range=False)
    assert x.dtype == np.int32 and x.min() >= 0 and x.max() < 1000 and np.mean(x == 0) > 0.2
    y = h.host_data(rng, 100_000, 1000, "uniform", "int32", out_of_range=True)
    assert (y < 0).any() and (y >= 1000).any()
    z = h.host_data(rng, 10_000, 200, "uniform", "uint8", out_of_range=True)
    assert z.dtype == np.uint8 and (z >= 200).any()
    ref = h.reference_counts(np.array([-1, 0, 0, 2, 5, 7], dtype=np.int32), 6)
    assert ref.tolist() == [2, 0, 1, 0, 0, 1]


def test_older_targets_get_the_portable_kernels_only():
    exprs = h.kernel_expressions("sm_80")
    assert not any("hist_cluster" in e or "hist_exchange" in e for e in exprs) and "hist_hot<int>" in exprs
    module = h.build_module("sm_80")
    for kernel in ("hist_block<int, false>", "hist_block<int, true>", "hist_hot<int>"):
        assert module.resources_for(kernel).spill_store_bytes == 0, kernel


def test_cluster_kernel_below_sm90_fails_with_a_message():
    from cuadv.compiler import compile_source, kernel_source
    from cuadv.errors import CompileError

    with pytest.raises(CompileError, match="hist_cluster needs sm_90 or newer"):
        compile_source(kernel_source("histogram.cu"), name="histogram_old", arch="sm_80",
                       name_expressions=["hist_cluster<int, false, false>"])
    with pytest.raises(CompileError, match="hist_exchange needs sm_90 or newer"):
        compile_source(kernel_source("histogram.cu"), name="histogram_old_x", arch="sm_80",
                       name_expressions=["hist_exchange<false, 4, 1>"])


@pytest.mark.parametrize("bins, cluster, bits", [
    (1, 2, 32), (5000, 2, 32), (70_001, 2, 32), (131_072, 2, 16), (131_073, 4, 32), (262_144, 4, 16),
    (1 << 20, 16, 16),
])
def test_exchange_default_plans(bins, cluster, bits):
    plan = h.plan_histogram(bins, variant="exchange")
    assert (plan.variant, plan.cluster, plan.counter_bits, plan.hot, plan.vectors) == ("exchange", cluster, bits, 0, 2)
    assert plan.clustered and plan.threads == h.THREADS and plan.kernel_expr in h.kernel_expressions()
    assert plan.scalar_args() == (0, plan.cap, 1, 0) and plan.cap == h.exchange_cap(cluster, 2)
    assert plan.shared_bytes == h.exchange_layout(bins, cluster, bits, 0, plan.cap)["bytes"] <= h.H200_SHARED_PER_BLOCK
    assert plan.label == f"dsm exchange c={cluster} ({bits}-bit, 8K/round, atomic sort)"  # atomic: the default
    ballot = h.plan_histogram(bins, variant="exchange", sort="ballot", vectors=1)
    assert ballot.scalar_args() == (0, h.exchange_cap(cluster, 1), 0, 0) and ballot.sort == "ballot"
    assert ballot.label == f"dsm exchange c={cluster} ({bits}-bit, 4K/round, ballot sort)"


def test_exchange_sizes_and_layout():
    # 1.25x a uniform chunk's share per owner, in 16-byte vectors of 16-bit entries.
    assert h.exchange_chunk(1) == 4096 and h.exchange_chunk(2) == 8192
    assert [h.exchange_cap(c, 2) for c in h.EXCHANGE_CLUSTER_SIZES] == [5120, 2560, 1280, 640]
    assert h.exchange_cap(16, 1) == 320 and h.exchange_cap(2, 1) == 2560
    for c in h.EXCHANGE_CLUSTER_SIZES:
        for v in h.EXCHANGE_VECTORS:
            cap = h.exchange_cap(c, v)
            assert cap % 8 == 0 and cap * c >= 5 * h.exchange_chunk(v) // 4
            for bins, bits, hot in ((1, 32, 0), (4097, 32, 1365), (70_001, 16, 3), (1 << 20, 16, 4096)):
                lay = h.exchange_layout(bins, c, bits, hot, cap)
                offsets = [lay[k] for k in ("counters_off", "stage_off", "mbox_off", "mcount_off", "cursor_off",
                                            "bytes")]
                assert all(o % 16 == 0 for o in offsets) and offsets == sorted(offsets)
                assert lay["stride"] >= cap and lay["stride"] % 8 == 0 and (lay["stride"] // 2) % 32 == 4
                assert lay["counters_off"] >= 4 * hot
                words = -(-bins // c) if bits == 32 else -(-(-(-bins // c)) // 2)
                assert lay["stage_off"] - lay["counters_off"] >= 4 * words
                assert lay["mbox_off"] - lay["stage_off"] == 2 * 2 * c * lay["stride"]
                assert lay["mcount_off"] - lay["mbox_off"] == 2 * 2 * c * cap
                assert lay["bytes"] - lay["cursor_off"] >= 4 * 3 * c
    # The largest case the lab measures fits an H200 block: 1M bins over 16 blocks, 8K per round, 4096 hot bins.
    big = h.plan_histogram(1 << 20, variant="exchange", hot=h.EXCHANGE_HOT)
    assert big.shared_bytes == 230_208 <= h.H200_SHARED_PER_BLOCK
    assert big.label == "dsm exchange c=16 (16-bit, 8K/round, atomic sort) +hot 4096"
    assert big.scalar_args() == (4096, 640, 1, 0)  # 1: the atomic sort
    # At 70,001 bins over 2 blocks the 32-bit shard and a hot range no longer fit: 16-bit counters instead.
    assert h.plan_histogram(70_001, variant="exchange", cluster=2, hot=4096).counter_bits == 16


def test_hot_plans():
    assert h.hot_max() == 57_344
    plan = h.plan_histogram(1 << 20, variant="hot")
    assert (plan.hot, plan.shared_bytes, plan.cluster, plan.clustered) == (57_344, 4 * 57_344, 1, False)
    assert plan.kernel_expr == "hist_hot<int>" and plan.scalar_args() == (57_344,)
    assert plan.label == "skew-aware: shared [0, 57344) + global"
    assert h.plan_histogram(300, variant="hot").hot == 300  # never more than bins
    assert h.plan_histogram(300, variant="hot", hot=7).scalar_args() == (7,)


class FakeCaps:
    shared_mem_per_block_optin = h.H200_SHARED_PER_BLOCK
    shared_mem_per_sm = h.H200_SHARED_PER_SM
    cluster_launch = True
    tma = True
    pdl = True
    max_cluster_size_nonportable = 16
    sm_count = 132

    def cc_string(self):
        return "9.0"


def fake_engine(monkeypatch=None):
    eng = h.HistogramEngine(FakeCaps())  # no GPU: plans only
    if monkeypatch is not None:
        monkeypatch.setattr(launcher, "_engine", eng)
    return eng


def test_the_engine_makes_each_plan_once_and_still_checks_every_call():
    """Plans are kept per engine (a one-shot call makes the candidates it launches every time), keyed on each
    argument's value and type: a value equal to a valid one (256.0, True) or one that cannot be hashed still meets
    the checks, whatever was planned before."""
    eng = fake_engine()
    assert eng.plan(256, "int32") is eng.plan(256, "int32")
    assert eng.plan(1000, "int32", "hot", hot=1) is eng.plan(1000, "int32", "hot", hot=1)
    with pytest.raises(TypeError, match="bins must be an int"):
        eng.plan(256.0, "int32")
    with pytest.raises(ValueError, match="hot must be an int"):
        eng.plan(1000, "int32", "hot", hot=True)
    with pytest.raises(ValueError, match="hot must be an int"):
        eng.plan(1000, "int32", "hot", hot=[3])


def test_the_engines_plan_memo_is_bounded():
    eng = fake_engine()
    first = eng.plan(1, "int32")
    for bins in range(2, launcher.PLAN_MEMO + 10):
        eng.plan(bins, "int32")
    assert len(eng._plans) == launcher.PLAN_MEMO
    assert eng.plan(launcher.PLAN_MEMO + 9, "int32") is eng.plan(launcher.PLAN_MEMO + 9, "int32")  # the newest kept
    again = eng.plan(1, "int32")  # the oldest was dropped: made anew, equal to the first
    assert again == first and again is not first


def test_options_cover_the_new_variants():
    eng = fake_engine()
    for bins in (1, 256, 4097, 70_001, 1 << 20):
        opts = eng.options(bins, "int32")
        hot = [o for o in opts if o["variant"] == "hot"]
        assert hot == [{"variant": "hot", "hot": max(1, min(bins // 3, 16384))}]
        ex = [o for o in opts if o["variant"] == "exchange"]
        clusters = [o["cluster"] for o in ex if "vectors" not in o]
        assert clusters == ([16] if bins == 1 << 20 else [2, 4, 8, 16])
        assert ex[-1] == {"variant": "exchange", "cluster": 16, "vectors": 1, "sort": "atomic",
                          "hot": max(1, min(bins // 3, 4096))}
        for o in opts:
            eng.plan(bins, "int32", **{k: v for k, v in o.items()})
    assert not any(o["variant"] in ("hot", "exchange") for o in eng.options(256, "uint8"))
    assert not any(o["variant"] in ("hot", "exchange") for o in eng.options(256, "int32", extras=False))
    tma = [(o["stages"], o.get("vectors", 0)) for o in eng.options(256, "uint8") if "stages" in o]
    assert tma == [(0, 0), *TMA_RINGS]  # register loads and every TMA ring, where TMA exists
    eng.caps.tma = False
    assert not any("stages" in o for o in eng.options(256, "uint8"))


@pytest.mark.parametrize("bins", [1, 256, 1024, 4096, 16384, 40_000, 65_536, 80_000])
@pytest.mark.parametrize("stages, vectors", TMA_RINGS)
def test_tma_fed_shared_plans_keep_two_blocks_per_sm_where_the_counters_allow(bins, stages, vectors):
    plain = h.plan_histogram(bins, "int32", "shared")
    bits = plain.counter_bits
    need = 4 * (bins + 1) if bits == 32 else 4 * ((bins + 2) // 2)
    if bits == 16 and vectors == 1:  # 16-bit counters take 2-vector chunks only
        with pytest.raises(LaunchConfigError, match="which take TMA rings of 2-vector chunks"):
            h.plan_histogram(bins, "int32", "shared", stages=stages, vectors=vectors)
        return
    if tma_ring_bytes(need, stages, vectors) > H200_SHARED_PER_BLOCK:  # one replica and the ring do not fit a block
        with pytest.raises(LaunchConfigError, match="use fewer stages"):
            h.plan_histogram(bins, "int32", "shared", stages=stages, vectors=vectors)
        return
    plan = h.plan_histogram(bins, "int32", "shared", stages=stages, vectors=vectors)
    packed = "true" if bits == 16 else "false"
    assert plan.kernel_expr == f"hist_block_tma<int, {stages}, {vectors}, {packed}>"
    assert f"TMA ring of {stages} x {16 * vectors} KB" in plan.label and plan.counter_bits == bits
    assert plan.shared_bytes == tma_ring_bytes(need * plan.replicas, stages, vectors)
    assert plan.replicas <= plain.replicas
    two_fit = 2 * (plan.shared_bytes + BLOCK_RESERVED) <= H200_SHARED_PER_SM
    assert two_fit or plan.replicas == 1  # replicas are only given up to keep two blocks per SM
    if plan.replicas < plain.replicas:  # ... and only as far as needed
        assert 2 * (tma_ring_bytes(need * plan.replicas * 2, stages, vectors) + BLOCK_RESERVED) > H200_SHARED_PER_SM


def test_auto_ring_per_input_type():
    # The first ring of AUTO_TMA_RINGS of at least 64 KB that keeps two blocks per SM (int32 gives up replicas for
    # it; uint8, an atomic per byte, keeps its 32), else the first that fits one block, else register loads (the H200
    # measurements in the comment of AUTO_TMA_RINGS)
    from cuadv.histograms.plans import AUTO_TMA_RINGS, DTYPES, plan_histogram

    assert set(AUTO_TMA_RINGS) == set(DTYPES) and all(set(r) <= set(TMA_RINGS) for r in AUTO_TMA_RINGS.values())
    wide = plan_histogram(256, "int32", "shared", tma=True)
    assert (wide.stages, wide.vectors, wide.replicas) == (3, 2, 16)
    narrow = plan_histogram(256, "uint8", "shared", tma=True)
    assert (narrow.stages, narrow.vectors, narrow.replicas) == (2, 2, 32)
    for bins, ring, two in ((4096, (3, 2), True), (8192, (2, 2), True), (16_384, (3, 2), False),
                            (33_000, (3, 2), False), (41_000, (2, 2), False), (45_000, (2, 1), False),
                            (58_000, (0, 0), False), (65_536, (3, 2), False), (70_000, (2, 2), False),
                            (100_000, (0, 0), False)):
        plan = plan_histogram(bins, "int32", "shared", tma=True)
        assert (plan.stages, plan.vectors) == ring, (bins, plan.label)
        assert plan.counter_bits == (16 if bins > 58_111 else 32)
        assert (2 * (plan.shared_bytes + BLOCK_RESERVED) <= H200_SHARED_PER_SM) == two, (bins, plan.label)
    assert plan_histogram(65_536, "int32", "shared").stages == 0  # no TMA unit: register loads


def test_tma_fed_shared_plan_errors_name_the_rule():
    with pytest.raises(ValueError, match="stages applies to variant 'shared' only"):
        h.plan_histogram(256, "int32", "dsm", stages=2)
    with pytest.raises(ValueError, match=r"stages must be 0 \(register loads\) or one of 2, 3, 4, 5, 6"):
        h.plan_histogram(256, "int32", "shared", stages=7)
    with pytest.raises(LaunchConfigError, match="per-block limit is 232448 B: use fewer stages"):
        h.plan_histogram(50_000, "int32", "shared", stages=2)


def test_the_lab_measures_the_new_variants_where_no_block_holds_the_bins(monkeypatch):
    fake_engine(monkeypatch)
    small = h.HistogramLab._plans("int32", "uniform", 65_536)
    assert not any(o["variant"] in ("hot", "exchange") for o in small)
    for dist in ("uniform", "zipf"):
        mid = h.HistogramLab._plans("int32", dist, 262_144)
        assert {"variant": "hot", "hot": 16384} in mid and {"variant": "hot", "hot": 57_344} in mid
        ex = [(o["cluster"], o["sort"], o["vectors"], o.get("hot", 0)) for o in mid if o["variant"] == "exchange"]
        assert ex == [(c, s, v, hot) for c in (4, 8, 16) for s in ("ballot", "atomic")
                      for v, hot in ((1, 0), (2, 0), (2, 4096))]
        big = h.HistogramLab._plans("int32", dist, 1 << 20)
        ex = [(o["cluster"], o["sort"], o["vectors"], o.get("hot", 0)) for o in big if o["variant"] == "exchange"]
        assert ex == [(16, s, v, hot) for s in ("ballot", "atomic") for v, hot in ((1, 0), (2, 0), (2, 4096))]
        assert {"variant": "global"} in big and {"variant": "dsm", "cluster": 16} in big


def test_report_from_measurements(tmp_path):
    """Tables, plot, target notes and the selection cell build from a set of measurements."""
    from cuadv.labs.base import RunContext
    from cuadv.report.results import LabResult

    class Caps:
        shared_mem_per_block_optin = h.H200_SHARED_PER_BLOCK
        max_cluster_size_nonportable = 16

    class Ceiling:
        bytes_per_s = 4.2e12
        tb_per_s = 4.2

    ms = []
    for dist in ("uniform", "zipf"):
        for bins in (256, 4096, 65536, 1 << 20):
            ms.append(h.Measurement("int32", dist, bins, "global atomics", "global", 1, 5.0, 200.0, 264))
            if bins <= 4096:
                ms.append(h.Measurement("int32", dist, bins, "shared (1 block, x32)", "shared", 1, 0.4, 3000.0, 528))
            for c in (1, 16):
                ms.append(h.Measurement("int32", dist, bins, f"dsm c={c} (16-bit)", "dsm", c, 1.0, 900.0 / c, 132))
            if bins == 1 << 20:
                for v, gbps in ((1, 700.0), (2, 1100.0)):
                    label = f"dsm exchange c=16 (16-bit, {4 * v}K/round, ballot sort)"
                    ms.append(h.Measurement("int32", dist, bins, label, "exchange", 16, 1.0, gbps, 112))
                ms.append(h.Measurement("int32", dist, bins, "skew-aware: shared [0, 57344) + global", "hot", 1, 1.0,
                                        2500.0 if dist == "zipf" else 300.0, 132))
            ms.append(h.Measurement("int32", dist, bins, "cupy.histogram (CUB)", "cupy", 0, 10.0, 100.0))
            ms.append(h.Measurement("int32", dist, bins, "cupy.bincount", "bincount", 0, 10.0, 90.0))
    ms.append(h.Measurement("uint8", "uniform", 256, "shared (1 block, x32)", "shared", 1, 0.4, 2500.0, 528))
    ms.append(h.Measurement("uint8", "uniform", 256, "global atomics", "global", 1, 0.4, 250.0, 528))
    ms.append(h.Measurement("uint8", "uniform", 256, "cupy.histogram (CUB)", "cupy", 0, 10.0, 300.0))
    ctx = RunContext(out_dir=tmp_path, quick=True, caps=Caps(), ceiling=Ceiling())
    lab = h.HistogramLab()
    result = LabResult(lab.name, lab.title)
    lab._tables(result, ctx, ms, 1 << 30)
    lab._plot(result, ctx, ms)
    lab._judge(result, ctx, ms)
    assert (tmp_path / "histogram_throughput.png").exists() and result.plots == ["histogram_throughput.png"]
    summary = result.tables[0]
    assert len(summary.rows) == 9 and summary.rows[0][3] == "shared (1 block, x32)"
    assert result.figures["hist_int32_uniform_256_best_x_cupy"] == pytest.approx(30.0)
    assert result.figures["hist_int32_uniform_65536_dsm_x_global"] == pytest.approx(4.5)
    # 1M bins: the exchange is the best DSM variant, the skew-aware hybrid the best on Zipf data.
    rows = {(r[1], r[2]): r for r in summary.rows}
    assert rows[("uniform", 1 << 20)][3] == rows[("uniform", 1 << 20)][9] == \
        "dsm exchange c=16 (16-bit, 8K/round, ballot sort)"
    assert rows[("zipf", 1 << 20)][3] == "skew-aware: shared [0, 57344) + global"
    assert result.figures["hist_int32_uniform_1048576_dsm_x_global"] == pytest.approx(5.5)
    assert result.figures["hist_int32_uniform_1048576_exchange_x_global"] == pytest.approx(5.5)
    assert result.figures["hist_int32_zipf_1048576_best_x_cupy"] == pytest.approx(25.0)
    assert "target >= 70%" in result.notes[0] and "uint8" in result.notes[0]
    assert "best DSM (dsm exchange c=16 (16-bit, 8K/round, ballot sort)) 5.50x global atomics" in result.notes[0]
    every = result.tables[1]
    assert any(r[3] == "dsm exchange c=16 (16-bit, 4K/round, ballot sort)" for r in every.rows)
    (cell,) = result.selection
    assert cell.scenario == "data exchange between blocks" and "dsm exchange c=16" in cell.choice
    assert "global atomics" in cell.evidence and "skew-aware" in cell.evidence


def ballot_sort_model(values: np.ndarray, c: int, hot: int, bins: int, cursor: np.ndarray) -> np.ndarray:
    """A Python mirror of Exchange::partition's ballot sort for one warp: values[k, lane] for K slots.
    Returns each element's position in its owner's run (-1: not exchanged); advances ``cursor``."""
    k_slots, lanes = values.shape
    log2c = c.bit_length() - 1
    lt = [(1 << lane) - 1 for lane in range(lanes)]

    def ballot(pred):
        return sum(1 << lane for lane in range(lanes) if pred[lane])

    place = np.zeros_like(values)
    run = [0] * lanes
    for k in range(k_slots):
        v = values[k]
        valid = [hot <= int(x) < bins for x in v]
        peers = [ballot(valid)] * lanes
        of_lane = [ballot(valid)] * lanes
        for b in range(log2c):
            bit = [bool(int(x) & (1 << b)) for x in v]
            s = ballot(bit)
            for lane in range(lanes):
                peers[lane] &= s ^ (0 if bit[lane] else 0xFFFFFFFF)
                of_lane[lane] &= s ^ (0 if (lane >> b) & 1 else 0xFFFFFFFF)
        for lane in range(lanes):
            place[k, lane] = run[int(v[lane]) & (c - 1)] + bin(peers[lane] & lt[lane]).count("1")
        run = [run[lane] + bin(of_lane[lane]).count("1") for lane in range(lanes)]
    base = [0] * lanes
    for lane in range(min(c, lanes)):
        base[lane] = int(cursor[lane])
        cursor[lane] += run[lane]
    pos = np.full_like(values, -1)
    for k in range(k_slots):
        for lane in range(lanes):
            x = int(values[k, lane])
            if hot <= x < bins:
                pos[k, lane] = base[x & (c - 1)] + place[k, lane]
    return pos


@pytest.mark.parametrize("c", [2, 4, 8, 16])
def test_ballot_sort_model_places_every_element_once(c):
    rng = np.random.default_rng(c)
    bins, hot = 1000, 37
    cursor = np.zeros(c, dtype=np.int64)
    seen = {o: [] for o in range(c)}
    for _warp in range(3):  # three warps of one block share the cursors
        values = rng.integers(-5, bins + 5, size=(4, 32))
        values[1] = 123  # a slot where every lane has the same owner
        pos = ballot_sort_model(values, c, hot, bins, cursor)
        for k in range(4):
            for lane in range(32):
                x = int(values[k, lane])
                if hot <= x < bins:
                    seen[x & (c - 1)].append(int(pos[k, lane]))
                else:
                    assert pos[k, lane] == -1
    for o in range(c):  # each owner's run is dense: places 0 .. count - 1, each once
        assert sorted(seen[o]) == list(range(len(seen[o]))) and cursor[o] == len(seen[o])


def test_uint8_block_kernel_counts_in_three_instructions_per_element(tmp_path):
    """With 32 replicas known at compile time and every uint8 value in range over 256 bins, each element costs
    a shift, an and-or into the lane's word offset and the shared atomic (the profile found six when the
    replica shift was a runtime value): the densest run of 64 shared atomics spans fewer than 4 x 64 opcodes."""
    from sass_tools import sass_opcodes

    from cuadv.histograms.launcher import build_module

    module = build_module("sm_90a")
    ops = sass_opcodes(module.cubin, tmp_path)[module.lowered_names["hist_block<unsigned char, false>"]]
    atoms = [i for i, op in enumerate(ops) if op.startswith("ATOMS")]
    assert len(atoms) >= 64
    densest = min(atoms[k + 63] - atoms[k] + 1 for k in range(len(atoms) - 63))
    assert densest < 4 * 64, densest


def test_auto_with_a_tma_ring_asked_for_keeps_dsm_where_16_bit_counters_cannot_take_it():
    # 16-bit counters in one block take 2-vector rings that fit beside them; any other ring leaves them to dsm
    assert h.plan_histogram(70_000, stages=2).label == "dsm c=1 (16-bit)"
    assert h.plan_histogram(70_000, stages=3, vectors=2).label == "dsm c=1 (16-bit)"  # 96 KB do not fit beside
    assert h.plan_histogram(70_000, stages=2, vectors=2).label == "shared (1 block, 16-bit, x1, TMA ring of 2 x 32 KB)"
    assert h.plan_histogram(70_000, stages=0).label == "shared (1 block, 16-bit, x1)"
    assert h.plan_histogram(4096, stages=2).stages == 2  # 32-bit counters and the ring, as before


@pytest.mark.parametrize("bins, bits", [(9000, 32), (16_382, 32), (20_000, 16), (32_766, 16)])
def test_replicas_never_push_a_plan_past_the_per_block_limit(bins, bits):
    limit = 64 * 1024  # a GPU with 64 KB per block: two replicas of these counters would not fit
    plan = h.plan_histogram(bins, shared_limit=limit)
    assert plan.variant == "shared" and plan.counter_bits == bits
    assert plan.shared_bytes <= limit and plan.replicas == 1
