"""The segreduce lab on the CPU: its seeded segments (exact totals, int32 offsets, the same arrays for a seed), the
float64 reference, the byte count, the segmented-sum kernel's source and compile, the CUB peer's build and its
reason when nvcc is missing, and the lab's place in the registry."""

import numpy as np
import pytest

from cuadv.labs import segreduce_support as G
from cuadv.labs import spmv_support as S
from cuadv.labs.peers import cub_segmented_reduce as cubseg
from cuadv.labs.segreduce import MIN_BLOCKS, THREADS, SegReduceLab, segsum_kernel
from test_histogram_peers_cpu import _fake_nvcc  # a stand-in nvcc that writes its -o file


@pytest.mark.parametrize("kind", G.KINDS)
def test_segments_hold_exactly_the_total_and_repeat_for_a_seed(kind):
    m = G.generate_segments(kind, 1 << 12, 32, seed=5)
    assert m.n_rows == 1 << 12 and m.nnz == 32 << 12
    assert m.offsets.dtype == np.int32 and m.offsets[0] == 0 and np.all(np.diff(m.offsets) >= 0)
    assert m.vals.dtype == np.float32 and m.vals.size == m.nnz and np.all(np.abs(m.vals) <= 1)
    again = G.generate_segments(kind, 1 << 12, 32, seed=5)
    assert np.array_equal(again.offsets, m.offsets) and np.array_equal(again.vals, m.vals)


def test_segment_shapes_differ_as_named():
    stats = {kind: G.generate_segments(kind, 1 << 14, 32, seed=1).stats() for kind in G.KINDS}
    assert stats["uniform"]["max_row"] <= 40 and stats["uniform"]["gini"] < 0.15
    assert stats["power-law"]["max_row"] <= (1 << 14) // 8 and stats["power-law"]["gini"] > 0.4
    assert stats["R-MAT"]["empty_rows"] > 0 and stats["R-MAT"]["gini"] > 0.6


def test_bad_segment_requests_raise():
    with pytest.raises(ValueError, match="power of two"):
        G.generate_segments("R-MAT", 1000, 32, seed=1)
    with pytest.raises(ValueError, match="unknown segments 'zipf'"):
        G.generate_segments("zipf", 1 << 10, 32, seed=1)


def test_rmat_out_degrees_sum_to_the_edges():
    d = S.rmat_out_degrees(10, 20_000, np.random.default_rng(3))
    assert d.size == 1 << 10 and int(d.sum()) == 20_000 and d.max() > 20 * d.mean()


def test_reference_and_bytes():
    lens = np.array([0, 3, 1, 0, 5])
    offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
    vals = np.array([1, -2, 3, 4, 0.5, -0.5, 2, 2, -1], np.float32)
    m = S.Csr("t", offsets, np.empty(0, np.int32), vals, 0)
    sums, mags = G.reference(m)
    assert sums.tolist() == [0.0, 2.0, 4.0, 0.0, 3.0]
    assert mags.tolist() == [0.0, 6.0, 4.0, 0.0, 6.0]
    assert G.segment_bytes(m) == 4 * 9 + 4 * 6 + 4 * 5
    tol = S.tolerance(m.lengths, mags)
    with pytest.raises(Exception, match="segreduce t: 1 rows out of tolerance"):
        S.check("t", np.array([0, 2, 4, 1e-3, 3], np.float32), sums, tol, lab="segreduce")


def test_the_kernel_is_the_spmv_body_without_the_gather():
    k = segsum_kernel()
    spmv = S.spmv_kernel()
    assert k.name.endswith("_segsum") and "segsum" not in spmv.name
    assert k.gather is False and spmv.gather is True
    # The whole SM's 2048 threads resident (MIN_BLOCKS blocks of THREADS), so at most 65536 / 2048 = 32 registers
    assert k.block == (THREADS, 1, 1) and k.min_blocks_per_sm == MIN_BLOCKS and THREADS * MIN_BLOCKS == 2048
    for arch in ("sm_90a", "sm_100a"):
        for policy in ("fixed_work", "fixed_blocks", "steal"):
            res = k.compile(arch, policy).resources
            assert all(r.spill_store_bytes == 0 and r.registers <= 32 for r in res.values()), (arch, policy, res)


def test_the_cub_peer_is_built_once_under_its_own_name(tmp_path, monkeypatch):
    from cuadv import cache
    from cuadv.labs.peers import nvcc_build

    nvcc, _ = _fake_nvcc(tmp_path)
    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path / "cache"))
    lib = nvcc_build.build_library(cubseg.SOURCE, "sm_90", str(nvcc))
    assert lib.name.startswith("cub_segmented_reduce-sm_90-") and lib.read_bytes() == b"ELF"
    assert cache.usage().entries >= 1  # counted (and cleared) with the labs' other tool builds
    cmd = nvcc_build.build_command("nvcc", "sm_90", lib, cubseg.SOURCE)
    assert cmd[-1].endswith("cub_segmented_reduce.cu") and "-shared" in cmd


