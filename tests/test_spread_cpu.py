"""Medians with their spread: interleaved_rounds gives a Spread (p10, p90 of all its samples); tables show it,
results.json records it, arithmetic and copies see a float."""

import copy
import json

from cuadv.labs.base import interleaved_rounds
from cuadv.report.results import LabResult, Spread, Table, fmt
from cuadv.report.writer import Report, write_report


def test_interleaved_rounds_keeps_the_spread_of_all_samples():
    samples = iter([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [9.0, 10.0]])
    ms = interleaved_rounds({"a": lambda: next(samples)}, rounds=5)["a"]
    assert isinstance(ms, Spread) and float(ms) == 5.5
    assert (round(ms.p10, 6), round(ms.p90, 6)) == (1.9, 9.1)  # numpy's linear percentiles of 1..10
    assert ms / 2 == 2.75 and type(ms / 2) is float  # arithmetic is on the median
    assert fmt(ms) == "5.5 (1.9-9.1)"
    again = copy.deepcopy(ms)
    assert (float(again), again.p10, again.p90) == (5.5, ms.p10, ms.p90)


def test_results_json_records_the_spread_and_keeps_figures_numbers(tmp_path):
    result = LabResult("demo", "Demo", tables=[Table("t", ["ms"], [[Spread(0.3, 0.29, 0.32)]])],
                       figures={"ms": Spread(0.3, 0.29, 0.32)})
    write_report(Report(caps={}, results=[result]), tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    lab = data["results"][0]
    assert lab["tables"][0]["rows"] == [[{"median": 0.3, "p10": 0.29, "p90": 0.32}]]
    assert lab["figures"] == {"ms": 0.3}
    assert "0.3 (0.29-0.32)" in (tmp_path / "report.md").read_text()
