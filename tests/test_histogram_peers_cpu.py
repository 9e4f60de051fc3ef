"""The histogram peer comparison without a GPU: the case list, the targets, the tables from fake timings,
the CUB peer's discovery, build cache and skip reasons, and the GPU edge formula against numpy."""

import shutil
import stat

import numpy as np
import pytest

from cuadv.histograms.api import device_edge_spec
from cuadv.labs import histogram_peers as hp
from cuadv.labs.peers import cub_histogram as cubmod
from cuadv.labs.peers import nvcc_build


def test_cases_cover_the_issue():
    full = hp.cases(quick=False)
    keys = {c.key for c in full}
    for dist in ("uniform", "zipf"):
        for b in (256, 4096, 65536, 262144, 1 << 20, 1 << 24):
            assert f"int32_{dist}_{b}" in keys
    assert "uint8_uniform_256" in keys and f"float32_uniform_{hp.FLOAT_BINS}" in keys
    quick = {c.key for c in hp.cases(quick=True)}
    assert quick < keys and "int32_uniform_16777216" not in quick and "int32_zipf_1048576" in quick
    assert hp.Case("float32", "uniform", 4096).range == (0.0, 1.0)
    assert hp.Case("int32", "zipf", 4096).range == (0, 4096)


@pytest.mark.parametrize("case, expect", [
    (hp.Case("int32", "uniform", 256), {("x_cub", 2.5), ("pct_read", 95.0)}),
    (hp.Case("int32", "uniform", 65536), {("x_cub", 10.0), ("pct_read", 95.0)}),
    (hp.Case("int32", "uniform", 1 << 20), {("x_cub", 10.0)}),
    (hp.Case("int32", "uniform", 1 << 24), set()),
    (hp.Case("int32", "zipf", 1 << 20), {("x_cub", 10.0)}),
    (hp.Case("int32", "zipf", 4096), set()),
    (hp.Case("uint8", "uniform", 256), {("x_cub", 2.0)}),
])
def test_targets(case, expect):
    assert {(key, least) for _, key, least in hp.targets(case)} == expect


def test_verdict():
    assert hp.verdict(25.0, 10.0) == "met (2.50x the target)"
    assert hp.verdict(7.5, 10.0) == "missed by 25.0%"
    assert hp.verdict(float("nan"), 10.0) == "not measured"
    # A miss is never rounded to nothing: 0.988 against 1.0 is 1.2%, 2.496x against 2.5x 0.16% (was "0%").
    assert hp.verdict(0.988, 1.0) == "missed by 1.2%"
    assert hp.verdict(1.976, 2.0) == "missed by 1.2%"
    assert hp.verdict(2.496, 2.5) == "missed by 0.2%"
    assert hp.verdict(2.4996, 2.5) == "missed by 0.016%"
    # A % of the read-only ceiling against 95%: by points, as docs/histogram.md states them.
    assert hp.verdict(93.7, 95.0, points=True) == "missed by 1.3 points"
    assert hp.verdict(94.8, 95.0, points=True) == "missed by 0.2 points"


def test_target_lines_never_show_a_miss_as_the_target():
    """CUB 0.624 ms against cuadv 0.25 ms is 2.496x: shown as 2.496 and missed by 0.2%, not '2.50 ... missed by 0%'."""
    c = hp.Case("int32", "uniform", 256)
    rows = [hp.Row(c, hp.CUADV, 0.25, 4294.97, "cuadv"), hp.Row(c, "CUB 3.0.1 HistogramEven", 0.624, 1720.74, "cub")]
    tables, figures, lines = hp.peer_tables(rows, read_gbps=4530.0, n_bytes=1 << 30)
    assert figures["peers_int32_uniform_256_x_cub"] == pytest.approx(0.624 / 0.25, rel=1e-4)
    assert lines[0].startswith("int32 uniform 256 bins: 2.496 (>= 2.5x CUB): missed by 0.2%")
    assert lines[1].startswith("int32 uniform 256 bins: 94.81 (>= 95% of the read-only ceiling): missed by 0.2 points")
    assert tables[0].rows[0][9] == "missed by 0.2%; missed by 0.2 points"


def test_a_ratio_to_cub_the_memory_cannot_give_says_so():
    """On an H100 (2026-12-06 07:32: read-only ceiling 3.13 TB/s, CUB 1.73 TB/s at 256 bins) a histogram that reads
    its input once is at most 1.81x CUB, below the 2.5x target: the line says that bound, measured, instead of the
    H200's profile note where cuadv is at the ceiling, beside it where not; where the ceiling allows the target (an
    H200's 4.53 TB/s) the profile's note stays."""
    c = hp.Case("int32", "uniform", 256)
    rows = [hp.Row(c, hp.CUADV, 0.345, 3111.0, "cuadv"), hp.Row(c, "CUB 3.0.1 HistogramEven", 0.62, 1733.0, "cub")]
    _, _, lines = hp.peer_tables(rows, read_gbps=3130.0, n_bytes=1 << 30)
    assert "missed by 28.2%; bound by this GPU's memory" in lines[0]
    assert lines[0].endswith("at most about 1.81x CUB, whose kernel reads 55.4% of that ceiling; cuadv reads 99.4%")
    assert "bound" not in lines[1] and "met" in lines[1]  # the % of the ceiling: met, no reason needed
    # A kernel well below the ceiling: the bound, and the profile's note for the rest of the gap.
    rows[0] = hp.Row(c, hp.CUADV, 0.537, 2000.0, "cuadv")
    _, _, lines = hp.peer_tables(rows, read_gbps=3130.0, n_bytes=1 << 30)
    assert "bound by this GPU's memory" in lines[0] and "cuadv reads 63.9%; why (" in lines[0]
    _, _, lines = hp.peer_tables(rows, read_gbps=4530.0, n_bytes=1 << 30)
    assert "bound by" not in lines[0] and "why (" in lines[0]
    assert hp.ceiling_bound(4530.0, 1720.0, 97.0, 2.5) is None


