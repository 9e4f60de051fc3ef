"""Checking report pages in headless Chromium (the python ``playwright`` package from the test extra,
driving the system's Chromium: no browser download).

Without Chromium or playwright the browser tests skip, unless ``CUADV_REQUIRE_CHROMIUM=1`` (set by
.ci/run, which installs Chromium), where they fail: CI must not pass by skipping them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

import pytest
from repo_files import load_script

# Without the background-networking flags Chromium keeps trying to reach Google's hosts, which a
# machine without network refuses; --no-sandbox is playwright's default (chromium_sandbox=False).
CHROMIUM_ARGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

# Every image loaded (lazy ones too: they are switched to eager), every <details> opened; then the
# images that failed to decode, the links (as written and resolved) and the ids of the page.
_INSPECT_JS = """
async () => {
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  const images = Array.from(document.images);
  await Promise.all(images.map(i => { i.loading = "eager"; return i.decode().catch(() => null); }));
  return {
    broken: images.filter(i => i.naturalWidth === 0).map(i => i.getAttribute("src")),
    links: Array.from(document.querySelectorAll("a[href]")).map(a => [a.getAttribute("href"), a.href]),
    ids: Array.from(document.querySelectorAll("[id]")).map(e => e.id),
  };
}
"""


def screenshot_module():
    """scripts/screenshot_report.py as a module (it is a script, not part of the package)."""
    return load_script("screenshot_report")


def require_chromium() -> str:
    """The Chromium binary; skips the test without one (fails it where CUADV_REQUIRE_CHROMIUM=1)."""
    binary = screenshot_module().find_chromium()
    if binary is None:
        _missing("no Chromium binary (install Debian's chromium or set CUADV_CHROMIUM)")
    return binary


def _missing(reason: str) -> None:
    if os.environ.get("CUADV_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"{reason}; CUADV_REQUIRE_CHROMIUM=1 makes this a failure")
    pytest.skip(reason)


@dataclass
class PageProblems:
    """What went wrong while the pages of one report were loaded."""

    visited: list[str] = field(default_factory=list)  # page paths, relative to the report directory
    broken_images: list[str] = field(default_factory=list)
    missing_targets: list[str] = field(default_factory=list)  # links to no file, or to no anchor
    failed_requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        return self.broken_images + self.missing_targets + self.failed_requests + self.console_errors


class ReportBrowser:
    """One headless Chromium, loading report pages over file:// and recording what fails."""

    def __init__(self):
        chromium = require_chromium()
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            _missing("the python package playwright is not installed (pip install '.[test]')")
        self._playwright = sync_playwright().start()
        self.browser = self._playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)

    def close(self) -> None:
        self.browser.close()
        self._playwright.stop()

    def new_page(self, problems: PageProblems):
        page = self.browser.new_page()
        page.on("requestfailed", lambda r: problems.failed_requests.append(f"{r.url}: {r.failure}"))
        page.on("console", lambda m: problems.console_errors.append(f"{page.url}: {m.text}")
                if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.console_errors.append(f"{page.url}: {e}"))
        return page

    def check_report(self, directory: Path) -> PageProblems:
        """Loads index.html, every page it links to (transitively) and every other .html file of
        ``directory``; records broken images, links to missing files or anchors, failed requests
        and JavaScript errors."""
        problems = PageProblems()
        page = self.new_page(problems)
        queue = [directory / "index.html", *sorted(directory.glob("*.html"))]
        ids: dict[Path, set[str]] = {}
        anchors: list[tuple[Path, str, str]] = []  # (target page, anchor, "page -> href")
        while queue:
            path = queue.pop(0).resolve()
            if path in ids:
                continue
            page.goto(path.as_uri(), wait_until="load")
            found = page.evaluate(_INSPECT_JS)
            name = path.relative_to(directory.resolve()).as_posix()
            problems.visited.append(name)
            ids[path] = set(found["ids"])
            problems.broken_images += [f"{name}: <img src={src!r}>" for src in found["broken"]]
            for written, resolved in found["links"]:
                parts = urlsplit(resolved)
                if parts.scheme != "file":
                    continue  # an outside address: not this report's to resolve
                target = Path(url2pathname(parts.path))
                if not target.is_file():
                    problems.missing_targets.append(f"{name} -> {written}: no such file")
                    continue
                if target.suffix == ".html":
                    queue.append(target)
                    if parts.fragment:
                        anchors.append((target.resolve(), parts.fragment, f"{name} -> {written}"))
        problems.missing_targets += [f"{link}: no element with id {anchor!r}"
                                     for target, anchor, link in anchors if anchor not in ids[target]]
        page.close()
        return problems
