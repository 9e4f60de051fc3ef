"""TMA: 2-D tiled copies and transposes driven by tensor maps built in Python, and multicast to a cluster.

Shows (seed 002, exercise 3, and TMA multicast): a tensor map built from Python for a user's array
(pitched rows; float32, float16, bfloat16, uint8) with every alignment and size rule checked before
anything reaches the driver; a 2-D copy and a transpose through TMA against the same tiles moved by 256
threads, over tile shapes, element types, pitches and tail tiles (TMA fills the out-of-bounds part of a
box and clips the stores); the TMA copy swept over tile shape x blocks per SM x ring slots, then tile order
(side-by-side chunks), loads in flight, L2 promotion and evict-first hints, every configuration measured
and checked in the same run; then a batched matrix-vector product whose blocks share the tiles of A, with
per-block loads against TMA multicast to clusters of 1 to 8 blocks (time, and DRAM and L2 bytes from
Nsight Compute where it runs).
Needs: compute capability 9.0 (TMA, clusters); multicast is built for sm_90a / sm_100a.
Key insight: one thread per block can keep an SM's share of HBM bandwidth in flight with TMA, streaming
boxes through a ring of shared-memory slots with no per-thread address arithmetic; tails and pitches cost
nothing, and what is left to tune is the order and width of the runs the boxes make in memory. Multicast
pays when several blocks consume the same tiles and the L2-to-SM traffic, not DRAM, is the limit; with
one consumer, or with enough compute per byte, per-block loads are as fast and simpler.
Run: ``cuadv bench tma`` (``--quick`` for a smaller problem).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..compiler import compile_source, kernel_source
from ..errors import LaunchConfigError, ValidationError
from ..launch import LaunchConfig, launch
from ..results import LabResult, Selection, Table
from ..tensormap import L2_PROMOTIONS, TensorMap, TiledLayout, describe_array, element_size, pitch_elements
from .base import RunContext

# Mirrors kernels/tma.cu.
TMA_PARAMS_BYTES, THREAD_PARAMS_BYTES, GEMV_PARAMS_BYTES = 320, 72, 192
MAX_STAGES = 32        # ring slots of tma_copy (kMaxStages)
MAX_READING = 8        # stages - lookahead: stores that may still read their slots (bulk_wait_group_read_dynamic)
MAX_CHUNK = 1024       # side-by-side tiles a block takes at a time (any positive value works; this bounds typos)
COPY_THREADS, TILE_THREADS = 32, 256
GEMV_THREADS, GEMV_TILE_M, GEMV_TILE_K, GEMV_SLICES, GEMV_STAGES = 256, 64, 64, 8, 4
GEMV_TILE_BYTES = GEMV_TILE_M * GEMV_TILE_K * 4
GEMV_SHARED = GEMV_STAGES * GEMV_TILE_BYTES + 128
MAX_MULTICAST_CLUSTER = GEMV_SLICES
GEMV_VECTORS_PER_BLOCK = (1, 8)
EVICT_FIRST = {"none": 0, "loads": 1, "stores": 2, "both": 3}  # cache_hints bits of TmaTileParams
ELEMENT_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int"}


def kernel_expressions() -> list[str]:
    exprs = [f"tma_transpose<{t}>" for t in ELEMENT_TYPES.values()]
    exprs += [f"thread_transpose<{t}>" for t in ELEMENT_TYPES.values()]
    exprs += [f"gemv_tma<{'true' if mc else 'false'}, {vb}>" for mc in (False, True) for vb in GEMV_VECTORS_PER_BLOCK]
    return exprs


def build_module(arch: str | None = None):
    return compile_source(kernel_source("tma.cu"), name="tma", arch=arch, name_expressions=kernel_expressions())


def _pad(blob: bytes, size: int) -> bytes:
    assert len(blob) <= size, (len(blob), size)
    return blob + bytes(size - len(blob))


def _round128(nbytes: int) -> int:
    return -(-nbytes // 128) * 128


@dataclass(frozen=True)
class TmaTileParams:
    """TmaTileParams of tma.cu (320 bytes: two 128-byte descriptors, then the tiling)."""

    src: TensorMap
    dst: TensorMap
    tiles_x: int
    tiles_y: int
    box_w: int
    box_h: int
    box_bytes: int
    stages: int = 2
    lookahead: int = 1
    chunk: int = 1
    cache_hints: int = 0
    burst: int = 1

    def kernel_param_bytes(self) -> bytes:
        return _pad(self.src.kernel_param_bytes() + self.dst.kernel_param_bytes() + struct.pack(
            "<iiiiIiiiii", self.tiles_x, self.tiles_y, self.box_w, self.box_h, self.box_bytes, self.stages,
            self.lookahead, self.chunk, self.cache_hints, self.burst), TMA_PARAMS_BYTES)


@dataclass(frozen=True)
class ThreadTileParams:
    """ThreadTileParams of tma.cu (72 bytes)."""

    src: int
    dst: int
    rows: int
    cols: int
    src_pitch: int  # bytes
    dst_pitch: int  # bytes
    esize: int
    box_w: int
    box_h: int
    tiles_x: int
    tiles_y: int
    chunk: int = 1

    def kernel_param_bytes(self) -> bytes:
        return struct.pack("<QQqqqqiiiiii", self.src, self.dst, self.rows, self.cols, self.src_pitch, self.dst_pitch,
                           self.esize, self.box_w, self.box_h, self.tiles_x, self.tiles_y, self.chunk)


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
    'stores', 'both'). Pure checks here; whether the blocks fit is checked against the device when a copy is
    prepared (TmaOps.prepare_copy).
    """

    stages: int = 4
    lookahead: int | None = None
    blocks_per_sm: int | None = None
    chunk: int = 1
    l2_promotion: str = "128B"
    evict_first: str = "none"
    burst: int = 1

    def __post_init__(self):
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
class GemvParams:
    """GemvParams of tma.cu (192 bytes)."""

    a: TensorMap
    x: int
    y: int
    m: int
    k: int
    x_pitch: int  # elements
    y_pitch: int  # elements

    def kernel_param_bytes(self) -> bytes:
        return _pad(self.a.kernel_param_bytes() + struct.pack("<QQqqqq", self.x, self.y, self.m, self.k,
                                                              self.x_pitch, self.y_pitch), GEMV_PARAMS_BYTES)


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


