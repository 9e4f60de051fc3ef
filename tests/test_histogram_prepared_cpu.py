"""The prepared forms without a GPU: what a PreparedBincount keeps per output length (a bounded number of counters,
the evicted one's buffer freed), what ``plan`` reports before and after calls, and the one bins check shared by
the plans and the public calls. The driver, the kernels and the min/max pass are faked; plans are made for a fake
H200."""

import contextlib
import itertools

import numpy as np
import pytest

import cuadv
import cuadv.launching
from cuadv.histograms import api, plan_histogram, plans
from cuadv.histograms.launcher import HistogramEngine

from bad_input.library_fakes import H200, FakeCupy  # the bad-input corpus's fakes (pytest puts tests/ on the path)

X = 0x100000
OUT = 0x900000


class Driver:
    """The driver calls of a prepared bincount's counting: each cuMemAlloc a new address, memsets accepted."""

    def __init__(self):
        self.allocs: list[int] = []

    def cuMemAlloc(self, nbytes):
        self.allocs.append(0x10_0000_0000 + 0x100_0000 * len(self.allocs))
        return 0, self.allocs[-1]

    def cuMemsetD32Async(self, ptr, value, count, stream):
        return (0,)


@pytest.fixture
def counting(monkeypatch):
    """Calls of a prepared bincount run on the host: the min/max pass returns (0, the next of ``maxima``), the
    kernels are not launched, and the kept buffers' frees (memory.free) are recorded in ``frees``."""
    from types import SimpleNamespace

    eng = HistogramEngine(H200)
    drv, frees = Driver(), []
    state = SimpleNamespace(eng=eng, drv=drv, frees=frees, maxima=iter(()))
    monkeypatch.setattr(api, "engine", lambda: eng)
    monkeypatch.setattr(api, "driver", lambda: drv)
    monkeypatch.setattr(api, "free", frees.append)
    monkeypatch.setattr(api, "_order_after_producer", lambda x, stream: None)
    monkeypatch.setattr(api, "_minmax", lambda src, stream, arch, sm, needed_by: (src.dtype.type(0),
                                                                          src.dtype.type(next(state.maxima))))
    monkeypatch.setattr(api, "_aux_launch", lambda *a, **k: None)
    monkeypatch.setattr(api, "_new_output", lambda src, x, length, dtype, stream: FakeCupy((length,), "<i8",
                                                                                            address=OUT))
    monkeypatch.setattr(api, "data_ptr", lambda arr: OUT)
    monkeypatch.setattr(api, "_cupy_importable", lambda: True)  # the CuPy output is faked
    monkeypatch.setattr(cuadv.launching, "launch", lambda *a, **k: None)
    monkeypatch.setattr(eng, "launch_config", lambda plan, n, units=None: (None, None))
    monkeypatch.setattr(api, "capturing", lambda stream: False)  # a test of captures says otherwise
    monkeypatch.setattr(api, "relaxed_capture_mode", contextlib.nullcontext)
    return state


def call_with_lengths(state, p, lengths):
    for length in lengths:
        state.maxima = iter([length - 1])
        p()


def test_a_prepared_bincount_keeps_the_counters_of_its_last_lengths_only(counting):
    """Each output length has its counter (plan and uint32 counts, one cuMemAlloc): at most KEPT_LENGTHS are kept,
    the least recently used going first, its buffer freed (memory.free, which waits for the work queued on it)."""
    p = cuadv.prepare_bincount(FakeCupy((1 << 20,), "<i4", address=X), stream=0)
    call_with_lengths(counting, p, [1000, 1001, 1002, 1003, 1000])  # 1000 again: the most recently used now
    assert len(counting.drv.allocs) == 4 and counting.frees == []
    call_with_lengths(counting, p, [1004])  # past the bound: 1001, the least recently used, goes
    assert counting.frees == [counting.drv.allocs[1]]
    assert p.plan(1001) is None and all(p.plan(n) is not None for n in (1000, 1002, 1003, 1004))
    call_with_lengths(counting, p, range(2000, 2200))  # a caller whose lengths follow its data
    held = [c._counts.ptr for c in p._counters.values()]
    assert len(p._counters) == api.KEPT_LENGTHS == 4
    assert len(counting.drv.allocs) - len(counting.frees) == 4  # every other buffer freed...
    assert sorted(counting.frees + held) == sorted(counting.drv.allocs)  # ...once, and none still held
    assert sorted(p._counters) == [2196, 2197, 2198, 2199]


