"""What a lab returns: tables, plots, checks and named figures; serialisable to JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
        return asdict(self)


def fmt(value: Any) -> str:
    """A table cell as text: 3 significant figures for floats."""
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    return str(value)
