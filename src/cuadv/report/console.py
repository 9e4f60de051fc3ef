"""Tables on the terminal (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable

from .results import Table, fmt


def print_table(console: Console, table: Table) -> None:
    t = RichTable(title=table.title, title_justify="left")
    for c in table.columns:
        t.add_column(c, justify="left" if c == table.columns[0] else "right")
    for row in table.rows:
        t.add_row(*[fmt(c) for c in row])
    console.print(t)
    if table.note:
        console.print(f"[dim]{table.note}[/]")
