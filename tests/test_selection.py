"""The selection matrix from lab results: one row per scenario, reasons for empty rows, features
this GPU lacks with reason and fallback."""

from cuadv.report.writer import Report
from cuadv.report.results import SCENARIOS, LabResult, Selection
from cuadv.report.selection import EXPECTED_LABS, selection_matrix, unsupported_features, unsupported_table

H200 = {"name": "NVIDIA H200", "compute_capability": (9, 0), "clc": False, "cluster_launch": True, "tma": True,
        "pdl": True, "cooperative_launch": True, "persisting_l2_max_bytes": 39_321_600, "mem_sync_domain_count": 4,
        "stream_priority_low": 0, "stream_priority_high": -5}
B200 = dict(H200, name="NVIDIA B200", compute_capability=(10, 0), clc=True)


def lab(name, status="ok", reason="", cells=()):
    return LabResult(name, f"{name} lab", status=status, reason=reason, selection=list(cells))


def row(table, scenario):
    return dict(zip(table.columns, next(r for r in table.rows if r[0] == scenario)))


def test_one_row_per_scenario_in_order():
    table = selection_matrix(Report(caps=H200, results=[]))
    assert [r[0] for r in table.rows] == list(SCENARIOS)
    assert set(EXPECTED_LABS) == set(SCENARIOS)


def test_cells_fill_rows_and_name_their_lab():
    results = [lab("scheduling", cells=[Selection("variable work per tile", "steal", "1.02x ideal vs 1.4x",
                                                  "fixed_work")]),
               lab("histogram", cells=[Selection("data exchange between blocks", "DSM", "3.1x global atomics",
                                                 "atomics")]),
               lab("cooperative", cells=[Selection("data exchange between blocks", "grid sync", "1.3x two kernels",
                                                   "two kernels")])]
    t = selection_matrix(Report(caps=H200, results=results))
    r = row(t, "variable work per tile")
    assert r["choice on this GPU"] == "steal" and r["evidence (measured in this run)"] == "1.02x ideal vs 1.4x"
    assert r["fallback"] == "fixed_work" and r["lab"] == "scheduling"
    r = row(t, "data exchange between blocks")
    assert r["choice on this GPU"] == "DSM [histogram]; grid sync [cooperative]"
    assert r["lab"] == "histogram, cooperative"


def test_empty_rows_say_why():
    results = [lab("scheduling", status="skipped", reason="needs compute capability >= 9.0"),
               lab("pdl", status="failed", reason="ValidationError: overlap"),
               lab("tma")]  # ran, but supplied no cell
    report = Report(caps=H200, results=results, skipped=[("lab l2", "no persisting L2")])
    t = selection_matrix(report)
    assert "lab scheduling skipped: needs compute capability >= 9.0" in row(t, "heavy prologue")["choice on this GPU"]
    assert "lab pdl failed: ValidationError: overlap" in row(t, "chained kernels")["choice on this GPU"]
    assert "lab tma ran but gave no cell" in row(t, "tiles reused by several blocks")["choice on this GPU"]
    assert "lab l2 skipped: no persisting L2" in row(t, "a hot read-only table")["choice on this GPU"]
    assert "lab launch was not run" in row(t, "many small tasks")["choice on this GPU"]


def test_failed_lab_cells_are_not_used():
    results = [lab("scheduling", status="failed", reason="boom",
                   cells=[Selection("heavy prologue", "steal", "x", "y")])]
    t = selection_matrix(Report(caps=H200, results=results))
    assert row(t, "heavy prologue")["choice on this GPU"].startswith("not measured (lab scheduling failed: boom")


def test_clc_is_marked_unsupported_on_hopper_with_its_fallback():
    missing = {f.key: why for f, why in unsupported_features(H200)}
    assert set(missing) == {"clc"}
    assert "compute capability >= 10.0" in missing["clc"] and "9.0" in missing["clc"]
    t = selection_matrix(Report(caps=H200, results=[]))
    for scenario in ("variable work per tile", "heavy prologue", "work that must yield to higher priority"):
        text = row(t, scenario)["unsupported here"]
        assert "Cluster Launch Control" in text and "fallback" in text and "steal" in text
    assert row(t, "chained kernels")["unsupported here"] == "-"
    u = unsupported_table(H200)
    assert u.rows[0][0].startswith("Cluster Launch Control") and "steal" in u.rows[0][2]


def test_blackwell_lacks_nothing_and_no_gpu_is_unknown():
    assert unsupported_features(B200) == []
    assert unsupported_table(B200).rows[0][0] == "(none)"
    t = selection_matrix(Report(caps=None, results=[], skipped=[("lab scheduling", "no CUDA GPU")]))
    assert row(t, "heavy prologue")["unsupported here"] == "unknown (no GPU)"
    assert "no CUDA GPU" in row(t, "heavy prologue")["choice on this GPU"]
    assert unsupported_table(None).rows[0][0] == "(unknown)"


def test_old_gpu_lists_every_missing_feature():
    old = dict(H200, compute_capability=(8, 0), clc=False, cluster_launch=False, tma=False, pdl=False,
               mem_sync_domain_count=1)
    keys = {f.key for f, _ in unsupported_features(old)}
    assert keys == {"clc", "cluster_launch", "tma", "pdl", "mem_sync_domains"}
    t = selection_matrix(Report(caps=old, results=[]))
    assert row(t, "chained kernels")["unsupported here"].startswith("PDL unsupported (needs compute capability >= 9.0)")
    assert "clusters" in row(t, "tiles reused by several blocks")["unsupported here"]
