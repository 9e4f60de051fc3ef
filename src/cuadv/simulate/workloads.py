"""Per-tile durations for the simulator: the named workloads (uniform, Pareto, triangular, periodic)
and durations read from a file."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .model import Machine, SimulationError

STANDARD_WORKLOADS = ("uniform", "pareto:1.5", "triangular", "periodic")
WORKLOAD_NAMES = ("uniform", "pareto", "triangular", "periodic")
PERIODIC_FACTOR = 120.0


def make_workload(spec: str, tiles: int, tile_ns: float, machine: Machine, seed: int = 0) -> np.ndarray:
    """Per-tile durations (ns) for a workload name, or from a file of durations in microseconds.

    ``uniform``: every tile ``tile_ns``. ``pareto[:alpha]``: Pareto(alpha) with mean ``tile_ns``
    (alpha > 1, default 1.5). ``triangular``: tile i costs in proportion to i + 1 (mean ``tile_ns``),
    like the rows of a triangular matrix. ``periodic[:period[:factor]]``: every period-th tile (default
    the machine's slot count) costs factor (default 120) times ``tile_ns``. A path ending in .npy or
    .txt/.csv: one duration per tile in microseconds (``tiles`` is then the file's length).
    """
    if not isinstance(tiles, (int, np.integer)) or tiles < 0:
        raise SimulationError(f"tiles must be an integer >= 0, got {tiles!r}")
    if not (math.isfinite(tile_ns) and tile_ns >= 0):
        raise SimulationError(f"the tile duration must be a finite number >= 0, got {tile_ns!r}")
    name, *params = spec.split(":")
    try:
        values = [float(p) for p in params]
    except ValueError:
        values = None
    if name == "uniform" and not params:
        return np.full(tiles, float(tile_ns))
    if name == "pareto" and values is not None and len(values) <= 1:
        alpha = values[0] if values else 1.5
        if not alpha > 1:
            raise SimulationError(f"pareto needs alpha > 1 for a finite mean, got {alpha}")
        scale = tile_ns * (alpha - 1) / alpha  # the minimum; the mean of Pareto(alpha, scale) is tile_ns
        return scale * (np.random.default_rng(seed).pareto(alpha, tiles) + 1.0)
    if name == "triangular" and not params:
        return 2.0 * tile_ns * np.arange(1, tiles + 1, dtype=np.float64) / (tiles + 1)
    if name == "periodic" and values is not None and len(values) <= 2:
        if values and not (math.isfinite(values[0]) and values[0] == int(values[0]) and values[0] >= 1):
            raise SimulationError(f"periodic needs a period that is a whole number >= 1, got {values[0]:g}")
        period = int(values[0]) if values else machine.slots
        factor = values[1] if len(values) > 1 else PERIODIC_FACTOR
        if not (math.isfinite(factor) and factor >= 0):
            raise SimulationError(f"periodic needs a finite factor >= 0, got {factor:g}")
        d = np.full(tiles, float(tile_ns))
        d[::period] *= factor
        return d
    if is_workload_file(spec):
        return _durations_from_file(Path(spec))
    raise SimulationError(f"unknown workload {spec!r}: use uniform, pareto[:alpha], triangular, "
                          "periodic[:period[:factor]], or a .npy/.txt/.csv file of durations in microseconds")


def is_workload_file(spec: str) -> bool:
    """Whether make_workload reads ``spec`` as a file of durations (its values are the tiles) rather than a name:
    a workload name wins over a file of that name."""
    path = Path(spec)
    return spec.split(":")[0] not in WORKLOAD_NAMES and (path.suffix in (".npy", ".txt", ".csv") or path.exists())


def _durations_from_file(path: Path) -> np.ndarray:
    if not path.is_file():
        raise SimulationError(f"workload file {path} does not exist")
    try:
        us = (np.load(path) if path.suffix == ".npy"
              else np.loadtxt(path, delimiter="," if path.suffix == ".csv" else None))
        us = np.asarray(us, dtype=np.float64).reshape(-1)  # strings or objects in a .npy fail here, with the path named
    except Exception as exc:
        raise SimulationError(f"cannot read durations from {path}: {exc}") from exc
    if len(us) == 0 or not np.isfinite(us).all() or us.min() < 0:
        raise SimulationError(f"{path} must hold at least one finite duration >= 0 (microseconds per tile)")
    return us * 1e3
