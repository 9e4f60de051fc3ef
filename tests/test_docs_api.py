"""The docs index (docs/README.md) names every public name of cuadv and of its mechanism modules, every CLI
command, and links every mechanism page and every example (issue 19, item 8)."""

import importlib
import re
from pathlib import Path

import pytest

from cuadv.app import cli

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "README.md"
MODULES = ["cuadv", "cuadv.tma", "cuadv.pipeline", "cuadv.l2", "cuadv.domains", "cuadv.torch_ops", "cuadv.nvtx",
           "cuadv.pdl", "cuadv.persistent", "cuadv.cooperative", "cuadv.histograms", "cuadv.work_stealing",
           "cuadv.waiting"]


def _named(name: str, text: str) -> bool:
    return re.search(rf"`[^`]*\b{re.escape(name)}\b[^`]*`", text) is not None  # in code marks, as a word


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_in_the_index(module):
    names = importlib.import_module(module).__all__
    text = INDEX.read_text()
    missing = [name for name in names if not _named(name, text)]
    assert not missing, f"docs/README.md does not name {module}'s {missing}"
    assert _named(module, text), f"docs/README.md does not name the module {module}"


def test_every_public_name_exists():
    """__all__ lists only what the module has (a stale name would pass the test above and fail an import)."""
    for module in MODULES:
        mod = importlib.import_module(module)
        assert [n for n in mod.__all__ if not hasattr(mod, n)] == [], module


def test_every_command_is_in_the_index():
    commands = cli.build_parser()._subparsers._group_actions[0].choices
    text = INDEX.read_text()
    assert not [c for c in commands if f"`cuadv {c}" not in text]


def test_every_mechanism_page_and_example_is_linked_from_the_index():
    text = INDEX.read_text()
    pages = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "README.md"]
    examples = [p.name for p in sorted((ROOT / "examples").glob("*.py"))]
    assert not [p for p in pages if f"]({p})" not in text]
    assert not [e for e in examples if f"](../examples/{e})" not in text]


def test_every_error_the_readme_tabulates_is_exported_and_a_cuadv_error():
    """The README's error table names what a user catches: each is importable from cuadv, a CuadvError."""
    import cuadv

    table = (ROOT / "README.md").read_text().split("| error | example call | message |", 1)[1].split("\n\n", 1)[0]
    names = re.findall(r"^\| `(\w+Error)`", table, flags=re.M)
    assert len(names) >= 8, names
    for name in names:
        assert name in cuadv.__all__ and issubclass(getattr(cuadv, name), cuadv.CuadvError), name


def test_interactive_sessions_in_the_docs_print_what_they_show():
    """Every ```pycon block of the docs runs as a doctest (those that need no GPU: all of them today)."""
    import doctest

    blocks = [(page.name, m.group(1)) for page in sorted((ROOT / "docs").glob("*.md"))
              for m in re.finditer(r"```pycon\n(.*?)```", page.read_text(), re.S)]
    assert blocks, "no ```pycon block found: the test reads none"
    for name, text in blocks:
        test = doctest.DocTestParser().get_doctest(text, {}, name, name, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert runner.failures == 0, f"a ```pycon block of docs/{name} does not print what it shows"
