"""examples/nvtx_ranges.py on a GPU: its result matches NumPy and its ranges nest as the docstring says."""

import pytest

from cuadv import nvtx
from repo_files import load_example

pytestmark = pytest.mark.gpu


def test_nvtx_example_opens_one_range_per_step_and_launch(cp, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(nvtx, "_calls", lambda: (lambda m: calls.append(f"push {m}"), lambda: calls.append("pop")))
    example = load_example("nvtx_ranges")
    example.main(iterations=2, n=1000)  # exits with a message when the result differs from NumPy
    iteration = ["push smooth", "pop", "push scale", "pop"]
    assert calls == ["push setup: compile and upload", "pop",
                     "push iteration 0", *iteration, "pop", "push iteration 1", *iteration, "pop",
                     "push check against NumPy", "pop"]
