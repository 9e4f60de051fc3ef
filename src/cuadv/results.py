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