class TmaOps:
    """The lab's kernels for one target; each ``prepare_*`` checks everything and returns a zero-argument
    launcher (so a timed loop does no Python work beyond the launch)."""

    def __init__(self, arch: str | None = None):
        self.module = build_module(arch)
        self._per_sm: dict[tuple[str, int, int], int] = {}

    def kernel(self, name: str):
        """The named kernel (one object per name, kept by the module)."""
        return self.module.kernel(name)

    def blocks_per_sm(self, name: str, threads: int, shared: int) -> int:
        """Blocks of ``name`` that fit on one SM with this much dynamic shared memory; raises if none does."""
        from ..device import current_device
        from ..occupancy import max_active_blocks_per_sm

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
        from ..device import current_device

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
        if method not in ("tma", "threads"):
            raise ValueError(f"method must be 'tma' or 'threads'; got {method!r}")
        if method == "tma" and config is not None and stages is not None:
            raise LaunchConfigError("tma copy: give stages or config (which has stages), not both")
        if method == "threads" and (config is not None or stages is not None):
            raise LaunchConfigError("stages and config configure method 'tma'; the thread copy takes only chunk")
        promotion = config.l2_promotion if config is not None else TmaCopyConfig.l2_promotion
        s, d = Plan2D.of(src, box, dtype, l2_promotion=promotion), Plan2D.of(dst, box, dtype, l2_promotion=promotion)
        if s.layout.shape != d.layout.shape or s.layout.dtype != d.layout.dtype:
            raise LaunchConfigError(f"copy: dst is {d.layout.dtype}{d.layout.shape}, src {s.layout.dtype}{s.layout.shape}")
        bh, bw = s.layout.box
        if method == "tma":
            if config is None:
                config = TmaCopyConfig(stages=stages or default_stages(s.layout.box_bytes))
            tiles_x, tiles_y, units = self._tiling(s, config.chunk)
            shared = config.shared_bytes(s.layout.box_bytes)
            grid = self._grid("tma_copy", COPY_THREADS, shared, units, config.blocks_per_sm)
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
        return lambda: launch(kernel, cfg, params, stream=stream)

    def prepare_transpose(self, src: Any, dst: Any, box: Sequence[int], *, method: str = "tma",
                          dtype: str | None = None, stream: Any = None) -> Callable[[], None]:
        """dst[:] = src.T, box by box (``box`` = (rows, columns) of src; dst's box is the transpose)."""
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
        return lambda: launch(kernel, cfg, params, stream=stream)

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
               TmaTileParams(tmap, tmap, tiles_x, tiles_y, bw, bh, s.layout.box_bytes, 1), out)
        return out

    def prepare_gemv(self, a: Any, x: Any, y: Any, *, vectors_per_block: int, cluster: int, multicast: bool,
                     stream: Any = None) -> Callable[[], None]:
        """y = x @ a.T with float32 a [m, k], x [v, k], y [v, m]; v / vectors_per_block blocks per band of 64 rows
        of a, grouped into clusters of ``cluster`` blocks that share the band's tiles."""
        if vectors_per_block not in GEMV_VECTORS_PER_BLOCK:
            raise LaunchConfigError(f"vectors_per_block must be one of {GEMV_VECTORS_PER_BLOCK}; got "
                                    f"{vectors_per_block}")
        if not 1 <= cluster <= MAX_MULTICAST_CLUSTER:
            raise LaunchConfigError(f"cluster must be 1 to {MAX_MULTICAST_CLUSTER} blocks (a tile is "
                                    f"{GEMV_SLICES} slices, one or more per block); got {cluster}")
        pa = Plan2D.of(a, (GEMV_TILE_M // GEMV_SLICES, GEMV_TILE_K))
        if pa.layout.dtype != "float32":
            raise LaunchConfigError(f"a must be float32; got {pa.layout.dtype}")
        m, k = pa.layout.shape
        px, py = _rows_of(x, "x"), _rows_of(y, "y")
        if px[1] != k or py[1] != m or px[0] != py[0]:
            raise LaunchConfigError(f"shapes: a {m} x {k}, x {px[0]} x {px[1]}, y {py[0]} x {py[1]}: need x v x {k} "
                                    f"and y v x {m}")
        vectors = px[0]
        if vectors % vectors_per_block:
            raise LaunchConfigError(f"{vectors} vectors are not a multiple of vectors_per_block={vectors_per_block}")
        grid_x = vectors // vectors_per_block
        if grid_x % cluster:
            raise LaunchConfigError(f"cluster of {cluster} does not divide the {grid_x} blocks per band "
                                    f"({vectors} vectors / {vectors_per_block} per block)")
        name = f"gemv_tma<{'true' if multicast else 'false'}, {vectors_per_block}>"
        params = GemvParams(pa.tensor_map(), px[2], py[2], m, k, px[3], py[3])
        cfg = LaunchConfig(grid=(grid_x, -(-m // GEMV_TILE_M)), block=GEMV_THREADS,
                           cluster=(cluster, 1, 1) if cluster > 1 else None, shared_mem=GEMV_SHARED)
        kernel = self.kernel(name)
        return lambda: launch(kernel, cfg, params, stream=stream)


def _rows_of(array: Any, what: str) -> tuple[int, int, int, int]:
    """(rows, cols, address, pitch in elements) of a 2-D float32 array with contiguous rows."""
    address, dtype, shape, strides = describe_array(array)
    if dtype != "float32" or len(shape) != 2 or strides[1] != 4 or strides[0] % 4:
        raise LaunchConfigError(f"{what} must be a 2-D float32 array with contiguous rows; got {dtype} {shape} "
                                f"strides {strides}")
    return shape[0], shape[1], address, strides[0] // 4


# ---------------------------------------------------------------------------------------------- validation

NUMPY_TYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "uint8": np.uint8}
BF16_NOTE = "bfloat16 data is held in uint16 arrays (NumPy and CuPy have no bfloat16) and mapped as bfloat16"


def pitched(cp, rows: int, cols: int, dtype: str, extra: int = 0):
    """A (rows, cols) view of a (rows, pitch) allocation: rows padded to a 16-byte pitch (plus ``extra`` elements
    of 16 bytes each, to test wider pitches)."""
    npt = NUMPY_TYPES[dtype]
    per = 16 // element_size(dtype)
    storage = cp.zeros((rows, pitch_elements(cols, dtype) + extra * per), dtype=npt)
    return storage[:, :cols]


def random_array(cp, rng, rows: int, cols: int, dtype: str, extra: int = 0):
    """Fresh random values in a pitched array: from NumPy's ``rng``, or generated on the GPU when rng is None
    (large arrays). Integer types get uniformly random bit patterns."""
    arr = pitched(cp, rows, cols, dtype, extra)
    npt = NUMPY_TYPES[dtype]
    floating = dtype in ("float32", "float16")
    if rng is not None:
        if floating:
            values = cp.asarray(rng.standard_normal((rows, cols)).astype(npt))
        else:
            info = np.iinfo(npt)
            values = cp.asarray(rng.integers(info.min, info.max, size=(rows, cols), endpoint=True, dtype=npt))
    elif floating:
        values = cp.random.default_rng().standard_normal((rows, cols), dtype=cp.float32).astype(npt)
    else:  # float64 uniforms scaled to [0, 2^bits): exact, so every pattern is reachable and none overflows
        values = (cp.random.random((rows, cols), dtype=cp.float64) * float(np.iinfo(npt).max + 1)).astype(npt)
    arr[...] = values
    return arr


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


def poison_against(cp, dst, expected) -> None:
    """Fill dst with the bitwise complement of what it should receive (a NumPy or CuPy array): every element
    starts wrong."""
    u = np.dtype(f"u{dst.dtype.itemsize}")
    e = cp.asarray(expected) if isinstance(expected, np.ndarray) else expected
    dst.view(u)[...] = cp.invert(e.view(u))


# (rows, cols, box, extra pitch): tails in both directions, exact multiples, a single row, a wide pitch.
VALIDATION_CASES = (
    (1, 64, (8, 64), 0),
    (37, 61, (16, 32), 0),
    (64, 128, (32, 64), 0),
    (130, 200, (64, 64), 3),
    (257, 129, (8, 128), 1),
    (100, 33, (128, 16), 0),
)


def box_for(dtype: str, box: tuple[int, int]) -> tuple[int, int]:
    """A float32 box scaled to the same bytes per row for narrower types (the inner extent stays 16-byte legal)."""
    bh, bw = box
    scale = 4 // element_size(dtype)
    return bh, min(256, bw * scale)


def validate_tiles(ops: TmaOps, dtypes: Sequence[str] = tuple(NUMPY_TYPES), cases=VALIDATION_CASES) -> list[str]:
    """Copies and transposes, both methods, every dtype and case, every element against NumPy (bit patterns);
    destinations poisoned first. Then the out-of-bounds fill of load_tiles (zeros, and NaN for floats)."""
    import cupy as cp

    rng = np.random.default_rng()
    count = 0
    for dtype in dtypes:
        tdtype = "bfloat16" if dtype == "bfloat16" else None
        for rows, cols, box32, extra in cases:
            box = box_for(dtype, box32)
            src = random_array(cp, rng, rows, cols, dtype, extra)
            host = cp.asnumpy(src)
            for method in ("tma", "threads"):
                dst = pitched(cp, rows, cols, dtype, extra=1)
                poison_against(cp, dst, host)
                ops.prepare_copy(src, dst, box, method=method, dtype=tdtype)()
                if not np.array_equal(_bits(cp.asnumpy(dst)), _bits(host)):
                    raise ValidationError(f"{method} copy wrong: {dtype} {rows}x{cols} box {box}")
                count += 1
                if box[0] * element_size(dtype) % 16 == 0:  # the transposed box's inner extent must be 16-byte legal
                    dst_t = pitched(cp, cols, rows, dtype)
                    poison_against(cp, dst_t, host.T)
                    ops.prepare_transpose(src, dst_t, box, method=method, dtype=tdtype)()
                    if not np.array_equal(_bits(cp.asnumpy(dst_t)), _bits(host.T)):
                        raise ValidationError(f"{method} transpose wrong: {dtype} {rows}x{cols} box {box}")
                    count += 1
    checks = [f"TMA and thread copies and transposes equal NumPy bit for bit for {', '.join(dtypes)} on "
              f"{len(cases)} shapes each (tails in both directions, pitched rows; {count} configurations; destinations poisoned with the complement of the "
              "expected bits); "
              + BF16_NOTE]
    checks.append(validate_oob_fill(ops))
    return checks


def validate_oob_fill(ops: TmaOps) -> str:
    import cupy as cp

    rng = np.random.default_rng()
    for dtype, fill in (("float32", "zero"), ("float32", "nan"), ("float16", "nan"), ("uint8", "zero"),
                        ("bfloat16", "zero")):
        rows, cols, box = 45, 70, box_for(dtype, (16, 32))
        src = random_array(cp, rng, rows, cols, dtype)
        got = cp.asnumpy(ops.load_tiles(src, box, dtype="bfloat16" if dtype == "bfloat16" else None, oob_fill=fill))
        ty, tx = got.shape[:2]
        host = cp.asnumpy(src)
        padded = np.zeros((ty * box[0], tx * box[1]), dtype=host.dtype)
        padded[:rows, :cols] = host
        expected = padded.reshape(ty, box[0], tx, box[1]).transpose(0, 2, 1, 3)
        mask = np.zeros((ty * box[0], tx * box[1]), dtype=bool)
        mask[:rows, :cols] = True
        inside = mask.reshape(ty, box[0], tx, box[1]).transpose(0, 2, 1, 3)
        got_typed = got.view(host.dtype)
        if not np.array_equal(_bits(got_typed[inside]), _bits(expected[inside])):
            raise ValidationError(f"TMA load_tiles: in-bounds elements wrong ({dtype})")
        outside = got_typed[~inside]
        if fill == "zero" and not np.all(_bits(outside) == 0):
            raise ValidationError(f"TMA zero fill: {np.count_nonzero(_bits(outside))} out-of-bounds elements not 0")
        if fill == "nan" and not np.all(np.isnan(outside)):
            raise ValidationError(f"TMA NaN fill: {np.count_nonzero(~np.isnan(outside))} out-of-bounds elements not NaN")
    return ("TMA loads of tail boxes (45 x 70 array, 16-row boxes) deliver the in-bounds elements exactly and fill the "
            "rest with zeros (float32, uint8, bfloat16) or NaN (float32, float16 with the NaN fill mode)")


# (dtype, rows, cols, box, config): tails in both directions, and tma_copy's ring at its limits: 2 slots; lookahead
# = stages (the thread waits for the store it has just issued); MAX_READING stores still reading; 32 slots
# wrapping several times; chunks that do not divide a row of tiles (units wrap to the next row); bursts equal to
# the chunk, not dividing the lookahead, and out of step with the chunks; 1, 2 and 4 blocks per SM; every L2
# promotion and evict-first hint.
COPY_CONFIG_CASES = (
    ("float32", 515, 1000, (8, 64), TmaCopyConfig(stages=2, blocks_per_sm=1)),
    ("float32", 515, 1000, (8, 64), TmaCopyConfig(stages=3, lookahead=3, blocks_per_sm=1, chunk=2, burst=2)),
    ("float32", 2053, 1000, (4, 32), TmaCopyConfig(stages=12, lookahead=4, blocks_per_sm=1, chunk=7,
                                                   l2_promotion="none")),
    ("float32", 2053, 1000, (4, 32), TmaCopyConfig(stages=32, lookahead=30, blocks_per_sm=1, chunk=5, burst=5,
                                                   evict_first="loads")),
    ("float32", 2053, 1000, (4, 32), TmaCopyConfig(stages=16, lookahead=12, blocks_per_sm=2, chunk=4, burst=7)),
    ("uint8", 777, 3001, (8, 256), TmaCopyConfig(stages=6, lookahead=4, blocks_per_sm=2, chunk=3,
                                                 l2_promotion="256B", evict_first="both")),
    ("float16", 301, 999, (16, 128), TmaCopyConfig(stages=8, blocks_per_sm=4, chunk=4, l2_promotion="64B",
                                                   evict_first="stores")),
)


def validate_copy_configs(ops: TmaOps, cases=COPY_CONFIG_CASES) -> str:
    """tma_copy under each configuration of ``cases``, and the thread copy with the same chunk, bit for bit against
    the source (destinations poisoned with the complement of the expected bits)."""
    import cupy as cp

    rng = np.random.default_rng()
    for dtype, rows, cols, box, config in cases:
        src = random_array(cp, rng, rows, cols, dtype)
        host = cp.asnumpy(src)
        for method in ("tma", "threads"):
            dst = pitched(cp, rows, cols, dtype, extra=1)
            poison_against(cp, dst, host)
            if method == "tma":
                ops.prepare_copy(src, dst, box, config=config)()
            else:
                ops.prepare_copy(src, dst, box, method="threads", chunk=config.chunk)()
            if not np.array_equal(_bits(cp.asnumpy(dst)), _bits(host)):
                raise ValidationError(f"{method} copy wrong: {dtype} {rows}x{cols} box {box}, {config.describe()}")
    return (f"TMA copies equal their source bit for bit under {len(cases)} ring configurations (2 to 32 slots, "
            f"lookahead 1 to stages, up to {MAX_READING} stores reading, bursts of 1 to 7 loads, 1 to 4 blocks per "
            "SM, chunks of 1 to 7 tiles that wrap rows, every L2 promotion and evict-first hint; float32, float16, "
            "uint8 with tails both ways), and so do the thread copies with the same chunks")


def integer_problem(cp, rng, m: int, k: int, vectors: int, pitch_extra: int = 0, reference: str = "numpy"):
    """A [m, k] (16-byte pitch), X [vectors, k], Y [vectors, m] poisoned, and the expected Y. Entries are small
    integers in float32, so every order of summation is exact and a float64 product is the exact reference:
    reference="numpy" (host data from ``rng``), "cupy" (data and cuBLAS product on the GPU, for sizes where NumPy
    would take too long) or "none"."""
    a = pitched(cp, m, k, "float32", pitch_extra)
    if reference == "numpy":
        a_host = rng.integers(-2, 3, size=(m, k)).astype(np.float32)
        x_host = rng.integers(-2, 3, size=(vectors, k)).astype(np.float32)
        a[...] = cp.asarray(a_host)
        x = cp.asarray(x_host)
        expected = cp.asarray((x_host.astype(np.float64) @ a_host.astype(np.float64).T).astype(np.float32))
    else:
        a[...] = cp.floor(cp.random.random((m, k), dtype=cp.float32) * 5) - 2  # integers -2 .. 2
        x = cp.floor(cp.random.random((vectors, k), dtype=cp.float32) * 5) - 2
        expected = (x.astype(cp.float64) @ a.astype(cp.float64).T).astype(cp.float32) if reference == "cupy" else None
    y = cp.full((vectors, m), cp.nan, dtype=cp.float32)
    return a, x, y, expected


def validate_gemv(ops: TmaOps, clusters: Sequence[int] = tuple(range(1, 9))) -> str:
    import cupy as cp

    rng = np.random.default_rng()
    for cluster in clusters:
        for vb in GEMV_VECTORS_PER_BLOCK:
            m, k = 64 * 3 + 17, 64 * 5 + 9  # tails in both directions: TMA fills A with zeros past the edges
            a, x, _, expected = integer_problem(cp, rng, m, k, 2 * cluster * vb, pitch_extra=1)
            for multicast in (False, True):
                y = cp.full((2 * cluster * vb, m), cp.nan, dtype=cp.float32)
                ops.prepare_gemv(a, x, y, vectors_per_block=vb, cluster=cluster, multicast=multicast)()
                if not bool(cp.array_equal(y, expected)):
                    raise ValidationError(f"gemv wrong: cluster {cluster}, {vb} vectors per block, "
                                          f"{'multicast' if multicast else 'per-block loads'}")
    return (f"batched matrix-vector product y = A x equals NumPy's exact integer result for clusters of "
            f"{', '.join(map(str, clusters))} blocks, {' and '.join(map(str, GEMV_VECTORS_PER_BLOCK))} vectors per "
            f"block, per-block loads and multicast (A {64 * 3 + 17} x {64 * 5 + 9}: tails in both directions)")


# ---------------------------------------------------------------------------------------------- Nsight Compute

NCU_METRICS = ("dram__bytes_read.sum", "lts__t_bytes.sum")
NCU_CONFIGS = [(cluster, multicast) for cluster in (1, 2, 4, 8) for multicast in (False, True)]
_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12, "kib": 1024, "mib": 2**20,
          "gib": 2**30}


def ncu_worker(m: int, k: int, vectors_per_block: int) -> None:
    """Runs under ncu: one launch of each NCU_CONFIGS entry, in order, and nothing else named gemv_tma."""
    import cupy as cp

    ops = TmaOps()
    rng = np.random.default_rng(0)
    a, x, y, _ = integer_problem(cp, rng, m, k, 8 * vectors_per_block, reference="none")
    for cluster, multicast in NCU_CONFIGS:
        ops.prepare_gemv(a, x, y, vectors_per_block=vectors_per_block, cluster=cluster, multicast=multicast)()
    cp.cuda.runtime.deviceSynchronize()


def parse_ncu_csv(text: str) -> list[dict[str, float]]:
    """ncu --csv output -> one {metric: bytes} per profiled kernel, in launch order."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    by_id: dict[int, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        name, unit, value = row.get("Metric Name"), (row.get("Metric Unit") or "byte").lower(), row.get("Metric Value")
        if name not in NCU_METRICS or value is None:
            continue
        scale = _UNITS.get(unit)
        if scale is None:
            continue
        by_id.setdefault(int(row["ID"]), {})[name] = float(value.replace(",", "")) * scale
    return [by_id[i] for i in sorted(by_id)]


def run_ncu(m: int, k: int, vectors_per_block: int, timeout: float = 60.0) -> tuple[list[dict[str, float]], str]:
    """Profile NCU_CONFIGS in a subprocess; returns (metrics per config, '' or why there are none)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return [], "ncu is not on PATH"
    src_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src_root, os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "ncu.csv"
        cmd = [ncu, "--clock-control", "none", "--metrics", ",".join(NCU_METRICS), "--csv", "--print-units", "base",
               "--kernel-name", "regex:gemv_tma", "--log-file", str(log), sys.executable, "-m", "cuadv.labs.tma",
               "--ncu-worker", json.dumps([m, k, vectors_per_block])]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return [], f"ncu did not finish within {timeout:.0f} s"
        text = log.read_text() if log.exists() else ""
    rows = parse_ncu_csv(text)
    if proc.returncode != 0 or len(rows) != len(NCU_CONFIGS):
        tail = (proc.stdout + proc.stderr + text).strip().splitlines()[-3:]
        return [], f"ncu exited {proc.returncode} with {len(rows)} of {len(NCU_CONFIGS)} kernels profiled: " + \
            " | ".join(tail)
    return rows, ""


# ---------------------------------------------------------------------------------------------- the lab

TILE_SHAPES = ((4, 256), (8, 256), (16, 256), (32, 256), (16, 128), (32, 32), (32, 128), (64, 64), (128, 64),
               (256, 32))
SWEEP_BLOCKS_PER_SM = (1, 2, 4)
SWEEP_RING_KIB = (64, 128, 192)  # shared memory per SM given to the rings
SWEEP_CHUNKS = (2, 4, 8, 16)      # and a whole row of tiles
SWEEP_TOP = 3                    # tiles (their fastest grid configuration) whose chunks are swept
CONFIRM_REPEATS = 100
# Measured whatever the greedy steps pick: long runs per row sent out together, at one and two blocks per SM.
SWEEP_EXTRA = (
    ((8, 256), TmaCopyConfig(stages=24, lookahead=16, blocks_per_sm=1, chunk=4, burst=4)),
    ((8, 256), TmaCopyConfig(stages=12, lookahead=8, blocks_per_sm=2, chunk=4, burst=4)),
    ((8, 256), TmaCopyConfig(stages=12, lookahead=8, blocks_per_sm=2, chunk=8, burst=8)),
    ((4, 256), TmaCopyConfig(stages=32, lookahead=24, blocks_per_sm=1, chunk=8, burst=8)),
    ((4, 256), TmaCopyConfig(stages=24, lookahead=16, blocks_per_sm=2, chunk=8, burst=8)),
    ((16, 256), TmaCopyConfig(stages=12, lookahead=8, blocks_per_sm=1, chunk=4, burst=4)),
    ((16, 256), TmaCopyConfig(stages=6, lookahead=4, blocks_per_sm=2, chunk=2, burst=2)),
)


def sweep_grid(tiles: Sequence[tuple[int, int]], itemsize: int, quick: bool = False
               ) -> list[tuple[tuple[int, int], TmaCopyConfig]]:
    """Tile shape x blocks per SM x ring depth for tma_copy: for each tile and blocks per SM, the stages that give
    the rings of one SM about SWEEP_RING_KIB of shared memory; loads run stages - 1 ahead for rings of up to 4 slots,
    stages - 2 for deeper ones. Configurations that do not fit an SM are skipped where they are measured."""
    out = []
    for box in tiles:
        stride = _round128(box[0] * box[1] * itemsize)
        for bps in (1, 2) if quick else SWEEP_BLOCKS_PER_SM:
            seen: set[int] = set()
            for kib in (128,) if quick else SWEEP_RING_KIB:
                stages = max(2, min(MAX_STAGES, round(kib * 1024 / (bps * stride))))
                if stages not in seen:
                    seen.add(stages)
                    out.append((box, TmaCopyConfig(stages=stages, lookahead=stages - (1 if stages <= 4 else 2),
                                                   blocks_per_sm=bps)))
    return out


def _variant(config: TmaCopyConfig, **changes: Any) -> TmaCopyConfig | None:
    try:
        return replace(config, **changes)
    except LaunchConfigError:
        return None


def chunk_variants(config: TmaCopyConfig, chunk: int) -> list[TmaCopyConfig]:
    """``chunk`` side-by-side tiles per block with loads issued one by one, and (where the ring allows) with the
    chunk's loads issued together: burst = chunk, lookahead the largest multiple of it that keeps at most
    MAX_READING stores reading, so bursts line up with the chunks."""
    out = [replace(config, chunk=chunk, burst=1)]
    ahead = config.lookahead // chunk * chunk
    together = _variant(config, chunk=chunk, burst=chunk, lookahead=ahead) if ahead >= chunk > 1 else None
    return out + ([together] if together else [])


def ring_neighbours(config: TmaCopyConfig) -> list[TmaCopyConfig]:
    """The same shared memory per SM arranged differently: 1, 2 or 4 stores reading; twice the blocks with half
    the slots, or half the blocks with twice the slots (each kept only where it is a valid configuration)."""
    out = []
    for reading in (1, 2, 4):
        if reading != config.reading and config.stages - reading >= 1:
            out.append(_variant(config, lookahead=config.stages - reading))
    bps = config.blocks_per_sm or 1
    for b, st in ((bps * 2, config.stages // 2), (bps // 2, config.stages * 2)):
        if b >= 1 and 2 <= st <= MAX_STAGES:
            out.append(_variant(config, blocks_per_sm=b, stages=st, lookahead=st - min(config.reading, st - 1)))
    return [c for c in out if c is not None]


def config_label(config: TmaCopyConfig) -> str:
    """Short form for the tables: '12 slots, 10 ahead, 2/SM, chunk 4' (+ non-default L2 settings)."""
    bps = "max" if config.blocks_per_sm is None else str(config.blocks_per_sm)
    label = f"{config.stages} slots, {config.lookahead} ahead, {bps}/SM, chunk {config.chunk}"
    if config.burst > 1:
        label += f", bursts of {config.burst}"
    if config.l2_promotion != "128B":
        label += f", L2 {config.l2_promotion}"
    if config.evict_first != "none":
        label += f", evict-first {config.evict_first}"
    return label


class TmaLab:
    name = "tma"
    title = "TMA: tiled 2-D copies and transposes from Python tensor maps, and multicast to a cluster"

    def supported(self, caps) -> str | None:
        if not caps.tma:
            return (f"TMA needs compute capability >= 9.0 (got {caps.cc_string()}); fallback: cp.async copies "
                    "(cuadv bench pipeline) and per-block loads")
        if not caps.cluster_launch:
            return "TMA multicast needs thread block clusters; fallback: per-block TMA loads"
        return None

    def build(self, arch: str):
        return [build_module(arch)]

    def smoke(self) -> None:
        ops = TmaOps()
        validate_tiles(ops, cases=VALIDATION_CASES[:3])
        validate_copy_configs(ops)
        validate_gemv(ops, clusters=(1, 2, 3, 8))

    def run(self, ctx: RunContext) -> LabResult:
        result = LabResult(self.name, self.title)
        ops = TmaOps()
        ctx.progress("tma: validating copies, transposes and out-of-bounds fill")
        result.checks += validate_tiles(ops)
        ctx.progress("tma: validating the TMA copy's ring configurations")
        result.checks.append(validate_copy_configs(ops))
        ctx.progress("tma: validating the multicast gemv for clusters of 1 to 8")
        result.checks.append(validate_gemv(ops))
        self._tile_table(ctx, ops, result)
        self._dtype_table(ctx, ops, result)
        self._multicast(ctx, ops, result)
        return result

    def _timer(self, ctx):
        from ..timing import time_gpu

        repeats = 10 if ctx.quick else 30
        return (lambda fn: time_gpu(fn, repeats=repeats)), repeats

    def _tile_table(self, ctx: RunContext, ops: TmaOps, result: LabResult) -> None:
        import cupy as cp

        timed, repeats = self._timer(ctx)
        side = 8192 if ctx.quick else 16384
        rows, cols = side + 77, side + 45  # tail tiles in both directions
        src = random_array(cp, None, rows, cols, "float32")
        dst = pitched(cp, rows, cols, "float32", extra=1)
        dst_t = pitched(cp, cols, rows, "float32")
        nbytes = 2 * 4 * rows * cols  # read + write

        def pct(ms: float) -> float:
            return 100 * ctx.ceiling.fraction(nbytes / (ms * 1e-3))

        def checked(fn: Callable[[], None], target, expected, what: str) -> float:
            """Median ms of fn; then the target is poisoned, fn rerun and its output compared with expected."""
            t = timed(fn)
            target.fill(cp.nan)
            fn()
            if not bool(cp.array_equal(target, expected)):
                raise ValidationError(f"{what} wrong at {rows} x {cols}")
            return t.median_ms

        ctx.progress("tma: CuPy copy and transpose")
        peer_copy = timed(lambda: cp.copyto(dst, src))
        peer_t = timed(lambda: cp.copyto(dst_t, src.T))
        times: dict[tuple[tuple[int, int], str, str], float] = {}
        for box in TILE_SHAPES:
            ctx.progress(f"tma: tile {box[0]} x {box[1]}")
            for op, method in (("copy", "tma"), ("copy", "threads"), ("transpose", "tma"), ("transpose", "threads")):
                target, expected = (dst, src) if op == "copy" else (dst_t, src.T)
                prep = ops.prepare_copy if op == "copy" else ops.prepare_transpose
                times[(box, op, method)] = checked(prep(src, target, box, method=method), target, expected,
                                                   f"{method} {op}, box {box}")
        records = [{"box": box, "config": TmaCopyConfig(stages=default_stages(4 * box[0] * box[1])),
                    "ms": times[(box, "copy", "tma")], "step": "default"} for box in TILE_SHAPES]
        records += self._copy_sweep(ctx, ops, src, dst, checked)
        for r in records:
            r["pct"] = pct(r["ms"])
        best = max(records, key=lambda r: r["pct"])

        # The winner again, with more repeats: the maximum of many medians is biased upwards.
        from ..timing import time_gpu

        confirm_fn = ops.prepare_copy(src, dst, best["box"], config=best["config"])
        confirm = time_gpu(confirm_fn, repeats=repeats if ctx.quick else CONFIRM_REPEATS)
        thread_same = None
        if best["config"].chunk > 1:  # the baseline with the winner's tile order, for a like-for-like ratio
            thread_same = checked(ops.prepare_copy(src, dst, best["box"], method="threads",
                                                   chunk=best["config"].chunk), dst, src, "thread copy (chunked)")

        table = []
        for box in TILE_SHAPES:
            tag = f"{box[0]}x{box[1]}"
            default_ms = times[(box, "copy", "tma")]
            swept = [r for r in records if r["box"] == box and r["step"] != "default"]
            top = min(swept, key=lambda r: r["ms"]) if swept else None
            tma_ms = min(default_ms, top["ms"]) if top else default_ms
            thr_ms = times[(box, "copy", "threads")]
            tt_ms, tthr_ms = times[(box, "transpose", "tma")], times[(box, "transpose", "threads")]
            table.append([f"{box[0]} x {box[1]}", pct(default_ms), pct(top["ms"]) if top else "-",
                          config_label(top["config"]) if top else "-", pct(thr_ms), thr_ms / tma_ms,
                          peer_copy.median_ms / tma_ms, pct(tt_ms), pct(tthr_ms), tthr_ms / tt_ms,
                          peer_t.median_ms / tt_ms])
            result.figures[f"tma_copy_{tag}_pct_ceiling"] = pct(default_ms)
            if top:
                result.figures[f"tma_copy_swept_{tag}_pct_ceiling"] = pct(top["ms"])
            result.figures[f"tma_transpose_{tag}_pct_ceiling"] = pct(tt_ms)
        result.tables.append(Table(
            f"float32 {rows} x {cols} (pitched rows, tail tiles both ways): tile shape by method, % of the copy ceiling",
            ["tile (rows x cols)", "TMA copy % (default ring)", "TMA copy % (best swept)", "best swept configuration",
             "thread copy %", "copy: TMA x threads", "copy: TMA x CuPy", "TMA transpose %", "thread transpose %",
             "transpose: TMA x threads", "transpose: TMA x CuPy"],
            table,
            note=f"bytes = 8 per element (read + write); copy ceiling {ctx.ceiling.tb_per_s:.2f} TB/s measured in "
                 f"this run; CuPy copy {100 * ctx.ceiling.fraction(nbytes / peer_copy.median_s):.1f}%, CuPy "
                 f"transpose (copyto of .T) {100 * ctx.ceiling.fraction(nbytes / peer_t.median_s):.1f}%. TMA copy: "
                 "one thread per block streams boxes through a ring of shared-memory slots; default ring: 4 slots "
                 "(fewer for boxes over 24 KiB), 3 loads ahead, as many blocks as fit, blocks interleaved tile by "
                 "tile; best swept: the fastest configuration of the next table for that tile ('chunk' = side-by-side "
                 "tiles a block takes at a time); the ratios use the faster of the two TMA copies. Threads: 256 per "
                 f"block, 16-byte loads, tiles interleaved. Medians of {repeats} CUDA-event timings; every output "
                 "poisoned, rerun and compared with the source after timing"))
        self._sweep_table(ops, records, result, rows, cols, repeats)

        result.figures["tma_copy_best_pct_ceiling"] = best["pct"]
        result.figures["tma_copy_best_confirmed_pct_ceiling"] = pct(confirm.median_ms)
        note = (f"best TMA copy: tile {best['box'][0]} x {best['box'][1]}, {config_label(best['config'])}: "
                f"{best['pct']:.1f}% of the copy ceiling (best of {len(records)} configurations; re-timed with "
                f"{len(confirm.samples)} repeats: {pct(confirm.median_ms):.1f}%)")
        if thread_same is not None:
            result.figures["tma_copy_best_x_threads_same_order"] = thread_same / best["ms"]
            note += (f"; threads with the same tile and chunk: {pct(thread_same):.1f}% "
                     f"({thread_same / best['ms']:.2f}x slower)")
        result.notes.append(note)
        best_t = max(TILE_SHAPES, key=lambda b: pct(times[(b, "transpose", "tma")]))
        result.figures["tma_transpose_best_pct_ceiling"] = pct(times[(best_t, "transpose", "tma")])
        result.notes.append(f"best TMA transpose: tile {best_t[0]} x {best_t[1]}, "
                            f"{pct(times[(best_t, 'transpose', 'tma')]):.1f}% of the copy ceiling")
        result.checks.append(f"every timed copy and transpose at {rows} x {cols} ({len(records)} TMA copy "
                             "configurations among them) equals its source (or its transpose) element for element, "
                             "output poisoned with NaN before the checked run")

    def _copy_sweep(self, ctx: RunContext, ops: TmaOps, src, dst, checked) -> list[dict[str, Any]]:
        """tma_copy over sweep_grid; chunks for the fastest configuration of each of the SWEEP_TOP fastest tiles;
        then, greedily from the fastest so far, the ring's arrangement, the L2 promotion and the evict-first hints.
        Every configuration measured is returned (median ms and the step that proposed it)."""
        measured: dict[tuple[tuple[int, int], TmaCopyConfig], dict[str, Any]] = {}

        def measure(box: tuple[int, int], config: TmaCopyConfig, step: str) -> None:
            if (box, config) in measured or not ops.copy_fits(4 * box[0] * box[1], config):
                return
            fn = ops.prepare_copy(src, dst, box, config=config)
            ms = checked(fn, dst, src, f"TMA copy ({config_label(config)}), box {box}")
            measured[(box, config)] = {"box": box, "config": config, "ms": ms, "step": step}

        def fastest(count: int = 1) -> list[dict[str, Any]]:
            return sorted(measured.values(), key=lambda r: r["ms"])[:count]

        grid = sweep_grid(TILE_SHAPES, 4, ctx.quick)
        for i, (box, config) in enumerate(grid):
            if i % 16 == 0:
                ctx.progress(f"tma: TMA copy sweep, tile x blocks per SM x slots ({i + 1} of {len(grid)})")
            measure(box, config, "grid")
        if not ctx.quick:
            for box, config in SWEEP_EXTRA:
                measure(box, config, "extra")
        ctx.progress("tma: TMA copy sweep, chunks")
        leaders: dict[tuple[int, int], dict[str, Any]] = {}  # the fastest configuration of each tile, fastest first
        for r in fastest(len(measured)):
            if r["step"] == "grid":
                leaders.setdefault(r["box"], r)
        for r in list(leaders.values())[:1 if ctx.quick else SWEEP_TOP]:
            tiles_x = -(-src.shape[1] // r["box"][1])
            for chunk in (4,) if ctx.quick else SWEEP_CHUNKS + (tiles_x,):  # ... and a whole row of tiles
                for config in chunk_variants(r["config"], chunk):
                    measure(r["box"], config, "chunk")
        refinements: tuple[tuple[str, Callable[[TmaCopyConfig], list[TmaCopyConfig]]], ...] = (
            ("ring", ring_neighbours),
            ("L2 promotion", lambda c: [replace(c, l2_promotion=v) for v in ("none", "256B") if v != c.l2_promotion]),
            ("evict-first", lambda c: [replace(c, evict_first=v) for v in ("loads", "stores", "both")
                                       if v != c.evict_first]),
        )
        for step, variants in refinements:
            ctx.progress(f"tma: TMA copy sweep, {step}")
            best = fastest()[0]
            for config in variants(best["config"]):
                measure(best["box"], config, step)
        return list(measured.values())

    def _sweep_table(self, ops: TmaOps, records: list[dict[str, Any]], result: LabResult, rows: int, cols: int,
                     repeats: int) -> None:
        table = []
        for r in sorted(records, key=lambda r: -r["pct"]):
            box, c = r["box"], r["config"]
            box_bytes = 4 * box[0] * box[1]
            shared = c.shared_bytes(box_bytes)
            bps = c.blocks_per_sm or ops.blocks_per_sm("tma_copy", COPY_THREADS, shared)
            table.append([f"{box[0]} x {box[1]}", box_bytes / 1024, c.stages, c.lookahead, c.reading, c.burst,
                          bps if c.blocks_per_sm else f"{bps} (all that fit)", c.chunk, c.l2_promotion,
                          c.evict_first, bps * shared / 1024, bps * c.lookahead * box_bytes / 1024, r["pct"],
                          r["step"]])
        result.tables.append(Table(
            f"TMA copy, float32 {rows} x {cols}: every configuration measured, fastest first, % of the copy ceiling",
            ["tile (rows x cols)", "box KiB", "slots", "loads ahead", "stores reading", "burst", "blocks/SM",
             "chunk (tiles)",
             "L2 promotion", "evict-first", "shared KiB/SM", "loads in flight/SM KiB", "% of copy ceiling", "step"],
            table,
            note="one issuing thread per block; 'loads ahead' boxes are in flight while the oldest is stored, and "
                 "a slot is refilled once the store that last used it has read it, so 'stores reading' = slots - "
                 "loads ahead stores may still be reading their slots; loads leave in bursts of 'burst' once that "
                 "many are due; the grid is blocks/SM x SMs (persistent); chunk = side-by-side tiles of one row a "
                 "block takes at a time (runs of chunk x tile width; with burst = chunk they leave together). Steps: "
                 "default = the first table's default ring; grid = tile x blocks/SM x slots (rings of about 64, 128, "
                 "192 KiB of shared memory per SM; those that do not fit an SM are left out); extra = a few long-run configurations measured in every "
                 "full run; chunk = chunks of "
                 f"{', '.join(map(str, SWEEP_CHUNKS))} tiles and a whole row of tiles, loads one by one and in "
                 "bursts of a chunk, for the fastest grid "
                 f"configuration of each of the {SWEEP_TOP} fastest tiles; then, greedily from the fastest so far: "
                 "ring (the same shared memory per SM arranged differently), L2 promotion, evict-first hints. "
                 f"Medians of {repeats} CUDA-event timings; every output poisoned, rerun and compared with the source"))

    def _dtype_table(self, ctx: RunContext, ops: TmaOps, result: LabResult) -> None:
        import cupy as cp

        timed, _ = self._timer(ctx)
        rows = (4096 if ctx.quick else 8192) + 77
        width_bytes = (4096 if ctx.quick else 8192) * 4 + 52
        table = []
        for dtype in NUMPY_TYPES:
            es = element_size(dtype)
            cols = width_bytes // es
            box = box_for(dtype, (64, 64))
            tdtype = "bfloat16" if dtype == "bfloat16" else None
            ctx.progress(f"tma: {dtype}")
            src = random_array(cp, None, rows, cols, dtype)
            dst, dst_t = pitched(cp, rows, cols, dtype, extra=2), pitched(cp, cols, rows, dtype)
            nbytes = 2 * es * rows * cols
            cells = [dtype, f"{box[0]} x {box[1]}", f"{src.strides[0]} B"]
            for op in ("copy", "transpose"):
                target = dst if op == "copy" else dst_t
                for method in ("tma", "threads"):
                    prep = ops.prepare_copy if op == "copy" else ops.prepare_transpose
                    fn = prep(src, target, box, method=method, dtype=tdtype)
                    t = timed(fn)
                    poison_against(cp, target, src if op == "copy" else src.T)
                    fn()
                    if not bool(cp.array_equal(target, src if op == "copy" else src.T)):
                        raise ValidationError(f"{method} {op} wrong for {dtype} at {rows} x {cols}")
                    cells.append(100 * ctx.ceiling.fraction(nbytes / t.median_s))
                peer = timed(lambda: cp.copyto(dst, src)) if op == "copy" else timed(lambda: cp.copyto(dst_t, src.T))
                cells.append(100 * ctx.ceiling.fraction(nbytes / peer.median_s))
            table.append(cells)
        result.tables.append(Table(
            f"By element type: {rows} rows of about {width_bytes} B, boxes of 64 rows x 256 B, % of the copy ceiling",
            ["dtype", "box", "row pitch", "TMA copy", "thread copy", "CuPy copy", "TMA transpose", "thread transpose",
             "CuPy transpose"], table,
            note="rows pitched to a multiple of 16 B; " + BF16_NOTE))

    def _multicast(self, ctx: RunContext, ops: TmaOps, result: LabResult) -> None:
        import cupy as cp

        timed, repeats = self._timer(ctx)
        m = k = 8192 if ctx.quick else 16384
        a_bytes = 4 * m * k
        rng = np.random.default_rng()
        table, best = [], {}
        for vb in GEMV_VECTORS_PER_BLOCK:
            ctx.progress(f"tma: multicast gemv, {vb} vectors per block")
            vectors = 8 * vb
            a, x, y, expected = integer_problem(cp, rng, m, k, vectors, reference="cupy")
            baseline = None
            for cluster in (1, 2, 4, 8):
                cells = [vb, cluster]
                times = {}
                for multicast in (False, True):
                    fn = ops.prepare_gemv(a, x, y, vectors_per_block=vb, cluster=cluster, multicast=multicast)
                    t = timed(fn)
                    y.fill(cp.nan)
                    fn()
                    if not bool(cp.array_equal(y, expected)):
                        raise ValidationError(f"gemv wrong at {m} x {k}, cluster {cluster}, multicast {multicast}")
                    times[multicast] = t.median_ms
                baseline = baseline or times[False]
                # Model of the L2 -> SM traffic: per-block loads read the band once per block (8 per band),
                # multicast once per cluster.
                cells += [times[False], times[True], times[False] / times[True], baseline / times[True],
                          a_bytes / (times[True] * 1e-3) / 1e12, 8 * a_bytes / 2**30, 8 // cluster * a_bytes / 2**30]
                table.append(cells)
                result.figures[f"tma_gemv_vb{vb}_c{cluster}_multicast_x_per_block"] = times[False] / times[True]
                if vb == 1:
                    best[cluster] = (times[False], times[True])
            del a, x, y, expected
        result.tables.append(Table(
            f"Batched y = A x, A {m} x {k} float32 ({a_bytes / 2**30:.2f} GiB), 8 blocks per band of 64 rows share "
            "every tile: per-block loads vs TMA multicast",
            ["vectors per block", "cluster", "per-block ms", "multicast ms", "multicast x per-block (same cluster)",
             "multicast x per-block, no cluster", "A TB/s (multicast)", "A from L2, per-block GiB (model)",
             "A from L2, multicast GiB (model)"], table,
            note="cluster 1 = no cluster (multicast then loads for itself); per-block loads use the same cluster "
                 "launch, so the column 'same cluster' isolates multicast. L2->SM bytes are the model: per-block "
                 f"every block reads the band, multicast once per cluster. Medians of {repeats} CUDA-event timings; "
                 "results checked against the exact integer product (float64, cuBLAS)"))
        self._ncu(ctx, result)
        per_block_1 = best[1][0]
        c_best = min(best, key=lambda c: best[c][1])
        mc_ms = best[c_best][1]
        pays = mc_ms < 0.95 * per_block_1
        evidence = (f"A {m} x {k} read by 8 blocks per band, 1 vector each: multicast to clusters of {c_best} "
                    f"{mc_ms:.3f} ms vs per-block loads {per_block_1:.3f} ms ({per_block_1 / mc_ms:.2f}x)")
        if "tma_ncu_l2_bytes_ratio" in result.figures:
            evidence += f"; L2 bytes {result.figures['tma_ncu_l2_bytes_ratio']:.2f}x fewer (ncu, cluster 8)"
        result.selection.append(Selection(
            "tiles reused by several blocks",
            f"TMA multicast, cluster of {c_best}" if pays else "per-block loads (L2 serves the reuse)",
            evidence, fallback="per-block TMA or cp.async loads; below compute capability 9.0 (no clusters) L2 "
                               "alone deduplicates the DRAM reads"))
        result.notes.append("multicast pays " + ("here" if pays else "not here") + f": {evidence}")

    def _ncu(self, ctx: RunContext, result: LabResult) -> None:
        if ctx.quick:
            result.notes.append("Nsight Compute counters skipped in --quick runs (ncu replays each kernel)")
            return
        m, k, vb = 4096, 8192, 1
        ctx.progress("tma: Nsight Compute on the gemv (DRAM and L2 bytes)")
        rows, why = run_ncu(m, k, vb)
        if not rows:
            result.notes.append(f"Nsight Compute counters unavailable: {why}")
            return
        a_bytes = 4 * m * k
        table = []
        for (cluster, multicast), metrics in zip(NCU_CONFIGS, rows):
            dram, l2 = metrics.get(NCU_METRICS[0], math.nan), metrics.get(NCU_METRICS[1], math.nan)
            table.append([cluster, "multicast" if multicast else "per-block", dram / 2**20, dram / a_bytes,
                          l2 / 2**20, l2 / a_bytes])
        per_block_8, multicast_8 = rows[NCU_CONFIGS.index((8, False))], rows[NCU_CONFIGS.index((8, True))]
        result.figures["tma_ncu_l2_bytes_ratio"] = per_block_8[NCU_METRICS[1]] / multicast_8[NCU_METRICS[1]]
        result.tables.append(Table(
            f"Nsight Compute: gemv A {m} x {k} float32 ({a_bytes / 2**20:.0f} MiB), 8 blocks per band, 1 vector each",
            ["cluster", "loads", "DRAM read MiB", "DRAM read / A", "L2 traffic MiB (lts__t_bytes)", "L2 / A"], table,
            note="ncu --clock-control none, one launch per configuration, caches flushed between replays; "
                 "DRAM stays near 1x A either way (L2 deduplicates), the L2 traffic is what multicast removes"))


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--ncu-worker":
        m, k, vb = json.loads(argv[1])
        ncu_worker(int(m), int(k), int(vb))
        return 0
    print("usage: python -m cuadv.labs.tma --ncu-worker '[m, k, vectors_per_block]'", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
