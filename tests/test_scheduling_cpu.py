"""The scheduling lab without a GPU: workloads, kernels for both targets, table d from given samples."""

import numpy as np
import pytest

from cuadv.labs.scheduling import DOMINANT, REGIMES, SHARED, WORKLOADS, SchedulingLab, workload


@pytest.mark.parametrize("regime", REGIMES, ids=lambda r: r.key)
@pytest.mark.parametrize("kind", WORKLOADS)
def test_workloads_have_the_stated_mean(kind, regime):
    d = workload(kind, regime.tiles(1056), np.random.default_rng(1), regime)
    assert d.dtype == np.uint32 and d.min() >= 1000
    assert abs(d.mean() / regime.mean_ns - 1) < 0.15


@pytest.mark.parametrize("regime", REGIMES, ids=lambda r: r.key)
def test_periodic_heavy_lands_on_one_fixed_blocks_block(regime):
    d = workload("periodic", regime.tiles(1000), np.random.default_rng(1), regime, period=1000)
    heavy = np.flatnonzero(d > 10 * np.median(d))
    assert (heavy % 1000 == 0).all() and len(heavy) == regime.tiles_per_slot


@pytest.mark.parametrize("kind", ["pareto", "periodic"])
def test_regimes_place_the_longest_tile(kind):
    """Many tiles per slot: the longest tile is under 10% of a slot's share. Dominant: it outlasts the share."""
    for regime, below in ((SHARED, True), (DOMINANT, False)):
        d = workload(kind, regime.tiles(1056), np.random.default_rng(2), regime).astype(np.float64)
        share = d.sum() / 1056
        assert (d.max() < 0.1 * share) == below, (regime.key, d.max() / share)


def test_unknown_workload():
    with pytest.raises(ValueError, match="unknown workload"):
        workload("bursty", 10, np.random.default_rng())


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_lab_kernels_compile(arch):
    modules = SchedulingLab().build(arch)
    names = {name for m in modules for name in m.resources}
    assert {"spin_fixed_work", "spin_fixed_blocks", "spin_steal", "spin_atomic_counter", "sm_holder"} <= names
    assert ("spin_clc" in names) == (arch == "sm_100a")


def test_sm_id_ranges():
    from cuadv.labs.vecscale import _ranges

    assert _ranges([32, 33, 34, 40, 78, 79]) == "32-34, 40, 78-79"
    assert _ranges([5]) == "5" and _ranges([]) == "none"


def test_ideal_is_the_larger_of_share_and_longest_tile():
    from cuadv.labs.scheduling_shared import ideal_ms

    d = np.full(1000, 10_000, dtype=np.uint32)
    assert ideal_ms(d, 100) == pytest.approx(0.1)  # 10 tiles of 10 us per slot
    d[0] = 5_000_000
    assert ideal_ms(d, 100) == pytest.approx(5.0)  # one tile outlasts a slot's share


def test_holder_params_mirror_the_device_struct():
    """HolderParams in sm_holder.cu: seven 8-byte fields in this order (the kernel reads them by offset)."""
    from cuadv.labs.scheduling_shared import HOLDER_DTYPE

    assert HOLDER_DTYPE.itemsize == 56
    assert list(HOLDER_DTYPE.names) == ["resident", "smids", "release", "all_in", "generation", "timeout_ns",
                                        "timed_out"]
    assert [HOLDER_DTYPE.fields[n][1] for n in HOLDER_DTYPE.names] == list(range(0, 56, 8))


def test_scheduling_lab_compares_atomic_counter():
    from cuadv.labs.scheduling_shared import COUNTER_POLICIES, SHARED_POLICIES
    from cuadv.labs.scheduling_support import POLICIES

    assert (POLICIES[-1][1] == "atomic_counter"
            and [p[0] for p in POLICIES[:3]] == ["fixed_work", "fixed_blocks", "steal"])
    assert (COUNTER_POLICIES[0][1] == "atomic_counter"
            and {"steal", "fixed_blocks"} <= {p for _, p, _ in COUNTER_POLICIES})
    assert {"fixed_work", "fixed_blocks", "steal", "atomic_counter"} <= {p for _, p, _ in SHARED_POLICIES}


def test_counter_table_judges_steal_on_its_lower_ratio_with_the_interval():
    import numpy as np

    from cuadv.labs.scheduling_shared import COUNTER_POLICIES, counter_report
    from cuadv.report.results import LabResult

    rng = np.random.default_rng(3)
    rounds = 60
    labels = {"short": "short launches", "mixed": "Pareto tiles"}
    # us per launch, one sample per round; steal 2% slower than the counter in a graph on Pareto tiles, equal else
    slower = {("mixed", "steal", "graph"): 1.02}
    samples = {((case, name), mode): list(100 * slower.get((case, name, mode), 1.0) * rng.normal(1, 0.002, rounds))
               for case in labels for name, _, _ in COUNTER_POLICIES for mode in ("stream", "graph")}
    samples.update({("memset", mode): [0.9] * rounds for mode in ("stream", "graph")})
    result = LabResult("scheduling", "Scheduling")
    counter_report(result, labels, samples)

    (table,) = result.tables
    assert len(table.rows) == len(labels) * len(COUNTER_POLICIES) and f"medians of {rounds} " in table.note
    rows = {(row[0], row[1]): row for row in table.rows}
    assert rows["Pareto tiles", "atomic_counter"][3] == 1.0 and rows["Pareto tiles", "atomic_counter"][6] == "-"
    steal = rows["Pareto tiles", "steal"]
    assert steal[6].startswith("graph: missed by 1.") and "; 90% interval 0.9" in steal[6]  # 1 / 1.02 = 0.980x
    assert "do not resolve" not in steal[6] and "Why steal misses" in table.note
    low, high = (result.figures[f"counter_mixed_steal_graph_x_atomic_counter_{end}"] for end in ("low", "high"))
    assert low < result.figures["counter_mixed_steal_graph_x_atomic_counter"] < high < 1.0
    # equal in both modes: met or missed by a hair, and (with this seed) the interval holds 1.0
    assert "do not resolve" in rows["short launches", "steal"][6]
    assert result.figures["counter_memset_graph_us"] == 0.9
    samples[(("short", "steal"), "graph")].append(100.0)  # a round of two samples: no pairing by round
    with pytest.raises(ValueError, match="one sample per round"):
        counter_report(LabResult("scheduling", "Scheduling"), labels, samples)