def test_tables_from_fake_timings():
    c1, c2 = hp.Case("int32", "uniform", 4096), hp.Case("uint8", "uniform", 256)
    rows = [hp.Row(c1, hp.CUADV, 0.3, 3600.0, "cuadv", "shared (1 block, x2)"),
            hp.Row(c1, hp.CUADV_PREPARED, 0.29, 3700.0, "cuadv"),
            hp.Row(c1, "CUB 3.0.1 HistogramEven", 3.0, 300.0, "cub"),
            hp.Row(c1, "torch.bincount (torch 2.9)", 6.0, 150.0, "peer"),
            hp.Row(c2, hp.CUADV, 0.5, 2000.0, "cuadv"),
            hp.Row(c2, "cupy.bincount (CuPy 14.2.0)", 1.0, 1000.0, "peer")]  # no CUB row: skipped
    tables, figures, lines = hp.peer_tables(rows, read_gbps=4000.0, n_bytes=1 << 30)
    assert [t.title for t in tables] == ["Histogram peers: int32 uniform", "Histogram peers: uint8 uniform"]
    assert "read-only ceiling 4.00 TB/s" in tables[0].note and "{" not in tables[0].note  # the note's figures filled in
    first = tables[0].rows[0]
    assert first[1] == hp.CUADV + " [shared (1 block, x2)]"
    assert first[4] == pytest.approx(90.0) and first[5] == pytest.approx(12.0) and first[6] == pytest.approx(12.0)
    assert first[7] == "CUB 3.0.1 HistogramEven" and first[9] == "met (1.20x the target); missed by 5.0 points"
    assert figures["peers_int32_uniform_4096_x_cub"] == pytest.approx(12.0)
    assert figures["peers_int32_uniform_4096_pct_read_ceiling"] == pytest.approx(90.0)
    assert "peers_uint8_uniform_256_x_cub" not in figures  # CUB was not measured there
    assert figures["peers_uint8_uniform_256_x_best_peer"] == pytest.approx(2.0)
    assert any("uint8 uniform 256 bins" in line and "not measured" in line for line in lines)
    peer_row = tables[0].rows[2]
    assert peer_row[5] == pytest.approx(1.0) and np.isnan(peer_row[6]) and peer_row[8] == "-"


def test_cub_version_string():
    assert nvcc_build.cub_version_string(300001) == "3.0.1"
    assert nvcc_build.cub_version_string(200800) == "2.8.0"


