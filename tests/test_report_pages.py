"""The multi-page report (issue 19): a small index.html, one page per lab with collapsible and
sortable tables and a CSV beside each, every link and image resolving to a written file, and the
environment recorded by the runner (best effort, never failing) and rendered by the writer."""

import csv
import json
import platform
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from cuadv.app import runner
from cuadv.report.html_pages import HEADLINE_CHARS, OPEN_ROWS, headline
from cuadv.report.results import LabResult, Selection, Table
from cuadv.report.writer import write_report
from test_report_html import Page, _plot, make_report

ENV = {"gpu": "NVIDIA H200", "driver_version": "580.159.04", "cuda_driver_api": "13.0",
       "clocks": {"sm MHz": "1980", "memory MHz": "3201"}, "nvidia_smi": "ok", "python": "3.12.3",
       "platform": "Linux", "nvrtc": "13.0",
       "packages": {"cuda-core": "1.2.0", "cuda-bindings": "13.3.1", "cupy": "14.2.0", "torch": None},
       "cupy_cub": {"built with CUB": True, "routine accelerators": ["cub"], "reduction accelerators": ["cub"]}}


def big_report(out: Path):
    """make_report's labs, plus: a long table, a large plot, a plot name with a space, a lab name
    given twice, a lab with neither tables nor plots, and the environment."""
    report = make_report(out)
    long = LabResult("tma", "TMA copies")
    long.tables.append(Table("every configuration", ["box", "GB/s", "note"],
                             [[f"{i}x64", 1000.0 + i / 7, f"row {i}, with a comma"] for i in range(OPEN_ROWS + 5)]))
    _plot(out / "tma copy rate.png", "tma")
    long.plots.append("tma copy rate.png")
    import numpy as np
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(16, 10))
    ax.imshow(np.random.default_rng(0).random((400, 600)))  # noise: a PNG of several hundred KB
    fig.savefig(out / "big.png", dpi=100)
    plt.close(fig)
    long.plots.append("big.png")
    report.results += [long, LabResult("scheduling", "Scheduling again", checks=["ran twice"])]
    report.environment = ENV
    return report


@pytest.fixture
def out(tmp_path):
    d = tmp_path / "rep"
    write_report(big_report(d), d)
    return d


def _parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text())
    return page


def test_every_link_and_image_of_every_page_resolves(out):
    pages = {p.name: _parse(p) for p in out.glob("*.html")}
    assert "index.html" in pages and len(pages) == 1 + 5  # index + one per result (names made unique)
    assert {"lab-scheduling.html", "lab-scheduling-2.html", "lab-tma.html", "lab-tma-2.html"} <= set(pages)
    checked = 0
    for name, page in pages.items():
        for ref in page.hrefs + page.images:
            parts = urlsplit(ref)
            assert not parts.scheme and not parts.netloc, f"{name}: {ref} leaves the report directory"
            target = unquote(parts.path)
            if target:
                assert (out / target).is_file(), f"{name}: {ref} points at no written file"
                assert "/" not in target and ".." not in target
            if parts.fragment:
                assert parts.fragment in pages[target or name].ids, f"{name}: {ref} has no anchor {parts.fragment}"
            checked += 1
        assert page.external == []
    assert checked > 30


def test_index_is_small_and_links_every_lab(out):
    text = (out / "index.html").read_text()
    assert "base64" not in text and "data:" not in text
    assert len(text.encode()) < 40_000
    assert (out / "big.png").stat().st_size > len(text.encode())  # the big plot is linked, not embedded
    index = _parse(out / "index.html")
    for page in out.glob("lab-*.html"):
        assert page.name in index.hrefs
    # one thumbnail per lab with a plot (scheduling, tma #2), linking to the lab's page
    assert index.images == ["timeline_steal.png", "tma%20copy%20rate.png"]
    assert index.h2[:4] == ["Summary", "GPU capabilities", "Selection matrix: which mechanism to choose (NVIDIA H200)",
                            "Unsupported features"]
    assert "Environment" in index.h2 and "Figures" in index.h2
    assert "variable work per tile: steal" in text  # the headline: the lab's selection cell


