"""The report of a run: results.json, report.md and a self-contained index.html (plots embedded)."""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
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
        return {"created": self.created, "command": self.command, "caps": self.caps, "ceiling_tb_s": self.ceiling_tb_s,
                "skipped": [{"what": w, "why": y} for w, y in self.skipped],
                "extra_tables": [asdict(t) for t in self.extra_tables],
                "results": [r.as_dict() for r in self.results]}


def table_markdown(table: Table) -> str:
    lines = [f"**{table.title}**", "", "| " + " | ".join(table.columns) + " |",
             "|" + "|".join("---" for _ in table.columns) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", f"_{table.note}_"]
    return "\n".join(lines)


def _caps_rows(caps: dict) -> list[tuple[str, str]]:
    return [(k, str(v)) for k, v in caps.items()]


def write_markdown(report: Report, path: Path) -> None:
    out = [f"# cuadv report", "", f"Created {report.created}" + (f" by `{report.command}`" if report.command else ""), ""]
    if report.caps:
        out += ["## GPU", "", "| capability | value |", "|---|---|"]
        out += [f"| {k} | {v} |" for k, v in _caps_rows(report.caps)]
        out.append("")
    if report.ceiling_tb_s:
        out += [f"Copy ceiling (device-to-device, read + write): **{report.ceiling_tb_s:.2f} TB/s**", ""]
    for table in report.extra_tables:
        out += [table_markdown(table), ""]
    for r in report.results:
        out += [f"## {r.title}", "", f"Lab `{r.lab}`: **{r.status}**" + (f" ({r.reason})" if r.reason else ""), ""]
        out += [f"- check: {c}" for c in r.checks]
        out += [f"- note: {n}" for n in r.notes]
        out.append("")
        for t in r.tables:
            out += [table_markdown(t), ""]
        out += [f"![{p}]({p})" for p in r.plots]
        out.append("")
    if report.skipped:
        out += ["## Skipped", ""] + [f"- {w}: {y}" for w, y in report.skipped] + [""]
    path.write_text("\n".join(out))


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}.ok{color:#080}.failed{color:#b00}
.skipped{color:#a60}img{max-width:100%;border:1px solid #ddd}.note{color:#555;font-style:italic}
"""


def table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(c))}</td>" for c in row) + "</tr>" for row in table.rows)
    note = f"<p class='note'>{html.escape(table.note)}</p>" if table.note else ""
    return f"<h4>{html.escape(table.title)}</h4><table><tr>{head}</tr>{body}</table>{note}"


def write_html(report: Report, path: Path) -> None:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>cuadv report</title><style>{_CSS}</style>"
             "</head><body><h1>cuadv report</h1>",
             f"<p>Created {html.escape(report.created)} {html.escape(report.command)}</p>"]
    if report.caps:
        parts.append(table_html(Table("GPU capabilities", ["capability", "value"], _caps_rows(report.caps))))
    if report.ceiling_tb_s:
        parts.append(f"<p>Copy ceiling (device-to-device, read + write): <b>{report.ceiling_tb_s:.2f} TB/s</b></p>")
    for table in report.extra_tables:
        parts.append(table_html(table))
    for r in report.results:
        parts.append(f"<h2 id='{html.escape(r.lab)}'>{html.escape(r.title)}</h2>"
                     f"<p>Lab <code>{html.escape(r.lab)}</code>: <span class='{r.status}'>{r.status}</span> "
                     f"{html.escape(r.reason)}</p>")
        if r.checks or r.notes:
            parts.append("<ul>" + "".join(f"<li>check: {html.escape(c)}</li>" for c in r.checks)
                         + "".join(f"<li>note: {html.escape(n)}</li>" for n in r.notes) + "</ul>")
        parts += [table_html(t) for t in r.tables]
        for p in r.plots:
            img = path.parent / p
            if img.exists():
                data = base64.b64encode(img.read_bytes()).decode()
                parts.append(f"<p><img alt='{html.escape(p)}' src='data:image/png;base64,{data}'></p>")
    if report.skipped:
        parts.append("<h2>Skipped</h2><ul>" + "".join(
            f"<li>{html.escape(w)}: {html.escape(y)}</li>" for w, y in report.skipped) + "</ul>")
    parts.append("</body></html>")
    path.write_text("".join(parts))


def write_report(report: Report, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "report.md", out_dir / "index.html"]
    paths[0].write_text(json.dumps(report.as_dict(), indent=2, default=str))
    write_markdown(report, paths[1])
    write_html(report, paths[2])
    return paths
