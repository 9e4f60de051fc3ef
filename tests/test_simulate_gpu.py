"""The simulator's prediction against a measured block trace of the same workload.

A TileKernel whose tiles spin on %globaltimer for durations read from an array (after a spin
prologue) runs with ``trace=True`` under fixed_work, fixed_blocks and steal; the same durations go
into the simulator with this GPU's SM count and the kernel's measured occupancy (blocks per SM).
Both makespans are the trace's: first tile start to last tile end.

Tolerance: the predicted makespan is within 25% of the measured one for every policy and workload.
Calibrated conservatively: tiles are 20 us on average (%globaltimer ticks about every microsecond,
block launch and the scheduler's atomics cost well under a microsecond each, the model's defaults),
so per-tile errors stay a few percent; the wide margin covers the hardware's block-placement order
and the jitter of the ticket order, which the deterministic model does not reproduce. The observed
errors are reported as a warning (pytest's warnings summary) to calibrate the model's costs. The model's
machine is a whole GPU: a trace that shows another process's kernels beside it (tiles that took longer than they
spin, blocks that paused between tiles, an SM left without a tile, or fixed_blocks' blocks that did not all start
at once, as under ``pytest -n``) is taken again, and after three such the test skips, saying so.
"""

import warnings

import numpy as np
import pytest

from cuadv import current_device
from cuadv.simulate import KernelSpec, Machine, make_workload, simulate, spin_kernel

pytestmark = pytest.mark.gpu

TOLERANCE = 0.25
TILE_US = 20.0
PROLOGUE_US = 5.0
QUANTUM_US = 50.0
BLOCK = 128
WAVES = 16  # tiles = SMs x 8 x WAVES: about 16 waves of 8 blocks per SM


def occupancy(kernel_obj, policy: str) -> int:
    from cuadv.kernel import max_active_blocks_per_sm

    kernel, _ = kernel_obj.kernel(policy)
    return max_active_blocks_per_sm(kernel, BLOCK, 0)


WORKLOADS = ("uniform", "triangular", "pareto:2 capped at 10x", "periodic: every 8*SMs-th tile 20x")


def workload(name: str, sms: int) -> np.ndarray:
    """Per-tile durations (integer ns), SMs x 8 x WAVES tiles of about 20 us."""
    tiles = sms * 8 * WAVES
    machine = Machine(sms, 8)
    if name.startswith("pareto"):
        d = np.minimum(make_workload("pareto:2", tiles, TILE_US * 1e3, machine, seed=7), 10 * TILE_US * 1e3)
    elif name.startswith("periodic"):
        d = make_workload(f"periodic:{8 * sms}:20", tiles, TILE_US * 1e3, machine)
    else:
        d = make_workload(name, tiles, TILE_US * 1e3, machine, seed=7)
    return np.round(d).astype(np.uint64)


def blocks_started_together(trace, within_ns: float) -> bool:
    """Whether every block of a grid that fits the GPU at once (fixed_blocks) ran its first tile within
    ``within_ns`` of the first block: the model's machine is the whole GPU. Under ``pytest -n`` another test's
    kernels can hold SMs, and then some blocks start only when those end (fixed_blocks measured 7.1 ms against
    2.5 ms predicted once, the dynamic policies within 0.1%)."""
    r = trace.records[trace.written]
    order = np.argsort(r["start_ns"], kind="stable")
    _, first = np.unique(r["block"][order], return_index=True)  # each block's earliest tile
    starts = r["start_ns"][order][first]
    return int(starts.max() - starts.min()) <= within_ns


