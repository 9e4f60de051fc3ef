"""The DSM histogram without a GPU: kernels for sm_90a and sm_100a, plans, argument checks, the
16-bit counter arithmetic, test data."""

import numpy as np
import pytest

from cuadv.errors import KernelArgumentError, LaunchConfigError
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
    (58_112, "dsm", 1, 16),
    (65_536, "dsm", 1, 16),
    (262_144, "dsm", 4, 16),
    (1 << 20, "dsm", 16, 16),
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
    (dict(bins=2.5), ValueError, "bins must be an int"),
    (dict(bins=257, dtype="uint8"), ValueError, r"uint8 input holds values 0..255, so bins must be <= 256 \(got 257\)"),
    (dict(bins=10, dtype="float32"), ValueError, "int32 or uint8"),
    (dict(bins=10, variant="magic"), ValueError, "variant must be one of"),
    (dict(bins=10, variant="dsm", cluster=32), LaunchConfigError, "cluster size 32 exceeds the largest cluster size 16"),
    (dict(bins=10, variant="dsm", cluster=3), LaunchConfigError, "power of two in 1..16, got 3"),
    (dict(bins=10, variant="dsm", cluster=0), LaunchConfigError, "power of two"),
    (dict(bins=10, variant="global", cluster=2), LaunchConfigError, "applies to variant 'dsm' only"),
    (dict(bins=10, variant="shared", aggregate=True), ValueError, "apply to variant 'dsm' only"),
    (dict(bins=10, variant="dsm", counter_bits=8), ValueError, "counter_bits must be 16 or 32"),
    (dict(bins=10, dtype="uint8", variant="dsm", counter_bits=16), ValueError, "16-bit counters are for int32"),
    (dict(bins=70_000, variant="shared"), LaunchConfigError,
     r"need 280004 B of shared memory in one block .* limit is 232448 B \(at most 58111 bins\)"),
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
    with pytest.raises(KernelArgumentError, match="__cuda_array_interface__"):
        h.device_array(np.zeros(4, dtype=np.int32), "x")
    with pytest.raises(ValueError, match="int32 or uint8"):
        h._dtype_name(np.dtype(np.float32))


def packed_model(bins, c, increments):
    """A Python mirror of the packed 16-bit counters of one block's shard (one replica): a 32-bit word per
    two slots, wrap corrections into `out`, then the flush. Returns the final counts of every bin."""
    out = np.zeros(bins, dtype=np.uint64)
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
        hi_bin = lo_bin + c
        if lo_carry:
            if lo_bin < bins:
                out[lo_bin] += 0x10000
            if hi_bin < bins:
                out[hi_bin] += 0xFFFFFFFF
        if word_wrap and hi_bin < bins:
            out[hi_bin] += 0x10000
    for (rank, w), word in words.items():
        for half in (0, 1):
            b = ((2 * w + half) * c) + rank
            if b < bins:
                out[b] += (word >> (16 * half)) & 0xFFFF
    return (out & 0xFFFFFFFF).astype(np.int64)


@pytest.mark.parametrize("bins, c", [(1, 1), (3, 1), (4, 2), (5, 4), (7, 16)])
def test_packed_counter_corrections_are_exact(bins, c):
    rng = np.random.default_rng(5)
    slots = np.concatenate([np.zeros(300_000, dtype=np.int64), rng.integers(0, bins + 1, size=200_000)])
    if bins > 1:
        slots = np.concatenate([slots, np.ones(250_000, dtype=np.int64)])
    rng.shuffle(slots)
    counts = rng.integers(1, 33, size=slots.size)  # aggregated adds of up to 32 lanes
    got = packed_model(bins, c, zip(slots.tolist(), counts.tolist()))
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
    assert not any("hist_cluster" in e for e in h.kernel_expressions("sm_80"))
    module = h.build_module("sm_80")
    assert module.resources_for("hist_block<int>").spill_store_bytes == 0


def test_cluster_kernel_below_sm90_fails_with_a_message():
    from cuadv.compiler import compile_source, kernel_source
    from cuadv.errors import CompileError

    with pytest.raises(CompileError, match="hist_cluster needs sm_90 or newer"):
        compile_source(kernel_source("histogram.cu"), name="histogram_old", arch="sm_80",
                       name_expressions=["hist_cluster<int, false, false>"])


def test_report_from_measurements(tmp_path):
    """Tables, plot, target notes and the selection cell build from a set of measurements."""
    from cuadv.labs.base import RunContext
    from cuadv.results import LabResult

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
    assert result.figures["hist_int32_uniform_1048576_dsm_x_global"] == pytest.approx(4.5)
    assert "target >= 70%" in result.notes[0] and "uint8" in result.notes[0]
    (cell,) = result.selection
    assert cell.scenario == "data exchange between blocks" and "dsm c=1" in cell.choice and "global atomics" in cell.evidence
