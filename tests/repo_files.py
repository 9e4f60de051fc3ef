"""The repository's scripts and examples as modules in tests (they are files beside the package, not part of it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_repo_file(folder: str, name: str) -> ModuleType:
    """ROOT/folder/name.py executed afresh as module `name`, which it is registered as in sys.modules before it runs
    (dataclasses look their module up as a class is built)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_example(name: str) -> ModuleType:
    return load_repo_file("examples", name)


def load_script(name: str) -> ModuleType:
    return load_repo_file("scripts", name)
