"""The HTML report: a one-screen index.html and one page per lab (lab-<name>.html), with a CSV
beside every table of a lab page.

index.html: the labs with their status and one headline each (linked to their pages), the GPU in
one line (its capabilities folded away), the selection matrix, the features this GPU lacks, the
environment (folded), one headline figure per lab as a thumbnail linking to its page, and what
was skipped. A lab page: status, checks, notes, every table (collapsible, sortable by a click on a
column heading, with its CSV), every plot and the selection cells the lab supplied.

Everything works offline: CSS and the few lines of sorting JavaScript are inline, images and CSVs
are files beside the pages, referenced by relative path (never embedded: the pages stay small).
"""

from __future__ import annotations

import csv
import html
import math
import numbers
import textwrap
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from .results import LabResult, Table, fmt

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#222;background:#fafafa}
main{max-width:1500px;margin:0 auto;padding:1em 1.5em;background:#fff}
h1{margin:.1em 0;font-size:1.5em}h2{border-bottom:2px solid #ddd;padding-bottom:.1em;margin:1em 0 .4em;font-size:1.15em}
h4{margin:1em 0 .3em}
.top{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:0 1.5em;align-items:start}
.top .sum{grid-column:1;grid-row:1}.top .gpu{grid-column:1;grid-row:2}.top .fig{grid-column:2;grid-row:1/3}
.top .sel{grid-column:1/-1}.top .uns{grid-column:1}.top .env{grid-column:2}
@media (max-width:1000px){.top{display:block}}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:.3em 0 .4em;font-size:.85em}
td,th{border:1px solid #ccc;padding:2px 7px;vertical-align:top}
th{background:#eef1f4;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.text{text-align:left;max-width:38em}
tr:nth-child(even) td{background:#fbfbfb}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th[data-dir=asc]::after{content:" \\25B2"}table.sortable th[data-dir=desc]::after{content:" \\25BC"}
.ok{color:#080;font-weight:600}.failed{color:#b00;font-weight:600}.skipped{color:#a60;font-weight:600}
.unsupported td{background:#fff4f0}
details{margin:.3em 0}summary{cursor:pointer}
figure{margin:.6em 0}figcaption{color:#555;font-size:.85em}
figure img{max-width:100%;border:1px solid #ddd}
.thumbs{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:.5em}
.thumbs figure{margin:0}.thumbs img{width:100%;height:105px;object-fit:contain;border:1px solid #ddd;background:#fff}
.note{color:#555;font-style:italic;margin:.2em 0 .8em}.meta{color:#555;margin:.2em 0}
nav.labs{font-size:.9em;margin:.3em 0}nav.labs a{margin-right:.8em}
"""

# Click a column heading to sort by it (again: reverse). Numbers sort by the value in data-v.
_SORT_JS = textwrap.dedent("""
    document.querySelectorAll("table.sortable").forEach(function (t) {
      var heads = t.tHead.rows[0].cells;
      Array.prototype.forEach.call(heads, function (th, i) {
        th.addEventListener("click", function () {
          var dir = th.getAttribute("data-dir") === "asc" ? -1 : 1, body = t.tBodies[0];
          Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("data-dir"); });
          th.setAttribute("data-dir", dir === 1 ? "asc" : "desc");
          var key = function (r) {
            var c = r.cells[i]; if (!c) return "";
            var v = c.getAttribute("data-v"); return v === null ? c.textContent : parseFloat(v);
          };
          Array.prototype.slice.call(body.rows).sort(function (a, b) {
            var x = key(a), y = key(b);
            if (typeof x === "number" && typeof y === "number") return dir * (x - y);
            return dir * String(x).localeCompare(String(y), undefined, {numeric: true});
          }).forEach(function (r) { body.appendChild(r); });
        });
      });
    });
""").strip()

OPEN_ROWS = 30  # tables longer than this start folded on a lab page
HEADLINE_CHARS = 110


@dataclass
class LabPage:
    """Where one lab's page and its tables' CSVs go (names relative to the report directory)."""

    result: LabResult
    anchor: str  # unique among the report's sections: "lab-<slug>"

    @property
    def page(self) -> str:
        return f"{self.anchor}.html"

    def tables(self) -> list[Table]:
        """Every table of the page, in order: the lab's, then the selection cells it supplied."""
        return list(self.result.tables) + ([selection_cells(self.result)] if self.result.selection else [])

    def csv_names(self) -> list[str]:
        return [f"{self.anchor}-{k}.csv" for k in range(1, len(self.tables()) + 1)]


def selection_cells(r: LabResult) -> Table:
    return Table(f"Selection-matrix cells from {r.lab}", ["scenario", "choice", "evidence", "fallback"],
                 [[c.scenario, c.choice, c.evidence, c.fallback or "-"] for c in r.selection])


def headline(r: LabResult) -> str:
    """One short line for the index: the reason when it did not run, else its first selection cell,
    else its first table's first row, else its first check."""
    if r.status != "ok":
        text = r.reason or r.status
    elif r.selection:
        text = f"{r.selection[0].scenario}: {r.selection[0].choice}"
    elif r.tables and r.tables[0].rows:
        t = r.tables[0]
        text = f"{t.title}: " + ", ".join(f"{c} {fmt(v)}" for c, v in zip(t.columns, t.rows[0]))
    else:
        text = r.checks[0] if r.checks else "-"
    text = " ".join(text.split())
    return text if len(text) <= HEADLINE_CHARS else text[:HEADLINE_CHARS - 1].rstrip() + "\u2026"


# -------------------------------------------------------------------------------------- fragments

def esc(text) -> str:
    return html.escape(str(text), quote=True)


def url(name: str) -> str:
    """A relative file name as an attribute value (spaces and the like percent-encoded)."""
    return esc(quote(name))


def _cell_html(value) -> str:
    text = esc(fmt(value))
    if isinstance(value, str) and value in ("ok", "failed", "skipped"):
        return f"<td class='text {value}'>{text}</td>"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):  # NumPy's numbers too (not its bool)
        v = float(value)
        shown = "Infinity" if v == math.inf else "-Infinity" if v == -math.inf else repr(v)  # as parseFloat reads
        key = "" if v != v else f" data-v='{shown}'"  # NaN: no key, sorts as its text
        return f"<td class='num'{key}>{text}</td>"
    return f"<td class='text'>{text}</td>"


def table_html(table: Table, css_class: str = "", title: bool = True) -> str:
    """A table with its title (an h4, unless ``title`` is False: the section heading says it) and note."""
    head = "".join(f"<th>{esc(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(_cell_html(c) for c in row) + "</tr>" for row in table.rows)
    note = f"<p class='note'>{esc(table.note)}</p>" if table.note else ""
    cls = f" class='{css_class}'" if css_class else ""
    heading = f"<h4>{esc(table.title)}</h4>" if title else ""
    return (f"{heading}<div class='scroll'><table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
            f"</table></div>{note}")


def collapsible_table(table: Table, csv_name: str, anchor: str) -> str:
    """A lab page's table: folded under its title (open unless long), sortable, its CSV linked."""
    rows = len(table.rows)
    opened = " open" if rows <= OPEN_ROWS else ""
    return (f"<details id='{esc(anchor)}'{opened}><summary><b>{esc(table.title)}</b> "
            f"({rows} row{'s' if rows != 1 else ''}; <a href='{url(csv_name)}'>CSV</a>)</summary>"
            + table_html(table, css_class="sortable", title=False) + "</details>")


def write_csv(table: Table, path: Path) -> None:
    """The table's raw cells (numbers unrounded), its columns as the header."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(table.columns)
        w.writerows(table.rows)


def figure_html(out_dir: Path, name: str, href: str | None = None, css_class: str = "") -> str:
    """An image by relative path, linked to ``href`` (default: the image itself); a note when missing."""
    if not (out_dir / name).is_file():
        return f"<p class='note'>plot {esc(name)} is missing</p>"
    cls = f" class='{css_class}'" if css_class else ""
    data = plot_data(out_dir, name)
    link = f" (<a href='{url(data)}'>data</a>)" if data else ""
    return (f"<figure{cls}><a href='{url(href or name)}'><img src='{url(name)}' alt='{esc(Path(name).name)}' "
            f"loading='lazy'></a><figcaption>{esc(Path(name).name)}{link}</figcaption></figure>")


def plot_data(out_dir: Path, name: str) -> str | None:
    """The CSV that ``cuadv.figures.save_figure`` wrote beside a plot (relative path), if there is one."""
    for suffix in (".csv", ".csv.gz"):
        data = str(Path(name).with_suffix(suffix))
        if (out_dir / data).is_file():
            return data
    return None


def document(title: str, body: str, script: str = "") -> str:
    js = f"<script>{script}</script>" if script else ""
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{esc(title)}</title>"
            f"<style>{_CSS}</style></head><body><main>{body}</main>{js}</body></html>")


def status_html(r: LabResult) -> str:
    return f"<span class='{esc(r.status)}'>{esc(r.status)}</span>"


# -------------------------------------------------------------------------------------- lab pages

def lab_page_html(lp: LabPage, out_dir: Path, meta: str, env_line: str) -> str:
    r = lp.result
    tables = lp.tables()
    anchors = [f"t{k}" for k in range(1, len(tables) + 1)]
    parts = [f"<p><a href='index.html'>&larr; report index</a></p><h1>{esc(r.title)}</h1>",
             f"<p class='meta'>Lab <code>{esc(r.lab)}</code>: {status_html(r)} {esc(r.reason)}</p>",
             f"<p class='meta'>{meta}</p>"]
    if env_line:
        parts.append(f"<p class='meta'>{esc(env_line)}</p>")
    if tables:
        parts.append("<p class='meta'>Tables: " + " &middot; ".join(
            f"<a href='#{a}'>{esc(t.title)}</a>" for a, t in zip(anchors, tables)) + "</p>")
    if r.checks or r.notes:
        parts.append("<ul>" + "".join(f"<li>check: {esc(c)}</li>" for c in r.checks)
                     + "".join(f"<li>note: {esc(n)}</li>" for n in r.notes) + "</ul>")
    if tables:
        parts.append("<h2>Tables</h2><p class='note'>click a title to fold or unfold a table, a column heading "
                     "to sort by it; each table's CSV lies beside this page</p>")
        parts += [collapsible_table(t, c, a) for t, c, a in zip(tables, lp.csv_names(), anchors)]
    if r.plots:
        parts.append("<h2>Plots</h2>")
        parts += [figure_html(out_dir, p) for p in r.plots]
    return document(f"cuadv: {r.title}", "".join(parts), script=_SORT_JS if tables else "")


def write_lab_page(lp: LabPage, out_dir: Path, meta: str, env_line: str) -> list[Path]:
    """The lab's page and its CSVs; returns the paths written."""
    written = []
    for table, name in zip(lp.tables(), lp.csv_names()):
        write_csv(table, out_dir / name)
        written.append(out_dir / name)
    page = out_dir / lp.page
    page.write_text(lab_page_html(lp, out_dir, meta, env_line))
    return [page, *written]


# ------------------------------------------------------------------------------------------ index

def labs_table_html(pages: list[LabPage], skipped: list[tuple[str, str]]) -> str:
    rows = []
    for lp in pages:
        r = lp.result
        rows.append(f"<tr><td class='text'><a href='{url(lp.page)}' title='{esc(r.title)}'>{esc(r.lab)}</a></td>"
                    f"<td class='text {esc(r.status)}'>{esc(r.status)}</td><td class='text'>{esc(headline(r))}</td>"
                    f"<td class='num'>{len(r.tables)}</td><td class='num'>{len(r.plots)}</td></tr>")
    for what, why in skipped:
        rows.append(f"<tr><td class='text'>{esc(what)}</td><td class='text skipped'>skipped</td>"
                    f"<td class='text'>{esc(why)}</td><td class='num'>0</td><td class='num'>0</td></tr>")
    return ("<div class='scroll'><table><thead><tr><th>lab</th><th>status</th><th>headline</th><th>tables</th>"
            "<th>plots</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def thumbnails_html(pages: list[LabPage], out_dir: Path) -> str:
    """The first plot of each lab that has one, linking to the lab's page."""
    figs = []
    for lp in pages:
        first = next((p for p in lp.result.plots if (out_dir / p).is_file()), None)
        if first is None:
            continue
        figs.append(f"<figure><a href='{url(lp.page)}'><img src='{url(first)}' alt='{esc(lp.result.lab)}: "
                    f"{esc(Path(first).name)}' loading='lazy'></a><figcaption><a href='{url(lp.page)}'>"
                    f"{esc(lp.result.lab)}</a> ({len(lp.result.plots)} plot{'s' if len(lp.result.plots) != 1 else ''})"
                    f"</figcaption></figure>")
    return "<div class='thumbs'>" + "".join(figs) + "</div>" if figs else "<p class='note'>no plots in this run</p>"


def missing_plots_html(pages: list[LabPage], out_dir: Path) -> str:
    missing = [(lp.result.lab, p) for lp in pages for p in lp.result.plots if not (out_dir / p).is_file()]
    if not missing:
        return ""
    return "<p class='note'>" + "; ".join(f"plot {esc(p)} is missing (lab {esc(lab)})" for lab, p in missing) + "</p>"
