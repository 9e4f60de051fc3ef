#!/usr/bin/env python3
"""Render a cuadv report (index.html) in headless Chromium and check the screenshot is not blank.

    python scripts/screenshot_report.py cuadv-report                 # writes cuadv-report/screenshot.png
    python scripts/screenshot_report.py cuadv-report/index.html --out shot.png --height 6000

Exit status: 0 when the page rendered with visible content, 1 when the screenshot is blank or
Chromium failed, 2 when no Chromium binary is found (set CUADV_CHROMIUM to its path; on Debian:
``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless_shell")


def find_chromium() -> str | None:
    """The Chromium binary: $CUADV_CHROMIUM, else the first of CANDIDATES on PATH."""
    explicit = os.environ.get("CUADV_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() or shutil.which(explicit) else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot(html: Path, png: Path, width: int = 1400, height: int = 3000, chromium: str | None = None,
               timeout: float = 120.0) -> Path:
    """Render ``html`` (a local file) to ``png`` with headless Chromium; raises RuntimeError on failure."""
    binary = chromium or find_chromium()
    if binary is None:
        raise FileNotFoundError("no Chromium binary found (tried $CUADV_CHROMIUM and " + ", ".join(CANDIDATES) + ")")
    html, png = Path(html).resolve(), Path(png).resolve()
    if not html.is_file():
        raise FileNotFoundError(f"{html} does not exist")
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="cuadv-chromium-") as profile:
        # --no-sandbox: Chromium refuses to run as root otherwise (containers, CI); no background
        # networking: without a network Chromium's calls home fail and slow it; a throw-away profile
        # so a running browser's lock does not get in the way.
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--disable-quic", "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={width},{height}",
               html.as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if not png.is_file() or png.stat().st_size == 0:
        raise RuntimeError(f"Chromium wrote no screenshot (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return png


@dataclass
class Ink:
    """How much of a screenshot is not background."""

    width: int
    height: int
    ink_fraction: float  # pixels that differ visibly from the most common colour
    distinct_colours: int

    @property
    def blank(self) -> bool:
        return self.ink_fraction < 0.005 or self.distinct_colours < 8


def measure_ink(png: Path) -> Ink:
    import matplotlib.image as mpimg
    import numpy as np

    pixels = mpimg.imread(str(png))
    rgb = np.round(pixels[..., :3] * 255).astype(np.int32)
    flat = rgb.reshape(-1, 3)
    packed = (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]
    values, counts = np.unique(packed, return_counts=True)
    background = values[counts.argmax()]
    bg = np.array([(background >> 16) & 255, (background >> 8) & 255, background & 255])
    ink = np.abs(flat - bg).sum(axis=1) > 30
    return Ink(rgb.shape[1], rgb.shape[0], float(ink.mean()), int(len(values)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", help="the report directory or its index.html")
    p.add_argument("--out", help="screenshot PNG (default: screenshot.png next to index.html)")
    p.add_argument("--width", type=int, default=1400)
    p.add_argument("--height", type=int, default=3000)
    args = p.parse_args(argv)
    html = Path(args.report)
    if html.is_dir():
        html = html / "index.html"
    out = Path(args.out) if args.out else html.parent / "screenshot.png"
    if find_chromium() is None:
        print("no Chromium binary found: set CUADV_CHROMIUM or install chromium", file=sys.stderr)
        return 2
    try:
        screenshot(html, out, args.width, args.height)
    except (RuntimeError, FileNotFoundError, subprocess.TimeoutExpired) as exc:
        print(f"screenshot failed: {exc}", file=sys.stderr)
        return 1
    ink = measure_ink(out)
    print(f"{out}: {ink.width} x {ink.height} px, {ink.ink_fraction:.1%} ink, {ink.distinct_colours} colours"
          + (" -- BLANK" if ink.blank else ""))
    return 1 if ink.blank else 0


if __name__ == "__main__":
    sys.exit(main())
