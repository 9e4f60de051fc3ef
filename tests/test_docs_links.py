"""Every relative link in the README and the docs points at a file that exists (anchors aside)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    missing = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+://", target) or target.startswith("#") or target.startswith("mailto:"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


REPORTS = sorted((ROOT / "docs" / "results").rglob("index.html"))
HTML_REF = re.compile(r"""(?:src|href)=['"]([^'"]+)['"]""")


@pytest.mark.parametrize("index", REPORTS, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_committed_reports_have_no_broken_image_or_link(index):
    """Every page of a committed report (its index and the pages it links) refers only to files that exist:
    no broken image, table CSV, plot data or page link."""
    from urllib.parse import unquote

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
