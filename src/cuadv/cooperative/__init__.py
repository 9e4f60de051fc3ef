"""Cooperative groups, grid-wide sync, thread block clusters and distributed shared memory.

What users call:

- ``block_sum(x, block=256, total=False)`` / ``prepare_block_sum``: the cooperative-groups block
  reduction (``cuadv::groups::block_sum`` in ``<cuadv/groups.cuh>``) over a 1-D int32 or float32
  device array: one sum per ``block`` consecutive elements, or (``total=True``) the sum of all,
  by the same kernel applied again to its partial sums. Output in the input's library.
- ``grid_sync_launch(kernel, block, *args, grid=None)``: a user kernel that calls ``grid.sync()``,
  launched cooperatively after the grid is checked against ``max_cooperative_grid(kernel, block)``
  (the error names the maximum and the fallback: the same phases as two launches).
  ``two_phase(x, rounds, mode='grid_sync' | 'two_kernels')`` / ``prepare_two_phase``: the classic
  two-phase kernel (x += sum(x) mod 2^32 per round) both ways, the pattern's worked example.
- ``largest_cluster``, ``active_clusters``, ``cluster_config`` and ``cluster_launch``: cluster
  occupancy queries and a launch whose cluster shape (run-time ``cluster=`` or the kernel's
  compile-time ``__cluster_dims__``, never both) is checked before launch.
- Device code for user kernels: ``<cuadv/groups.cuh>`` (block, tile and coalesced-group reductions,
  warp-aggregated atomics) and ``<cuadv/dsm.cuh>`` (map_shared_rank, remote loads/stores/atomics,
  the split cluster barrier, the four DSM lifetime rules).

Needs: cooperative launch for grid sync; compute capability 9.0 for clusters and DSM. Without them
the functions raise ``UnsupportedFeatureError`` naming the fallback (two kernel launches; no cluster).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from ..dims import PORTABLE_CLUSTER_SIZE, Dim3, as_dim3, volume
from ..errors import KernelArgumentError, LaunchConfigError
from ..features import require
from ..interop import data_ptr, device_array, empty, overlaps, stream_handle, writable, zeros
from ..kernel import Kernel, max_active_blocks_per_sm, max_active_clusters, max_cluster_size
from ..launching import LaunchConfig, check_block, launch, prepare
from ..memo import BoundedMemo
from ..waiting import wait

__all__ = [
    "BlockSum", "TwoPhase", "active_clusters", "block_sum", "cluster_config", "cluster_launch",
    "grid_sync_launch", "largest_cluster", "max_cooperative_grid", "prepare_block_sum", "prepare_two_phase",
    "two_phase", "two_phase_reference",
]

TILE_SIZES = (4, 8, 16, 32)
BLOCK_SUM_TYPES = {"int32": "int", "float32": "float"}
RING_BLOCK = 128
PHASE_BLOCK = 256
MAX_ELEMENTS = 2**32 - 1  # block_sums<T> counts elements in an unsigned 32-bit n

TWO_KERNELS_FALLBACK = "split the kernel at grid.sync() into two launches (mode='two_kernels': no cap on the grid)"
NO_CLUSTER_FALLBACK = "launch without a cluster (blocks exchange data through global memory)"


# ---------------------------------------------------------------------------------------------
# The shipped kernels (cooperative.cu), built once per target.


def kernel_expressions() -> list[str]:
    return [f"block_sums<{t}>" for t in BLOCK_SUM_TYPES.values()] + [f"tile_sums<{t}>" for t in TILE_SIZES]


def build_module(arch: str):
    """cooperative.cu for ``arch`` (no GPU needed): the one cached build shared by the op and the lab."""
    from ..compiler import shipped

    return shipped("cooperative.cu", arch=arch, name_expressions=kernel_expressions(), name="cooperative")


@lru_cache(maxsize=None)
def kernel(name: str) -> Kernel:
    """A kernel of cooperative.cu on the current GPU (loaded once)."""
    from ..device import current_device

    return build_module(current_device().caps.arch).kernel(name)


def _caps():
    from ..device import current_device

    return current_device().caps


def _sms() -> int:
    return _caps().sm_count


def _launch(k: Kernel, config: LaunchConfig, *args, stream: Any = None, backend: str = "auto") -> None:
    if config.cluster_size > PORTABLE_CLUSTER_SIZE:
        k.set_non_portable_cluster(True)  # occupancy queries for portable sizes may have cleared it
    launch(k, config, *args, stream=stream, backend=backend)


# ---------------------------------------------------------------------------------------------
# Input checks shared by the ops (all before anything is launched).


def _vector(x: Any, name: str, dtypes: Sequence[str], stream: int | None, dtype_error: type = TypeError):
    """The DeviceArray of a 1-D contiguous device array of one of ``dtypes`` (KernelArgumentError /
    ``dtype_error`` / ValueError naming the argument otherwise). ``stream``: where the data will be used (its
    producer is ordered before it); None only checks."""
    if isinstance(x, np.ndarray):
        raise KernelArgumentError(f"{name}: a NumPy array lives in host memory; copy it to the GPU (cupy.asarray "
                                  "or torch.as_tensor(..., device='cuda'))")
    arr = device_array(x, stream=stream)
    if arr.type_name not in dtypes:
        raise dtype_error(f"{name} must be {' or '.join(dtypes)}, got {arr.type_name}")
    if len(arr.shape) != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if not arr.contiguous:
        raise ValueError(f"{name} must be contiguous, got byte strides {arr.strides} for shape {arr.shape}")
    return arr


def _check_block(block: int) -> None:
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)):
        raise TypeError(f"block must be an int number of threads, got {type(block).__name__} {block!r}")
    if not 1 <= int(block) <= 1024:
        raise LaunchConfigError(f"block of {block} threads is outside [1, 1024]")


def _check_kernel(kernel: Any) -> None:
    if not isinstance(kernel, Kernel):
        raise KernelArgumentError(f"kernel must be a cuadv Kernel (CompiledModule.kernel(name)), got "
                                  f"{type(kernel).__name__}")


def _check_occupancy_query(kernel: Any, block: Any, shared_mem: int, cluster: Any = None) -> None:
    """An occupancy query's inputs: the kernel, the pure limits of a block, its shared memory and cluster (as a
    LaunchConfig checks them), then what this kernel allows a block on this GPU, before the driver is asked."""
    _check_kernel(kernel)
    LaunchConfig(grid=1 if cluster is None else cluster, block=block, shared_mem=shared_mem, cluster=cluster)
    check_block(kernel, block, shared_mem, _caps())


# ---------------------------------------------------------------------------------------------
# 1. Cooperative groups: block_sum.


def _blocks(n: int, block: int) -> int:
    return -(-n // block)


@dataclass
class BlockSum:
    """A checked block_sum for arrays of ``size`` elements of ``dtype``: calling it launches.

    ``block``: threads per block, which is also how many consecutive elements each sum covers.
    ``total``: False gives ceil(size / block) partial sums; True reduces the partial sums again
    with the same kernel (ping-pong between the two halves of a scratch vector kept here) until one
    remains, and gives it as a 1-element array; it needs ``block`` >= 2. The scratch vector is made on
    first use, in the library of the first input (one call at a time, on one stream at a time: it belongs to
    this object, and calls on two streams may overlap on the GPU).
    """

    size: int
    dtype: np.dtype
    block: int = 256
    total: bool = False

    def __post_init__(self):
        self.dtype = np.dtype(self.dtype)
        if self.dtype.name not in BLOCK_SUM_TYPES:
            raise TypeError(f"block_sum takes int32 or float32, got {self.dtype}")
        _check_block(self.block)
        if not isinstance(self.total, (bool, np.bool_)):
            raise TypeError(f"total must be True or False, got {self.total!r}")
        self.total = bool(self.total)
        if self.total and self.block < 2:  # one element per sum would never reduce to one sum
            raise LaunchConfigError(f"total=True needs block >= 2 (each pass sums block elements into one), got "
                                    f"block={self.block}")
        if not 0 <= self.size <= MAX_ELEMENTS:
            raise ValueError(f"block_sum takes at most {MAX_ELEMENTS} elements (a 32-bit count), got {self.size}")
        padded = _blocks(self.size, self.block) * self.block  # block_sums<T> indexes its threads in 32 bits
        if padded > MAX_ELEMENTS + 1:  # the last block's top thread indices would wrap to elements of other blocks
            raise ValueError(f"block_sum of {self.size} elements with block={self.block}: the last block's thread "
                             f"indices reach {padded - 1}, past the 32-bit index limit {MAX_ELEMENTS}; use a power "
                             f"of two for block, or at most {(MAX_ELEMENTS + 1) // self.block * self.block} elements")
        self.kernel = kernel(f"block_sums<{BLOCK_SUM_TYPES[self.dtype.name]}>")
        self.launches = self._launch_sizes()  # elements read by each launch (each writes ceil(n / block))
        self.out_size = 1 if self.total else _blocks(self.size, self.block)
        key = (self.kernel, tuple(self.launches), self.block)
        self._launchers = _BLOCK_SUM_LAUNCHERS.get(key) or _BLOCK_SUM_LAUNCHERS.put(key, tuple(
            prepare(self.kernel, LaunchConfig(grid=_blocks(n, self.block), block=self.block,
                                              shared_mem=self.block * self.dtype.itemsize)) for n in self.launches))
        self._scratch: Any = None

    def _launch_sizes(self) -> list[int]:
        if self.size == 0:
            return []
        sizes = [self.size]
        while self.total and _blocks(sizes[-1], self.block) > 1:
            sizes.append(_blocks(sizes[-1], self.block))
        return sizes

    def __call__(self, x: Any, *, out: Any = None, stream: Any = None) -> Any:
        handle = stream_handle(stream, x)
        arr = _vector(x, "x", (self.dtype.name,), handle)
        if arr.size != self.size:
            raise ValueError(f"x has {arr.size} elements; this BlockSum was prepared for {self.size}")
        if out is None:
            make = zeros if self.size == 0 else empty
            out = make(arr.library, (self.out_size,), self.dtype, like=x, stream=handle)
            out_ptr = data_ptr(out)
        else:
            o = writable(_vector(out, "out", (self.dtype.name,), handle), "out")
            if o.size != self.out_size:
                want = "1 (total=True)" if self.total else f"ceil({self.size} / {self.block}) = {self.out_size}"
                raise ValueError(f"out must have {want} elements, got {o.size}")
            if overlaps(o, arr):
                raise ValueError(f"out (at {o.ptr:#x}) overlaps x (at {arr.ptr:#x}): blocks would overwrite elements "
                                 "other blocks still read; pass a separate out, or out=None for a new array")
            out_ptr = o.ptr
            if self.size == 0 and o.nbytes:  # the sum of nothing is 0 (no launch reads x)
                from .._cuda import check, driver

                check(driver().cuMemsetD8Async(o.ptr, 0, o.nbytes, handle), "cuMemsetD8Async")
        src = arr.ptr
        last = len(self._launchers) - 1
        for i, (run, n) in enumerate(zip(self._launchers, self.launches)):
            dst = out_ptr if i == last else self._scratch_ptr(i % 2, arr.library, x, handle)
            run(src, dst, np.uint32(n), stream=handle)
            src = dst
        return out

    def _scratch_ptr(self, which: int, library: str, like: Any, handle: int) -> int:
        """Where launch i (not the last) writes its ceil(launches[i] / block) sums: half i % 2 of one scratch
        vector, the halves as long as launches 1 and 2 read."""
        sizes = (self.launches[1:3] + [1])[:2]
        if self._scratch is None:
            self._scratch = empty(library, (sum(sizes),), self.dtype, like=like, stream=handle)
        return data_ptr(self._scratch) + which * sizes[0] * self.dtype.itemsize


_BLOCK_SUM_LAUNCHERS = BoundedMemo(256)  # (kernel, elements each launch reads, block) -> their checked launchers


def prepare_block_sum(x: Any, block: int = 256, *, total: bool = False) -> BlockSum:
    """Check ``x`` (1-D int32/float32 device array) and build the kernel once; the returned BlockSum
    takes any array of the same size and dtype: ``sums = bs(x, out=None, stream=None)``."""
    arr = _vector(x, "x", tuple(BLOCK_SUM_TYPES), None)  # checks only: the call orders the data on its stream
    return BlockSum(arr.size, arr.dtype, block, total)


def block_sum(x: Any, block: int = 256, *, total: bool = False, out: Any = None, stream: Any = None) -> Any:
    """Sums of ``block`` consecutive elements of ``x`` by ``cuadv::groups::block_sum`` over a
    ``cg::thread_block`` (one block of ``block`` threads per sum; the last block zero-padded).

    Returns ceil(n / block) sums (n = 0: an empty array), or with ``total=True`` a 1-element array
    holding the sum of all of ``x`` (n = 0: [0]). int32 sums wrap modulo 2^32 (as
    ``x.sum(dtype=np.int32)``); float32 sums use a fixed tree order (deterministic, not NumPy's order).
    Output in the input's library (torch in, torch out; otherwise CuPy), on ``stream`` (None: the
    input library's current stream).
    """
    return prepare_block_sum(x, block, total=total)(x, out=out, stream=stream)


# Experiment kernels of the lab (the tile and coalesced-group helpers of groups.cuh), CuPy arrays.


def block_sums(x, block: int = 256):
    """One sum per ``block`` consecutive elements of ``x`` (int32 or float32, CuPy), by the classic
    cooperative-groups block_sum."""
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


def max_cooperative_grid(kernel: Kernel, block: Dim3 | int | Sequence[int], shared_mem: int = 0) -> int:
    """The largest grid (in blocks) a cooperative launch of ``kernel`` accepts on this GPU now: blocks
    per SM at this block size and dynamic shared memory (the occupancy API) times the SM count. MIG
    or other processes can lower it; every cooperative launch is checked against it."""
    _check_occupancy_query(kernel, block, shared_mem)
    return max_active_blocks_per_sm(kernel, block, shared_mem) * _sms()


def co_resident_max(k, block: int, shared_mem: int = 0) -> int:
    """Blocks of this kernel that fit on the whole GPU at once: the largest cooperative grid."""
    return max_cooperative_grid(k, block, shared_mem)


def _cooperative_config(kernel: Kernel, block, grid: int | None, shared_mem: int) -> LaunchConfig:
    _check_kernel(kernel)
    LaunchConfig(grid=1 if grid is None else grid, block=block, shared_mem=shared_mem)  # pure limits, before the GPU
    caps = _caps()
    require("cooperative_launch", caps.as_dict(), name="cooperative launch (grid.sync())",
            fallback=TWO_KERNELS_FALLBACK)
    top = max_cooperative_grid(kernel, block, shared_mem)
    if top == 0:  # the kernel's registers or shared memory leave no room for one such block on an SM
        raise LaunchConfigError(
            f"no block of {kernel.name} with {volume(as_dim3(block))} threads and "
            f"{shared_mem + kernel.static_shared_bytes} B shared memory fits on an SM (occupancy 0), so no "
            f"cooperative grid can run; use a smaller block or less shared memory")
    blocks = top if grid is None else volume(as_dim3(grid))
    if blocks > top:
        raise LaunchConfigError(
            f"cooperative grid of {blocks} blocks exceeds the co-resident maximum {top} ({caps.sm_count} SMs, "
            f"{volume(as_dim3(block))} threads and {shared_mem + kernel.static_shared_bytes} B shared memory per "
            f"block); fallback: {TWO_KERNELS_FALLBACK}")
    return LaunchConfig(grid=top if grid is None else grid, block=block, shared_mem=shared_mem, cooperative=True)


def grid_sync_launch(kernel: Kernel, block: Dim3 | int | Sequence[int], *args: Any, grid: Any = None,
                     shared_mem: int = 0, stream: Any = None) -> LaunchConfig:
    """Launch a kernel that calls ``cg::this_grid().sync()`` as a cooperative launch.

    ``grid=None`` takes the co-resident maximum (``max_cooperative_grid``); a larger grid raises
    LaunchConfigError naming the maximum before anything is launched (a grid.sync() in a grid
    that does not fit would deadlock). Without cooperative launch: UnsupportedFeatureError naming
    the fallback, two launches split at the barrier (what ``two_phase(mode='two_kernels')`` does).
    Returns the checked LaunchConfig (reuse it with ``cuadv.launch`` for repeated launches).
    """
    config = _cooperative_config(kernel, block, grid, shared_mem)
    launch(kernel, config, *args, stream=stream)
    return config


def two_phase_reference(x: np.ndarray, rounds: int) -> np.ndarray:
    """Each round: x += sum(x), modulo 2^32."""
    x = x.astype(np.uint32).copy()
    for _ in range(rounds):
        x += np.uint32(x.sum(dtype=np.uint64) & 0xFFFFFFFF)
    return x


MODES = ("grid_sync", "two_kernels")


def _check_rounds(rounds: Any) -> None:
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)):
        raise TypeError(f"rounds must be an int, got {type(rounds).__name__} {rounds!r}")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")


def _check_two_phase(x, rounds: int, mode: str) -> None:
    dtype = getattr(x, "dtype", None)
    if dtype is None:  # only the CUDA Array Interface or DLPack
        dtype = device_array(x).type_name
    try:
        is_u32 = np.dtype(dtype) == np.uint32
    except TypeError:  # a torch dtype
        is_u32 = str(dtype) == "torch.uint32"
    if not is_u32:
        raise ValueError(f"two_phase works on uint32, got {dtype}")
    _check_rounds(rounds)
    if mode not in MODES:
        raise ValueError(f"mode must be 'grid_sync' or 'two_kernels', got {mode!r}")


def enqueue_two_phase(x, partials, rounds: int, mode: str, grid: int, block: int, stream: Any = None,
                      backend: str = "auto") -> None:
    n = device_array(x).size  # torch's .size is a method
    smem = block * 4
    if mode == "grid_sync":
        _launch(kernel("two_phase"), LaunchConfig(grid=grid, block=block, shared_mem=smem, cooperative=True),
                x, partials, n, rounds, stream=stream, backend=backend)
    elif mode == "two_kernels":
        cfg = LaunchConfig(grid=grid, block=block, shared_mem=smem)
        p1, p2 = kernel("phase1"), kernel("phase2")
        base = device_array(partials).ptr
        halves = (base, base + 4 * grid)
        for r in range(rounds):
            launch(p1, cfg, x, halves[r & 1], n, stream=stream, backend=backend)
            launch(p2, cfg, x, halves[r & 1], n, stream=stream, backend=backend)
    else:
        raise ValueError(f"mode must be 'grid_sync' or 'two_kernels', got {mode!r}")


def two_phase(x, rounds: int = 1, *, mode: str = "grid_sync", grid: int | None = None, block: int = PHASE_BLOCK,
              stream: Any = None) -> None:
    """The two-phase kernel (phase 1, grid.sync(), phase 2) on a uint32 device array, in place: each
    round x += sum(x) (mod 2^32).

    mode 'grid_sync': one cooperative kernel, phase1; grid.sync(); phase2 per round (the grid must
    fit on the GPU at once: LaunchConfigError names the maximum); 'two_kernels': two launches per
    round. grid: blocks (default the co-resident maximum).
    """
    prepare_two_phase(x, rounds, mode=mode, grid=grid, block=block)(x, stream=stream)  # every check, then one run


@dataclass
class TwoPhase:
    """``two_phase`` checked once for arrays of ``size`` uint32 elements: the grid, the launch
    configurations and the partial-sum buffer are kept (one stream at a time: calls on two streams may overlap
    on the GPU and would share it). ``tp(x, stream=None)`` runs ``rounds`` rounds."""

    size: int
    rounds: int = 1
    mode: str = "grid_sync"
    grid: int | None = None
    block: int = PHASE_BLOCK

    def __post_init__(self):
        _check_rounds(self.rounds)
        if self.mode not in MODES:
            raise ValueError(f"mode must be 'grid_sync' or 'two_kernels', got {self.mode!r}")
        _check_block(self.block)
        smem = self.block * 4
        LaunchConfig(grid=1 if self.grid is None else self.grid, block=self.block, shared_mem=smem)  # before the GPU
        if self.mode == "grid_sync":
            self.config = _cooperative_config(kernel("two_phase"), self.block, self.grid, smem)
            prepare(kernel("two_phase"), self.config)
        else:
            top = max_cooperative_grid(kernel("two_phase"), self.block, smem)
            self.config = LaunchConfig(grid=top if self.grid is None else self.grid, block=self.block, shared_mem=smem)
            prepare(kernel("phase1"), self.config), prepare(kernel("phase2"), self.config)
        self.grid = self.config.grid_blocks
        self._partials = None

    def __call__(self, x: Any, *, stream: Any = None) -> Any:
        handle = stream_handle(stream, x)
        arr = _vector(x, "x", ("uint32",), handle, ValueError)  # ValueError, as two_phase's check (docs)
        if arr.size != self.size:
            raise ValueError(f"x has {arr.size} elements; this TwoPhase was prepared for {self.size}")
        if self._partials is None:
            self._partials = zeros(arr.library, (2 * self.grid,), np.uint32, like=x, stream=handle)
        enqueue_two_phase(x, self._partials, self.rounds, self.mode, self.grid, self.block, handle)
        return x


def prepare_two_phase(x: Any, rounds: int = 1, *, mode: str = "grid_sync", grid: int | None = None,
                      block: int = PHASE_BLOCK) -> TwoPhase:
    """Check ``x`` and the launch (co-residency for 'grid_sync') once; the TwoPhase runs it."""
    _check_two_phase(x, rounds, mode)
    arr = _vector(x, "x", ("uint32",), None)  # checks only: the call orders the data on its own stream
    return TwoPhase(arr.size, rounds, mode, grid, block)


# ---------------------------------------------------------------------------------------------
# 3. Clusters.


def largest_cluster(kernel: Kernel, block: Dim3 | int | Sequence[int], shared_mem: int = 0,
                    non_portable: bool = False) -> int:
    """The largest cluster (blocks) ``kernel`` can be launched with at this block size and dynamic
    shared memory (cuOccupancyMaxPotentialClusterSize); portable sizes (<= 8) unless ``non_portable``.
    UnsupportedFeatureError (fallback: no cluster) on a GPU without clusters."""
    require("cluster_launch", _caps().as_dict(), name="thread block clusters", fallback=NO_CLUSTER_FALLBACK)
    _check_occupancy_query(kernel, block, shared_mem)
    return max_cluster_size(kernel, block, shared_mem, non_portable=non_portable)


def active_clusters(kernel: Kernel, block: Dim3 | int | Sequence[int], cluster: Dim3 | int | Sequence[int],
                    shared_mem: int = 0) -> int:
    """How many clusters of this shape can run at once on the whole GPU (cuOccupancyMaxActiveClusters);
    times the cluster size, the blocks of a persistent cluster grid."""
    c = as_dim3(cluster)
    if min(c) < 1:
        raise LaunchConfigError(f"cluster dimensions must be >= 1, got {c}")
    require("cluster_launch", _caps().as_dict(), name="thread block clusters", fallback=NO_CLUSTER_FALLBACK)
    _check_occupancy_query(kernel, block, shared_mem, c)
    return max_active_clusters(kernel, block, c, shared_mem)


def cluster_config(kernel: Kernel, grid: Any, block: Any, cluster: Any = None, shared_mem: int = 0) -> LaunchConfig:
    """A LaunchConfig with a cluster, checked against the GPU and the kernel now (no launch).

    ``cluster``: the run-time cluster shape, or None for a kernel compiled with ``__cluster_dims__``
    (giving both is refused: the compile-time shape wins in CUDA, so a run-time one would be ignored).
    Refused before launch: no cluster support (UnsupportedFeatureError, fallback: no cluster), a shape
    that does not divide the grid, one larger than ``largest_cluster(..., non_portable=True)`` for this kernel
    (sizes above 8 need no opt-in: the kernel's non-portable attribute is set where it fits).
    """
    _check_kernel(kernel)
    if cluster is None and kernel.compile_time_cluster is None:
        raise LaunchConfigError(f"kernel {kernel.name} declares no __cluster_dims__; give a run-time cluster")
    config = LaunchConfig(grid=grid, block=block, cluster=cluster, shared_mem=shared_mem)
    prepare(kernel, config)  # the device checks: feature, compile-time vs run-time, divisibility, largest size
    return config


def cluster_launch(kernel: Kernel, grid: Any, block: Any, *args: Any, cluster: Any = None, shared_mem: int = 0,
                   stream: Any = None) -> LaunchConfig:
    """Launch ``kernel`` with thread block clusters after ``cluster_config``'s checks; returns the config."""
    config = cluster_config(kernel, grid, block, cluster, shared_mem)
    _launch(kernel, config, *args, stream=stream)
    return config


def cluster_ring(cluster: int | None, grid: int, fixed: bool = False) -> np.ndarray:
    """Launch the DSM ring: per block (rank, cluster size, the next block's index read through DSM).

    fixed: the kernel with __cluster_dims__(2, 1, 1) (then give cluster=None)."""
    require("cluster_launch", _caps().as_dict(), name="thread block clusters",
            fallback="no cluster: blocks exchange data through global memory (two_phase)")
    import cupy as cp

    k = kernel("cluster_ring_fixed" if fixed else "cluster_ring")
    out = cp.full(3 * grid, -1, dtype=cp.int32)
    _launch(k, LaunchConfig(grid=grid, block=RING_BLOCK, cluster=cluster), out)
    wait(None, what=f"the DSM ring kernel ({k.name})")  # bounded: the copy below would wait without a bound
    return cp.asnumpy(out).reshape(grid, 3)


def ring_expected(grid: int, cluster: int) -> np.ndarray:
    b = np.arange(grid)
    rank = b % cluster
    return np.stack([rank, np.full(grid, cluster), b - rank + (rank + 1) % cluster], axis=1)


def cluster_occupancy(k, block: int, shared_mem: int = 0, sizes: Sequence[int] = range(1, 17)) -> list[list]:
    """Rows (cluster size, active clusters, resident blocks) from cuOccupancyMaxActiveClusters."""
    return [[c, (a := max_active_clusters(k, block, c, shared_mem)), a * c] for c in sizes]
