"""Plots (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from .work_stealing import Trace


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_sm_timeline(trace: "Trace", path: str | Path, title: str, sm_count: int | None = None,
                     highlight: Sequence[tuple[float, float, str]] = ()) -> None:
    """One row per SM, one bar per tile (start to end, microseconds from the first tile's start).

    Colour encodes the block that ran the tile, so a block that runs many tiles (stealing) shows as
    runs of one colour; gaps show idle SMs (tail effect) and preemption. ``highlight`` spans
    (start_us, end_us, label) are shaded, e.g. when a high-priority kernel ran.
    """
    plt = _pyplot()
    rec = trace.records[trace.written]
    fig, ax = plt.subplots(figsize=(11, 5.5))
    if len(rec):
        t0 = rec["start_ns"].min()
        start = (rec["start_ns"] - t0) / 1e3
        width = np.maximum((rec["end_ns"] - rec["start_ns"]) / 1e3, 0.05)
        colors = plt.cm.tab20((rec["block"] % 20) / 20.0)
        ax.barh(rec["smid"], width, left=start, height=0.8, color=colors, linewidth=0)
        ax.set_xlim(0, float((rec["end_ns"].max() - t0) / 1e3) * 1.01)
    for lo, hi, label in highlight:
        ax.axvspan(lo, hi, color="red", alpha=0.15, label=label)
    if highlight:
        ax.legend(loc="upper right")
    ax.set_ylim(-1, (sm_count or (int(rec["smid"].max()) + 1 if len(rec) else 1)))
    ax.set_xlabel("time since the first tile started (us)")
    ax.set_ylabel("SM")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
