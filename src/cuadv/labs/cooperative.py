"""Cooperative groups, grid-wide sync and thread block clusters.

What it shows:

1. Cooperative groups: the classic ``block_sum`` over ``cg::thread_block``; warp-level reductions
   over ``cg::tiled_partition<4..32>`` (``cg::reduce`` and a ``shfl_down`` tree, which must agree);
   ``cg::coalesced_threads()`` in a divergent branch (warp-aggregated atomics). Exact against NumPy.
2. Grid-wide sync: the two-phase kernel (phase 1; ``grid.sync()``; phase 2) under cooperative
   launch, against the same phases as two kernel launches (from Python and from a CUDA graph);
   the cost of one ``grid.sync()`` and of one kernel boundary. A cooperative grid larger than the
   co-resident maximum is refused before launch with an error that names the maximum.
3. Clusters: compile-time ``__cluster_dims__`` and run-time cluster dims on the same body (a DSM
   ring through ``cluster.map_shared_rank``), every size 1..16 (above 8: non-portable); giving both
   is refused, so is a grid the cluster shape does not divide; the occupancy queries (largest
   cluster, active clusters) as a table (see also ``cuadv caps --occupancy``).

Needs: compute capability 9.0 for clusters; cooperative launch for grid sync (any recent GPU).

Key insight: ``grid.sync()`` costs about as much as a kernel boundary inside a graph, but it caps
the grid at what fits on the GPU at once; two launches need no such cap and make phase 1 visible
for free. Clusters are the middle ground: a handful of blocks guaranteed co-resident on one GPC,
sharing shared memory, with no cap on the grid.

Run: ``cuadv bench cooperative``. The mechanisms live in ``cuadv.cooperative`` (this module only
measures and reports); from Python::

    from cuadv.cooperative import block_sum, two_phase, largest_cluster
    sums = block_sum(x, block=256)             # one sum per block of x (int32 or float32)
    two_phase(x, rounds=3)                     # x += sum(x), three times, one grid.sync() per round
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .._cuda import check, driver
from ..cooperative import (BLOCK_SUM_TYPES, PHASE_BLOCK, RING_BLOCK, TILE_SIZES, _launch, _sms,  # noqa: F401
                           block_sums, build_module, cluster_occupancy, cluster_ring, co_resident_max,
                           enqueue_two_phase, kernel, kernel_expressions, odd_sums, ring_expected, tile_sums,
                           two_phase, two_phase_reference)
from ..dims import PORTABLE_CLUSTER_SIZE
from ..errors import LaunchConfigError, ValidationError
from ..launching import LaunchConfig, launch
from ..report.results import LabResult, Selection, Spread, Table, spread_map
from .base import RunContext, readback


class CapturedGraph:
    """Work enqueued by ``enqueue(stream)`` captured once into a CUDA graph on a stream of its own,
    replayed by ``launch()`` (capture and instantiation: cuadv.graphs.Graph)."""

    def __init__(self, enqueue: Callable[[int], None]):
        from ..graphs import Graph

        drv = driver()
        self.stream = check(drv.cuStreamCreate(int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate")
        try:
            self.graph = Graph.capture(self.handle, lambda: enqueue(self.handle))
        except BaseException:  # no graph to close: __del__ would skip the stream too
            drv.cuStreamDestroy(self.stream)
            self.stream = None
            raise

    @property
    def handle(self) -> int:
        return int(self.stream)

    def launch(self) -> None:
        self.graph.launch(self.handle)

    def __del__(self):
        try:
            if getattr(self, "graph", None) is not None:
                self.graph.close()
            if getattr(self, "stream", None) is not None:
                driver().cuStreamDestroy(self.stream)
        except Exception:  # at interpreter exit the driver may be gone
            pass


# ---------------------------------------------------------------------------------------------
# Validation (shared by run, smoke and the GPU tests).


def validate_groups(cp, n: int = 100_003) -> list[str]:
    rng = np.random.default_rng()
    for dtype in (np.int32, np.float32):
        host = rng.integers(-1000, 1001, size=n).astype(dtype)  # integer values: float sums are exact
        for block in (32, 96, 128, 1000, 1024):
            got = readback(block_sums(cp.asarray(host), block))
            padded = np.zeros(-(-n // block) * block, dtype=np.int64)
            padded[:n] = host
            want = padded.reshape(-1, block).sum(axis=1)
            if not np.array_equal(got.astype(np.int64), want):
                raise ValidationError(f"block_sum {np.dtype(dtype)} block {block} differs from NumPy")
    host = rng.integers(-1000, 1001, size=n).astype(np.int32)
    for tile in TILE_SIZES:
        by_reduce, by_shuffle = (readback(a) for a in tile_sums(cp.asarray(host), tile))
        padded = np.zeros(by_reduce.size * tile, dtype=np.int64)
        padded[:n] = host
        want = padded.reshape(-1, tile).sum(axis=1)
        if not (np.array_equal(by_reduce, want) and np.array_equal(by_shuffle, want)):
            raise ValidationError(f"tile_sums<{tile}> differs from NumPy")
    sums, counts = (readback(a) for a in odd_sums(cp.asarray(host)))
    padded = np.zeros(sums.size * 32, dtype=np.int64)
    padded[:n] = host
    odd = (padded & 1).astype(bool)
    if not (np.array_equal(sums, np.where(odd, padded, 0).reshape(-1, 32).sum(axis=1))
            and np.array_equal(counts, odd.reshape(-1, 32).sum(axis=1))):
        raise ValidationError("odd_sums (coalesced groups) differs from NumPy")
    return [f"block_sum over cg::thread_block equals NumPy for int32 and float32 at block sizes 32, 96, 128, 1000, "
            f"1024 (n = {n})",
            f"cg::reduce and a shfl_down tree over tiled_partition<4, 8, 16, 32> both equal NumPy (n = {n})",
            "coalesced_threads() in a divergent branch: per-warp sums and counts of odd values equal NumPy"]


def validate_grid_sync(cp) -> list[str]:
    rng = np.random.default_rng()
    k = kernel("two_phase")
    top = co_resident_max(k, PHASE_BLOCK, PHASE_BLOCK * 4)
    for grid in (1, _sms(), top):
        for n in (1, 4099, grid * PHASE_BLOCK * 3 + 5):
            host = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
            for rounds in (1, 3):
                want = two_phase_reference(host, rounds)
                for mode in ("grid_sync", "two_kernels"):
                    x = cp.asarray(host)
                    two_phase(x, rounds, mode=mode, grid=grid)
                    if not np.array_equal(readback(x), want):
                        raise ValidationError(f"two_phase {mode} grid={grid} n={n} rounds={rounds} differs from NumPy")
    try:
        two_phase(cp.zeros(16, dtype=cp.uint32), 1, grid=top + 1)
    except LaunchConfigError as exc:
        if f"co-resident maximum {top}" not in str(exc):
            raise ValidationError(f"the co-residency error does not name the maximum {top}: {exc}") from None
        refused = str(exc)
    else:
        raise ValidationError(f"a cooperative grid of {top + 1} blocks was not refused (maximum {top})")
    return [f"two-phase kernel with grid.sync() (cooperative launch) and as two kernels both equal NumPy "
            f"(x += sum(x) mod 2^32; 1 and 3 rounds; grids 1, {_sms()}, {top}; n = 1, 4099, 3 x grid x block + 5)",
            f"a cooperative grid of {top + 1} blocks is refused before launch: \"{refused}\""]


def validate_clusters(largest: int) -> list[str]:
    for c in range(1, largest + 1):
        grid = 8 * c
        rec = cluster_ring(c, grid)
        if not np.array_equal(rec, ring_expected(grid, c)):
            raise ValidationError(f"cluster ring with run-time cluster size {c} read the wrong neighbour")
    rec = cluster_ring(None, 8, fixed=True)
    if not np.array_equal(rec, ring_expected(8, 2)):
        raise ValidationError("cluster ring with __cluster_dims__(2, 1, 1) read the wrong neighbour")
    refusals = []
    for attempt in (lambda: cluster_ring(2, 8, fixed=True),  # compile-time and run-time cluster together
                    lambda: cluster_ring(None, 7, fixed=True),  # grid 7 with __cluster_dims__(2, 1, 1)
                    lambda: cluster_ring(4, 6),  # run-time cluster 4 does not divide grid 6
                    lambda: cluster_ring(largest + 1, 8 * (largest + 1))):  # over the largest cluster
        try:
            attempt()
        except LaunchConfigError as exc:
            refusals.append(str(exc))
        else:
            raise ValidationError("an invalid cluster launch was not refused")
    return [f"DSM ring through cluster.map_shared_rank correct at every run-time cluster size 1..{largest} "
            f"(above {PORTABLE_CLUSTER_SIZE}: non-portable) and with __cluster_dims__(2, 1, 1)",
            "refused before launch: " + "; ".join(f"\"{r}\"" for r in refusals)]


# ---------------------------------------------------------------------------------------------
# The lab.


@dataclass
class SyncCosts:
    per_sync_us: dict[int, float]
    per_launch_us: float
    per_graph_node_us: float


class CooperativeLab:
    name = "cooperative"
    title = "Cooperative groups, grid-wide sync and clusters"

    def supported(self, caps) -> str | None:
        if not caps.cooperative_launch:
            return "grid sync needs cooperative launch (not on this GPU); fallback: two kernel launches"
        if caps.compute_capability < (9, 0) or not caps.cluster_launch:
            return (f"thread block clusters need compute capability >= 9.0 (got {caps.cc_string()}); fallback: "
                    "cooperative groups and grid sync without clusters (block_sums, two_phase)")
        return None

    def build(self, arch: str):
        return [build_module(arch)]

    def smoke(self) -> None:
        import cupy as cp

        from ..device import current_device

        validate_groups(cp, n=4099)
        x = cp.arange(4099, dtype=cp.uint32)
        want = two_phase_reference(readback(x), 2)
        for mode in ("grid_sync", "two_kernels"):
            y = x.copy()
            two_phase(y, 2, mode=mode, grid=4)
            if not np.array_equal(readback(y), want):
                raise ValidationError(f"two_phase {mode} differs from NumPy")
        sync_done = cp.zeros(1, dtype=cp.uint32)
        _launch(kernel("sync_loop"), LaunchConfig(grid=4, block=64, cooperative=True), 3, sync_done)
        largest = current_device().caps.max_cluster_size_nonportable
        for c in sorted({1, 2, 3, largest}):
            if not np.array_equal(cluster_ring(c, 2 * c), ring_expected(2 * c, c)):
                raise ValidationError(f"cluster ring of {c} read the wrong neighbour")
        if not np.array_equal(cluster_ring(None, 4, fixed=True), ring_expected(4, 2)):
            raise ValidationError("cluster ring with __cluster_dims__(2, 1, 1) read the wrong neighbour")
        _launch(kernel("empty"), LaunchConfig(grid=1, block=32))

    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        result = LabResult(self.name, self.title)
        ctx.progress("cooperative: validating groups, grid sync, clusters")
        result.checks += validate_groups(cp)
        result.checks += validate_grid_sync(cp)
        largest = ctx.caps.max_cluster_size_nonportable
        result.checks += validate_clusters(largest)

        ctx.progress("cooperative: grid.sync() and kernel-boundary costs")
        costs = self._sync_costs(ctx)
        per_round = self._two_phase_table(result, ctx)
        result.tables.append(Table(
            "Cost of one grid-wide barrier vs one kernel boundary",
            ["mechanism", "grid (blocks)", "us each"],
            [[f"grid.sync() ({g} blocks x {PHASE_BLOCK} threads)", g, us] for g, us in costs.per_sync_us.items()]
            + [["kernel boundary: empty kernel, back-to-back launches from Python", 1, costs.per_launch_us],
               ["kernel boundary: empty kernel, one node of a CUDA graph", 1, costs.per_graph_node_us]],
            note="grid.sync(): (time of 2000 syncs - time of 0 syncs) / 2000 in one cooperative kernel, from the "
                 "medians; launches: time of 2000 back-to-back launches / 2000; medians of CUDA-event timings"))
        for g, us in costs.per_sync_us.items():
            result.figures[f"grid_sync_us_{g}_blocks"] = us
        result.figures["kernel_boundary_python_us"] = costs.per_launch_us
        result.figures["kernel_boundary_graph_us"] = costs.per_graph_node_us

        best = min(per_round, key=per_round.get)
        result.selection.append(Selection(
            "data exchange between blocks",
            f"phases exchanging data through global memory, ordered by: {best}",
            "L2-resident two-phase round: " + ", ".join(f"{k} {v:.1f} us" for k, v in per_round.items())
            + f"; one grid.sync() {max(costs.per_sync_us.values()):.1f} us vs one graph kernel node "
              f"{costs.per_graph_node_us:.1f} us",
            fallback="two kernel launches (no cooperative launch needed, no cap on the grid)"))

        ctx.progress("cooperative: cluster occupancy")
        self._occupancy_tables(result, ctx)
        result.notes.append("co-residency of a cooperative grid and of a cluster is what the occupancy API reports "
                            "for this GPU now (MIG or other processes can lower it); the launch checks it every time")
        return result

    # -- measuring ------------------------------------------------------------------------------

    def _sync_costs(self, ctx) -> SyncCosts:
        import cupy as cp

        from ..timing import time_gpu

        k = kernel("sync_loop")
        done = cp.zeros(1, dtype=cp.uint32)
        per_sync = {}
        repeats = 5 if ctx.quick else 15
        iters = 2000
        for grid in (ctx.caps.sm_count, co_resident_max(k, PHASE_BLOCK)):
            cfg = LaunchConfig(grid=grid, block=PHASE_BLOCK, cooperative=True)
            t0 = time_gpu(lambda: _launch(k, cfg, 0, done), repeats=repeats)
            t1 = time_gpu(lambda: _launch(k, cfg, iters, done), repeats=repeats)
            per_sync[grid] = (t1.median_ms - t0.median_ms) * 1e3 / iters
        if int(readback(done)[0]) != iters:
            raise ValidationError("sync_loop did not finish its iterations")
        empty = kernel("empty")
        cfg1 = LaunchConfig(grid=1, block=32)

        def many(stream=None):
            for _ in range(iters):
                launch(empty, cfg1, stream=stream, backend="driver")

        t_py = time_gpu(many, repeats=3 if ctx.quick else 7)
        graph = CapturedGraph(lambda s: many(s))
        t_graph = time_gpu(graph.launch, stream=graph.handle, repeats=repeats)
        return SyncCosts(per_sync, *(spread_map(lambda ms: ms * 1e3 / iters, Spread.of(t.samples))
                                     for t in (t_py, t_graph)))

    def _two_phase_table(self, result: LabResult, ctx) -> dict[str, float]:
        """The table; returns microseconds per round of each version for the L2-resident size."""
        import cupy as cp

        from ..timing import time_gpu

        k = kernel("two_phase")
        grid = co_resident_max(k, PHASE_BLOCK, PHASE_BLOCK * 4)
        rounds = 50 if ctx.quick else 200
        rows = []
        first: dict[str, float] = {}
        for per_thread in (4, 64):  # L2-resident data (sync-bound) and DRAM-sized data (work-bound)
            n = grid * PHASE_BLOCK * per_thread
            x = cp.arange(n, dtype=cp.uint32)
            partials = cp.zeros(2 * grid, dtype=cp.uint32)
            times = {}
            for mode in ("grid_sync", "two_kernels"):
                t = time_gpu(lambda: enqueue_two_phase(x, partials, rounds, mode, grid, PHASE_BLOCK),
                             repeats=3 if ctx.quick else 7)
                times[mode] = Spread.of(t.samples)
            graph = CapturedGraph(lambda s: enqueue_two_phase(x, partials, rounds, "two_kernels", grid, PHASE_BLOCK,
                                                              stream=s, backend="driver"))
            times["two kernels, CUDA graph"] = Spread.of(time_gpu(graph.launch, stream=graph.handle,
                                                                  repeats=3 if ctx.quick else 7).samples)
            base = times["grid_sync"]
            for label, ms in (("grid.sync() (cooperative launch)", times["grid_sync"]),
                              ("two kernels, launched from Python", times["two_kernels"]),
                              ("two kernels, CUDA graph", times["two kernels, CUDA graph"])):
                us = spread_map(lambda t: t * 1e3 / rounds, ms)
                rows.append([f"{n * 4 / 2**20:.0f} MiB", label, us, ms / base])
                if per_thread == 4:
                    first[label] = us
                result.figures[f"two_phase_{per_thread}pt_{label.split(' (')[0].replace(' ', '_')}_us_per_round"] = us
            del x
        result.tables.append(Table(
            f"Two-phase kernel: phase 1; grid-wide order; phase 2 — {grid} blocks x {PHASE_BLOCK} threads",
            ["data", "how phase 2 waits for phase 1", "us per round", "x grid.sync()"], rows,
            note=f"{rounds} rounds per timing (x += sum(x) mod 2^32), same phase code in every version; the grid is "
                 "the co-resident maximum (the largest a cooperative launch accepts); outputs validated separately"))
        return first

    def _occupancy_tables(self, result: LabResult, ctx) -> None:
        from ..kernel import max_cluster_size

        k = kernel("cluster_ring")
        rows = cluster_occupancy(k, RING_BLOCK, 0, range(1, ctx.caps.max_cluster_size_nonportable + 1))
        result.tables.append(Table(
            f"Active clusters by cluster size (cluster_ring, {RING_BLOCK} threads, no dynamic shared memory)",
            ["cluster size", "active clusters", "resident blocks"], rows,
            note=f"cuOccupancyMaxActiveClusters; sizes above {PORTABLE_CLUSTER_SIZE} are non-portable (the kernel "
                 "attribute NON_PORTABLE_CLUSTER_SIZE_ALLOWED is set for them)"))
        big_rows = []
        for block in (128, 1024):
            for kb in (0, 64, 128, 200):
                smem = min(kb * 1024, ctx.caps.shared_mem_per_block_optin)
                big_rows.append([block, f"{smem // 1024} KB", max_cluster_size(k, block, smem, non_portable=False),
                                 max_cluster_size(k, block, smem, non_portable=True)])
        result.tables.append(Table("Largest cluster (cuOccupancyMaxPotentialClusterSize)",
                                   ["threads / block", "dynamic shared mem", "portable", "non-portable"], big_rows))
        result.figures["largest_cluster_portable"] = ctx.caps.max_cluster_size_portable
        result.figures["largest_cluster_nonportable"] = ctx.caps.max_cluster_size_nonportable