def test_a_prepared_bincounts_plan_is_that_of_the_counter_its_calls_use(counting):
    """plan(length) looks up the counter a call of that length counts with: int32 input has one per length,
    uint8 input (counted in place) one over its 256 values for any length past 256."""
    p = cuadv.prepare_bincount(FakeCupy((1000,), "<i4", address=X), variant="global", stream=0)
    assert p.plan(256) is None
    call_with_lengths(counting, p, [256])
    assert p.plan(256) == counting.eng.plan(256, "int32", "global")
    assert p.plan(300) is None  # no call had 300 bins: another counter (and plan) would count them
    u8 = cuadv.prepare_bincount(FakeCupy((1000,), "|u1", address=X), minlength=300, variant="global", stream=0)
    call_with_lengths(counting, u8, [256])  # max 255: the length is minlength, 300
    assert u8.plan(300) is u8.plan(256) == counting.eng.plan(256, "uint8", "global")
    assert u8.plan(100) is None


def test_a_prepared_histograms_plan_is_the_one_its_calls_count_with_from_the_start(monkeypatch):
    """A named variant's plan is known when prepared: for int32 over range=(0, bins), counted in place, the plan
    for bins + 1 slots (not the binning path's over bins); with auto, None until a call chooses."""
    eng = HistogramEngine(H200)
    monkeypatch.setattr(api, "engine", lambda: eng)
    x = FakeCupy((1000,), "<i4", address=X)
    in_place = api.PreparedHistogram(x, 4096, range=(0, 4096), variant="global")
    assert in_place.plan == eng.plan(4097, "int32", "global") and in_place.plan.bins == 4097
    binned = api.PreparedHistogram(x, 4096, range=(0.5, 4096.5), variant="global")
    assert binned.plan == eng.plan(4096, "int32", "global")
    assert api.PreparedHistogram(x, 4096, range=(0, 4096)).plan is None  # auto: chosen by the first call


@pytest.mark.parametrize("bins", [2.0, True, np.bool_(True), "3", None, np.arange(3)])
def test_one_bins_check_for_the_plans_and_the_public_calls(bins):
    """plan_histogram (count_bins' rule) and histogram share one check: a bins that is no int is a TypeError."""
    assert api.check_bins is plans.check_bins
    with pytest.raises(TypeError, match="bins must be an int") as planned:
        plan_histogram(bins)
    with pytest.raises(TypeError) as checked:
        api.check_bins(bins)
    assert str(planned.value) == str(checked.value)
    assert plans.check_bins(np.int64(7)) == 7 and type(plans.check_bins(np.int64(7))) is int


def test_every_plan_runs_the_most_threads_per_block():
    """The thread count is a constant (the kernels' __launch_bounds__), not a function of the shared memory."""
    for bins, dtype, variant in itertools.product((10, 4096, 100_000, 1 << 20), ("int32", "uint8"), plans.VARIANTS):
        try:
            plan = plan_histogram(bins, dtype, variant)
        except (ValueError, cuadv.LaunchConfigError):
            continue
        assert plan.threads == plans.THREADS == 1024


