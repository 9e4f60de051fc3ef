"""Lab-private pieces of the ``scheduling`` lab: the spin kernel whose tiles take known times, the workloads
and regimes of the balance experiment, and the policies compared. The scheduler itself lives in
``cuadv.work_stealing``; the lab (``cuadv.labs.scheduling``) measures and reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..work_stealing import TileKernel

SPIN_BLOCK = 256  # 8 resident blocks per SM on a 2048-thread SM: the slots of the balance experiments
SPIN_PARAMS = "const unsigned int* durations_ns, unsigned int* done, unsigned long long prologue_ns"
SPIN_PROLOGUE = r"""
    if (prologue_ns != 0 && threadIdx.x == 0) {  // the per-block setup the CUDA Programming Guide 4.12 example's compute_scalar() stands for
      const unsigned long long t0 = cuadv::ptx::globaltimer_ns();
      while (cuadv::ptx::globaltimer_ns() - t0 < prologue_ns) {}
    }
    __syncthreads();  // the whole block waits for its prologue
"""
SPIN_BODY = r"""
      if (threadIdx.x == 0) {  // a tile of known duration in real time, whatever the SM clock
        const unsigned long long t0 = cuadv::ptx::globaltimer_ns();
        const unsigned int d = durations_ns[tile.index];
        while (cuadv::ptx::globaltimer_ns() - t0 < d) {}
        atomicAdd(&done[tile.index], 1u);  // a tile run twice or never shows here
      }
      __syncthreads();  // the whole block is busy for the tile: its warps hold their slot (occupancy)
"""
TILES = 42_240  # the brief's feasibility measurement: 40 tiles per slot on 132 SMs x 8
MEAN_TILE_NS = 25_000
WORKLOAD_SEED = 18  # the random (Pareto) tile durations: the same workload in every run and on every machine


@dataclass(frozen=True)
class Regime:
    """How the costliest tile compares with one slot's share of the work, which decides what the ideal
    max(total / slots, longest tile) is set by and so what an online scheduler can reach."""

    key: str
    label: str
    tiles_per_slot: int
    mean_ns: int
    pareto_cap: float  # the longest Pareto tile, in means
    periodic_heavy: float  # a heavy periodic tile over a light one

    def tiles(self, slots: int) -> int:
        return self.tiles_per_slot * slots


# Many tiles per slot: the longest tile is a few % of a slot's share, so a greedy scheduler in any
# order ends within about one tile of total / slots. The targets of issue 3 are judged here.
SHARED = Regime("shared", "many tiles per slot", 500, MEAN_TILE_NS, 20.0, 24.0)
# The brief's setting (40 tiles per slot): the costliest tile alone outlasts a slot's share, so the
# ideal is that tile, and only handing it out first reaches it.
DOMINANT = Regime("dominant", "one tile outweighs a slot's share", TILES // 1056, MEAN_TILE_NS, 200.0, 120.0)
REGIMES = (SHARED, DOMINANT)

# Labels, policy, quantum (us; None = default, inf = never yield). atomic_counter last: the first three are
# the CUDA Programming Guide 4.12 strategies (the heaviest-first rows and timelines take POLICIES[:3], [1] and [2]).
POLICIES = [("fixed_work", "fixed_work", None), ("fixed_blocks", "fixed_blocks", None),
            ("steal", "steal", None), ("steal Q=inf", "steal", math.inf), ("atomic_counter", "atomic_counter", None)]


def spin_kernel(policy: str, quantum_us: float | None = None, name: str = "spin",
                min_tiles: int | None = None) -> TileKernel:
    # min_blocks_per_sm=8 caps registers at 32, so every policy gets the same 8 slots per SM.
    return TileKernel(SPIN_PARAMS, SPIN_BODY, SPIN_PROLOGUE, policy=policy, block=SPIN_BLOCK, quantum_us=quantum_us,
                      name=f"{name}_{policy}", min_blocks_per_sm=8, min_tiles=min_tiles)


def workload(kind: str, tiles: int, rng: np.random.Generator, regime: Regime = DOMINANT,
             period: int = 1056) -> np.ndarray:
    """Tile durations in ns with mean regime.mean_ns. period: every period-th tile is heavy in 'periodic'
    (the fixed_blocks grid, so a grid-stride loop hands all of them to block 0)."""
    m = regime.mean_ns
    if kind == "uniform":
        d = np.full(tiles, m, dtype=np.float64)
    elif kind == "pareto":  # heavy tail, alpha 1.5, capped at regime.pareto_cap means
        alpha = 1.5
        d = (rng.pareto(alpha, tiles) + 1) * m * (alpha - 1) / alpha
        d = np.minimum(d, regime.pareto_cap * m)
    elif kind == "triangular":  # causal attention: row r of a 64-row block does r+1 units of work
        d = (np.arange(tiles) % 64 + 1) * (2 * m / 65)
    elif kind == "periodic":  # every period-th tile regime.periodic_heavy x heavier than the others
        d = np.full(tiles, 1.0)
        d[::period] = regime.periodic_heavy
        d *= m / d.mean()
    else:
        raise ValueError(f"unknown workload {kind!r}")
    return np.maximum(d, 1000).astype(np.uint32)


WORKLOADS = ("uniform", "pareto", "triangular", "periodic")


@dataclass
class BalanceRow:
    workload: str
    policy: str
    ms: float  # a Spread when measured: the median with its spread
    ideal_ms: float
    order: str = "index"  # index: tiles handed out 0, 1, 2, ...; heaviest first: a TileOrder by cost
    regime: str = SHARED.key
