"""Asynchronous copies into shared memory: a 2-D 5-point stencil, synchronous vs ``cuda::memcpy_async`` and TMA
pipelines.

Shows (seed 002, exercise 1; issue 5, item 1): the same stencil staged through shared memory in two layouts and
four ways. Layouts: ``tile`` (16 x 128 output tiles, each re-reading its halo; 32 and 64 x 128 too for ``tma``) and
``strip`` (a block walks down a strip of W columns; each stage brings R new rows and the rows above and below
come from the ring of stages already in shared memory, so every input row is read once). Staging: ``sync``
(plain loads, the baseline), ``thread`` (``cuda::memcpy_async`` with a per-thread ``cuda::pipeline`` plus one
block barrier per stage), ``mbar`` (a block-scope pipeline on explicit full / empty mbarriers:
``cp.async.mbarrier.arrive.noinc`` marks a stage landed, every thread waits on every phase it arrives on, no
block barrier in the loop) and ``tma`` (tiles only, warp specialised: one extra producer warp loads each tile
with its halo as one ``cp.async.bulk.tensor`` box from a tensor map of the input, completing the bytes on a full
mbarrier; every consumer thread releases the slot on an empty mbarrier; TMA zero-fills the box outside the array,
which is the stencil's boundary; optionally the tile leaves by one TMA store from shared memory, a block
takes chunks of side-by-side tiles, and blocks claim their chunks from a self-resetting ticket counter instead
of a static split). Every pipelined variant has an explicit fill, steady state and drain. Tails
that are not a multiple of the 16-byte copy are copied element by element; a row pitch or base that is not
16-byte aligned gets 4-byte copies throughout (and an output that is not gets 4-byte stores): the alignment a
copy claims is always one that was checked. TMA has no 4-byte fallback: a ``tma`` variant refuses such an input
with ``LaunchConfigError`` (use ``thread`` or ``mbar``). Several strip shapes (width, rows per stage, stages,
blocks per SM) and TMA tile heights, stage counts, stores, chunks and ticket claims are measured in the same run and
the best is picked by measurement. In-kernel ``%globaltimer`` stamps per stage are drawn as a fill / steady / drain
timeline.

Needs: compute capability 8.0 (cp.async, mbarrier), 9.0 for the ``tma`` variants; built for sm_90a and sm_100a.
Key insight: a staged kernel that waits for its loads idles for the memory latency once per stage; with S
stages, S - D of them are in flight while one is computed (D = stages one compute reads: 1 for a tile, 2 for a
strip), so the wait leaves the steady state. What is left is how the bytes move: on the H200 the cp.async
pipelines level off near 73-78% of the copy ceiling whatever the tile shape, stage count or row pitch, the strips
below that, while one TMA box per stage (no per-thread copy instructions, no edge code) reaches 82-86% with
tall tiles (less halo per output row) and a static split of the tiles, the most when a block takes 4 side-by-side
tiles in turn (longer runs of each input row from one SM). The static split is then what limits it: some SMs
stream faster than others (24 of the H200's 132, rates 1.4x apart) and sit idle at the end of their share. With
the tiles claimed by ticket (2 side-by-side tiles a claim) the same pipeline reaches 92-93% at 16K x 16K. TMA
stores instead of 16-byte thread stores change little.
Run: ``cuadv bench pipeline`` (``--quick`` for a smaller problem).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compiler import compile_source, kernel_source, parse_arch
from ..errors import LaunchConfigError, ValidationError
from ..launch import LaunchConfig, launch, stream_handle
from ..results import LabResult, Table
from ..tensormap import TensorMap, TensorMapError, TiledLayout, pitch_elements
from ..work_stealing import StatePool
from .base import RunContext

# Mirrors kernels/pipeline.cu.
THREADS = 256
TILE_W, TILE_H, HALO = 128, 16, 4
STAGE_W, STAGE_H = TILE_W + 2 * HALO, TILE_H + 2
STAGE_BYTES = STAGE_W * STAGE_H * 4
STRIP_WIDTHS = (256, 512, 1024)
TMA_TILE_HEIGHTS = (16, 32, 64)  # output rows of a tma tile (TH); its box is (TH + 2) x STAGE_W floats
PARAMS_BYTES = 72
TMA_PARAMS_BYTES, TMA_MAP_OFFSET = 384, 128  # StencilTmaParams: StencilParams, the input's tensor map, the output's
OUT_VEC16 = 1  # StencilParams.flags: the output base and row pitch allow 16-byte stores
TRACE_FIELDS = ("issued", "wait", "ready", "done")
TRACE_LIMIT_BYTES = 1 << 30  # the largest stamp buffer a traced launch allocates
KINDS = ("sync", "thread", "mbar", "tma")
KIND_LABELS = {"sync": "sync (plain loads)", "thread": "cuda::pipeline, thread scope",
               "mbar": "mbarrier pipeline, block scope", "tma": "TMA pipeline, block scope"}

C_CENTER, C_NEIGHBOUR = np.float32(0.5), np.float32(0.125)


@dataclass(frozen=True)
class Variant:
    """One kernel configuration.

    layout: 'tile' (16 x 128 tiles; for kind 'tma' ``rows_per_stage`` x 128, 16, 32 or 64 rows) or 'strip' (a block
    walks down ``width`` columns, ``rows_per_stage`` rows a stage); kind: 'sync', 'thread', 'mbar' or 'tma' (see
    the module docstring); stages: shared-memory buffers (the sync baseline has the fewest the loop allows: 2 for a
    tile, 3 for a strip); blocks_per_sm: 0 for as many as fit, else that many blocks per SM are launched (the
    launch raises if they do not fit). tma_store (kind 'tma' only): each tile is computed into shared memory and
    leaves by one TMA store (two output buffers), instead of 16-byte stores from every thread. chunk (kind 'tma'
    only): a block takes this many side-by-side tiles at a time, so it reads longer runs of each input row.
    tickets (kind 'tma' only): blocks claim their chunks one at a time from a shared counter (cuadv's ``steal``
    without a time slice) instead of a static split, so SMs that stream faster take more of them.
    """

    layout: str
    kind: str
    stages: int
    width: int = TILE_W
    rows_per_stage: int = TILE_H
    blocks_per_sm: int = 0
    tma_store: bool = False
    chunk: int = 1
    tickets: bool = False

    def __post_init__(self):
        if self.layout not in ("tile", "strip"):
            raise ValueError(f"layout must be tile or strip; got {self.layout!r}")
        if self.kind not in KINDS:
            raise ValueError(f"variant kind must be sync, thread or mbar (cp.async), or tma; got {self.kind!r}")
        if self.kind == "tma" and self.layout != "tile":
            raise ValueError(f"the TMA pipeline stages tiles; got layout {self.layout!r}")
        if self.tma_store and self.kind != "tma":
            raise ValueError(f"TMA stores belong to the tma pipeline; got kind {self.kind!r}")
        if self.tickets and self.kind != "tma":
            raise ValueError(f"ticket claims belong to the tma pipeline; got kind {self.kind!r}")
        if self.chunk != 1 and (self.kind != "tma" or not 1 <= self.chunk <= 64):
            raise ValueError(f"chunks of 1 to 64 tiles belong to the tma pipeline; got {self.chunk} for {self.kind!r}")
        if self.blocks_per_sm < 0:
            raise ValueError(f"blocks per SM must be >= 0 (0: as many as fit); got {self.blocks_per_sm}")
        least = self.reuse + 1  # the loop needs one stage in flight beyond the D it computes from
        if self.kind == "sync" and self.stages != least:
            raise ValueError(f"the synchronous {self.layout} baseline has exactly {least} buffers; got {self.stages}")
        if self.kind != "sync" and not least <= self.stages <= 8:
            raise ValueError(f"a {self.layout} pipeline has {least} to 8 stages; got {self.stages}")
        if self.kind == "tma":
            if self.width != TILE_W or self.rows_per_stage not in TMA_TILE_HEIGHTS:
                raise ValueError(f"TMA tiles are 16, 32 or 64 rows x {TILE_W} columns; got {self.rows_per_stage} x "
                                 f"{self.width}")
            return
        if self.layout == "tile":
            if (self.width, self.rows_per_stage) != (TILE_W, TILE_H):
                raise ValueError(f"tiles are {TILE_H} x {TILE_W}; got {self.rows_per_stage} x {self.width}")
            return
        if self.width not in STRIP_WIDTHS:
            raise ValueError(f"strip width must be one of {STRIP_WIDTHS}; got {self.width}")
        groups = THREADS // (self.width // 4)  # row groups: threads share a stage's rows this many ways
        if self.rows_per_stage < 2 or self.rows_per_stage % groups:
            raise ValueError(f"a {self.width}-column strip needs rows per stage >= 2 and a multiple of {groups}; "
                             f"got {self.rows_per_stage}")

    @property
    def threads(self) -> int:
        """Threads per block: THREADS compute; a tma variant adds one producer warp."""
        return THREADS + 32 if self.kind == "tma" else THREADS

    @property
    def reuse(self) -> int:
        """D: consecutive stages one compute reads (a strip's row i-1 may sit in the previous stage)."""
        return 1 if self.layout == "tile" else 2

    @property
    def label(self) -> str:
        what = KIND_LABELS[self.kind] if self.kind == "sync" else f"{self.stages}-stage {KIND_LABELS[self.kind]}"
        shape = (f"tile {self.rows_per_stage}x{TILE_W}" if self.layout == "tile"
                 else f"strip {self.width} cols x {self.rows_per_stage} rows")
        bps = f", {self.blocks_per_sm} blocks/SM" if self.blocks_per_sm else ""
        chunk = f", chunks of {self.chunk}" if self.chunk > 1 else ""
        claims = ", claimed by ticket" if self.tickets else ""
        return f"{shape}: {what}{', TMA stores' if self.tma_store else ''}{chunk}{claims}{bps}"

    @property
    def key(self) -> str:
        """A short name for figures: tile_thread2, tile_tma4_r32, strip_mbar4_w512r8, strip_mbar4_w512r8_b2."""
        key = f"{self.layout}_{self.kind}{self.stages}"
        if self.layout == "strip":
            key += f"_w{self.width}r{self.rows_per_stage}"
        elif self.kind == "tma":
            key += (f"_r{self.rows_per_stage}" + ("_st" if self.tma_store else "")
                    + (f"_c{self.chunk}" if self.chunk > 1 else "") + ("_tk" if self.tickets else ""))
        return key + (f"_b{self.blocks_per_sm}" if self.blocks_per_sm else "")

    @property
    def box_bytes(self) -> int:
        """A tma variant's box: the tile plus its halo, (TH + 2) x STAGE_W floats (the bytes one load completes)."""
        return (self.rows_per_stage + 2) * STAGE_W * 4

    @property
    def shared_bytes(self) -> int:
        if self.kind == "tma":  # 128-byte aligned slots, and up to 128 B to align the ring (TmaBox in pipeline.cu)
            staged = 2 * self.rows_per_stage * TILE_W * 4 if self.tma_store else 0  # two output tiles
            return self.stages * -(-self.box_bytes // 128) * 128 + staged + 128
        if self.layout == "tile":
            return self.stages * STAGE_BYTES
        return self.stages * self.rows_per_stage * (self.width + 2 * HALO) * 4

    def expression(self, align: int) -> str:
        """The kernel; ``align`` is what its copies may claim (a tma kernel has one form: TMA needs 16)."""
        if self.kind == "tma":
            return f"stencil_tile_tma<{self.stages}, {self.rows_per_stage}, {str(self.tma_store).lower()}>"
        if self.layout == "tile":
            return f"stencil_tile_sync<{align}>" if self.kind == "sync" else \
                f"stencil_tile_{self.kind}<{self.stages}, {align}>"
        if self.kind == "sync":
            return f"stencil_strip_sync<{self.width}, {self.rows_per_stage}, {align}>"
        return f"stencil_strip_{self.kind}<{self.width}, {self.rows_per_stage}, {self.stages}, {align}>"


def tile(kind: str, stages: int) -> Variant:
    return Variant("tile", kind, stages)


def tma(stages: int, rows: int = TILE_H, store: bool = False, chunk: int = 1, tickets: bool = False) -> Variant:
    return Variant("tile", "tma", stages, TILE_W, rows, tma_store=store, chunk=chunk, tickets=tickets)


def strip(kind: str, width: int, rows_per_stage: int, stages: int = 3, blocks_per_sm: int = 0) -> Variant:
    return Variant("strip", kind, stages, width, rows_per_stage, blocks_per_sm)


SYNC = tile("sync", 2)
TILE_VARIANTS = (SYNC, tile("thread", 2), tile("thread", 4), tile("mbar", 4),
                 tma(3, 16), tma(4, 16), tma(6, 16), tma(3, 32), tma(4, 32), tma(6, 32), tma(3, 64), tma(4, 64),
                 tma(4, 32, True), tma(3, 64, True), tma(4, 64, True),
                 tma(4, 32, chunk=4), tma(4, 64, chunk=4), tma(4, 64, chunk=8), tma(3, 64, True, 4),
                 tma(3, 64, tickets=True), tma(4, 64, tickets=True), tma(4, 64, chunk=2, tickets=True),
                 tma(3, 64, True, 1, True), tma(3, 64, True, 2, True), tma(4, 32, chunk=2, tickets=True))
# The strip candidates: the measured run picks the best. In flight while a stage is computed: (stages - 2) x
# rows x (width + 8) x 4 B per block, times the blocks that fit on an SM.
STRIP_VARIANTS = (
    strip("sync", 512, 8), strip("sync", 1024, 4),
    strip("thread", 512, 8, 4),
    strip("mbar", 512, 8, 3), strip("mbar", 512, 8, 4), strip("mbar", 512, 8, 4, blocks_per_sm=2),
    strip("mbar", 512, 4, 6), strip("mbar", 1024, 4, 4), strip("mbar", 1024, 8, 3), strip("mbar", 256, 8, 4),
)
VARIANTS = TILE_VARIANTS + STRIP_VARIANTS
TIMELINE_VARIANTS = (strip("sync", 512, 8), strip("thread", 512, 8, 4), strip("mbar", 512, 8, 4), tma(4, 16))
ALIGNS = (16, 4)


def variants_for(arch: str) -> tuple[Variant, ...]:
    """The variants a target runs: the tma ones need sm_90 (TMA)."""
    return VARIANTS if parse_arch(arch) >= (9, 0) else tuple(v for v in VARIANTS if v.kind != "tma")


def stencil_expressions(arch: str = "sm_90a") -> list[str]:
    seen: dict[str, None] = {}
    for v in variants_for(arch):
        for a in ALIGNS:
            seen[v.expression(a)] = None
    return list(seen)


@dataclass(frozen=True)
class StencilParams:
    """The kernels' parameter struct (72 bytes; the layout is asserted in pipeline.cu)."""

    in_ptr: int
    out_ptr: int
    rows: int
    cols: int
    in_pitch: int  # elements
    out_pitch: int  # elements
    c_center: float
    c_neighbour: float
    trace_ptr: int = 0
    trace_capacity: int = 0
    flags: int = 0

    def kernel_param_bytes(self) -> bytes:
        return struct.pack("<QQqqqqffQII", self.in_ptr, self.out_ptr, self.rows, self.cols, self.in_pitch,
                           self.out_pitch, self.c_center, self.c_neighbour, self.trace_ptr, self.trace_capacity,
                           self.flags)


@dataclass(frozen=True)
class StencilTmaParams:
    """The tma kernels' parameter struct (384 bytes: StencilParams, the chunk, the ticket counter's address at
    offset 80 (0: the static split), then the input's 128-byte tensor map at offset 128 and the output's at 256,
    zeros where the variant stores with threads; asserted in pipeline.cu)."""

    params: StencilParams
    map: Any  # a TensorMap (anything with the 128-byte kernel_param_bytes())
    out_map: Any = None
    chunk: int = 1
    tickets: int = 0

    def kernel_param_bytes(self) -> bytes:
        head = self.params.kernel_param_bytes() + struct.pack("<I4xQ", self.chunk, self.tickets)
        out = self.out_map.kernel_param_bytes() if self.out_map is not None else bytes(128)
        return head + bytes(TMA_MAP_OFFSET - len(head)) + self.map.kernel_param_bytes() + out


@dataclass(frozen=True)
class Grid2D:
    """A 2-D float32 device array as the kernels see it."""

    address: int
    rows: int
    cols: int
    pitch: int  # elements between rows

    @classmethod
    def of(cls, array: Any, what: str) -> "Grid2D":
        from ..tensormap import describe_array

        address, dtype, shape, strides = describe_array(array)
        if dtype != "float32" or len(shape) != 2:
            raise LaunchConfigError(f"{what} must be a 2-D float32 array; got {dtype} of shape {shape}")
        if strides[1] != 4 or strides[0] % 4 or strides[0] < 4 * shape[1]:
            raise LaunchConfigError(f"{what} must have contiguous rows (strides {strides} bytes)")
        return cls(address, shape[0], shape[1], strides[0] // 4)

    @property
    def copy_alignment(self) -> int:
        """16 when every row starts 16-byte aligned (base and pitch), else 4: what a copy may claim."""
        return 16 if self.address % 16 == 0 and (self.pitch * 4) % 16 == 0 else 4

    @property
    def tma_loadable(self) -> bool:
        """What a tma variant takes: a 16-byte aligned base and, beyond one row, a 16-byte multiple pitch."""
        return self.address % 16 == 0 and (self.rows == 1 or (self.pitch * 4) % 16 == 0)

    @property
    def tma_pitch_bytes(self) -> int:
        """The row stride a tensor map gets: the pitch, or for one row (whose stride is never used, so the array
        may not have one) the row's size rounded up to 16 bytes."""
        return 4 * self.pitch if self.rows > 1 else -(-4 * self.cols // 16) * 16

    def byte_span(self) -> tuple[int, int]:
        """[first, last) bytes the array's elements occupy."""
        if self.rows == 0 or self.cols == 0:
            return self.address, self.address
        return self.address, self.address + 4 * ((self.rows - 1) * self.pitch + self.cols)


def tile_count(rows: int, cols: int, tile_h: int = TILE_H) -> int:
    return -(-rows // tile_h) * -(-cols // TILE_W)


def strip_work(rows: int, cols: int, width: int) -> int:
    """(strip, row) pairs: what the strip kernels split evenly over their blocks."""
    return -(-cols // width) * rows


def stage_counts(variant: Variant, rows: int, cols: int, grid: int) -> list[int]:
    """Stages each block runs (mirrors Tiling::count_for_block and strip::Stream in pipeline.cu)."""
    if variant.layout == "tile":  # chunks of variant.chunk tiles dealt out in turn; the last may be short
        tiles, c = tile_count(rows, cols, variant.rows_per_stage), variant.chunk
        chunks = -(-tiles // c)
        short = chunks * c - tiles
        return [((chunks - 1 - b) // grid + 1) * c - (short if (chunks - 1) % grid == b else 0) if b < chunks else 0
                for b in range(grid)]
    work, counts = strip_work(rows, cols, variant.width), []
    for b in range(grid):
        w0, w1 = work * b // grid, work * (b + 1) // grid
        runs = (w1 - 1) // rows - w0 // rows + 1 if w1 > w0 else 0
        counts.append(-(-(w1 - w0 + 2 * runs) // variant.rows_per_stage))
    return counts


def tma_layout(variant: Variant, src: Grid2D) -> TiledLayout:
    """The tensor map a tma variant loads ``src`` through (box: one tile with its halo, zero fill outside the
    array), with every TMA rule checked here, before anything reaches the GPU."""
    fallback = "; fallback: the thread or mbar variants (cp.async copies, 4-byte alignment suffices)"
    if max(src.rows, src.cols) > 1 << 31:
        raise LaunchConfigError(f"{variant.label}: TMA box coordinates are 32-bit signed, so rows and columns must "
                                f"be at most 2^31; got {src.rows} x {src.cols}{fallback}")
    try:
        return TiledLayout(src.address, "float32", (src.rows, src.cols), (src.tma_pitch_bytes, 4),
                           (variant.rows_per_stage + 2, STAGE_W), oob_fill="zero")
    except TensorMapError as e:
        raise LaunchConfigError(f"{variant.label} loads x by TMA: {e}{fallback}") from e


def tma_store_layout(variant: Variant, dst: Grid2D) -> TiledLayout:
    """The tensor map a TMA-store variant writes ``dst`` through (box: one output tile), rules checked here."""
    fallback = "; fallback: the same tma variant without TMA stores (16- or 4-byte stores from threads)"
    if not dst.tma_loadable:
        raise LaunchConfigError(f"{variant.label}: TMA stores need an output whose base and row pitch are 16-byte "
                                f"aligned (base {dst.address:#x}, pitch {4 * dst.pitch} B){fallback}")
    try:
        return TiledLayout(dst.address, "float32", (dst.rows, dst.cols), (dst.tma_pitch_bytes, 4),
                           (variant.rows_per_stage, TILE_W))
    except TensorMapError as e:
        raise LaunchConfigError(f"{variant.label} stores out by TMA: {e}{fallback}") from e


def pitched_copy(x: Any) -> Any:
    """A CuPy copy of the 2-D float32 array x whose rows start 16-byte aligned: an input a tma variant takes."""
    import cupy as cp

    rows, cols = x.shape
    storage = cp.zeros((rows, pitch_elements(cols, "float32")), dtype=cp.float32)
    storage[:, :cols] = x
    return storage[:, :cols]


def reference(x: np.ndarray, c_center=C_CENTER, c_neighbour=C_NEIGHBOUR) -> np.ndarray:
    """NumPy float32, zero outside the array, operations in the kernels' order."""
    x = np.asarray(x, dtype=np.float32)
    p = np.pad(x, 1)
    total = ((p[:-2, 1:-1] + p[2:, 1:-1]) + p[1:-1, :-2]) + p[1:-1, 2:]
    return np.float32(c_center) * x + np.float32(c_neighbour) * total


class Stencil:
    """The stencil kernels for one target, launched on CuPy / PyTorch / any CUDA-array-interface arrays."""

    def __init__(self, arch: str | None = None):
        if arch is None:
            from ..device import current_device

            arch = current_device().caps.arch
        self.module = compile_source(kernel_source("pipeline.cu"), name="pipeline", arch=arch,
                                     name_expressions=stencil_expressions(arch))
        self.variants = variants_for(arch)
        self._fit: dict[tuple[Variant, int], int] = {}

    @staticmethod
    def tickets(stream: Any = None) -> int:
        """The address of the ticket counter a variant with ``tickets`` launched on ``stream`` uses: one 8-byte word
        per stream, and a fresh one for every graph capture (launches on one stream never overlap; a graph may
        run beside the stream it was captured on). Zero before the first launch; every launch leaves it zero. Only
        the stencil's launches touch it: a value written there from outside makes the next launch skip tiles."""
        return _TICKETS.slot_for(stream_handle(stream))[0]

    def kernel(self, variant: Variant, align: int):
        if variant.kind == "tma" and parse_arch(self.module.arch) < (9, 0):
            raise LaunchConfigError(f"{variant.label} needs sm_90 (TMA); built for {self.module.arch}: use a thread "
                                    "or mbar variant")
        expression = variant.expression(align)
        if expression not in self.module.lowered_names:
            raise LaunchConfigError(f"{variant.label}: kernel {expression} is not among those built (the kernels "
                                    "of cuadv.labs.pipeline.VARIANTS); add the variant there")
        return self.module.kernel(expression)

    def blocks_per_sm(self, variant: Variant, align: int) -> int:
        """How many blocks of this variant fit on one SM (registers, shared memory, threads)."""
        key = (variant, align)
        if key not in self._fit:
            from ..occupancy import max_active_blocks_per_sm

            self._fit[key] = max_active_blocks_per_sm(self.kernel(variant, align), variant.threads,
                                                      variant.shared_bytes)
        return self._fit[key]

    def fits(self, variant: Variant, align: int = 16) -> bool:
        fit = self.blocks_per_sm(variant, align)
        return fit >= max(1, variant.blocks_per_sm)

    def grid(self, variant: Variant, align: int, rows: int, cols: int) -> int:
        """Blocks to launch: at most as many as run at once (each then runs a long sequence of stages), and for a
        strip no more than one per R (strip, row) pairs."""
        from ..device import current_device

        fit = self.blocks_per_sm(variant, align)
        if fit < 1:
            raise LaunchConfigError(f"{variant.label} does not fit on an SM ({variant.shared_bytes} B shared memory, "
                                    f"{variant.threads} threads)")
        if variant.blocks_per_sm > fit:
            raise LaunchConfigError(f"{variant.label}: {variant.blocks_per_sm} blocks per SM requested but only {fit} "
                                    f"fit ({variant.shared_bytes} B shared memory, {variant.threads} threads)")
        resident = (variant.blocks_per_sm or fit) * current_device().caps.sm_count
        if variant.layout == "tile":
            return max(1, min(resident, -(-tile_count(rows, cols, variant.rows_per_stage) // variant.chunk)))
        work = strip_work(rows, cols, variant.width)
        grid = max(1, min(resident, work // variant.rows_per_stage))
        if work * grid >= 1 << 63:
            raise LaunchConfigError(f"{rows} x {cols} is too large for the strip split ({work} strip rows x {grid} "
                                    "blocks overflows 64 bits)")
        return grid

    def __call__(self, variant: Variant, x: Any, out: Any, c_center=C_CENTER, c_neighbour=C_NEIGHBOUR, *,
                 trace: "Trace | None" = None, stream: Any = None) -> int:
        """out = stencil(x); returns the grid used (0: empty array, nothing launched)."""
        src, dst = Grid2D.of(x, "x"), Grid2D.of(out, "out")
        if (src.rows, src.cols) != (dst.rows, dst.cols):
            raise LaunchConfigError(f"out has shape {(dst.rows, dst.cols)} but x has {(src.rows, src.cols)}")
        if src.rows == 0 or src.cols == 0:
            return 0
        (a0, a1), (b0, b1) = src.byte_span(), dst.byte_span()
        if a0 < b1 and b0 < a1:
            raise LaunchConfigError("out overlaps x: the stencil reads neighbours, so it cannot run in place")
        if variant.layout == "strip" and max(src.rows, -(-src.cols // variant.width)) >= 1 << 31:
            raise LaunchConfigError(f"the strip kernels index rows and strips with 32 bits: {src.rows} rows x "
                                    f"{src.cols} columns needs more than {(1 << 31) - 1}; use a tile variant")
        layout = tma_layout(variant, src) if variant.kind == "tma" else None
        out_layout = tma_store_layout(variant, dst) if variant.tma_store else None
        align = src.copy_alignment
        grid = self.grid(variant, align, src.rows, src.cols)
        trace_ptr = capacity = 0
        if trace is not None:  # with tickets any block may run any number of tiles
            capacity = (tile_count(src.rows, src.cols, variant.rows_per_stage) if variant.tickets
                        else max(stage_counts(variant, src.rows, src.cols, grid)))
            if grid * capacity * len(TRACE_FIELDS) * 8 > TRACE_LIMIT_BYTES:
                raise LaunchConfigError(f"a trace of {variant.label} on {src.rows} x {src.cols} needs {grid} blocks x "
                                        f"{capacity} stages x 32 B, over {TRACE_LIMIT_BYTES >> 20} MiB; trace a "
                                        "smaller array (a variant claimed by ticket keeps room for every tile per "
                                        "block)")
            trace.prepare(grid, capacity, stream_handle(stream))
            trace_ptr, capacity = trace.buffer.ptr, trace.capacity
        params = StencilParams(src.address, dst.address, src.rows, src.cols, src.pitch, dst.pitch,
                               float(c_center), float(c_neighbour), trace_ptr, capacity,
                               OUT_VEC16 if dst.copy_alignment == 16 else 0)
        args = params if layout is None else StencilTmaParams(
            params, TensorMap(layout, owner=x), TensorMap(out_layout, owner=out) if out_layout else None, variant.chunk,
            self.tickets(stream) if variant.tickets else 0)
        config = LaunchConfig(grid=grid, block=variant.threads, shared_mem=variant.shared_bytes)
        launch(self.kernel(variant, align), config, args, stream=stream)
        return grid


# The stencil's own counters: never shared with steal's, whose word holds a launch tag.
_TICKETS = StatePool("the stencil's ticket claims")


class Trace:
    """Per-stage %globaltimer stamps of thread 0 of every block: issued, wait, ready, done (nanoseconds)."""

    def __init__(self):
        self.buffer = None
        self.blocks = self.capacity = self.stream = 0

    def prepare(self, blocks: int, capacity: int, stream: int) -> None:
        """A zeroed buffer for one launch on ``stream`` (zeroed there, so a non-blocking stream's kernel sees zeros)."""
        from ..memory import DeviceBuffer

        self.blocks, self.capacity, self.stream = blocks, max(1, capacity), stream
        self.buffer = DeviceBuffer(blocks * self.capacity * len(TRACE_FIELDS) * 8, fill=None)
        self.buffer.fill(0, stream=stream)

    def records(self) -> np.ndarray:
        """uint64 array [block, stage, field] (after the traced launch's stream has finished); a stage a block
        did not run is all zeros."""
        return self.buffer.to_host(np.uint64, self.stream).reshape(self.blocks, self.capacity, len(TRACE_FIELDS))


def peer_kernel():
    """CuPy's way: one ElementwiseKernel reading the neighbours straight from global memory (caches do the reuse)."""
    import cupy as cp

    return cp.ElementwiseKernel(
        "raw float32 x, int64 rows, int64 cols, float32 c0, float32 c1", "float32 y",
        """
        const long long r = i / cols, c = i - r * cols;
        const float up = r > 0 ? x[i - cols] : 0.0f;
        const float down = r + 1 < rows ? x[i + cols] : 0.0f;
        const float left = c > 0 ? x[i - 1] : 0.0f;
        const float right = c + 1 < cols ? x[i + 1] : 0.0f;
        const float s = __fadd_rn(__fadd_rn(__fadd_rn(up, down), left), right);
        y = __fadd_rn(__fmul_rn(c0, x[i]), __fmul_rn(c1, s));
        """, "cuadv_stencil5_peer")


def run_peer(peer, x, out) -> None:
    rows, cols = x.shape
    peer(x.reshape(-1), np.int64(rows), np.int64(cols), C_CENTER, C_NEIGHBOUR, out)


# Shapes that exercise every edge: single row/column, tails in both directions, a 16-byte-aligned pitch with a
# partial last chunk, pitches that are not multiples of 16 bytes, a misaligned base, a tile grid with remainders,
# strips whose last one is partial, blocks whose share of (strip, row) pairs spans several strips, a wide
# 1-row array (many 1-row runs per block) and heights that are no multiple of any stage.
VALIDATION_SHAPES = ((1, 1), (1, 7), (7, 1), (2, 3), (17, 131), (16, 128), (33, 300), (129, 257), (1000, 1001),
                     (257, 1031), (1, 5000), (12, 4), (3, 1030), (35, 2100))


def _cases(cp, rng, shapes) -> list[tuple[str, Any, np.ndarray, bool]]:
    """(name, x, x on the host, whether out is a view starting 4 bytes past a 16-byte boundary)."""
    cases = []
    for rows, cols in shapes:
        host = rng.standard_normal((rows, cols), dtype=np.float32)
        cases.append((f"{rows}x{cols}", cp.asarray(host), host, False))
    storage = cp.asarray(rng.standard_normal((61, 260), dtype=np.float32))
    cases.append(("61x253 pitched (pitch 260)", storage[:, :253], cp.asnumpy(storage[:, :253]), False))
    cases.append(("61x259 base +4 B", storage[:, 1:], cp.asnumpy(storage[:, 1:]), False))
    host = rng.standard_normal((45, 520), dtype=np.float32)
    cases.append(("45x520 into out base +4 B", cp.asarray(host), host, True))
    return cases


def _expect_refusal(stencil: Stencil, variant: Variant, x: Any, out: Any, what: str) -> None:
    try:
        stencil(variant, x, out)
    except LaunchConfigError:
        return
    raise ValidationError(f"stencil {variant.label}, {what} whose base or pitch is not 16-byte aligned was "
                          "launched instead of refused")


def validate(stencil: Stencil, shapes=VALIDATION_SHAPES, variants=None) -> list[str]:
    """Every element of every variant (default: all the stencil's target runs) against NumPy, on fresh random data;
    outputs poisoned with NaN first. Also a pitched view (16-byte pitch, odd width), a view whose base is 4 bytes
    past a 16-byte boundary, and an output view that is not 16-byte aligned (4-byte stores; the float before each
    row must stay NaN). A tma variant must refuse every input whose base or pitch is not 16-byte aligned (TMA
    cannot load it); it is then checked on a copy of that input with 16-byte rows. A TMA-store variant likewise
    refuses such an output and is checked on one with 16-byte rows."""
    import cupy as cp

    variants = stencil.variants if variants is None else variants
    cases = _cases(cp, np.random.default_rng(), shapes)
    for name, x, host, shifted_out in cases:
        expected = reference(host)
        rows, cols = host.shape
        for variant in variants:
            storage = cp.full((rows, cols + 1 if shifted_out else cols), cp.nan, dtype=cp.float32)
            out = storage[:, 1:] if shifted_out else storage
            src, guarded = x, shifted_out
            if variant.kind == "tma" and not Grid2D.of(x, "x").tma_loadable:
                _expect_refusal(stencil, variant, x, out, f"{name}: a TMA load of an input")
                src = pitched_copy(x)
            if variant.tma_store and not Grid2D.of(out, "out").tma_loadable:
                _expect_refusal(stencil, variant, src, out, f"{name}: a TMA store into an output")
                out, guarded = pitched_copy(cp.full((rows, cols), cp.nan, dtype=cp.float32)), False
            stencil(variant, src, out)
            got = cp.asnumpy(out)
            if not np.array_equal(got, expected):
                bad = np.argwhere(got != expected)
                raise ValidationError(f"stencil {variant.label}, {name} (copy alignment "
                                      f"{Grid2D.of(src, 'x').copy_alignment} B): {len(bad)} wrong elements, first "
                                      f"at {tuple(bad[0])}: {got[tuple(bad[0])]} != {expected[tuple(bad[0])]}")
            if guarded and not bool(cp.isnan(storage[:, 0]).all()):
                raise ValidationError(f"stencil {variant.label}, {name}: wrote outside the output view")
    empty = cp.zeros((0, 5), dtype=cp.float32)
    for variant in (SYNC, strip("mbar", 512, 8, 4), *(v for v in variants if v.kind == "tma")):
        if stencil(variant, empty, empty) != 0:
            raise ValidationError("an empty array launched a kernel")
    return [f"every element of {len(variants)} variants equals NumPy's float32 stencil (bit for bit) on "
            f"{len(cases)} shapes: {', '.join(n for n, _, _, _ in cases)}; 16-byte copies where base and pitch "
            "allow, 4-byte copies otherwise (16-byte stores likewise); the TMA variants refuse a base or pitch "
            "that is not 16-byte aligned and are checked on a 16-byte-pitched copy instead (with TMA stores, "
            "likewise for the output); an empty array launches nothing"]


def trace_phases(rec: np.ndarray, pipelined: bool) -> dict[str, float]:
    """Stall and phase lengths (microseconds, medians over blocks) from one variant's trace."""
    stalls, fills, drains, spans = [], [], [], []
    for block in rec:
        n = int(np.count_nonzero(block[:, 3]))
        if n == 0:
            continue
        b = block[:n].astype(np.int64)
        stalls.append(np.median(b[:, 2] - b[:, 1]))
        spans.append(b[-1, 3] - b[0, 0])
        fills.append(b[0, 2] - b[0, 0])
        last_issue = b[:, 0].max()
        drains.append(b[-1, 3] - last_issue if pipelined else 0)
    med = lambda v: float(np.median(v)) / 1e3 if v else float("nan")  # noqa: E731
    return {"stall_us": med(stalls), "fill_us": med(fills), "drain_us": med(drains), "block_span_us": med(spans)}


def plot_timeline(traces: dict[str, tuple[np.ndarray, int, bool]], path, title: str, blocks: int = 3) -> None:
    """One panel per variant (records, stages, pipelined), one row per block: copies in flight (issued -> ready,
    thin, stacked by slot), waits (wait -> ready, red) and compute (ready -> done, thick); fill and drain shaded
    for the pipelined variants."""
    from ..plots import _pyplot, save_figure

    plt = _pyplot()
    fig, axes = plt.subplots(len(traces), 1, figsize=(12, 2.2 + 1.6 * len(traces)), squeeze=False)
    for ax, (label, (rec, stages, pipelined)) in zip(axes[:, 0], traces.items()):
        written = [b for b in range(rec.shape[0]) if rec[b, 0, 3]]
        chosen = written[:: max(1, len(written) // blocks)][:blocks]
        t0 = min(int(rec[b, 0, 0]) for b in chosen) if chosen else 0
        for row, b in enumerate(chosen):
            n = int(np.count_nonzero(rec[b, :, 3]))
            r = (rec[b, :n].astype(np.int64) - t0) / 1e3
            y = row * (stages + 2)
            for k in range(n):
                ax.plot([r[k, 0], r[k, 2]], [y + 1 + k % stages] * 2, color="tab:blue", lw=1)
                ax.barh(y, r[k, 2] - r[k, 1], left=r[k, 1], height=0.8, color="tab:red", lw=0)
                ax.barh(y, r[k, 3] - r[k, 2], left=r[k, 2], height=0.8, color="tab:green", lw=0)
            if pipelined and n:
                ax.axvspan(r[0, 0], r[0, 2], ymin=0, ymax=1, color="gold", alpha=0.08)
                ax.axvspan(r[:, 0].max(), r[-1, 3], color="purple", alpha=0.06)
        ax.set_yticks([])
        ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    axes[0, 0].set_title(title)
    axes[-1, 0].set_xlabel("time since the traced blocks' first issue (us)")
    from matplotlib.patches import Patch

    axes[0, 0].legend(handles=[Patch(color="tab:blue", label="copy in flight (issued -> ready), row = slot"),
                               Patch(color="tab:red", label="waiting for data"),
                               Patch(color="tab:green", label="compute"),
                               Patch(color="gold", alpha=0.3, label="fill"),
                               Patch(color="purple", alpha=0.2, label="drain")],
                      loc="upper right", fontsize=7, ncol=5)
    save_figure(fig, path)


class PipelineLab:
    name = "pipeline"
    title = "Async copies into shared memory: a 5-point stencil, synchronous vs memcpy_async pipelines"

    def supported(self, caps) -> str | None:
        if caps.compute_capability < (8, 0):
            return (f"cuda::memcpy_async into shared memory (cp.async) needs compute capability >= 8.0 "
                    f"(got {caps.cc_string()}); fallback: the synchronous variants (plain loads)")
        return None

    def build(self, arch: str):
        return [compile_source(kernel_source("pipeline.cu"), name="pipeline", arch=arch,
                               name_expressions=stencil_expressions(arch))]

    def smoke(self) -> None:
        """Every kernel (both copy alignments, vector and scalar stores) on small shapes, and a traced run."""
        stencil = Stencil()
        validate(stencil, shapes=((1, 1), (17, 131), (33, 300), (40, 301), (3, 1030)))
        import cupy as cp

        x = cp.asarray(np.random.default_rng().standard_normal((64, 1024), dtype=np.float32))
        out = cp.empty_like(x)
        for variant in (tile("mbar", 4), strip("mbar", 512, 8, 4), *(v for v in stencil.variants if v.kind == "tma")):
            trace = Trace()
            stencil(variant, x, out, trace=trace)
            if not np.array_equal(cp.asnumpy(out), reference(cp.asnumpy(x))):
                raise ValidationError(f"stencil {variant.label} with tracing: wrong result")

    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        from ..timing import time_gpu

        result = LabResult(self.name, self.title)
        stencil = Stencil()
        candidates = [v for v in stencil.variants if stencil.fits(v)]
        for v in stencil.variants:
            if v not in candidates:
                result.notes.append(f"not measured: {v.label} does not fit ({stencil.blocks_per_sm(v, 16)} blocks "
                                    f"per SM fit with {v.shared_bytes} B shared memory)")
        ctx.progress("pipeline: validating every variant")
        result.checks += validate(stencil, variants=candidates)
        peer = peer_kernel()
        repeats = 10 if ctx.quick else 30
        side = 8192 if ctx.quick else 16384
        shapes = [(side, side, "square"), (side, side - 1, "odd width: rows not 16-byte aligned")]
        if not ctx.quick:
            shapes.insert(1, (8192, 8192, "square"))
        sms = ctx.caps.sm_count
        rows_out = []
        rng = cp.random.default_rng()
        for rows, cols, what in shapes:
            x = rng.standard_normal((rows, cols), dtype=cp.float32)
            out = cp.empty_like(x)
            nbytes = 2 * 4 * rows * cols  # the formula: every input read once, every output written once
            size = f"{rows} x {cols} ({what})"
            ctx.progress(f"pipeline: {size}: checking the peer against NumPy")
            expected_dev = cp.empty_like(x)
            run_peer(peer, x, expected_dev)
            if not np.array_equal(cp.asnumpy(expected_dev), reference(cp.asnumpy(x))):
                raise ValidationError(f"CuPy peer stencil differs from NumPy at {size}")
            peer_t = time_gpu(lambda: run_peer(peer, x, out), repeats=repeats)
            align = Grid2D.of(x, "x").copy_alignment
            loadable = Grid2D.of(x, "x").tma_loadable
            measured = {}
            if not loadable and any(v.kind == "tma" for v in candidates):
                result.notes.append(f"not measured at {size}: the TMA variants (TMA needs rows that start 16-byte "
                                    "aligned; the cp.async variants fall back to 4-byte copies)")
            for variant in candidates:
                if variant.kind == "tma" and not loadable:
                    continue
                ctx.progress(f"pipeline: {size}: {variant.label}")
                t = time_gpu(lambda: stencil(variant, x, out), repeats=repeats)
                out.fill(cp.nan)
                grid = stencil(variant, x, out)
                if not bool(cp.array_equal(out, expected_dev)):
                    raise ValidationError(f"stencil {variant.label} wrong at {size}")
                measured[variant] = (t, grid)
            base_ms = min(t.median_ms for v, (t, _) in measured.items() if v.kind == "sync")
            for variant, (t, grid) in measured.items():
                bw = t.rate(nbytes)
                pct = 100 * ctx.ceiling.fraction(bw)
                per_sm = variant.blocks_per_sm or stencil.blocks_per_sm(variant, align)
                copy = "TMA" if variant.kind == "tma" else f"{align} B"
                rows_out.append([size, variant.label, copy, grid, per_sm, variant.shared_bytes / 1024,
                                 t.median_ms, bw / 1e9, pct, base_ms / t.median_ms, peer_t.median_ms / t.median_ms])
                key = f"pipeline_{variant.key}_{rows}x{cols}"
                result.figures[key + "_pct_ceiling"] = pct
                result.figures[key + "_x_sync"] = base_ms / t.median_ms
            peer_bw = peer_t.rate(nbytes)
            rows_out.append([size, "CuPy ElementwiseKernel (global loads)", "-", "-", "-", "-", peer_t.median_ms,
                             peer_bw / 1e9, 100 * ctx.ceiling.fraction(peer_bw), base_ms / peer_t.median_ms, 1.0])
            result.figures[f"pipeline_cupy_{rows}x{cols}_pct_ceiling"] = 100 * ctx.ceiling.fraction(peer_bw)
        result.checks.append("at every measured size every variant's output equals the CuPy peer's, which equals "
                             "NumPy's (outputs poisoned with NaN before the checked run)")
        result.tables.append(Table(
            "2-D 5-point stencil (float32), staged through shared memory",
            ["size", "variant", "copy", "blocks", "blocks/SM", "shared KB/block", "median ms", "GB/s",
             "% of copy ceiling", "x best sync", "x CuPy"],
            rows_out,
            note=f"bytes = 8 per element (read + write; halo re-reads not counted); copy ceiling "
                 f"{ctx.ceiling.tb_per_s:.2f} TB/s measured in this run; {THREADS} threads per block (tma: plus one "
                 f"producer warp); {sms} SMs. "
                 f"tile: {TILE_H} x {TILE_W} output tiles (tma: 16, 32 or 64 x {TILE_W}, each tile and its halo one "
                 "TMA box) +1 halo row and 4 halo columns each side, blocks = occupancy x SMs striding over the "
                 "tiles ('claimed by ticket': each block claims its next chunk of tiles from a shared counter "
                 "instead). strip: each block streams an equal share of the (strip, row) pairs, R rows per stage, rows "
                 "above/below reused from the ring of stages. 'x best sync': the "
                 "fastest synchronous (plain-load) variant at that size over this one's time. Medians of "
                 f"{repeats} CUDA-event timings (each queued behind a 150 us spin so host launch time is not "
                 "timed). 'copy' is the alignment the copies claim (4 B when the row pitch is not a multiple of "
                 "16 B), or TMA"))
        self._summary(result, measured_at=f"{side}x{side}")
        self._timeline(ctx, stencil, result)
        return result

    def _summary(self, result: LabResult, measured_at: str) -> None:
        """The best pipelined and the best synchronous variant at the largest square size, by measurement."""
        def pct(v: Variant) -> float:
            return result.figures.get(f"pipeline_{v.key}_{measured_at}_pct_ceiling", float("nan"))

        measured = [v for v in VARIANTS if pct(v) == pct(v)]
        best = max((v for v in measured if v.kind != "sync"), key=pct)
        best_sync = max((v for v in measured if v.kind == "sync"), key=pct)
        result.figures["pipeline_best_pct_ceiling"] = pct(best)
        result.figures["pipeline_best_x_sync"] = result.figures[f"pipeline_{best.key}_{measured_at}_x_sync"]
        result.figures["pipeline_best_sync_pct_ceiling"] = pct(best_sync)
        cupy = result.figures.get(f"pipeline_cupy_{measured_at}_pct_ceiling")
        result.notes.append(
            f"best pipelined variant at {measured_at.replace('x', ' x ')}: {best.label}, {pct(best):.1f}% of the copy "
            f"ceiling, {result.figures['pipeline_best_x_sync']:.2f}x the best synchronous variant ({best_sync.label}, "
            f"{pct(best_sync):.1f}%)" + (f", {pct(best) / cupy:.2f}x CuPy" if cupy else ""))

    def _timeline(self, ctx: RunContext, stencil: Stencil, result: LabResult) -> None:
        import cupy as cp

        ctx.progress("pipeline: traced runs for the timeline")
        x = cp.random.default_rng().standard_normal((8192, 4096), dtype=cp.float32)
        out = cp.empty_like(x)
        expected = cp.empty_like(x)
        run_peer(peer_kernel(), x, expected)
        traces, rows = {}, []
        for variant in TIMELINE_VARIANTS:
            if variant not in stencil.variants or not stencil.fits(variant):
                continue
            trace = Trace()
            stencil(variant, x, out, trace=trace)
            if not bool(cp.array_equal(out, expected)):
                raise ValidationError(f"stencil {variant.label} with tracing: wrong result")
            rec = trace.records()
            pipelined = variant.kind != "sync"
            traces[variant.label] = (rec, variant.stages, pipelined)
            ph = trace_phases(rec, pipelined)
            rows.append([variant.label, trace.blocks, trace.capacity, ph["stall_us"], ph["fill_us"], ph["drain_us"],
                         ph["block_span_us"]])
            result.figures[f"pipeline_{variant.key}_median_stall_us"] = ph["stall_us"]
            deltas = np.diff(np.unique(rec[rec > 0]))
            if len(deltas):
                result.figures["globaltimer_resolution_ns"] = float(deltas.min())
        name = "pipeline_timeline.png"
        plot_timeline(traces, ctx.plot_path(name), "Stencil 8192 x 4096: per-stage stamps of thread 0 (3 blocks "
                      "per variant)")
        result.plots.append(name)
        result.tables.append(Table(
            "Where the time goes (thread 0 of each block, %globaltimer, medians over blocks)",
            ["variant", "blocks", "stages per block (max)", "stall per stage us", "fill us", "drain us",
             "block span us"],
            rows,
            note="stall = waiting for a stage's data (wait -> ready); fill = first issue -> first stage ready; "
                 "drain = last issue -> last stage done (pipelined variants). For the sync variant 'issued' is "
                 "after its plain loads returned. A traced launch; the timings above are untraced"))
        res = result.figures.get("globaltimer_resolution_ns")
        if res is not None:
            result.notes.append(f"smallest %globaltimer step seen: {res:.0f} ns (stamps finer than that are "
                                "quantised)")