def test_a_given_out_is_ordered_after_its_producer_as_x_is(counting, monkeypatch):
    """histogram and bincount write out on the call's stream: the stream first waits for the pending work of out's
    producer (its CAI v3 stream; a DLPack out is asked on the call's stream), not only for x's."""
    from cuadv import interop

    monkeypatch.setattr(api, "_order_after_producer", lambda arr, stream: interop.device_array(arr, stream=stream))
    monkeypatch.setattr(interop, "capturing", lambda stream: False)
    waits = []
    monkeypatch.setattr(interop, "wait_for_stream", lambda waiter, producer: waits.append((waiter, producer)))

    def arrays(n, out_len):
        x, out = FakeCupy((n,), "<i4", address=X), FakeCupy((out_len,), "<i8", address=OUT)
        x.__cuda_array_interface__["stream"], out.__cuda_array_interface__["stream"] = 5, 9
        return x, out

    x, out = arrays(1000, 10)
    hist, _ = cuadv.prepare_histogram(x, bins=10, range=(0.5, 9.5), stream=3)(out=out)
    assert hist is out and waits == [(3, 5), (3, 9)]
    waits.clear()
    x, out = arrays(1000, 21)
    counting.maxima = iter([20])
    assert cuadv.prepare_bincount(x, stream=3)(out=out) is out and waits == [(3, 5), (3, 9)]


# -- CUDA graph captures: what no capture can take is refused before anything is enqueued ---------------------------

def test_a_histogram_whose_edges_numpy_computes_refuses_a_capture_before_enqueuing(counting, monkeypatch):
    """A range of NumPy scalars has its edges computed by NumPy and copied from host memory, which a capture would
    record by address (the array is gone by the replay): UnsupportedFeatureError naming the way out, nothing done.
    A range of Python floats has its edges written by the GPU, and a capture goes ahead."""
    from cuadv.errors import UnsupportedFeatureError

    monkeypatch.setattr(api, "capturing", lambda stream: True)
    monkeypatch.setattr(api, "_order_after_producer", lambda x, stream: pytest.fail("enqueued before the refusal"))
    x = FakeCupy((1000,), "<f4", address=X)
    p = api.PreparedHistogram(x, 100, (np.float32(0), np.float32(1)), stream=7)
    with pytest.raises(UnsupportedFeatureError, match=r"range=.* needs a stream not being captured \(NumPy computes "
                                                      r"these edges .* a range of Python ints or floats"):
        p()
    empty = api.PreparedHistogram(FakeCupy((0,), "<f4", address=X), 100, stream=7)  # no range: NumPy's edges too
    with pytest.raises(UnsupportedFeatureError, match=r"range=None of an empty x needs a stream not being captured"):
        empty()
    q = api.PreparedHistogram(x, 100, (0.0, 1.0), stream=7)
    with pytest.raises(pytest.fail.Exception, match="enqueued before the refusal"):
        q()  # got past the check: the GPU writes these edges


def test_a_prepared_counter_first_called_in_a_capture_keeps_the_sample_on_the_gpu(monkeypatch):
    """A prepared counter reads its skew sample back to the host on its first call, which a capture cannot wait
    for: first called in a capture, it gates both plans on the GPU's verdict instead, as a one-shot call does."""
    eng = HistogramEngine(H200)
    monkeypatch.setattr(api, "capturing", lambda stream: stream == 9)
    monkeypatch.setattr(api, "copy_to_host", lambda *a, **k: pytest.fail("a host read in a capture"))
    monkeypatch.setattr(api, "Scratch", lambda *a, **k: pytest.fail("the host path's verdict buffer"))
    counter = api._Counter(eng, 262_144, "int32", "auto", keep=True)
    plan = counter.choose(X, 1 << 20, 9)
    assert plan.variant == "exchange" and counter.skewed is not None and counter.skewed.variant == "hot"


