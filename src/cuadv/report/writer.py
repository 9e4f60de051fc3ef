"""The report of a run: results.json, report.md, index.html and one HTML page per lab.

report.md (one document): a summary of the labs, the GPU's capabilities, the summary tables (the
selection matrix first), the features this GPU lacks with their reason and fallback, the
environment, then every lab (status, checks, notes, tables, plots, the selection cells it
supplied) and what was skipped.

HTML (``html_pages``): index.html fits one screen (labs with a headline each, the GPU, the
selection matrix, unsupported features, the environment, one thumbnail per lab) and links to
lab-<name>.html, which holds the lab's tables (collapsible, sortable, each with a CSV beside it)
and plots. Images and CSVs are files beside the pages, referenced by relative path; CSS and
JavaScript are inline, so the directory works offline.

results.json: everything in ``Report.as_dict``; ``environment`` (what the runner recorded) and
``pages`` (the page and CSV files of each lab) were added beside the original keys.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .environment import environment_line, environment_table
from .html_pages import (LabPage, document, esc, labs_table_html, missing_plots_html,
                         selection_cells, table_html, thumbnails_html, url, write_lab_page)
from .results import LabResult, Table, fmt, json_cells

__all__ = ["Report", "write_report", "write_markdown", "write_html", "table_markdown", "table_html", "slug"]


@dataclass
class Report:
    caps: dict | None
    results: list[LabResult]
    ceiling_tb_s: float | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    created: str = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    command: str = ""
    extra_tables: list[Table] = field(default_factory=list)  # e.g. the selection matrix
    environment: dict | None = None  # GPU, driver, clocks, versions: recorded by the runner (app.runner)

    def as_dict(self) -> dict:
        """Plain data for results.json (a Spread cell as {"median", "p10", "p90"})."""
        from .selection import unsupported_features

        return json_cells({"created": self.created, "command": self.command, "caps": self.caps,
                "ceiling_tb_s": self.ceiling_tb_s,
                "skipped": [{"what": w, "why": y} for w, y in self.skipped],
                "extra_tables": [asdict(t) for t in self.extra_tables],
                "unsupported_features": [{"feature": f.name, "reason": why, "fallback": f.fallback}
                                         for f, why in unsupported_features(self.caps)],
                "results": [r.as_dict() for r in self.results],
                "environment": self.environment,
                "pages": {"index": "index.html",
                          "labs": [{"lab": lp.result.lab, "page": lp.page, "csv": lp.csv_names()}
                                   for lp in lab_pages(self)]}})


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
    environment: _Section
    labs: list[_Section]  # one per report.results
    skipped: _Section | None

    def all(self) -> list[_Section]:
        return ([self.summary, self.gpu, *self.extra, self.unsupported, self.environment, *self.labs]
                + ([self.skipped] if self.skipped else []))


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
                    section("unsupported", "Unsupported features"), section("environment", "Environment"),
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
    out = ["# cuadv report", "",
           f"Created {report.created}" + (f" by `{report.command}`" if report.command else ""), ""]
    out += ["Contents:", ""] + [f"- [{s.title}](#{s.anchor})" for s in o.all()] + [""]
    out += _md_heading(2, o.summary) + [table_markdown(_summary_table(report)), ""]
    out += _md_heading(2, o.gpu)
    out += [table_markdown(_caps_table(report)) if report.caps else
            "No GPU was used: what needs none (build check, simulator) ran; the labs are listed as skipped.", ""]
    for table, section in zip(report.extra_tables, o.extra):
        out += _md_heading(2, section) + [table_markdown(table), ""]
    out += _md_heading(2, o.unsupported) + [table_markdown(_unsupported(report)), ""]
    out += _md_heading(2, o.environment) + [table_markdown(environment_table(report.environment)), ""]
    for r, section in zip(report.results, o.labs):
        out += _md_heading(2, section)
        out += [f"Lab `{r.lab}`: **{r.status}**" + (f" ({r.reason})" if r.reason else ""), ""]
        out += [f"Page: [{section.anchor}.html]({section.anchor}.html) (sortable tables, a CSV per table)", ""]
        out += [f"- check: {c}" for c in r.checks]
        out += [f"- note: {n}" for n in r.notes]
        out.append("")
        for t in r.tables:
            out += [table_markdown(t), ""]
        out += [f"![{Path(p).name}](<{p}>)" for p in r.plots]  # <...>: a name with spaces stays one link (CommonMark)
        if r.selection:
            out += ["", table_markdown(selection_cells(r)), ""]
        out.append("")
    if o.skipped:
        out += _md_heading(2, o.skipped) + [f"- {w}: {y}" for w, y in report.skipped] + [""]
    path.write_text("\n".join(out))


# -------------------------------------------------------------------------------------------- HTML


def lab_pages(report: Report) -> list[LabPage]:
    """One page per lab, named after its unique section anchor (lab-<slug>.html)."""
    return [LabPage(r, s.anchor) for r, s in zip(report.results, _outline(report).labs)]


def _gpu_line(report: Report) -> str:
    caps = report.caps
    if not caps:
        return "no GPU"
    bits = [f"compute capability {_human('compute_capability', caps.get('compute_capability'))}"]
    if caps.get("sm_count"):
        bits.append(f"{caps['sm_count']} SMs")
    if caps.get("l2_cache_bytes"):
        bits.append(f"L2 {caps['l2_cache_bytes'] / 2**20:.0f} MiB")
    if report.ceiling_tb_s:
        bits.append(f"copy ceiling {report.ceiling_tb_s:.2f} TB/s (read + write)")
    return f"{caps.get('name', '')}: " + ", ".join(bits)


def _meta(report: Report) -> str:
    caps = report.caps
    gpu = (f"{caps.get('name', '')}, compute capability {_human('compute_capability', caps.get('compute_capability'))}"
           if caps else "no GPU")
    return (f"{esc(gpu)}. Created {esc(report.created)}"
            + (f" by <code>{esc(report.command)}</code>" if report.command else ""))


def _h2(section: _Section) -> str:
    return f"<h2 id='{esc(section.anchor)}'>{esc(section.title)}</h2>"


def index_html(report: Report, out_dir: Path) -> str:
    """The one-screen index: labs and headlines beside their thumbnails, the GPU, the selection
    matrix, then unsupported features beside the environment (capabilities and environment folded)."""
    o, pages = _outline(report), lab_pages(report)
    gpu = _gpu_line(report)
    if report.caps:
        gpu_body = (f"<p>{esc(gpu)}</p><details><summary>every capability</summary>"
                    + table_html(_caps_table(report), title=False) + "</details>")
    else:
        gpu_body = ("<p>No GPU was used: what needs none (build check, simulator) ran; the labs are listed as "
                    "skipped, with the reason.</p>")
    env = report.environment
    env_body = (f"<p>{esc(environment_line(env) or 'not recorded')}</p><details><summary>versions and clocks</summary>"
                + table_html(environment_table(env), title=False) + "</details>")
    extra = "".join(f"<section class='sel'>{_h2(s)}{table_html(t, title=False)}</section>"
                    for t, s in zip(report.extra_tables, o.extra))
    parts = [
        "<h1>cuadv report</h1>", f"<p class='meta'>{_meta(report)}</p>",
        "<nav class='labs'>Lab pages: " + " ".join(f"<a href='{url(lp.page)}'>{esc(lp.result.lab)}</a>" for lp in pages)
        + "</nav>" if pages else "",
        "<div class='top'>",
        f"<section class='sum'>{_h2(o.summary)}{labs_table_html(pages, report.skipped)}</section>",
        f"<section class='gpu'>{_h2(o.gpu)}{gpu_body}</section>",
        extra,
        f"<section class='uns'>{_h2(o.unsupported)}"
        f"{table_html(_unsupported(report), css_class='unsupported', title=False)}</section>",
        f"<section class='env'>{_h2(o.environment)}{env_body}</section>",
        f"<section class='fig'><h2 id='figures'>Figures</h2>{thumbnails_html(pages, out_dir)}"
        f"{missing_plots_html(pages, out_dir)}</section>",
        "</div>",
    ]
    return document("cuadv report", "".join(parts))


def write_html(report: Report, path: Path) -> list[Path]:
    """index.html at ``path`` and, beside it, every lab's page and CSVs; returns the lab files written."""
    out_dir = path.parent
    meta, env_line = _meta(report), environment_line(report.environment)
    written = [f for lp in lab_pages(report) for f in write_lab_page(lp, out_dir, meta, env_line)]
    path.write_text(index_html(report, out_dir))
    return written


def write_report(report: Report, out_dir: Path) -> list[Path]:
    """Write the report into ``out_dir``; returns the entry points (results.json, report.md,
    index.html). The lab pages and their CSVs lie beside them (listed in results.json's ``pages``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "report.md", out_dir / "index.html"]
    paths[0].write_text(json.dumps(report.as_dict(), indent=2, default=str))
    write_markdown(report, paths[1])
    write_html(report, paths[2])
    return paths
