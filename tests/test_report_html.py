"""The report: every table and plot in index.html and the lab pages (parsed), self-contained (no
external asset), working links, the same content in report.md and results.json; and a real
headless-browser render. tests/test_report_pages.py checks every link of every page and the CSVs."""

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from browser import require_chromium, screenshot_module
from cuadv.report.writer import Report, write_report
from cuadv.report.results import LabResult, Selection, Table
from cuadv.report.selection import selection_matrix

CAPS = {"name": "NVIDIA H200", "compute_capability": (9, 0), "sm_count": 132, "l2_cache_bytes": 62_914_560,
        "clc": False, "cluster_launch": True, "tma": True, "pdl": True, "cooperative_launch": True,
        "persisting_l2_max_bytes": 39_321_600, "mem_sync_domain_count": 4, "stream_priority_low": 0,
        "stream_priority_high": -5}


def _plot(path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot([0, 1, 2, 3], [1, 3, 2, 4], marker="o")
    ax.set_title(title)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def make_report(out: Path) -> Report:
    out.mkdir(parents=True, exist_ok=True)
    ok = LabResult("scheduling", "Work stealing <measured> & traced")
    ok.tables += [Table("makespan by policy", ["policy", "ms", "x fixed_work"], [["fixed_work", 4.99, 1.0],
                                                                                ["steal", 0.97, 5.14]], note="medians"),
                  Table("preemption", ["policy", "latency ms"], [["steal Q=4", 0.13]])]
    for name in ("timeline_steal.png", "timeline_fixed.png"):
        _plot(out / name, name)
        ok.plots.append(name)
    ok.checks.append("every tile exactly once")
    ok.notes.append("the steal count per block is not guaranteed")
    ok.selection.append(Selection("variable work per tile", "steal", "3.32 ms vs 4.57 ms fixed_blocks", "fixed_work"))
    skipped = LabResult("tma", "TMA", status="skipped", reason="needs compute capability >= 9.0; fallback: cp.async")
    failed = LabResult("pdl", "PDL", status="failed", reason="ValidationError: the wait was misplaced")
    report = Report(caps=CAPS, results=[ok, skipped, failed], ceiling_tb_s=4.2, command="cuadv run --quick",
                    skipped=[("lab l2", "no persisting L2 on this GPU")])
    report.extra_tables.append(selection_matrix(report))
    return report


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables, self.images, self.ids, self.hrefs, self.external, self.h2 = 0, [], set(), [], [], []
        self.scripts = 0
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "table":
            self.tables += 1
        elif tag == "img":
            self.images.append(a.get("src", ""))
        elif tag == "a" and "href" in a:
            self.hrefs.append(a["href"])
        elif tag in ("link", "iframe") or (tag == "script" and a.get("src")):
            self.external.append(tag)
        elif tag == "script":
            self.scripts += 1  # inline: the sorting of a lab page's tables
        elif tag == "h2":
            self._in_h2 = True
            self.h2.append("")

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in_h2 = False

    def handle_data(self, data):
        if self._in_h2:
            self.h2[-1] += data


@pytest.fixture
def written(tmp_path):
    report = make_report(tmp_path / "rep")
    paths = write_report(report, tmp_path / "rep")
    return report, {p.name: p for p in paths}


def _pages(out: Path) -> dict[str, Page]:
    pages = {}
    for f in sorted(out.glob("*.html")):
        pages[f.name] = Page()
        pages[f.name].feed(f.read_text())
    return pages


def test_html_has_every_table_and_image_and_is_self_contained(written):
    # Issue 19: index.html is one screen linking to a page per lab (it was one page holding every
    # table and every plot as base64). The same checks, now over index.html and the lab pages.
    report, paths = written
    out = paths["index.html"].parent
    pages = _pages(out)
    page = pages.pop("index.html")
    assert sorted(pages) == ["lab-pdl.html", "lab-scheduling.html", "lab-tma.html"]
    lab_tables = sum(len(r.tables) for r in report.results)
    cell_tables = sum(1 for r in report.results if r.selection)
    # index: summary + capabilities + extra tables (selection matrix) + unsupported features + environment
    assert page.tables == 1 + 1 + len(report.extra_tables) + 1 + 1
    # lab pages: the labs' tables + their selection cells
    assert sum(p.tables for p in pages.values()) == lab_tables + cell_tables
    images = [src for p in pages.values() for src in p.images]
    assert len(images) == sum(len(r.plots) for r in report.results) == 2
    assert len(page.images) == 1  # one headline figure per lab that has plots
    for src in images + page.images:
        assert not src.startswith("data:") and "/" not in src  # a file beside the page, not embedded
        assert (out / src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for p in [page, *pages.values()]:
        assert p.external == []  # no stylesheet links, script files or frames: the directory works offline
    assert page.scripts == 0 and all(p.scripts == (1 if p.tables else 0) for p in pages.values())  # inline sorting
    for name, p in [("index.html", page), *pages.items()]:
        for href in p.hrefs:
            target, _, frag = href.partition("#")
            assert (out / target).is_file() if target else frag in p.ids, f"{name}: link {href} has no target"
    assert len(page.hrefs) >= 3 + len(report.results)


def test_html_order_and_content(written):
    _, paths = written
    text = paths["index.html"].read_text()
    page = Page()
    page.feed(text)
    assert page.h2[:3] == ["Summary", "GPU capabilities", "Selection matrix: which mechanism to choose (NVIDIA H200)"]
    assert page.h2[3] == "Unsupported features"
    assert "Work stealing &lt;measured&gt; &amp; traced" in text  # escaped
    assert "Cluster Launch Control" in text and "software CLC" in text
    assert "ValidationError: the wait was misplaced" in text and "no persisting L2 on this GPU" in text
    assert "4.20 TB/s" in text and "39,321,600 (37.5 MiB)" in text
    assert "3.32 ms vs 4.57 ms fixed_blocks" in text


def test_markdown_and_json_carry_the_same_content(written):
    report, paths = written
    md = paths["report.md"].read_text()
    for title in ["makespan by policy", "preemption", "Selection matrix", "Unsupported features on NVIDIA H200"]:
        assert title in md
    assert "![timeline_steal.png](<timeline_steal.png>)" in md
    assert '<a id="lab-scheduling"></a>' in md and "(#lab-scheduling)" in md
    data = json.loads(paths["results.json"].read_text())
    assert [r["lab"] for r in data["results"]] == ["scheduling", "tma", "pdl"]
    assert data["unsupported_features"][0]["feature"].startswith("Cluster Launch Control")
    assert data["extra_tables"][0]["title"].startswith("Selection matrix")


def test_missing_plot_is_said_not_crashed(tmp_path):
    report = make_report(tmp_path / "rep")
    report.results[0].plots.append("never_written.png")
    write_report(report, tmp_path / "rep")
    assert "plot never_written.png is missing" in (tmp_path / "rep" / "index.html").read_text()


def test_report_without_gpu(tmp_path):
    report = Report(caps=None, results=[LabResult("build", "Build check")], skipped=[("lab vecscale", "no CUDA GPU")])
    report.extra_tables.append(selection_matrix(report))
    write_report(report, tmp_path)
    text = (tmp_path / "index.html").read_text()
    assert "No GPU was used" in text and "capabilities were not read" in text and "no CUDA GPU" in text


def test_cells_a_lab_could_not_fill_keep_the_files_readable(tmp_path):
    """NaN and inf cells (and NumPy numbers): results.json is JSON a strict parser reads (null for them), the HTML
    sort keys are numbers JavaScript's parseFloat reads, markdown links to a plot whose name has spaces stay links,
    and an environment record whose packages are no dict still gives a report."""
    import math

    import numpy as np

    result = LabResult("odd", "Odd cells", tables=[Table("t", ["case", "x"], [["nan", math.nan], ["inf", math.inf],
                                                                             ["np", np.float64(2.5)]])])
    result.plots.append("rate plot.png")
    _plot(tmp_path / "rate plot.png", "rate")
    report = Report(caps=None, results=[result], environment={"gpu": "fake", "packages": ["not", "a", "dict"]})
    write_report(report, tmp_path)
    data = json.loads((tmp_path / "results.json").read_text(),
                      parse_constant=lambda name: pytest.fail(f"results.json holds {name}, which JSON has not"))
    assert [row[1] for row in data["results"][0]["tables"][0]["rows"]] == [None, None, 2.5]
    page = next(tmp_path.glob("*odd*.html")).read_text()
    assert "data-v='Infinity'" in page and "data-v='2.5'" in page and "data-v='inf'" not in page
    assert "![rate plot.png](<rate plot.png>)" in (tmp_path / "report.md").read_text()


def test_headless_browser_renders_the_report(written, tmp_path):
    chromium = require_chromium()
    shot = screenshot_module()
    _, paths = written
    png = shot.screenshot(paths["index.html"], tmp_path / "shot.png", width=1400, height=3000, chromium=chromium)
    ink = shot.measure_ink(png)
    assert (ink.width, ink.height) == (1400, 3000)
    assert not ink.blank, ink


def test_blank_screenshot_is_detected(tmp_path):
    import matplotlib.image as mpimg
    import numpy as np

    shot = screenshot_module()
    mpimg.imsave(tmp_path / "white.png", np.ones((50, 80, 3)))
    assert shot.measure_ink(tmp_path / "white.png").blank


def test_terminal_tables_print_brackets_as_text():
    """A plan name in brackets or a path with '[/]' is printed as it is: the console never reads table text as rich
    markup (which dropped the plan names of the histogram peers' rows and raised MarkupError on '[/]')."""
    import io

    from rich.console import Console

    from cuadv.report.console import print_table

    out = io.StringIO()
    console = Console(file=out, width=300, color_system=None)
    print_table(console, Table("sizes [/tmp/a[/]b.txt]", ["variant [x]"],
                               [["cuadv.histogram (auto) [shared (1 block, x16, TMA ring of 6)]"]], note="see [red]x"))
    text = out.getvalue()
    for shown in ("sizes [/tmp/a[/]b.txt]", "variant [x]", "[shared (1 block, x16, TMA ring of 6)]", "see [red]x"):
        assert shown in text
