"""labs.base's import_torch: a torch peer left out with the reason, whichever way torch's import fails."""

import builtins
import sys

from cuadv.labs.base import import_torch


def test_an_absent_torch_is_named_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    assert import_torch() == (None, "torch is not installed")


def test_a_torch_failing_its_own_import_gives_the_first_line_of_its_error(monkeypatch):
    real_import = builtins.__import__

    def failing(name, *args, **kwargs):
        if name == "torch":
            raise RuntimeError("could not parse schema foo(Tensor x) -> Tensor\nmore detail")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(builtins, "__import__", failing)
    first_line = "could not parse schema foo(Tensor x) -> Tensor"
    assert import_torch() == (None, f"torch failed to import (RuntimeError: {first_line})")
