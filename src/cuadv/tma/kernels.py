"""The kernels of tma.cu for one target, with every check a launch needs made before anything is launched.

``TmaOps`` is the engine under ``cuadv.tma.copy`` / ``transpose`` and the lab's measurements: each
``*_launch`` method checks the arrays (``Plan2D``: every tensor-map rule), the box and the ring configuration
(``TmaCopyConfig``: pure checks in its constructor), then sizes the grid (persistent, from the kernel's
occupancy, or one block per unit) and returns (kernel, launch configuration, parameter struct);
``prepare_*`` wraps that into a zero-argument launcher. Method 'tma' moves boxes with the Tensor Memory
Accelerator; method 'threads' moves the same tiles with 256 threads and 16-byte loads (the baseline the lab
compares against).

Needs compute capability 9.0 to run; building for a named target (``TmaOps(arch="sm_90a")``) needs no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ..compiler import CompiledModule, shipped
from ..device import current_device
from ..dims import is_int
from ..errors import LaunchConfigError
from ..kernel import Kernel, max_active_blocks_per_sm
from ..launching import LaunchConfig, launch
from .params import ThreadTileParams, TmaTileParams
from .tensormap import L2_PROMOTIONS, TensorMap, TiledLayout, describe_array

MAX_STAGES = 32        # ring slots of tma_copy (kMaxStages)
MAX_READING = 8        # stages - lookahead: stores that may still read their slots (bulk_wait_group_read_dynamic)
MAX_CHUNK = 1024       # side-by-side tiles a block takes at a time (any positive value works; this bounds typos)
MAX_EXTENT = 2**31     # rows and columns: the kernels' TMA coordinates (x = tile * box_w) are 32-bit signed ints
COPY_THREADS, TILE_THREADS = 32, 256
GEMV_VECTORS_PER_BLOCK = (1, 8)  # gemv_tma<Multicast, VB> instantiations built with the module (the lab uses them)
EVICT_FIRST = {"none": 0, "loads": 1, "stores": 2, "both": 3}  # cache_hints bits of TmaTileParams
ELEMENT_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int"}


def kernel_expressions() -> list[str]:
    exprs = [f"tma_transpose<{t}>" for t in ELEMENT_TYPES.values()]
    exprs += [f"thread_transpose<{t}>" for t in ELEMENT_TYPES.values()]
    exprs += [f"gemv_tma<{'true' if mc else 'false'}, {vb}>" for mc in (False, True) for vb in GEMV_VECTORS_PER_BLOCK]
    return exprs


def build_module(arch: str | None = None) -> CompiledModule:
    """tma.cu for ``arch`` (default: the current GPU's), built once per process and cached on disk."""
    return shipped("tma.cu", arch=arch, name_expressions=kernel_expressions(), name="tma")


def _round128(nbytes: int) -> int:
    return -(-nbytes // 128) * 128


@dataclass(frozen=True)
class TmaCopyConfig:
    """How tma_copy streams its boxes (one issuing thread per block).

    stages: ring slots per block (2 to MAX_STAGES); lookahead: loads in flight ahead of the box being stored
    (1 to stages; default stages - 1), so ``stages - lookahead`` stores may still be reading their slots when the
    thread issues a load (at most MAX_READING); blocks_per_sm: resident blocks per SM (None: as many as fit), the
    grid is that many per SM; chunk: side-by-side tiles of a row that a block takes at a time (1: the blocks
    interleave tile by tile); burst: loads are issued once this many are due (1 to lookahead; equal to chunk, with
    lookahead a multiple of it, a chunk's boxes leave together: one long run per row); l2_promotion: the tensor
    maps' L2 fill granularity; evict_first: which TMA operations carry an L2 evict-first policy ('none', 'loads',
    'stores', 'both'); persistent: True, a grid of blocks_per_sm blocks per SM, each walking its share of the
    units through its ring; False, one block per unit of ``chunk`` boxes (the hardware hands the blocks to
    whichever SM has room, so an SM that streams faster takes more: no static share ends last). Pure checks
    here; whether the blocks fit is checked against the device when a copy is prepared (TmaOps.prepare_copy).
    """

    stages: int = 4
    lookahead: int | None = None
    blocks_per_sm: int | None = None
    chunk: int = 1
    l2_promotion: str = "128B"
    evict_first: str = "none"
    burst: int = 1
    persistent: bool = True

    def __post_init__(self):
        for name in ("stages", "lookahead", "blocks_per_sm", "chunk", "burst"):
            value = getattr(self, name)  # packed as 32-bit ints: 2.5 would become 2 with no word
            if value is not None and not is_int(value):
                raise LaunchConfigError(f"tma copy: {name} must be an integer; got {value!r}")
        if not 2 <= self.stages <= MAX_STAGES:
            raise LaunchConfigError(f"tma copy: stages must be 2 to {MAX_STAGES}; got {self.stages}")
        if self.lookahead is None:
            object.__setattr__(self, "lookahead", self.stages - 1)
        if not 1 <= self.lookahead <= self.stages:
            raise LaunchConfigError(f"tma copy: lookahead must be 1 to stages ({self.stages}); got {self.lookahead}")
        if self.reading > MAX_READING:
            raise LaunchConfigError(
                f"tma copy: stages - lookahead (stores still reading their slots) must be at most {MAX_READING}; "
                f"got {self.reading} (stages {self.stages}, lookahead {self.lookahead})")
        if self.blocks_per_sm is not None and self.blocks_per_sm < 1:
            raise LaunchConfigError(f"tma copy: blocks_per_sm must be >= 1 (or None: as many as fit); got "
                                    f"{self.blocks_per_sm}")
        if not self.persistent and self.blocks_per_sm is not None:
            raise LaunchConfigError("tma copy: blocks_per_sm sizes a persistent grid; with persistent=False the grid "
                                    "is one block per unit (leave blocks_per_sm None)")
        if not 1 <= self.chunk <= MAX_CHUNK:
            raise LaunchConfigError(f"tma copy: chunk must be 1 to {MAX_CHUNK} tiles; got {self.chunk}")
        if not 1 <= self.burst <= self.lookahead:
            raise LaunchConfigError(f"tma copy: burst must be 1 to lookahead ({self.lookahead}) loads; got "
                                    f"{self.burst}")
        if self.l2_promotion not in L2_PROMOTIONS:
            raise LaunchConfigError(f"tma copy: l2_promotion must be one of {', '.join(L2_PROMOTIONS)}; got "
                                    f"{self.l2_promotion!r}")
        if self.evict_first not in EVICT_FIRST:
            raise LaunchConfigError(f"tma copy: evict_first must be one of {', '.join(EVICT_FIRST)}; got "
                                    f"{self.evict_first!r}")

    @property
    def reading(self) -> int:
        """Stores that may still be reading their slots when the next load is issued."""
        return self.stages - self.lookahead

    def shared_bytes(self, box_bytes: int) -> int:
        """Dynamic shared memory of one block: the ring, plus 128 B to align it."""
        return self.stages * _round128(box_bytes) + 128

    def describe(self) -> str:
        bps = "all that fit" if self.blocks_per_sm is None else str(self.blocks_per_sm)
        return (f"{self.stages} stages ({self.lookahead} loads ahead, bursts of {self.burst}), {bps} blocks/SM, "
                f"chunk {self.chunk}, L2 promotion {self.l2_promotion}, evict-first {self.evict_first}")


@dataclass(frozen=True)
class Plan2D:
    """A 2-D array and a box, with every TMA rule checked (raises TensorMapError before any launch)."""

    layout: TiledLayout
    array: Any

    @classmethod
    def of(cls, array: Any, box: Sequence[int], dtype: str | None = None, oob_fill: str = "zero",
           l2_promotion: str = "128B") -> "Plan2D":
        address, name, shape, strides = describe_array(array, dtype)
        if len(shape) != 2:
            raise LaunchConfigError(f"a 2-D tile copy needs a 2-D array; got shape {shape}")
        if shape[0] == 1 and (strides[0] <= 0 or strides[0] % 16):
            # A single row: TMA never steps by the row stride, so any legal one describes the same bytes (a
            # dense (1, n) array reports n * itemsize, which is rarely a multiple of 16; a new axis reports 0).
            strides = (-(-shape[1] * strides[1] // 16) * 16, strides[1])
        return cls(TiledLayout(address, name, shape, strides, tuple(box), oob_fill=oob_fill,
                               l2_promotion=l2_promotion), array)

    @property
    def rows(self) -> int:
        return self.layout.shape[0]

    @property
    def cols(self) -> int:
        return self.layout.shape[1]

    @property
    def pitch(self) -> int:
        return self.layout.strides[0]

    def tensor_map(self) -> TensorMap:
        return TensorMap(self.layout, owner=self.array)


def default_stages(box_bytes: int) -> int:
    """Ring slots of the default TMA copy: 4, fewer when a box is large (the block must fit an SM)."""
    return max(2, min(4, (96 * 1024) // _round128(box_bytes)))


class Launch(NamedTuple):
    """One checked launch: the kernel, its configuration and its parameter struct (arrays bound)."""

    kernel: Kernel
    config: LaunchConfig
    params: Any


def _launcher(job: Launch, stream: Any) -> Callable[[], None]:
    """A zero-argument launch of ``job``; the struct is packed once (its tensor maps hold fixed addresses)."""
    kernel, cfg, blob = job.kernel, job.config, job.params.kernel_param_bytes()
    return lambda: launch(kernel, cfg, blob, stream=stream)


class TmaOps:
    """The kernels of tma.cu for one target; each ``*_launch`` checks everything and returns a ``Launch``,
    each ``prepare_*`` a zero-argument launcher (so a timed loop does no Python work beyond the launch)."""

    def __init__(self, arch: str | None = None):
        self.module = build_module(arch)
        self._per_sm: dict[tuple[str, int, int], int] = {}

    def kernel(self, name: str):
        """The named kernel (one object per name, kept by the module)."""
        return self.module.kernel(name)

    def blocks_per_sm(self, name: str, threads: int, shared: int) -> int:
        """Blocks of ``name`` that fit on one SM with this much dynamic shared memory; raises if none does."""
        key = (name, threads, shared)
        if key not in self._per_sm:
            kernel = self.kernel(name)
            limit = current_device().caps.shared_mem_per_block_optin
            if shared + kernel.static_shared_bytes > limit:
                raise LaunchConfigError(
                    f"{name}: {shared} B of dynamic + {kernel.static_shared_bytes} B of static shared memory per "
                    f"block exceed the per-block limit of {limit} B")
            per_sm = max_active_blocks_per_sm(kernel, threads, shared)
            if per_sm < 1:
                raise LaunchConfigError(f"{name} with {shared} B of shared memory does not fit on an SM")
            self._per_sm[key] = per_sm
        return self._per_sm[key]

    def _grid(self, name: str, threads: int, shared: int, units: int, blocks_per_sm: int | None = None) -> int:
        """Blocks to launch: ``blocks_per_sm`` (default: as many as fit) on every SM, at most one per unit of work."""
        fit = self.blocks_per_sm(name, threads, shared)
        if blocks_per_sm is not None and blocks_per_sm > fit:
            raise LaunchConfigError(
                f"{name}: {blocks_per_sm} blocks per SM asked for, but only {fit} fit with {threads} threads and "
                f"{shared} B of dynamic shared memory per block")
        return max(1, min((blocks_per_sm or fit) * current_device().caps.sm_count, units))

    def copy_fits(self, box_bytes: int, config: TmaCopyConfig) -> bool:
        """Whether tma_copy with this box and configuration fits the device (blocks_per_sm of them per SM)."""
        try:
            fit = self.blocks_per_sm("tma_copy", COPY_THREADS, config.shared_bytes(box_bytes))
        except LaunchConfigError:
            return False
        return config.blocks_per_sm is None or config.blocks_per_sm <= fit

    @staticmethod
    def _tiling(src: Plan2D, chunk: int = 1) -> tuple[int, int, int]:
        """(tiles_x, tiles_y, units of ``chunk`` tiles), within the kernels' 32-bit tile arithmetic."""
        if max(src.layout.shape) > MAX_EXTENT:
            raise LaunchConfigError(f"shape {src.layout.shape}: the kernels' TMA coordinates are 32-bit signed, so "
                                    "rows and columns must be at most 2^31")
        tiles_y, tiles_x = src.layout.tiles()
        if tiles_x * tiles_y + chunk >= 2**31:
            raise LaunchConfigError(f"{tiles_x * tiles_y} tiles (+ chunk {chunk}) exceed the kernels' 32-bit tile "
                                    "index")
        return tiles_x, tiles_y, -(-tiles_x * tiles_y // chunk)

    def prepare_copy(self, src: Any, dst: Any, box: Sequence[int], *, method: str = "tma", dtype: str | None = None,
                     stages: int | None = None, config: TmaCopyConfig | None = None, chunk: int = 1,
                     stream: Any = None) -> Callable[[], None]:
        """dst[:] = src, box by box (``box`` = (rows, columns)); method 'tma' or 'threads'.

        method 'tma': ``config`` (a TmaCopyConfig) or just ``stages`` (the rest default); method 'threads': 256
        threads per block, ``chunk`` side-by-side tiles per block at a time (as TmaCopyConfig.chunk)."""
        job = self.copy_launch(src, dst, box, method=method, dtype=dtype, stages=stages, config=config, chunk=chunk)
        return _launcher(job, stream)

    def copy_launch(self, src: Any, dst: Any, box: Sequence[int], *, method: str = "tma", dtype: str | None = None,
                    stages: int | None = None, config: TmaCopyConfig | None = None, chunk: int = 1) -> Launch:
        """The checked launch of prepare_copy (same arguments)."""
        if method not in ("tma", "threads"):
            raise ValueError(f"method must be 'tma' or 'threads'; got {method!r}")
        if method == "tma" and config is not None and stages is not None:
            raise LaunchConfigError("tma copy: give stages or config (which has stages), not both")
        if method == "threads" and (config is not None or stages is not None):
            raise LaunchConfigError("stages and config configure method 'tma'; the thread copy takes only chunk")
        promotion = config.l2_promotion if config is not None else TmaCopyConfig.l2_promotion
        s, d = Plan2D.of(src, box, dtype, l2_promotion=promotion), Plan2D.of(dst, box, dtype, l2_promotion=promotion)
        if s.layout.shape != d.layout.shape or s.layout.dtype != d.layout.dtype:
            raise LaunchConfigError(f"copy: dst is {d.layout.dtype}{d.layout.shape}, "
                                    f"src {s.layout.dtype}{s.layout.shape}")
        bh, bw = s.layout.box
        if method == "tma":
            if config is None:
                config = TmaCopyConfig(stages=stages or default_stages(s.layout.box_bytes))
            tiles_x, tiles_y, units = self._tiling(s, config.chunk)
            shared = config.shared_bytes(s.layout.box_bytes)
            if config.persistent:
                grid = self._grid("tma_copy", COPY_THREADS, shared, units, config.blocks_per_sm)
            else:
                self.blocks_per_sm("tma_copy", COPY_THREADS, shared)  # raises where one block does not fit
                grid = units
            params: Any = TmaTileParams(s.tensor_map(), d.tensor_map(), tiles_x, tiles_y, bw, bh, s.layout.box_bytes,
                                        config.stages, config.lookahead, config.chunk, EVICT_FIRST[config.evict_first],
                                        config.burst)
            kernel = self.kernel("tma_copy")
            cfg = LaunchConfig(grid=grid, block=COPY_THREADS, shared_mem=shared)
        else:
            if not 1 <= chunk <= MAX_CHUNK:
                raise LaunchConfigError(f"thread copy: chunk must be 1 to {MAX_CHUNK} tiles; got {chunk}")
            tiles_x, tiles_y, units = self._tiling(s, chunk)
            params = ThreadTileParams(s.layout.address, d.layout.address, s.rows, s.cols, s.pitch, d.pitch,
                                      s.layout.itemsize, bw, bh, tiles_x, tiles_y, chunk)
            kernel = self.kernel("thread_copy")
            cfg = LaunchConfig(grid=self._grid("thread_copy", TILE_THREADS, 0, units), block=TILE_THREADS)
        return Launch(kernel, cfg, params)

    def prepare_transpose(self, src: Any, dst: Any, box: Sequence[int], *, method: str = "tma",
                          dtype: str | None = None, stream: Any = None) -> Callable[[], None]:
        """dst[:] = src.T, box by box (``box`` = (rows, columns) of src; dst's box is the transpose)."""
        return _launcher(self.transpose_launch(src, dst, box, method=method, dtype=dtype), stream)

    def transpose_launch(self, src: Any, dst: Any, box: Sequence[int], *, method: str = "tma",
                         dtype: str | None = None) -> Launch:
        """The checked launch of prepare_transpose (same arguments)."""
        bh, bw = (int(v) for v in box)
        s, d = Plan2D.of(src, (bh, bw), dtype), Plan2D.of(dst, (bw, bh), dtype)
        if d.layout.shape != (s.cols, s.rows) or s.layout.dtype != d.layout.dtype:
            raise LaunchConfigError(f"transpose: dst is {d.layout.dtype}{d.layout.shape}, expected "
                                    f"{s.layout.dtype}{(s.cols, s.rows)}")
        esize = s.layout.itemsize
        if esize not in ELEMENT_TYPES:
            raise LaunchConfigError(f"transpose supports 1-, 2- and 4-byte elements; got {esize}-byte {s.layout.dtype}")
        tiles_x, tiles_y, units = self._tiling(s)
        box_bytes = s.layout.box_bytes
        name = f"{'tma' if method == 'tma' else 'thread'}_transpose<{ELEMENT_TYPES[esize]}>"
        if method == "tma":
            shared = 4 * _round128(box_bytes) + 128
            params: Any = TmaTileParams(s.tensor_map(), d.tensor_map(), tiles_x, tiles_y, bw, bh, box_bytes, 2)
        elif method == "threads":
            shared = 2 * box_bytes
            params = ThreadTileParams(s.layout.address, d.layout.address, s.rows, s.cols, s.pitch, d.pitch, esize,
                                      bw, bh, tiles_x, tiles_y)
        else:
            raise ValueError(f"method must be 'tma' or 'threads'; got {method!r}")
        kernel = self.kernel(name)
        cfg = LaunchConfig(grid=self._grid(name, TILE_THREADS, shared, units), block=TILE_THREADS, shared_mem=shared)
        return Launch(kernel, cfg, params)

    def load_tiles(self, src: Any, box: Sequence[int], *, dtype: str | None = None, oob_fill: str = "zero"):
        """Every box of src exactly as TMA writes it to shared memory: a CuPy array [tiles_y, tiles_x, rows, cols]
        of src's element size (raw bytes reinterpreted), out-of-bounds fill included."""
        import cupy as cp

        s = Plan2D.of(src, box, dtype, oob_fill)
        tiles_x, tiles_y, units = self._tiling(s)
        bh, bw = s.layout.box
        out = cp.empty((tiles_y, tiles_x, bh, bw), dtype=np.dtype(f"u{s.layout.itemsize}"))
        tmap = s.tensor_map()
        shared = _round128(s.layout.box_bytes) + 128
        cfg = LaunchConfig(grid=self._grid("tma_load_tiles", 128, shared, units), block=128, shared_mem=shared)
        launch(self.kernel("tma_load_tiles"), cfg,
               TmaTileParams(tmap, tmap, tiles_x, tiles_y, bw, bh, s.layout.box_bytes, 1),
               out.view(cp.uint8))  # the kernel writes bytes (unsigned char* out)
        return out