def sms_stayed_busy(trace, within_ns: float) -> bool:
    """Whether every SM of the GPU ran a tile, its first within ``within_ns`` of the launch's first, and until its
    last tile was never without a tile in flight for longer than that. steal's blocks give their SMs back at each
    time slice's end, and another process's kernel can take one before the next block comes (under ``pytest -n``
    steal measured 556 us against 394 us predicted on an H100, 2026-12-05, every tile and block gap within its
    slack)."""
    r = trace.records
    first = int(r["start_ns"].min())
    sms = np.unique(r["smid"])
    if sms.size < current_device().caps.sm_count:  # an SM held by another process all along
        return False
    for sm in sms:
        mine = r[r["smid"] == sm]
        order = np.argsort(mine["start_ns"], kind="stable")
        start = mine["start_ns"][order].astype(np.int64)
        busy_until = np.maximum.accumulate(mine["end_ns"][order].astype(np.int64))
        if start[0] - first > within_ns or np.any(start[1:] - busy_until[:-1] > within_ns):
            return False
    return True


def ran_undisturbed(trace, durations: np.ndarray, policy: str, slack_ns: float) -> bool:
    """Whether the launch had the GPU to itself: every tile took at most its duration + ``slack_ns`` and every
    block went from one tile to its next within ``slack_ns`` (a tile spins on %globaltimer, so one that took
    longer, or a block that paused between tiles, was switched out while another process's kernels ran, as
    under ``pytest -n``: fixed_blocks once measured 4.9 ms against 2.5 ms predicted with its blocks started
    together), and fixed_blocks' blocks all started at once."""
    r = trace.records  # one record per tile, in tile order
    took = r["end_ns"].astype(np.int64) - r["start_ns"].astype(np.int64)
    if np.any(took > durations.astype(np.int64) + slack_ns):
        return False
    order = np.lexsort((r["start_ns"], r["block"]))  # each block's tiles in the order it ran them
    same_block = r["block"][order][1:] == r["block"][order][:-1]
    gaps = r["start_ns"][order][1:].astype(np.int64) - r["end_ns"][order][:-1].astype(np.int64)
    if np.any(gaps[same_block] > slack_ns) or not sms_stayed_busy(trace, slack_ns):
        return False
    return policy != "fixed_blocks" or blocks_started_together(trace, slack_ns)


@pytest.mark.parametrize("name", WORKLOADS)
def test_simulated_makespan_matches_the_trace(cp, name):
    caps = current_device().caps
    if caps.compute_capability < (9, 0):
        pytest.skip("the steal policy needs compute capability 9.0")
    durations = workload(name, caps.sm_count)
    tiles = len(durations)
    dur_dev = cp.asarray(durations)
    rows, errors = [], {}
    for policy in ("fixed_work", "fixed_blocks", "steal"):
        k = spin_kernel(policy, QUANTUM_US if policy == "steal" else None, block=BLOCK)
        k(tiles, dur_dev, np.uint64(PROLOGUE_US * 1e3))  # warm-up: compiles, loads the module
        cp.cuda.runtime.deviceSynchronize()
        for _ in range(3):
            trace = k(tiles, dur_dev, np.uint64(PROLOGUE_US * 1e3), trace=True)
            assert trace.written.all(), "every tile must leave a trace record"
            if ran_undisturbed(trace, durations, policy, 4 * TILE_US * 1e3):
                break
        else:
            pytest.skip(f"{policy}: another process's kernels shared the GPU in 3 launches (pytest -n: tiles "
                        "stretched, blocks paused or started late, an SM left idle), which the model's machine "
                        "does not have")
        slots = occupancy(k, policy)
        machine = Machine(caps.sm_count, slots)
        spec = KernelSpec(durations.astype(np.float64), policy, PROLOGUE_US * 1e3,
                          quantum_ns=QUANTUM_US * 1e3 if policy == "steal" else float("inf"))
        predicted = simulate(machine, spec).trace().makespan_ns
        measured = trace.makespan_ns
        errors[policy] = (predicted - measured) / measured
        rows.append(f"{policy}: {slots}/SM measured {measured / 1e3:.1f} us, predicted {predicted / 1e3:.1f} us, "
                    f"error {errors[policy]:+.1%}")
    warnings.warn(UserWarning(f"simulator vs {caps.name} trace, {name}, {tiles} tiles: " + "; ".join(rows)))
    worst = max(errors, key=lambda p: abs(errors[p]))
    assert abs(errors[worst]) <= TOLERANCE, "; ".join(rows)
