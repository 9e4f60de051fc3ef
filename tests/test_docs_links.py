"""Every relative link in the README and the docs (the committed reports' pages included) points at a file
that exists, and every #anchor at a heading or an id of its page; the committed HTML reports link only to
files that exist."""

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\((?:<([^>\n]+)>|([^)\s]+))\)")  # <...>: a target with spaces (CommonMark)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
HTML_ID = re.compile(r"""<a\s+(?:id|name)=['"]([^'"]+)['"]""")


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped (not - or _), spaces to -."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # code marks, bold, links: their text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The headings' ids (a repeated heading gets -1, -2, ... as on GitHub) and the explicit <a id>s."""
    text = FENCE.sub("", page.read_text())  # '# comment' lines inside code blocks are no headings
    seen: dict[str, int] = {}
    ids = set(HTML_ID.findall(text))
    for heading in HEADING.findall(text):
        slug = github_anchor(heading)
        ids.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return ids


def test_github_anchor_rule():
    assert github_anchor("Reading a run with other tools") == "reading-a-run-with-other-tools"
    assert github_anchor("cuadv.pipeline — multi-stage pipelines") == "cuadvpipeline--multi-stage-pipelines"
    assert github_anchor("Your own kernel: `#include <cuadv/tma.cuh>`") == "your-own-kernel-include-cuadvtmacuh"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page):
    missing = []
    for bracketed, bare in LINK.findall(FENCE.sub("", page.read_text())):
        target = bracketed or bare
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: not this repository's to resolve
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / unquote(path)) if path else page
        if not linked.exists():
            missing.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            missing.append(f"{target}: no heading or id {anchor!r} in {linked.name}")
    assert not missing, f"{page.relative_to(ROOT)}: {missing}"


REPORTS = sorted((ROOT / "docs" / "results").rglob("index.html"))
HTML_REF = re.compile(r"""(?:src|href)=['"]([^'"]+)['"]""")


@pytest.mark.parametrize("index", REPORTS, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_committed_reports_have_no_broken_image_or_link(index):
    """Every page of a committed report (its index and the pages it links) refers only to files that exist:
    no broken image, table CSV, plot data or page link. (tests/test_report_browser.py loads them in Chromium.)"""
    pages, missing, seen = [index], [], set()
    while pages:
        page = pages.pop()
        if page in seen:
            continue
        seen.add(page)
        for target in HTML_REF.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = page.parent / unquote(target.split("#", 1)[0])
            if not path.exists():
                missing.append(f"{page.name} -> {target}")
            elif path.suffix == ".html":
                pages.append(path)
    assert not missing, f"{index.parent.relative_to(ROOT)}: {missing[:10]}"


def test_the_results_index_lists_every_results_folder():
    """docs/results/README.md has a row for every folder of results, so a run committed without one is caught."""
    index = (ROOT / "docs" / "results" / "README.md").read_text()
    folders = sorted(p.name for p in (ROOT / "docs" / "results").iterdir() if p.is_dir())
    assert folders and [f for f in folders if f"[{f}](" not in index] == []
