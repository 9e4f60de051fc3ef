"""Figures: matplotlib with the Agg backend (no display needed) and one way to save them."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path) -> None:
    """Lay out, write as PNG and close a figure (one resolution for every plot cuadv draws)."""
    plt = pyplot()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
