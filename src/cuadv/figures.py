"""Figures: matplotlib with the Agg backend (no display needed) and one way to save them, each with
the data it draws in a CSV beside it (so a figure's numbers can be read, diffed and re-plotted)."""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

CSV_COLUMNS = ("axes", "series", "kind", "x", "y", "width", "height")
GZIP_ROWS = 10_000  # a plot with more drawn items (a block timeline) gets a gzipped CSV: committed reports stay small


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path) -> Path:
    """Lay out, write as PNG and close a figure (one resolution for every plot cuadv draws), and write the
    data drawn beside it (``figure_data``): ``name.csv``, or ``name.csv.gz`` past GZIP_ROWS rows.
    Returns the path of the CSV."""
    plt = pyplot()
    path = Path(path)
    try:
        rows = figure_data(fig)
    except (TypeError, ValueError):  # data matplotlib converted (dates, categories): the plot still gets written
        rows = []
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(rows)
    if len(rows) > GZIP_ROWS:
        data_path = path.with_suffix(".csv.gz")
        data_path.write_bytes(gzip.compress(text.getvalue().encode(), mtime=0))
    else:
        data_path = path.with_suffix(".csv")
        data_path.write_text(text.getvalue())
    return data_path


def figure_data(fig) -> list[tuple]:
    """What a figure draws, one row per point, bar or box: (axes title, series label, kind, x, y, width,
    height). Lines and scatters give points (x, y); bars and the boxes of a timeline (``broken_barh``)
    give their lower-left corner and size in data coordinates. Shaded spans (``axvspan``) are boxes too. Only
    what lies inside the axes' x-range is listed (a zoomed timeline lists the tiles of its window)."""
    from matplotlib.collections import PathCollection, PolyCollection
    from matplotlib.container import BarContainer
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    rows: list[tuple] = []
    for i, ax in enumerate(fig.axes):
        name = ax.get_title() or f"axes {i}"
        lo, hi = sorted(ax.get_xlim())
        visible = lambda x0, width=0.0: x0 + width >= lo and x0 <= hi  # noqa: E731  (zoomed plots: only the window)
        in_bars: set[int] = set()
        for container in ax.containers:
            if isinstance(container, BarContainer):
                label = container.get_label()
                for patch in container.patches:
                    in_bars.add(id(patch))
                    if visible(patch.get_x(), patch.get_width()):
                        rows.append((name, label, "bar", patch.get_x(), patch.get_y(), patch.get_width(),
                                     patch.get_height()))
        for line in ax.get_lines():
            if not isinstance(line, Line2D) or line.get_transform() != ax.transData:
                continue  # a reference line (axhline, axvline) drawn in axes coordinates
            for x, y in line.get_xydata():  # converted to floats by matplotlib (categories, dates)
                if visible(float(x)):
                    rows.append((name, _series(line), "line", x, y, "", ""))
        for coll in ax.collections:
            if isinstance(coll, PathCollection):  # scatter
                for x, y in coll.get_offsets():
                    if visible(float(x)):
                        rows.append((name, _series(coll), "point", x, y, "", ""))
            elif isinstance(coll, PolyCollection):  # broken_barh, fill_between, spans
                for path in coll.get_paths():
                    (x0, y0), (x1, y1) = path.vertices.min(axis=0), path.vertices.max(axis=0)
                    if visible(float(x0), float(x1 - x0)):
                        rows.append((name, _series(coll), "box", x0, y0, x1 - x0, y1 - y0))
        for patch in ax.patches:
            if isinstance(patch, Rectangle) and id(patch) not in in_bars:
                (x0, y0), (x1, y1) = _extent(ax, patch)
                if visible(x0, x1 - x0):
                    rows.append((name, _series(patch), "box", x0, y0, x1 - x0, y1 - y0))
    return [tuple(_plain(v) for v in row) for row in rows]


def _extent(ax, patch):
    """A rectangle's corners in data coordinates (axvspan draws in blended axes/data coordinates)."""
    display = patch.get_transform().transform([(0, 0), (1, 1)])  # the unit square of the patch's path
    (x0, y0), (x1, y1) = ax.transData.inverted().transform(display)
    return (min(x0, x1), min(y0, y1)), (max(x0, x1), max(y0, y1))


def _series(artist) -> str:
    label = artist.get_label() or ""
    return "" if label.startswith("_") else str(label)


def _plain(value):
    """Numbers as Python floats/ints (NumPy scalars print with their type in some versions), text as is."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return round(value, 9)
    return value
