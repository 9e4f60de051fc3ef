"""The report of a run: results.json, report.md and a self-contained index.html (plots embedded).

Layout (both formats): a summary of the labs, the GPU's capabilities, the summary tables (the
selection matrix first), the features this GPU lacks with their reason and fallback, then every lab
(status, checks, notes, tables, plots, the selection cells it supplied) and what was skipped.
The HTML needs nothing but itself: CSS inline, plots as base64 PNG.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .results import LabResult, Table, fmt


@dataclass
class Report:
    caps: dict | None
    results: list[LabResult]
    ceiling_tb_s: float | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    created: str = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    command: str = ""
    extra_tables: list[Table] = field(default_factory=list)  # e.g. the selection matrix

    def as_dict(self) -> dict:
        from .selection import unsupported_features

        return {"created": self.created, "command": self.command, "caps": self.caps, "ceiling_tb_s": self.ceiling_tb_s,
                "skipped": [{"what": w, "why": y} for w, y in self.skipped],
                "extra_tables": [asdict(t) for t in self.extra_tables],
                "unsupported_features": [{"feature": f.name, "reason": why, "fallback": f.fallback}
                                         for f, why in unsupported_features(self.caps)],
                "results": [r.as_dict() for r in self.results]}


# ---------------------------------------------------------------------------------- shared content


@dataclass
class _Section:
    anchor: str
    title: str


def slug(text: str) -> str:
    """An anchor id: lower case, letters, digits and dashes (GitHub's heading style)."""
    return re.sub(r"[^a-z0-9 -]", "", text.lower()).strip().replace(" ", "-") or "section"


def _summary_table(report: Report) -> Table:
    rows = [[r.title, r.lab, r.status, r.reason or "-", len(r.tables), len(r.plots), len(r.checks)]
            for r in report.results]
    rows += [[what, what.removeprefix("lab "), "skipped", why, 0, 0, 0] for what, why in report.skipped]
    return Table("Labs in this report", ["lab", "name", "status", "reason", "tables", "plots", "checks"], rows)


def _human(key: str, value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ".".join(str(v) for v in value)
    if isinstance(value, int) and key.endswith("_bytes") and value >= 1 << 20:
        return f"{value:,} ({value / 2**20:.1f} MiB)"
    return str(value)


def _caps_table(report: Report) -> Table:
    rows = [[k.replace("_", " "), _human(k, v)] for k, v in report.caps.items()]
    if report.ceiling_tb_s:
        rows.append(["copy ceiling (measured, read + write)", f"{report.ceiling_tb_s:.2f} TB/s"])
    return Table(f"GPU capabilities: {report.caps.get('name', '')}", ["capability", "value"], rows,
                 note="read from the driver and the occupancy API in this run")


def _unsupported(report: Report) -> Table:
    from .selection import unsupported_table

    return unsupported_table(report.caps)


@dataclass
class _Outline:
    """The sections of a report, in order, with unique anchors."""

    summary: _Section
    gpu: _Section
    extra: list[_Section]  # one per report.extra_tables
    unsupported: _Section
    labs: list[_Section]  # one per report.results
    skipped: _Section | None

    def all(self) -> list[_Section]:
        return [self.summary, self.gpu, *self.extra, self.unsupported, *self.labs] + ([self.skipped] if self.skipped else [])


def _outline(report: Report) -> _Outline:
    seen: set[str] = set()

    def section(anchor: str, title: str) -> _Section:
        unique, n = anchor, 2
        while unique in seen:
            unique, n = f"{anchor}-{n}", n + 1
        seen.add(unique)
        return _Section(unique, title)

    return _Outline(section("summary", "Summary"), section("gpu", "GPU capabilities" if report.caps else "GPU: none"),
                    [section(f"t-{slug(t.title)}", t.title) for t in report.extra_tables],
                    section("unsupported", "Unsupported features"),
                    [section(f"lab-{slug(r.lab)}", r.title) for r in report.results],
                    section("skipped", "Skipped") if report.skipped else None)


# ---------------------------------------------------------------------------------------- Markdown


def table_markdown(table: Table) -> str:
    def cell(c) -> str:
        return fmt(c).replace("|", "\\|").replace("\n", " ")

    lines = [f"**{table.title}**", "", "| " + " | ".join(cell(c) for c in table.columns) + " |",
             "|" + "|".join("---" for _ in table.columns) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", f"_{table.note}_"]
    return "\n".join(lines)


def _md_heading(level: int, section: _Section) -> list[str]:
    return [f'<a id="{section.anchor}"></a>', "", f"{'#' * level} {section.title}", ""]


def write_markdown(report: Report, path: Path) -> None:
    o = _outline(report)
    out = ["# cuadv report", "", f"Created {report.created}" + (f" by `{report.command}`" if report.command else ""), ""]
    out += ["Contents:", ""] + [f"- [{s.title}](#{s.anchor})" for s in o.all()] + [""]
    out += _md_heading(2, o.summary) + [table_markdown(_summary_table(report)), ""]
    out += _md_heading(2, o.gpu)
    out += [table_markdown(_caps_table(report)) if report.caps else
            "No GPU was used: what needs none (build check, simulator) ran; the labs are listed as skipped.", ""]
    for table, section in zip(report.extra_tables, o.extra):
        out += _md_heading(2, section) + [table_markdown(table), ""]
    out += _md_heading(2, o.unsupported) + [table_markdown(_unsupported(report)), ""]
    for r, section in zip(report.results, o.labs):
        out += _md_heading(2, section)
        out += [f"Lab `{r.lab}`: **{r.status}**" + (f" ({r.reason})" if r.reason else ""), ""]
        out += [f"- check: {c}" for c in r.checks]
        out += [f"- note: {n}" for n in r.notes]
        out.append("")
        for t in r.tables:
            out += [table_markdown(t), ""]
        out += [f"![{Path(p).name}]({p})" for p in r.plots]
        if r.selection:
            out += ["", table_markdown(_selection_cells(r)), ""]
        out.append("")
    if o.skipped:
        out += _md_heading(2, o.skipped) + [f"- {w}: {y}" for w, y in report.skipped] + [""]
    path.write_text("\n".join(out))


def _selection_cells(r: LabResult) -> Table:
    return Table(f"Selection-matrix cells from {r.lab}", ["scenario", "choice", "evidence", "fallback"],
                 [[c.scenario, c.choice, c.evidence, c.fallback or "-"] for c in r.selection])


# -------------------------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#222;background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:1.5em 2em;background:#fff}
h1{margin:.2em 0}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}h4{margin:1.2em 0 .3em}
nav{background:#f4f6f8;border:1px solid #dde;padding:.5em 1.2em;columns:2;font-size:.95em}
nav ol{margin:.3em 0}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:.3em 0 .4em;font-size:.9em}
td,th{border:1px solid #ccc;padding:3px 8px;vertical-align:top}
th{background:#eef1f4;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.text{text-align:left;max-width:38em}
tr:nth-child(even) td{background:#fbfbfb}
.ok{color:#080;font-weight:600}.failed{color:#b00;font-weight:600}.skipped{color:#a60;font-weight:600}
.unsupported td{background:#fff4f0}
img{max-width:100%;border:1px solid #ddd;margin:.4em 0}.note{color:#555;font-style:italic;margin:.2em 0 1em}
.meta{color:#555}
"""


def _cell_html(value) -> str:
    text = html.escape(fmt(value))
    cls = "num" if isinstance(value, (int, float)) and not isinstance(value, bool) else "text"
    if isinstance(value, str) and value in ("ok", "failed", "skipped"):
        return f"<td class='text {value}'>{text}</td>"
    return f"<td class='{cls}'>{text}</td>"


def table_html(table: Table, css_class: str = "", title: bool = True) -> str:
    """A table with its title (an h4, unless ``title`` is False: the section heading says it) and note."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(_cell_html(c) for c in row) + "</tr>" for row in table.rows)
    note = f"<p class='note'>{html.escape(table.note)}</p>" if table.note else ""
    cls = f" class='{css_class}'" if css_class else ""
    heading = f"<h4>{html.escape(table.title)}</h4>" if title else ""
    return f"{heading}<div class='scroll'><table{cls}><tr>{head}</tr>{body}</table></div>{note}"


def _img_html(path: Path, name: str) -> str:
    img = path.parent / name
    if not img.exists():
        return f"<p class='note'>plot {html.escape(name)} is missing</p>"
    data = base64.b64encode(img.read_bytes()).decode()
    return f"<p><img alt='{html.escape(Path(name).name)}' src='data:image/png;base64,{data}'></p>"


def _h2(section: _Section) -> str:
    return f"<h2 id='{html.escape(section.anchor)}'>{html.escape(section.title)}</h2>"


def write_html(report: Report, path: Path) -> None:
    o = _outline(report)
    gpu = (f"{report.caps.get('name', '')}, compute capability {_human('compute_capability', report.caps.get('compute_capability'))}"
           if report.caps else "no GPU")
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>cuadv report</title>"
             f"<style>{_CSS}</style></head><body><main><h1>cuadv report</h1>",
             f"<p class='meta'>{html.escape(gpu)}. Created {html.escape(report.created)}"
             + (f" by <code>{html.escape(report.command)}</code>" if report.command else "") + "</p>",
             "<nav><b>Contents</b><ol>" + "".join(f"<li><a href='#{html.escape(s.anchor)}'>{html.escape(s.title)}</a></li>"
                                                  for s in o.all()) + "</ol></nav>"]
    parts += [_h2(o.summary), table_html(_summary_table(report)), _h2(o.gpu)]
    if report.caps:
        parts.append(table_html(_caps_table(report)))
    else:
        parts.append("<p>No GPU was used: what needs none (build check, simulator) ran; the labs are listed as "
                     "skipped, with the reason.</p>")
    for table, section in zip(report.extra_tables, o.extra):
        parts += [_h2(section), table_html(table, title=False)]
    parts += [_h2(o.unsupported), table_html(_unsupported(report), css_class="unsupported")]
    for r, section in zip(report.results, o.labs):
        parts.append(_h2(section))
        parts.append(f"<p>Lab <code>{html.escape(r.lab)}</code>: <span class='{html.escape(r.status)}'>"
                     f"{html.escape(r.status)}</span> {html.escape(r.reason)}</p>")
        if r.checks or r.notes:
            parts.append("<ul>" + "".join(f"<li>check: {html.escape(c)}</li>" for c in r.checks)
                         + "".join(f"<li>note: {html.escape(n)}</li>" for n in r.notes) + "</ul>")
        parts += [table_html(t) for t in r.tables]
        parts += [_img_html(path, p) for p in r.plots]
        if r.selection:
            parts.append(table_html(_selection_cells(r)))
    if o.skipped:
        parts.append(_h2(o.skipped) + "<ul>" + "".join(
            f"<li>{html.escape(w)}: {html.escape(y)}</li>" for w, y in report.skipped) + "</ul>")
    parts.append("</main></body></html>")
    path.write_text("".join(parts))


def write_report(report: Report, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "report.md", out_dir / "index.html"]
    paths[0].write_text(json.dumps(report.as_dict(), indent=2, default=str))
    write_markdown(report, paths[1])
    write_html(report, paths[2])
    return paths