def test_lab_page_tables_collapse_sort_and_have_a_csv(out):
    text = (out / "lab-tma-2.html").read_text()
    page = _parse(out / "lab-tma-2.html")
    assert text.count("<details") == page.tables == 1
    assert "<details id='t1'>" in text  # longer than OPEN_ROWS: starts folded
    assert "class='sortable'" in text and "<thead>" in text and "addEventListener" in text
    assert "lab-tma-2-1.csv" in page.hrefs and page.images == ["tma%20copy%20rate.png", "big.png"]
    assert "index.html" in page.hrefs
    sched = (out / "lab-scheduling.html").read_text()
    assert sched.count("<details id='t") == 3 and sched.count(" open>") == 3  # 2 tables + its selection cells
    assert "every tile exactly once" in sched and "the steal count per block is not guaranteed" in sched
    with open(out / "lab-tma-2-1.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["box", "GB/s", "note"] and len(rows) == 1 + OPEN_ROWS + 5
    assert rows[2] == ["1x64", repr(1000.0 + 1 / 7), "row 1, with a comma"]  # raw value, not the 3-figure cell
    with open(out / "lab-scheduling-3.csv", newline="") as f:
        assert list(csv.reader(f))[1][:2] == ["variable work per tile", "steal"]


def test_results_json_keeps_its_keys_and_adds_environment_and_pages(out):
    data = json.loads((out / "results.json").read_text())
    assert {"created", "command", "caps", "ceiling_tb_s", "skipped", "extra_tables", "unsupported_features",
            "results"} <= set(data)
    assert data["environment"] == ENV
    assert data["pages"]["index"] == "index.html"
    labs = data["pages"]["labs"]
    assert [p["lab"] for p in labs] == [r["lab"] for r in data["results"]]
    for p in labs:
        assert (out / p["page"]).is_file() and all((out / c).is_file() for c in p["csv"])
    assert labs[0]["csv"] == ["lab-scheduling-1.csv", "lab-scheduling-2.csv", "lab-scheduling-3.csv"]


def test_environment_is_rendered(out):
    index = (out / "index.html").read_text()
    for text in ("580.159.04", "1980", "cuda-core", "1.2.0", "cuda-bindings", "13.3.1", "NVRTC", "14.2.0",
                 "built with CUB yes", "not installed"):
        assert text in index, text
    md = (out / "report.md").read_text()
    assert "## Environment" in md and "580.159.04" in md and "[lab-tma-2.html](lab-tma-2.html)" in md
    assert "580.159.04" in (out / "lab-scheduling.html").read_text()  # the one-line summary on each lab page


def test_headline_is_short_and_says_what_matters():
    r = LabResult("x", "X", tables=[Table("t", ["a", "b"], [["long " * 50, 1.5]])])
    assert len(headline(r)) <= HEADLINE_CHARS and headline(r).endswith("\u2026")
    assert headline(LabResult("x", "X", status="skipped", reason="needs cc 9.0")) == "needs cc 9.0"
    cell = Selection("chained kernels", "PDL", "1 us")
    assert headline(LabResult("x", "X", selection=[cell])) == "chained kernels: PDL"
    assert headline(LabResult("x", "X", tables=[Table("t", ["n", "us"], [[4, 1.25]])])) == "t: n 4, us 1.25"
    assert headline(LabResult("x", "X")) == "-"


def test_report_without_environment_says_so(tmp_path):
    report = make_report(tmp_path)
    write_report(report, tmp_path)
    assert "not recorded" in (tmp_path / "index.html").read_text()
    assert json.loads((tmp_path / "results.json").read_text())["environment"] is None


def _fake_smi(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_collect_environment_reads_nvidia_smi(tmp_path, monkeypatch):
    exe = _fake_smi(tmp_path, 'echo "NVIDIA H200, 580.159.04, 1980, 3201, 1980, 3201"')
    monkeypatch.setattr(runner.shutil, "which", lambda name: exe)
    env = runner.collect_environment({"name": "NVIDIA H200", "driver_version": 13000, "nvrtc_version": (13, 0)})
    assert env["gpu"] == "NVIDIA H200" and env["driver_version"] == "580.159.04" and env["nvidia_smi"] == "ok"
    assert env["clocks"] == {"sm MHz": "1980", "memory MHz": "3201", "max sm MHz": "1980", "max memory MHz": "3201"}
    assert env["cuda_driver_api"] == "13.0" and env["nvrtc"] == "13.0"
    assert env["python"] == platform.python_version()
    assert set(env["packages"]) >= {"cuda-core", "cuda-bindings", "cupy", "torch"}
    json.dumps(env)  # results.json must hold it as it is


@pytest.mark.parametrize("body", ["exit 9", "echo garbage", "sleep 0; kill -9 $$"])
def test_collect_environment_never_fails(tmp_path, monkeypatch, body):
    exe = _fake_smi(tmp_path, body)
    monkeypatch.setattr(runner.shutil, "which", lambda name: exe)
    env = runner.collect_environment(None)
    assert env["driver_version"] is None and env["clocks"] is None
    assert env["nvidia_smi"].startswith(("failed", "unexpected"))
    monkeypatch.setattr(runner.shutil, "which", lambda name: None)
    assert runner.collect_environment(None)["nvidia_smi"] == "not found on PATH"


def test_collect_environment_without_cupy_or_torch(monkeypatch):
    real = runner.importlib.util.find_spec
    monkeypatch.setattr(runner.importlib.util, "find_spec",
                        lambda name, *a: None if name == "cupy" else real(name, *a))
    env = runner.collect_environment(None)
    assert env["cupy_cub"] == "CuPy is not installed"
    assert isinstance(env["nvrtc"], str)  # a version, or why it could not be read
