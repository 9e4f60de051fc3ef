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
