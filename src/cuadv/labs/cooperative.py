"""Cooperative groups, grid-wide sync and thread block clusters (seed 002).

What it shows:

1. Cooperative groups: the seed's ``block_sum`` over ``cg::thread_block``; warp-level reductions
   over ``cg::tiled_partition<4..32>`` (``cg::reduce`` and a ``shfl_down`` tree, which must agree);
   ``cg::coalesced_threads()`` in a divergent branch (warp-aggregated atomics). Exact against NumPy.
2. Grid-wide sync: the seed's two-phase kernel (phase 1; ``grid.sync()``; phase 2) under cooperative
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

Run: ``cuadv bench cooperative``; from Python::

    from cuadv.labs.cooperative import block_sums, two_phase, cluster_ring
    sums = block_sums(x, block=256)           # one sum per block of x (int32 or float32)
    two_phase(x, rounds=3)                     # x += sum(x), three times, one grid.sync() per round
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

from .._cuda import check, driver
from ..errors import LaunchConfigError, ValidationError
from ..launch import PORTABLE_CLUSTER_SIZE, LaunchConfig, launch
from ..results import LabResult, Selection, Table
from .base import RunContext

TILE_SIZES = (4, 8, 16, 32)
BLOCK_SUM_TYPES = {"int32": "int", "float32": "float"}
RING_BLOCK = 128
PHASE_BLOCK = 256


def kernel_expressions() -> list[str]:
    return [f"block_sums<{t}>" for t in BLOCK_SUM_TYPES.values()] + [f"tile_sums<{t}>" for t in TILE_SIZES]


@lru_cache(maxsize=None)
def build_module(arch: str):
    from ..compiler import compile_source, kernel_source

    return compile_source(kernel_source("cooperative.cu"), name="cooperative", arch=arch,
                          name_expressions=kernel_expressions())


@lru_cache(maxsize=None)
def kernel(name: str):
    """A kernel of cooperative.cu on the current GPU (loaded once)."""
    from ..device import current_device

    return build_module(current_device().caps.arch).kernel(name)


def _sms() -> int:
    from ..device import current_device

    return current_device().caps.sm_count


def co_resident_max(k, block: int, shared_mem: int = 0) -> int:
    """Blocks of this kernel that fit on the whole GPU at once: the largest cooperative grid."""
    from ..occupancy import max_active_blocks_per_sm

    return max_active_blocks_per_sm(k, block, shared_mem) * _sms()


def _launch(k, config: LaunchConfig, *args, stream: Any = None, backend: str = "auto") -> None:
    if config.cluster_size > PORTABLE_CLUSTER_SIZE:
        k.set_non_portable_cluster(True)  # occupancy queries for portable sizes may have cleared it
    launch(k, config, *args, stream=stream, backend=backend)


# ---------------------------------------------------------------------------------------------
# 1. Cooperative groups.


def block_sums(x, block: int = 256):
    """One sum per ``block`` consecutive elements of ``x`` (int32 or float32, CuPy), by the seed's block_sum."""
    dtype = np.dtype(x.dtype)
    names = {np.dtype(np.int32): "int32", np.dtype(np.float32): "float32"}
    if dtype not in names:
        raise ValueError(f"block_sums takes int32 or float32, got {dtype}")
    if not 1 <= block <= 1024:
        raise LaunchConfigError(f"block of {block} threads is outside [1, 1024]")
    import cupy as cp

    n = x.size
    grid = max(1, -(-n // block))
    out = cp.full(grid, -7, dtype=dtype)  # poison: a block that writes nothing shows
    k = kernel(f"block_sums<{BLOCK_SUM_TYPES[names[dtype]]}>")
    _launch(k, LaunchConfig(grid=grid, block=block, shared_mem=block * dtype.itemsize), x, out, n)
    return out


def tile_sums(x, tile: int, block: int = 256):
    """Sums of ``tile`` consecutive int32 elements, by cg::reduce and by a shfl_down tree."""
    if tile not in TILE_SIZES:
        raise ValueError(f"tile must be one of {TILE_SIZES}, got {tile}")
    if block % tile:
        raise ValueError(f"block {block} must be a multiple of the tile {tile}")
    if np.dtype(x.dtype) != np.int32:
        raise ValueError(f"tile_sums takes int32, got {x.dtype}")
    import cupy as cp

    n = x.size
    grid = max(1, -(-n // block))
    by_reduce = cp.full(grid * block // tile, -7, dtype=cp.int32)
    by_shuffle = cp.full(grid * block // tile, -7, dtype=cp.int32)
    _launch(kernel(f"tile_sums<{tile}>"), LaunchConfig(grid=grid, block=block), x, by_reduce, by_shuffle, n)
    return by_reduce, by_shuffle


def odd_sums(x, block: int = 256):
    """Per warp of 32 elements: the sum and the count of the odd values (coalesced groups)."""
    if np.dtype(x.dtype) != np.int32:
        raise ValueError(f"odd_sums takes int32, got {x.dtype}")
    if block % 32:
        raise ValueError(f"block {block} must be a multiple of the warp size 32")
    import cupy as cp

    n = x.size
    grid = max(1, -(-n // block))
    warps = grid * block // 32
    sums, counts = cp.zeros(warps, dtype=cp.int32), cp.zeros(warps, dtype=cp.int32)
    _launch(kernel("odd_sums"), LaunchConfig(grid=grid, block=block), x, sums, counts, n)
    return sums, counts


# ---------------------------------------------------------------------------------------------
# 2. Grid-wide sync.


def two_phase_reference(x: np.ndarray, rounds: int) -> np.ndarray:
    """Each round: x += sum(x), modulo 2^32."""
    x = x.astype(np.uint32).copy()
    for _ in range(rounds):
        x += np.uint32(x.sum(dtype=np.uint64) & 0xFFFFFFFF)
    return x


def two_phase(x, rounds: int = 1, *, mode: str = "grid_sync", grid: int | None = None, block: int = PHASE_BLOCK,
              stream: Any = None) -> None:
    """The seed's two-phase kernel on a uint32 CuPy array, in place: each round x += sum(x) (mod 2^32).

    mode 'grid_sync': one cooperative kernel, phase1; grid.sync(); phase2 per round (the grid must
    fit on the GPU at once: LaunchConfigError names the maximum); 'two_kernels': two launches per
    round. grid: blocks (default the co-resident maximum).
    """
    if np.dtype(x.dtype) != np.uint32:
        raise ValueError(f"two_phase works on uint32, got {x.dtype}")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    if mode not in ("grid_sync", "two_kernels"):
        raise ValueError(f"mode must be 'grid_sync' or 'two_kernels', got {mode!r}")
    import cupy as cp

    k = kernel("two_phase")
    smem = block * 4
    grid = grid or co_resident_max(k, block, smem)
    partials = cp.zeros(2 * grid, dtype=cp.uint32)
    enqueue_two_phase(x, partials, rounds, mode, grid, block, stream)


def enqueue_two_phase(x, partials, rounds: int, mode: str, grid: int, block: int, stream: Any = None,
                      backend: str = "auto") -> None:
    n = x.size
    smem = block * 4
    if mode == "grid_sync":
        _launch(kernel("two_phase"), LaunchConfig(grid=grid, block=block, shared_mem=smem, cooperative=True),
                x, partials, n, rounds, stream=stream, backend=backend)
    elif mode == "two_kernels":
        cfg = LaunchConfig(grid=grid, block=block, shared_mem=smem)
        p1, p2 = kernel("phase1"), kernel("phase2")
        halves = (partials.data.ptr, partials.data.ptr + 4 * grid)
        for r in range(rounds):
            launch(p1, cfg, x, halves[r & 1], n, stream=stream, backend=backend)
            launch(p2, cfg, x, halves[r & 1], n, stream=stream, backend=backend)
    else:
        raise ValueError(f"mode must be 'grid_sync' or 'two_kernels', got {mode!r}")


class CapturedGraph:
    """Work enqueued by ``enqueue(stream)`` captured once into a CUDA graph on a stream of its own,
    replayed by ``launch()`` (capture and instantiation: cuadv.graphs.Graph)."""

    def __init__(self, enqueue: Callable[[int], None]):
        from ..graphs import Graph

        drv = driver()
        self.stream = check(drv.cuStreamCreate(int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate")
        self.graph = Graph.capture(self.handle, lambda: enqueue(self.handle))

    @property
    def handle(self) -> int:
        return int(self.stream)

    def launch(self) -> None:
        self.graph.launch(self.handle)

    def __del__(self):
        try:
            self.graph.close()
            driver().cuStreamDestroy(self.stream)
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# 3. Clusters.


def cluster_ring(cluster: int | None, grid: int, fixed: bool = False) -> np.ndarray:
    """Launch the DSM ring: per block (rank, cluster size, the next block's index read through DSM).

    fixed: the kernel with __cluster_dims__(2, 1, 1) (then give cluster=None)."""
    from ..device import current_device

    current_device().caps.require("thread block clusters", 9, 0, "no cluster: blocks exchange data through global "
                                  "memory (two_phase)")
    import cupy as cp

    k = kernel("cluster_ring_fixed" if fixed else "cluster_ring")
    out = cp.full(3 * grid, -1, dtype=cp.int32)
    _launch(k, LaunchConfig(grid=grid, block=RING_BLOCK, cluster=cluster), out)
    return cp.asnumpy(out).reshape(grid, 3)


def ring_expected(grid: int, cluster: int) -> np.ndarray:
    b = np.arange(grid)
    rank = b % cluster
    return np.stack([rank, np.full(grid, cluster), b - rank + (rank + 1) % cluster], axis=1)


def cluster_occupancy(k, block: int, shared_mem: int = 0, sizes: Sequence[int] = range(1, 17)) -> list[list]:
    """Rows (cluster size, active clusters, resident blocks) from cuOccupancyMaxActiveClusters."""
    from ..occupancy import max_active_clusters

    return [[c, (a := max_active_clusters(k, block, c, shared_mem)), a * c] for c in sizes]


# ---------------------------------------------------------------------------------------------
# Validation (shared by run, smoke and the GPU tests).


def validate_groups(cp, n: int = 100_003) -> list[str]:
    rng = np.random.default_rng()
    for dtype in (np.int32, np.float32):
        host = rng.integers(-1000, 1001, size=n).astype(dtype)  # integer values: float sums are exact
        for block in (32, 96, 128, 1000, 1024):
            got = cp.asnumpy(block_sums(cp.asarray(host), block))
            padded = np.zeros(-(-n // block) * block, dtype=np.int64)
            padded[:n] = host
            want = padded.reshape(-1, block).sum(axis=1)
            if not np.array_equal(got.astype(np.int64), want):
                raise ValidationError(f"block_sum {np.dtype(dtype)} block {block} differs from NumPy")
    host = rng.integers(-1000, 1001, size=n).astype(np.int32)
    for tile in TILE_SIZES:
        by_reduce, by_shuffle = (cp.asnumpy(a) for a in tile_sums(cp.asarray(host), tile))
        padded = np.zeros(by_reduce.size * tile, dtype=np.int64)
        padded[:n] = host
        want = padded.reshape(-1, tile).sum(axis=1)
        if not (np.array_equal(by_reduce, want) and np.array_equal(by_shuffle, want)):
            raise ValidationError(f"tile_sums<{tile}> differs from NumPy")
    sums, counts = (cp.asnumpy(a) for a in odd_sums(cp.asarray(host)))
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
                    if not np.array_equal(cp.asnumpy(x), want):
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
    title = "Cooperative groups, grid-wide sync and clusters (seed 002)"

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
        want = two_phase_reference(cp.asnumpy(x), 2)
        for mode in ("grid_sync", "two_kernels"):
            y = x.copy()
            two_phase(y, 2, mode=mode, grid=4)
            if not np.array_equal(cp.asnumpy(y), want):
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
            note="grid.sync(): (time of 2000 syncs - time of 0 syncs) / 2000 in one cooperative kernel; launches: "
                 "time of 2000 back-to-back launches / 2000; medians of CUDA-event timings"))
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
        if int(done.get()[0]) != iters:
            raise ValidationError("sync_loop did not finish its iterations")
        empty = kernel("empty")
        cfg1 = LaunchConfig(grid=1, block=32)

        def many(stream=None):
            for _ in range(iters):
                launch(empty, cfg1, stream=stream, backend="driver")

        t_py = time_gpu(many, repeats=3 if ctx.quick else 7)
        graph = CapturedGraph(lambda s: many(s))
        t_graph = time_gpu(graph.launch, stream=graph.handle, repeats=repeats)
        return SyncCosts(per_sync, t_py.median_ms * 1e3 / iters, t_graph.median_ms * 1e3 / iters)

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
                times[mode] = t.median_ms
            graph = CapturedGraph(lambda s: enqueue_two_phase(x, partials, rounds, "two_kernels", grid, PHASE_BLOCK,
                                                              stream=s, backend="driver"))
            times["two kernels, CUDA graph"] = time_gpu(graph.launch, stream=graph.handle,
                                                        repeats=3 if ctx.quick else 7).median_ms
            base = times["grid_sync"]
            for label, ms in (("grid.sync() (cooperative launch)", times["grid_sync"]),
                              ("two kernels, launched from Python", times["two_kernels"]),
                              ("two kernels, CUDA graph", times["two kernels, CUDA graph"])):
                rows.append([f"{n * 4 / 2**20:.0f} MiB", label, ms * 1e3 / rounds, ms / base])
                if per_thread == 4:
                    first[label] = ms * 1e3 / rounds
                result.figures[f"two_phase_{per_thread}pt_{label.split(' (')[0].replace(' ', '_')}_us_per_round"] = (
                    ms * 1e3 / rounds)
            del x
        result.tables.append(Table(
            f"Two-phase kernel (seed 002): phase 1; grid-wide order; phase 2 — {grid} blocks x {PHASE_BLOCK} threads",
            ["data", "how phase 2 waits for phase 1", "us per round", "x grid.sync()"], rows,
            note=f"{rounds} rounds per timing (x += sum(x) mod 2^32), same phase code in every version; the grid is "
                 "the co-resident maximum (the largest a cooperative launch accepts); outputs validated separately"))
        return first

    def _occupancy_tables(self, result: LabResult, ctx) -> None:
        from ..occupancy import max_cluster_size

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
