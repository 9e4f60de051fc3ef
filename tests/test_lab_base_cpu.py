"""labs.base: import_torch (a torch peer left out with the reason, whichever way torch's import fails), the
measuring helpers (interleaved rounds, a ratio's interval, how a target is missed) and the lab registry."""

import builtins
import sys

import pytest

from cuadv.labs import base
from cuadv.labs.base import import_torch


@pytest.fixture(autouse=True)
def _torch_not_tried_yet(monkeypatch):
    monkeypatch.setattr(base, "_torch_import_failure", None)


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


def test_a_failed_torch_import_is_not_tried_again(monkeypatch):
    """A second run of torch's __init__ over the half-set-up extension its failed import left is never made."""
    real_import = builtins.__import__
    tries = []

    def failing(name, *args, **kwargs):
        if name == "torch":
            tries.append(name)
            raise RuntimeError("expected ident but found ')' here")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(builtins, "__import__", failing)
    first = import_torch()
    assert first[0] is None and import_torch() == first and tries == ["torch"]


def test_missed_by_is_relative_or_in_points_and_never_zero():
    from cuadv.labs.base import missed_by

    assert missed_by(0.988, 1.0) == "missed by 1.2%"  # relative to the target
    assert missed_by(7.5, 10.0) == "missed by 25.0%"
    assert missed_by(93.7, 95.0, points=True) == "missed by 1.3 points"  # a % target: percentage points
    assert missed_by(0.9996, 1.0) == "missed by 0.04%"  # not "0.0%"
    assert missed_by(94.96, 95.0, points=True) == "missed by 0.04 points"
    assert missed_by(0.99999, 1.0) == "missed by less than 0.01%"


def test_interleaved_samples_keep_each_variants_rounds_in_order():
    from cuadv.labs.base import interleaved_samples

    calls, seen = iter(range(100)), []
    variants = {"a": lambda: [next(calls)], "b": lambda: [next(calls)]}
    samples = interleaved_samples(variants, 3, on_round=seen.append)
    assert samples == {"a": [0, 2, 4], "b": [1, 3, 5]} and seen == [0, 1, 2]  # a, b in every round, in order


def test_ratio_interval_holds_the_ratio_and_keeps_rounds_paired():
    import numpy as np

    from cuadv.labs.base import ratio_interval

    assert ratio_interval([2.0] * 5, [1.0] * 5) == (2.0, 2.0)  # no spread: the ratio itself
    # A drift both variants saw in the same rounds cancels: each round's pair moves together.
    drift = np.linspace(1.0, 1.5, 40)
    low, high = ratio_interval(1.01 * drift, drift)
    assert 1.0099 < low <= high < 1.0101
    rng = np.random.default_rng(1)
    base, other = rng.normal(100, 3, 200), rng.normal(101, 3, 200)
    low, high = ratio_interval(base, other)
    assert low < np.median(base) / np.median(other) < high and high - low < 0.02
    assert ratio_interval(base, other) == (low, high)  # seeded
    wide = ratio_interval(base[:20], other[:20])
    assert wide[1] - wide[0] > high - low  # fewer rounds, a wider interval
    with pytest.raises(ValueError, match="one sample per round"):
        ratio_interval([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="level"):
        ratio_interval([1.0], [1.0], level=1.0)


def test_ratio_target_says_when_the_rounds_do_not_resolve_it():
    from cuadv.labs.base import ratio_target

    assert ratio_target(0.988, (0.975, 1.003)) == ("missed by 1.2%; 90% interval 0.975-1.003x: the rounds do not "
                                                    "resolve it")
    assert ratio_target(0.978, (0.965, 0.990)) == "missed by 2.2%; 90% interval 0.965-0.990x"
    assert ratio_target(1.004, (0.998, 1.010)) == "met (1.00x); 90% interval 0.998-1.010x: the rounds do not resolve it"
    assert ratio_target(1.02, (1.01, 1.03)) == "met (1.02x); 90% interval 1.010-1.030x"
    # a narrow interval keeps the digits that tell its bounds apart (H200 2026-12-06: 1.000-1.000x for a 0.03% miss)
    assert ratio_target(0.99968, (0.99961, 0.99974)) == "missed by 0.032%; 90% interval 0.9996-0.9997x"
    assert ratio_target(1.0, (1.0, 1.0)) == "met (1.00x); 90% interval 1.00000-1.00000x"


def test_rates_are_of_the_same_bytes_and_ceiling():
    from cuadv.labs.base import gb_per_s, rates
    from cuadv.report.results import Spread
    from cuadv.timing import Ceiling, Timing

    ceiling = Ceiling(bytes_per_s=4e12, nbytes=1 << 31, timing=Timing(1.0, 1.0, 1.0, (1.0,)))
    gbps, pct = rates(0.5, 1e9, ceiling)  # 1 GB in 0.5 ms: 2000 GB/s, half of 4 TB/s
    assert gbps == 2000.0 and pct == 50.0
    s = gb_per_s(Spread(0.5, 0.4, 1.0), 1e9)  # the slowest tenth of the times is the lowest tenth of the rates
    assert (float(s), s.p10, s.p90) == (2000.0, 1000.0, 2500.0)


def test_every_optional_lab_is_registered_under_its_cli_name(monkeypatch):
    """A lab whose module fails to import is listed under the name the CLI knows it by (launch, not launch_many),
    so `cuadv bench launch` shows the import error instead of 'no lab named'."""
    import importlib

    from cuadv import labs

    for module_name, class_name, lab_name in labs._OPTIONAL_LABS:
        assert getattr(importlib.import_module(f"cuadv.labs.{module_name}"), class_name)().name == lab_name

    def broken(name, *a, **k):
        if name == "cuadv.labs.launch_many":
            raise ImportError("a missing dependency")
        return importlib.import_module(name, *a, **k)

    monkeypatch.setattr(labs.importlib, "import_module", broken)
    lab = labs.lab_by_name("launch")
    assert isinstance(lab, labs.BrokenLab) and str(lab.error) == "a missing dependency"


def test_a_lab_named_twice_runs_once():
    from cuadv.app.cli import _select_labs

    assert [lab.name for lab in _select_labs(["vecscale", "vecscale", "l2"])] == ["vecscale", "l2"]
