"""What a lab returns: tables, plots, checks and named figures; serialisable to JSON."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable


@dataclass
class Table:
    """A titled table. Cells are numbers or strings; ``note`` says how the figures were measured."""

    title: str
    columns: list[str]
    rows: list[list[Any]]
    note: str = ""


@dataclass
class Selection:
    """One cell of the selection matrix, backed by this run's measurement.

    scenario: one of SCENARIOS; choice: the mechanism to use on this GPU; evidence: the measured
    numbers that justify it (with the baseline they beat); fallback: what to use where unsupported.
    """

    scenario: str
    choice: str
    evidence: str
    fallback: str = ""


SCENARIOS = (
    "variable work per tile",
    "heavy prologue",
    "work that must yield to higher priority",
    "many small tasks",
    "data exchange between blocks",
    "tiles reused by several blocks",
    "chained kernels",
    "a hot read-only table",
)


@dataclass
class LabResult:
    lab: str
    title: str
    status: str = "ok"  # ok | skipped | failed
    reason: str = ""  # why skipped or failed
    tables: list[Table] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # file names in the output directory
    checks: list[str] = field(default_factory=list)  # validations that passed, in words
    figures: dict[str, float] = field(default_factory=dict)  # named numbers (for the selection matrix)
    notes: list[str] = field(default_factory=list)  # what was observed but not asserted
    selection: list[Selection] = field(default_factory=list)  # cells of the selection matrix it informs

    def as_dict(self) -> dict:
        d = asdict(self)
        d["figures"] = {k: float(v) if isinstance(v, Spread) else v for k, v in self.figures.items()}  # numbers
        return d


class Spread(float):
    """A median with its spread: a float (the median) that also carries the 10th and 90th percentiles of the
    samples it came from. Tables show ``median (p10-p90)``; results.json gets {"median", "p10", "p90"}; any
    arithmetic on it is on the median."""

    def __new__(cls, median: float, p10: float, p90: float):
        self = super().__new__(cls, median)
        self.p10, self.p90 = float(p10), float(p90)
        return self

    def __getnewargs__(self):  # copies (dataclasses.asdict) and pickles keep the spread
        return float(self), self.p10, self.p90

    @classmethod
    def of(cls, samples) -> "Spread":
        """Of any sequence of numbers, e.g. a ``Timing``'s samples: ``Spread.of(time_gpu(fn).samples)``. No samples:
        NaN throughout (a cell shown as "-")."""
        import numpy as np

        a = np.asarray(samples, dtype=np.float64)
        if a.size == 0:
            return cls(math.nan, math.nan, math.nan)
        return cls(float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90)))

    def as_json(self) -> dict:
        return {"median": float(self), "p10": self.p10, "p90": self.p90}


def spread_map(fn: Callable[[float], float], value: float) -> float:
    """``fn(value)``. For a Spread, a Spread of ``fn`` applied to the median and to both percentiles (``fn`` is
    monotonic, e.g. a rate from a time; a decreasing one turns the p90 into the p10: the slowest tenth of the
    times is the lowest tenth of the rates). A plain number gives a plain number."""
    if not isinstance(value, Spread):
        return fn(value)
    low, high = sorted((fn(value.p10), fn(value.p90)))
    return Spread(fn(float(value)), low, high)


def json_cells(value: Any) -> Any:
    """``value`` with every Spread inside it (lists, dicts) as {"median", "p10", "p90"}, NumPy floats as floats and
    a number that is not finite (NaN, inf: a cell a lab could not fill) as null, so results.json is JSON that any
    reader parses (JSON has no NaN)."""
    if isinstance(value, Spread):
        return json_cells(value.as_json())
    if isinstance(value, dict):
        return {k: json_cells(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_cells(v) for v in value]
    if isinstance(value, float) or getattr(getattr(value, "dtype", None), "kind", None) == "f" \
            and not getattr(value, "shape", ()):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def fmt(value: Any) -> str:
    """A table cell as text: floats to 3 significant figures below 1,000 and as whole numbers with thousands
    separators from there (96,006); NaN as "-"; a Spread as ``median (p10-p90)``."""
    if isinstance(value, Spread):
        return "-" if value != value else f"{fmt(float(value))} ({fmt(value.p10)}-{fmt(value.p90)})"
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    return str(value)
