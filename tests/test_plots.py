"""Plot helpers without a GPU: figures land next to the report and are listed in the result."""

import numpy as np

from cuadv.labs.base import RunContext
from cuadv.figures import pyplot as _pyplot
from cuadv.work_stealing.timeline import plot_sm_timeline
from cuadv.report.results import LabResult
from cuadv.work_stealing import TRACE_DTYPE, Trace


def test_save_figure_writes_and_lists(tmp_path):
    ctx = RunContext(out_dir=tmp_path / "report", quick=True, caps=None, ceiling=None)
    result = LabResult("demo", "Demo")
    fig, ax = _pyplot().subplots()
    ax.plot([0, 1], [1, 0])
    ctx.save_figure(fig, "demo.png", result)
    assert result.plots == ["demo.png"]
    assert (tmp_path / "report" / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sm_timeline_with_highlight_and_window(tmp_path):
    rec = np.zeros(5000, TRACE_DTYPE)
    rec["smid"], rec["block"] = np.arange(5000) % 132, np.arange(5000) // 3
    rec["start_ns"] = np.arange(5000) * 200
    rec["end_ns"] = rec["start_ns"] + 3000
    path = tmp_path / "timeline.png"
    plot_sm_timeline(Trace("steal", (5000, 1, 1), records=rec), path, "t", sm_count=132,
                     highlight=[(100.0, 150.0, "high-priority kernel")], window_us=(0.0, 400.0))
    assert path.stat().st_size > 1000


def test_every_plot_has_its_data_beside_it(tmp_path):
    import csv

    from cuadv.figures import save_figure
    from cuadv.report.html_pages import figure_html

    fig, (lines, boxes) = _pyplot().subplots(1, 2)
    lines.plot([1, 2, 3], [4.0, 5.0, 6.0], "o-", label="steal")
    lines.bar([0, 1], [2, 3], 0.4, label="fixed_blocks")
    lines.axhline(1.0)  # a reference line in axes coordinates: not data
    lines.set_title("makespan")
    boxes.broken_barh([(0, 1), (2, 3)], (0, 0.9), label="SM 0")
    boxes.axvspan(1, 2, alpha=0.2, label="held SMs")
    data = save_figure(fig, tmp_path / "demo.png")
    assert data == tmp_path / "demo.csv"
    rows = list(csv.DictReader(data.open()))
    assert [(r["series"], r["kind"], float(r["x"]), float(r["y"])) for r in rows if r["axes"] == "makespan"] == [
        ("fixed_blocks", "bar", -0.2, 0.0), ("fixed_blocks", "bar", 0.8, 0.0),
        ("steal", "line", 1.0, 4.0), ("steal", "line", 2.0, 5.0), ("steal", "line", 3.0, 6.0)]
    spans = [(r["series"], float(r["x"]), float(r["width"])) for r in rows if r["kind"] == "box"]
    assert spans == [("SM 0", 0.0, 1.0), ("SM 0", 2.0, 3.0), ("held SMs", 1.0, 1.0)]
    assert "href='demo.csv'>data</a>" in figure_html(tmp_path, "demo.png")


def test_a_large_plot_gets_a_gzipped_csv(tmp_path):
    import gzip

    from cuadv.figures import GZIP_ROWS, save_figure

    fig, ax = _pyplot().subplots()
    ax.plot(np.arange(GZIP_ROWS + 1), np.arange(GZIP_ROWS + 1))
    data = save_figure(fig, tmp_path / "big.png")
    assert data.name == "big.csv.gz"
    assert len(gzip.decompress(data.read_bytes()).decode().splitlines()) == GZIP_ROWS + 2  # header + rows


def test_sm_timeline_shades_held_sms(tmp_path):
    """The shared-GPU timeline: SM rows another kernel held are shaded (Trace.plot passes them through)."""
    rec = np.zeros(2000, TRACE_DTYPE)
    free = np.arange(16, 132)
    rec["smid"], rec["block"] = free[np.arange(2000) % free.size], np.arange(2000) // 4
    rec["start_ns"] = np.arange(2000) * 100
    rec["end_ns"] = rec["start_ns"] + 5000
    path = tmp_path / "shared.png"
    Trace("fixed_blocks", (2000, 1, 1), records=rec).plot(path, sm_count=132, shade_sms=range(16))
    assert path.stat().st_size > 1000


def test_a_zoomed_plot_lists_only_its_window():
    from cuadv.figures import figure_data

    fig, ax = _pyplot().subplots()
    ax.broken_barh([(0, 1), (10, 1), (20, 1)], (0, 0.9), label="SM 0")
    ax.set_xlim(9, 12)
    assert [r[3] for r in figure_data(fig)] == [10.0]


def test_timeline_rows_split_per_slot_and_other_kernels_drawn(tmp_path):
    """Overlapping tiles on one SM go to separate sub-rows; a preempting kernel's tiles are drawn in their own
    colour on the same time base; two timelines share a time axis through common_window."""
    import csv

    from cuadv.work_stealing.timeline import common_window

    low = np.zeros(4, TRACE_DTYPE)
    low["smid"], low["block"] = [0, 0, 1, 1], [0, 1, 2, 3]
    low["start_ns"], low["end_ns"] = [0, 0, 0, 5000], [4000, 4000, 4000, 9000]  # SM 0: two tiles at once
    high = np.zeros(1, TRACE_DTYPE)
    high["smid"], high["start_ns"], high["end_ns"] = 1, 4000, 5000
    a, b = Trace("steal", (4, 1, 1), records=low), Trace("fixed_work", (1, 1, 1), records=high)
    assert common_window([a, b]) == (0.0, 9.0 * 1.01)
    plot_sm_timeline(a, tmp_path / "t.png", "t", sm_count=2, others=[(b, "high-priority kernel's tiles")],
                     window_us=common_window([a]))
    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    boxes = [(r["series"], float(r["x"]), round(float(r["y"]), 3)) for r in rows if r["kind"] == "box"]
    sm0 = sorted(y for s, x, y in boxes if s == "" and y < 0.5)
    assert len(sm0) == 2 and sm0[0] != sm0[1]  # two slots on SM 0
    assert [(s, x) for s, x, _ in boxes if s] == [("high-priority kernel's tiles", 4.0)]


def test_another_kernels_tiles_beside_this_ones_on_an_sm_get_their_own_lane(tmp_path):
    """A high-priority tile that runs on SM 0 while a low-priority tile runs there is drawn in its own lane, not
    over the other; the SM axis reaches the other kernel's highest SM."""
    import csv

    low = np.zeros(1, TRACE_DTYPE)
    low["smid"], low["start_ns"], low["end_ns"] = 0, 0, 10_000
    high = np.zeros(2, TRACE_DTYPE)
    high["smid"], high["start_ns"], high["end_ns"] = [0, 5], [2_000, 0], [4_000, 1_000]
    a, b = Trace("steal", (1, 1, 1), records=low), Trace("fixed_work", (2, 1, 1), records=high)
    plot_sm_timeline(a, tmp_path / "t.png", "t", others=[(b, "high")])
    boxes = [(r["series"], round(float(r["y"]), 3)) for r in csv.DictReader((tmp_path / "t.csv").open())
             if r["kind"] == "box"]
    sm0 = [y for _, y in boxes if y < 0.5]
    assert len(sm0) == 2 and sm0[0] != sm0[1]  # the low tile and the high one on SM 0: two lanes
    assert any(y > 4.5 for s, y in boxes if s == "high")  # SM 5's tile, within the axis (its limit: every kernel's SMs)
