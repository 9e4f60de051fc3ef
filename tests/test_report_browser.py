"""The reports in headless Chromium (issue 19, item 5): every committed report under docs/results and
a freshly written one load with no broken image, no link to a missing file or anchor, no failed
request and no JavaScript error, every lab page included; the lab pages' tables sort when a
heading is clicked. Needs Chromium (see tests/browser.py: skipped without it, failed in CI)."""

from pathlib import Path

import pytest

from browser import ReportBrowser
from repo_files import ROOT
from cuadv.report.writer import write_report
from test_report_pages import big_report

REPORT_DIRS = sorted(p.parent for p in (ROOT / "docs" / "results").rglob("index.html"))


@pytest.fixture(scope="module")
def chromium():
    browser = ReportBrowser()
    yield browser
    browser.close()


def _assert_clean(directory: Path, problems) -> None:
    lab_pages = {p.name for p in directory.glob("lab-*.html")}
    assert "index.html" in problems.visited and lab_pages <= set(problems.visited)
    assert not problems.all(), f"{directory}: " + "\n".join(problems.all()[:20])


@pytest.mark.parametrize("directory", REPORT_DIRS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_report_loads_cleanly(chromium, directory):
    _assert_clean(directory, chromium.check_report(directory))


def test_written_report_loads_cleanly_and_sorts(chromium, tmp_path):
    out = tmp_path / "rep"
    write_report(big_report(out), out)
    problems = chromium.check_report(out)
    assert len(problems.visited) == 1 + 5  # index and one page per result
    _assert_clean(out, problems)

    page = chromium.new_page(problems)
    page.goto((out / "lab-tma-2.html").resolve().as_uri(), wait_until="load")
    column = "Array.from(document.querySelectorAll('#t1 tbody tr')).map(r => parseFloat(r.cells[1].dataset.v))"
    written = page.evaluate(column)
    heading = "document.querySelectorAll('#t1 thead th')[1].click()"
    page.evaluate(heading)
    assert page.evaluate(column) == sorted(written)
    page.evaluate(heading)
    assert page.evaluate(column) == sorted(written, reverse=True)
    assert not problems.all(), problems.all()


def test_broken_report_is_caught(chromium, tmp_path):
    # The checker itself: a deleted plot, a deleted CSV, a dangling anchor and a script error are each reported.
    out = tmp_path / "rep"
    write_report(big_report(out), out)
    (out / "tma copy rate.png").unlink()
    (out / "lab-tma-2-1.csv").unlink()
    page = out / "lab-tma-2.html"
    page.write_text(page.read_text().replace("href='#t1'", "href='#t9'")
                    .replace("</main>", "<script>notDefined()</script></main>"))
    problems = chromium.check_report(out)
    # the plot is also the lab's thumbnail on index.html (linked to the lab page, not to the image)
    assert problems.broken_images == [f"{name}: <img src='tma%20copy%20rate.png'>"
                                      for name in ("index.html", "lab-tma-2.html")]
    assert sorted(problems.missing_targets) == sorted([
        "lab-tma-2.html -> lab-tma-2-1.csv: no such file",
        "lab-tma-2.html -> tma%20copy%20rate.png: no such file",
        "lab-tma-2.html -> #t9: no element with id 't9'"])
    assert any("tma%20copy%20rate.png: net::ERR_FILE_NOT_FOUND" in r for r in problems.failed_requests)
    assert any("notDefined is not defined" in e for e in problems.console_errors)