def test_counting_in_place_at_the_one_bin_count_that_needs_a_host_read_refuses_a_capture(counting, monkeypatch):
    """int32 over range=(0, 116,223): one block holds the bins but not the closed last one, so whether the input is
    counted in place depends on a sample read on the host; in a capture that read is refused, naming the way out,
    before anything is enqueued for the count."""
    from cuadv.errors import UnsupportedFeatureError

    monkeypatch.setattr(api, "capturing", lambda stream: True)
    monkeypatch.setattr(api, "copy_to_host", lambda *a, **k: pytest.fail("a host read in a capture"))
    monkeypatch.setattr(api, "Scratch", lambda *a, **k: pytest.fail("scratch allocated before the refusal"))
    monkeypatch.setattr(api, "_aux_launch", lambda *a, **k: pytest.fail("a launch enqueued before the refusal"))
    bins = 116_223
    assert plan_histogram(bins).variant == "shared" and plan_histogram(bins + 1).variant == "exchange"
    p = api.PreparedHistogram(FakeCupy((4096,), "<i4", address=X), bins, (0, bins), stream=7)
    with pytest.raises(UnsupportedFeatureError, match=r"range=\(0, 116223\) with variant 'auto' needs a host read "
                                                      r".* a stream being captured.*prepare_histogram"):
        p()


def test_a_prepared_histogram_counted_in_a_capture_zeroes_its_counts_at_its_next_call(counting, monkeypatch):
    """The widening pass zeroes the counts for the next call; captured into a graph it only records that, so the
    call after a capture zeroes them itself (a buffer made during the capture holds whatever cuMemAlloc gave it)."""
    memsets = []
    monkeypatch.setattr(counting.drv, "cuMemsetD32Async", lambda ptr, value, count, stream: memsets.append(stream)
                        or (0,))
    in_capture = {"on": False}
    monkeypatch.setattr(api, "capturing", lambda stream: in_capture["on"])
    p = api.PreparedHistogram(FakeCupy((4096,), "<i4", address=X), 1000, (0, 1000), stream=7)
    p()  # a new counts buffer: zeroed, then left zero by the widening pass
    p()
    in_capture["on"] = True
    p()  # captured: relies on the zeros the last call left
    in_capture["on"] = False
    p()  # after the capture: zeroes again
    p()
    assert memsets == [7, 7]


@pytest.mark.parametrize("range_, maximum, rule", [
    ((0.0, 1.0), None, "quick, computed edges"),  # Python floats: the GPU computes the edges where it compares
    ((np.float32(0.0), np.float32(1.0)), None, "quick, edges from a table"),  # NumPy scalars: numpy's edges
    (None, 1.0, "quick, edges from a table"),  # the data's min and max: numpy's edges
    ((np.float32(130.0), np.float32(131.0)), None, "quick, edges from a table"),  # margin 0.52 bins: under 1
    ((1000.0, 1001.0), None, "numpy's estimate"),  # bins 4 ulps wide: past the quick estimate's margin
])
def test_each_float32_call_takes_the_kernel_of_its_binning_rule(counting, monkeypatch, range_, maximum, rule):
    """float32 binned as read: each call launches hist_block_tma_float of the rule its edges and margin call for
    (FLOAT_RULES), with a null table exactly where the edges are computed; the prepared plan shows that rule."""
    monkeypatch.setattr(api, "_to_device", lambda ptr, host, stream: None)
    counting.maxima = iter([maximum] * 2)
    p = api.PreparedHistogram(FakeCupy((1 << 20,), "<f4", address=X), 4096, range=range_, stream=0)
    launched = []
    monkeypatch.setattr(p.counter, "count", lambda *a, binned=None, **k: launched.append(binned))
    for _ in range(2):
        p()
    plan, args = launched[-1]
    assert plan.float_rule == plans.FLOAT_RULES[rule] and plan.kernel_expr.endswith(f", {plan.float_rule}>")
    assert (args[0] == 0) == (rule == "quick, computed edges")  # the table pointer
    assert (args[4] < api.QUICK_MARGIN_LIMIT) == (rule != "numpy's estimate")  # the margin the kernel checks
    assert p.plan.binned and p.plan == plan
