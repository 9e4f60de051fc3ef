"""Medians with their spread: interleaved_rounds gives a Spread (p10, p90 of all its samples); tables show it,
results.json records it, arithmetic and copies see a float."""

import copy
import csv
import json

import pytest

from cuadv.labs.base import gb_per_s, interleaved_rounds, rates
from cuadv.report.results import LabResult, Spread, Table, fmt, spread_map
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


def test_spread_map_turns_a_decreasing_function_round():
    ms = Spread(2.0, 1.0, 4.0)
    rate = spread_map(lambda t: 8.0 / t, ms)  # a rate from a time: the slowest times give the lowest rates
    assert isinstance(rate, Spread) and (float(rate), rate.p10, rate.p90) == (4.0, 2.0, 8.0)
    doubled = spread_map(lambda t: 2 * t, ms)
    assert (float(doubled), doubled.p10, doubled.p90) == (4.0, 2.0, 8.0)
    plain = spread_map(lambda t: 8.0 / t, 2.0)
    assert plain == 4.0 and type(plain) is float


def test_rates_carry_the_spread_of_the_time():
    class Ceiling:
        bytes_per_s = 4e12

        def fraction(self, bytes_per_s):
            return bytes_per_s / self.bytes_per_s

    ms = Spread(0.5, 0.4, 1.0)  # 1e9 bytes in 0.5 ms: 2000 GB/s
    gbps, pct = rates(ms, 1e9, Ceiling())
    assert (float(gbps), gbps.p10, gbps.p90) == pytest.approx((2000.0, 1000.0, 2500.0))
    assert (float(pct), pct.p10, pct.p90) == pytest.approx((50.0, 25.0, 62.5))
    assert gb_per_s(0.5, 1e9) == pytest.approx(2000.0) and not isinstance(gb_per_s(0.5, 1e9), Spread)


def test_a_lab_table_from_timings_carries_their_spread_to_every_output(tmp_path):
    """The histogram lab's tables built from timings with a spread: times and rates keep it (table cells, report,
    results.json), ratios between two timings are plain medians, and the CSV holds the medians."""
    from cuadv.labs import histogram as h
    from cuadv.labs.base import RunContext

    class Ceiling:
        bytes_per_s = 4e12
        tb_per_s = 4.0

    n_bytes = 1 << 30

    def measured(label: str, variant: str, ms: Spread) -> h.Measurement:
        return h.Measurement("int32", "uniform", 4096, label, variant, 1, ms, gb_per_s(ms, n_bytes), 132)

    ms = [measured("shared (1 block, x32)", "shared", Spread(0.5, 0.4, 1.0)),
          measured("global atomics", "global", Spread(2.0, 1.5, 4.0)),
          measured("cupy.histogram (CUB)", "cupy", Spread(4.0, 3.0, 5.0))]
    result = LabResult("histogram", "Histogram")
    ctx = RunContext(out_dir=tmp_path, quick=True, caps=None, ceiling=Ceiling())
    h.HistogramLab()._tables(result, ctx, ms, n_bytes)
    every = {row[3]: row for row in result.tables[1].rows}
    shared = every["shared (1 block, x32)"]
    _, _, _, _, _, time_ms, gbps, pct, x_cupy, x_global = shared
    assert (float(time_ms), time_ms.p10, time_ms.p90) == (0.5, 0.4, 1.0)
    want_gbps = (n_bytes / 0.5e-3 / 1e9, n_bytes / 1.0e-3 / 1e9, n_bytes / 0.4e-3 / 1e9)
    assert (float(gbps), gbps.p10, gbps.p90) == pytest.approx(want_gbps)
    assert (float(pct), pct.p10, pct.p90) == pytest.approx(tuple(100 * g / 4000 for g in want_gbps))
    assert type(x_cupy) is float and x_cupy == pytest.approx(8.0) and x_global == pytest.approx(4.0)
    assert isinstance(result.tables[0].rows[0][4], Spread)  # the summary's GB/s
    assert result.figures["hist_int32_uniform_4096_best_gbps"] == pytest.approx(want_gbps[0])

    paths = {p.name: p for p in write_report(Report(caps={}, results=[result]), tmp_path / "rep")}
    row = json.loads(paths["results.json"].read_text())["results"][0]["tables"][1]["rows"][0]
    assert row[5] == {"median": 0.5, "p10": 0.4, "p90": 1.0}
    assert row[6] == pytest.approx({"median": want_gbps[0], "p10": want_gbps[1], "p90": want_gbps[2]})
    assert fmt(gbps) == "2,147 (1,074-2,684)" and fmt(gbps) in paths["report.md"].read_text()
    with open(tmp_path / "rep" / "lab-histogram-2.csv") as f:
        csv_row = next(r for r in csv.reader(f) if r[3] == "shared (1 block, x32)")
    assert float(csv_row[5]) == 0.5 and float(csv_row[6]) == pytest.approx(want_gbps[0])


def test_a_spread_of_no_samples_is_nan_shown_as_a_dash():
    import math

    from cuadv.report.results import Spread, fmt

    s = Spread.of([])
    assert math.isnan(s) and math.isnan(s.p10) and math.isnan(s.p90) and fmt(s) == "-"
