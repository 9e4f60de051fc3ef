"""examples/nvtx_ranges.py on a GPU: its result matches NumPy and its ranges nest as the docstring says."""

import importlib.util
from pathlib import Path

import pytest

from cuadv import nvtx

pytestmark = pytest.mark.gpu


def test_nvtx_example_opens_one_range_per_step_and_launch(cp, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(nvtx, "_calls", lambda: (lambda m: calls.append(f"push {m}"), lambda: calls.append("pop")))
    path = Path(__file__).resolve().parents[1] / "examples" / "nvtx_ranges.py"
    spec = importlib.util.spec_from_file_location("nvtx_ranges", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(iterations=2, n=1000)  # exits with a message when the result differs from NumPy
    iteration = ["push smooth", "pop", "push scale", "pop"]
    assert calls == ["push setup: compile and upload", "pop",
                     "push iteration 0", *iteration, "pop", "push iteration 1", *iteration, "pop",
                     "push check against NumPy", "pop"]
