"""Tables on the terminal (rich), the command's stdout console and its progress bars (on stderr)."""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.progress import Progress
from rich.table import Table as RichTable
from rich.text import Text

from .results import Table, fmt

# Where stdout is not a terminal (a pipe, a file, a CI log) rich would assume 80 columns and crop
# cells ("fixed_…"). There, lines are as wide as their content: up to this width without measuring,
# and a wider table widens the console before it is printed (print_table).
PIPE_WIDTH = 240


def make_console(**kwargs) -> Console:
    """The console a command prints its results to (stdout): the terminal's width on a terminal,
    else wide enough that no table cell is cropped and no line is wrapped."""
    console = Console(**kwargs)
    if not console.is_terminal:
        console = Console(width=max(PIPE_WIDTH, console.width), soft_wrap=True, **kwargs)
    return console


def progress_bar(console: Console, *columns, **kwargs) -> Progress:
    """A rich progress bar on stderr, so stdout stays clean for JSON and pipes; shown only where
    stderr is a terminal. ``console`` is the stdout console: where it is a terminal too, what is printed
    to it while the bar runs goes above the bar; where it is a pipe it goes to the pipe untouched."""
    err = Console(stderr=True)
    return Progress(*columns, console=err, disable=not err.is_terminal,
                    redirect_stdout=console.is_terminal, **kwargs)


def print_table(console: Console, table: Table) -> None:
    """The table as text: titles, cells and notes are printed as they are, never read as rich markup (a plan name
    "[shared (1 block, x16)]" or a path with brackets would be dropped or raise MarkupError)."""
    t = RichTable(title=Text(table.title), title_justify="left")
    for c in table.columns:
        t.add_column(Text(c), justify="left" if c == table.columns[0] else "right")
    for row in table.rows:
        t.add_row(*[Text(fmt(c)) for c in row])
    if not console.is_terminal:
        _fit(console, t)
    console.print(t)
    if table.note:
        console.print(Text(table.note, style="dim"))


def _fit(console: Console, table: RichTable) -> None:
    """Widen a console that is not a terminal to the table's natural width, so no cell is cropped."""
    wide = console.options.update(width=1_000_000)
    needed = Measurement.get(console, wide, table).maximum
    if needed > console.width:
        console.width = needed