def test_without_nvcc_the_cub_peer_says_why(monkeypatch):
    monkeypatch.setattr(cubseg, "find_nvcc", lambda: (None, "nvcc not found (looked in PATH)"))
    peer, why = cubseg.load_cub_segmented_sum("sm_90")
    assert peer is None and why == "CUB DeviceSegmentedReduce not measured: nvcc not found (looked in PATH)"


def test_lab_is_registered_after_spmv():
    from cuadv.labs import all_labs, lab_by_name

    names = [lab.name for lab in all_labs()]
    assert names.index("segreduce") == names.index("spmv") + 1
    assert lab_by_name("segreduce").title.startswith("Segmented sum")


def test_lab_names_the_capability_it_needs():
    class Caps:
        compute_capability = (8, 0)

        def cc_string(self):
            return "8.0"

    assert "compute capability 9.0" in SegReduceLab().supported(Caps())


def test_the_throughput_figure_draws_every_variant_and_peer(tmp_path):
    from cuadv.figures import save_figure
    from cuadv.labs.segreduce import PEER_SHORT, throughput_figure

    rates = {kind: {"split segments, auto (steal)": 2000.0, "split segments, fixed_work": 2100.0,
                    PEER_SHORT["cub"]: 120.0, PEER_SHORT["index_add"]: 300.0} for kind in G.KINDS}
    fig = throughput_figure(rates, 3130.0)
    assert [ax.get_title() for ax in fig.axes] == [f"{k} segments" for k in G.KINDS]
    assert all(len(ax.patches) == 4 for ax in fig.axes)
    csv = save_figure(fig, tmp_path / "segreduce_throughput.png")
    assert (tmp_path / "segreduce_throughput.png").stat().st_size > 0 and "2100" in csv.read_text()


class _Ctx:
    def __init__(self):
        self.messages = []

    def progress(self, message):
        self.messages.append(message)


def _timed_labs(monkeypatch):
    """checked_timings on the CPU: NumPy stands in for CuPy (NaN, fill), the timer returns a fixed time per call."""
    import sys
    import types

    from cuadv import timing

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(nan=np.nan))
    monkeypatch.setattr(S, "to_host", lambda y: np.asarray(y))
    monkeypatch.setattr(timing, "time_gpu", lambda fn, **kw: (fn(), types.SimpleNamespace(median_ms=1.5))[1])


def test_checked_timings_validates_poisons_and_times_every_variant(monkeypatch):
    _timed_labs(monkeypatch)
    ref = np.array([1.0, 2.0, 3.0])
    tol = np.full(3, 1e-6)
    dev = type("Dev", (), {"y": np.zeros(3, np.float32)})()
    runs = []

    def cuadv_fn():
        runs.append(bool(np.isnan(dev.y).all()))  # poisoned before every checked launch
        dev.y[:] = ref

    fns = {"mine": cuadv_fn}
    labels = {"mine": ("cuadv", ("split", "auto"))}
    found = ([("cub", "peer", lambda: ref.astype(np.float32))], {"torch": "not installed"})
    ctx = _Ctx()
    times, worst = S.checked_timings(ctx, "segreduce", "uniform", dev, fns, labels, found, ref, tol, 2, 10, 500.0)
    assert set(times) == {"mine", "peer"} and float(times["mine"]) == 1.5 and worst == 0.0
    assert labels["peer"] == ("peer", "cub")  # the peer found joins the variants
    assert runs[0] and runs[-1] and len(runs) == 4  # checked before and after 2 timed rounds
    assert ctx.messages == ["segreduce: torch skipped: not installed",
                            *(f"segreduce uniform: round {r} of 2, 2 variants" for r in (1, 2))]


def test_checked_timings_names_the_lab_and_variant_that_wrote_nothing(monkeypatch):
    _timed_labs(monkeypatch)
    ref = np.array([1.0, 2.0])
    dev = type("Dev", (), {"y": np.zeros(2, np.float32)})()
    fns = {"lazy": lambda: None}  # leaves the NaN poison in place
    with pytest.raises(Exception, match="segreduce R-MAT, lazy: 2 rows out of tolerance"):
        S.checked_timings(_Ctx(), "segreduce", "R-MAT", dev, fns, {"lazy": ("cuadv", ())}, ([], {}), ref, np.ones(2),
                          1, 1, 0.0)
