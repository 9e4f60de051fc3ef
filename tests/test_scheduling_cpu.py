"""The scheduling lab without a GPU: workloads, kernels for both targets."""

import numpy as np
import pytest

from cuadv.labs.scheduling import MEAN_TILE_NS, WORKLOADS, SchedulingLab, workload


@pytest.mark.parametrize("kind", WORKLOADS)
def test_workloads_have_the_stated_mean(kind):
    d = workload(kind, 42_240, np.random.default_rng(1))
    assert d.dtype == np.uint32 and d.min() >= 1000
    assert abs(d.mean() / MEAN_TILE_NS - 1) < 0.15


def test_periodic_heavy_lands_on_one_fixed_blocks_block():
    d = workload("periodic", 42_240, np.random.default_rng(1))
    heavy = np.flatnonzero(d > 10 * np.median(d))
    assert (heavy % 1056 == 0).all() and len(heavy) == 40


def test_unknown_workload():
    with pytest.raises(ValueError, match="unknown workload"):
        workload("bursty", 10, np.random.default_rng())


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_lab_kernels_compile(arch):
    modules = SchedulingLab().build(arch)
    names = {name for m in modules for name in m.resources}
    assert {"spin_fixed_work", "spin_fixed_blocks", "spin_steal"} <= names
    assert ("spin_clc" in names) == (arch == "sm_100a")