def _fake_nvcc(tmp_path, fail=False):
    """A stand-in nvcc: prints a version, writes the -o file (or fails), logs each build."""
    path = tmp_path / "bin" / "nvcc"
    path.parent.mkdir(parents=True)
    log = tmp_path / "builds.log"
    body = ("echo 'nvcc: fake' >&2; exit 3" if fail else
            'out=""; prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done; echo built >> '
            + str(log) + '; printf ELF > "$out"')
    path.write_text('#!/bin/sh\n'
                    'if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 99.9"; exit 0; fi\n'
                    + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path, log


def test_find_nvcc_prefers_cuda_home(tmp_path, monkeypatch):
    nvcc, _ = _fake_nvcc(tmp_path)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert cubmod.find_nvcc() == (str(nvcc), "$CUDA_HOME")


def test_build_is_cached_by_source_version_and_arch(tmp_path, monkeypatch):
    nvcc, log = _fake_nvcc(tmp_path)
    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path / "cache"))
    lib = cubmod.build_library("sm_90", str(nvcc))
    assert lib.read_bytes() == b"ELF" and lib.parent == tmp_path / "cache" / "peers"
    assert cubmod.build_library("sm_90", str(nvcc)) == lib
    assert log.read_text().count("built") == 1  # the second call is a cache hit
    other = cubmod.build_library("sm_100", str(nvcc))
    assert other != lib and log.read_text().count("built") == 2
    cmd = cubmod.build_command("nvcc", "sm_90", lib)
    assert cmd[1:6] == ["-O3", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC"]


def test_build_failure_names_nvcc_output(tmp_path, monkeypatch):
    nvcc, _ = _fake_nvcc(tmp_path, fail=True)
    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(cubmod.PeerUnavailable, match="nvcc failed to build cub_histogram.cu for sm_90: nvcc: fake"):
        cubmod.build_library("sm_90", str(nvcc))
    assert not list((tmp_path / "cache" / "peers").glob("*"))  # no half-written library left


def test_skip_reason_without_nvcc_or_cccl(monkeypatch):
    monkeypatch.setattr(cubmod, "find_nvcc", lambda: (None, "nvcc not found (looked in PATH)"))

    def no_cccl():
        raise ImportError("No module named 'cuda.compute'")

    monkeypatch.setattr(cubmod, "CcclPythonHistogram", no_cccl)
    peer, why = cubmod.load_cub("sm_90")
    assert peer is None
    assert why.startswith("CUB HistogramEven not measured: nvcc not found") and "cuda-cccl" in why


def test_cccl_fallback_when_nvcc_is_missing(monkeypatch):
    monkeypatch.setattr(cubmod, "find_nvcc", lambda: (None, "nvcc not found"))

    class Fake:
        name = "cuda-cccl 0.9 histogram_even"

    monkeypatch.setattr(cubmod, "CcclPythonHistogram", Fake)
    peer, how = cubmod.load_cub("sm_90")
    assert isinstance(peer, Fake) and "cuda-cccl" in how


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_real_nvcc_builds_and_loads_the_peer():
    peer = cubmod.CubHistogram(cubmod.build_library("sm_90"))
    assert peer.version.count(".") == 2 and int(peer.version.split(".")[0]) >= 2
    assert peer.name.startswith("CUB ")


def _edges_like_the_kernel(spec, bins):
    start, step, stop, dtype = spec
    i = np.arange(bins + 1, dtype=np.float64)
    v = np.add(np.multiply(i, step), start)  # two roundings, as __dmul_rn then __dadd_rn
    v[-1] = stop
    return v.astype(dtype)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int64", "uint16", "float32", "float64"])
@pytest.mark.parametrize("bins, rng", [(1, (0, 1)), (7, (-50.5, 75.25)), (256, (0, 256)), (4096, (0.0, 1.0)),
                                       (1000, (-3, 1e6)), (65536, (1e-3, 2.5)), (1 << 20, (0, 1 << 20)),
                                       (333, (-1e9, 1e9 + 7))])
def test_gpu_edges_equal_numpy_bit_for_bit(dtype, bins, rng):
    spec = device_edge_spec(np.dtype(dtype), bins, *rng)
    want = np.histogram_bin_edges(np.empty(0, dtype=dtype), bins, range=rng)
    if spec is None:
        return  # numpy is asked instead
    got = _edges_like_the_kernel(spec, bins)
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_gpu_edges_defer_to_numpy_where_numpy_rules_differ():
    assert device_edge_spec(np.dtype("float32"), 10, np.float32(0), np.float32(1)) is None  # numpy scalars
    assert device_edge_spec(np.dtype("float32"), 1 << 20, 1e6, 1e6 + 1) is None  # 'Too many bins' territory
    assert device_edge_spec(np.dtype("float64"), 10, 0, 2**60) is None
    assert device_edge_spec(np.dtype("int32"), 256, 0, 256) == (0.0, 1.0, 256.0, np.dtype("float64"))


def test_a_peer_that_fails_in_its_probe_process_is_named_not_run(monkeypatch):
    from cuadv.labs import histogram_peers as hp

    compile(hp._PROBE, "probe", "exec")  # the child's script is valid Python (it runs only where a GPU is)
    monkeypatch.setattr(hp, "_PROBE", "import sys; print('illegal memory access', file=sys.stderr); sys.exit(3)")
    why = hp.probe_peer(hp.Case("int32", "uniform", 1 << 24), "CUB x HistogramEven", 16, "sm_90")
    assert why.startswith("failed in a probe process (exit 3: illegal memory access)")
    monkeypatch.setattr(hp, "_PROBE", "pass")
    assert hp.probe_peer(hp.Case("int32", "uniform", 1 << 24), "cupy.bincount", 16, "sm_90") is None


def test_histogram_selection_names_the_measured_size():
    """--quick measures 256 MiB per histogram: the selection's evidence says so instead of a fixed '1 GiB'."""
    from types import SimpleNamespace

    from cuadv.labs.histogram import HistogramLab, Measurement
    from cuadv.report.results import LabResult

    ctx = SimpleNamespace(caps=SimpleNamespace(shared_mem_per_block_optin=232448))
    ms = [Measurement("int32", dist, 1 << 20, label, variant, c, 1.0, gbps)
          for dist in ("uniform", "zipf")
          for label, variant, c, gbps in (("global", "global", 0, 400.0), ("dsm c=16", "dsm", 16, 800.0),
                                          ("cupy.histogram (CUB)", "cupy", 0, 40.0))]
    for n_bytes, size in ((256 << 20, "256 MiB"), (1 << 30, "1 GiB")):
        result = LabResult("histogram", "x")
        HistogramLab()._judge(result, ctx, ms, n_bytes)
        assert f"1048576 bins, {size} uniform int32: dsm c=16 800 GB/s" in result.selection[0].evidence
        assert "(2.0x)" in result.selection[0].evidence
