"""The stencil staged through shared memory: the kernels' variants, their parameter structs, the checks every
launch runs first (dtype, shape, strides, overlap, the TMA rules) and the ``Stencil`` that launches them.

Moved from ``cuadv.labs.pipeline`` (which measures and reports them); the device code is ``pipeline.cu`` beside this
file, built on the public header ``cuadv/pipeline.cuh``. Needs compute capability 8.0 (cp.async, mbarrier), 9.0 for
the ``tma`` variants.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..arch import parse_arch
from ..compiler import shipped
from ..errors import LaunchConfigError
from ..interop import capturing, device_array, overlaps, relaxed_capture_mode, stream_handle
from ..launching import LaunchConfig, launch
from ..memo import BoundedMemo
from ..params import StructArgument, c_struct
from ..state_pool import StatePool
from ..tma.tensormap import TensorMap, TensorMapError, TiledLayout

# Mirrors pipeline.cu (beside this file).
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

TMA_MAX_EXTENT = 1 << 31  # rows and columns a tma variant takes: TMA box coordinates are 32-bit signed
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


PARAMS_LAYOUT = c_struct("StencilParams", [
    ("in_ptr", "<u8"), ("out_ptr", "<u8"), ("rows", "<i8"), ("cols", "<i8"), ("in_pitch", "<i8"), ("out_pitch", "<i8"),
    ("c_center", "<f4"), ("c_neighbour", "<f4"), ("trace_ptr", "<u8"), ("trace_capacity", "<u4"), ("flags", "<u4"),
], size=72)
TMA_PARAMS_LAYOUT = c_struct("StencilTmaParams", [
    ("params", "V72"), ("chunk", "<u4"), ("tickets", "<u8"), ("_to_maps", f"V{TMA_MAP_OFFSET - 88}"),
    ("map", "V128"), ("out_map", "V128"),  # the output's map stays zeros where the variant stores with threads
], size=TMA_PARAMS_BYTES)


@dataclass(frozen=True)
class StencilParams(StructArgument):
    """The kernels' parameter struct (72 bytes; the layout is asserted in pipeline.cu)."""

    LAYOUT: ClassVar[np.dtype] = PARAMS_LAYOUT

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



@dataclass(frozen=True)
class StencilTmaParams(StructArgument):
    """The tma kernels' parameter struct (384 bytes: StencilParams, the chunk, the ticket counter's address at
    offset 80 (0: the static split), then the input's 128-byte tensor map at offset 128 and the output's at 256,
    zeros where the variant stores with threads; asserted in pipeline.cu)."""

    LAYOUT: ClassVar[np.dtype] = TMA_PARAMS_LAYOUT
    params: StencilParams
    map: Any  # a TensorMap (anything with the 128-byte kernel_param_bytes())
    out_map: Any = None
    chunk: int = 1
    tickets: int = 0


@dataclass(frozen=True)
class Grid2D:
    """A 2-D float32 device array as the kernels see it."""

    address: int
    rows: int
    cols: int
    pitch: int  # elements between rows

    @classmethod
    def of(cls, array: Any, what: str) -> "Grid2D":
        from ..tma.tensormap import describe_array

        address, dtype, shape, strides = describe_array(array)
        if dtype != "float32" or len(shape) != 2:
            raise LaunchConfigError(f"{what} must be a 2-D float32 array; got {dtype} of shape {shape}")
        if shape[0] == 1 and (strides[0] < 4 * shape[1] or strides[0] % 4):
            # One row: its stride is never used (a new axis may report 0, a transposed column 4), so: dense.
            strides = (4 * shape[1], strides[1])
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
    def tma_addressable(self) -> bool:
        """Whether TMA's 32-bit signed coordinates reach every row and column (``tma_layout``'s limit)."""
        return max(self.rows, self.cols) <= TMA_MAX_EXTENT

    @property
    def tma_pitch_bytes(self) -> int:
        """The row stride a tensor map gets: the pitch, or for one row (whose stride is never used, so the array
        may not have one) the row's size rounded up to 16 bytes."""
        return 4 * self.pitch if self.rows > 1 else -(-4 * self.cols // 16) * 16


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
    if not src.tma_addressable:
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
        self.module = shipped("pipeline.cu", arch=arch, name_expressions=stencil_expressions(arch), name="pipeline")
        self.variants = variants_for(arch)
        self._fit: dict[tuple[Variant, int], int] = {}
        self._pieces = BoundedMemo(PIECES_MEMO)  # (variant, Grid2D, Grid2D) -> _launch_pieces'

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
                                    "of cuadv.pipeline.BUILT_VARIANTS)")
        return self.module.kernel(expression)

    def blocks_per_sm(self, variant: Variant, align: int) -> int:
        """How many blocks of this variant fit on one SM (registers, shared memory, threads)."""
        key = (variant, align)
        if key not in self._fit:
            from ..kernel import max_active_blocks_per_sm

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
        if overlaps(device_array(out), device_array(x)):
            raise LaunchConfigError("out overlaps x: the stencil reads neighbours, so it cannot run in place; pass a "
                                    "separate out")
        if variant.layout == "strip" and max(src.rows, -(-src.cols // variant.width)) >= 1 << 31:
            raise LaunchConfigError(f"the strip kernels index rows and strips with 32 bits: {src.rows} rows x "
                                    f"{src.cols} columns needs more than {(1 << 31) - 1}; use a tile variant")
        kernel, config, maps = self._launch_pieces(variant, src, dst)
        grid = config.grid[0]
        trace_ptr = capacity = 0
        if trace is not None:  # with tickets any block may run any number of tiles
            capacity = (tile_count(src.rows, src.cols, variant.rows_per_stage) if variant.tickets
                        else max(stage_counts(variant, src.rows, src.cols, grid)))
            limit = getattr(trace, "limit_bytes", TRACE_LIMIT_BYTES)
            if grid * capacity * len(TRACE_FIELDS) * 8 > limit:
                raise LaunchConfigError(f"a trace of {variant.label} on {src.rows} x {src.cols} needs {grid} blocks x "
                                        f"{capacity} stages x 32 B, over {limit >> 20} MiB; trace a "
                                        "smaller array (a variant claimed by ticket keeps room for every tile per "
                                        "block)")
            trace.prepare(grid, capacity, stream_handle(stream))
            trace_ptr, capacity = trace.buffer.ptr, trace.capacity
        params = StencilParams(src.address, dst.address, src.rows, src.cols, src.pitch, dst.pitch,
                               float(c_center), float(c_neighbour), trace_ptr, capacity,
                               OUT_VEC16 if dst.copy_alignment == 16 else 0)
        handle = stream_handle(stream)
        with _TICKETS.use(handle) if variant.tickets else nullcontext((0, False)) as (tickets, _captured):
            args = params if maps is None else StencilTmaParams(params, *maps, variant.chunk, tickets)
            launch(kernel, config, args, stream=handle)
        return grid

    def _launch_pieces(self, variant: Variant, src: Grid2D, dst: Grid2D) -> tuple[Any, LaunchConfig, tuple | None]:
        """The kernel, the launch configuration and (tma variants) the input's and output's tensor maps of a launch
        over these arrays, every rule checked: made once per (variant, arrays' addresses and layouts), so that a
        repeated call encodes no tensor map and builds no configuration. A map holds only the address, sizes and
        box, so a map made for an array that was freed is right for another array at the same address."""
        key = (variant, src, dst)
        pieces = self._pieces.get(key)
        if pieces is None:
            layout = tma_layout(variant, src) if variant.kind == "tma" else None
            out_layout = tma_store_layout(variant, dst) if variant.tma_store else None
            align = src.copy_alignment
            config = LaunchConfig(grid=self.grid(variant, align, src.rows, src.cols), block=variant.threads,
                                  shared_mem=variant.shared_bytes)
            maps = None if layout is None else (TensorMap(layout), TensorMap(out_layout) if out_layout else None)
            pieces = self._pieces.put(key, (self.kernel(variant, align), config, maps))
        return pieces


PIECES_MEMO = 256  # (variant, arrays) whose kernel, configuration and tensor maps a Stencil keeps; then the oldest go

# The stencil's own counters: never shared with steal's, whose launches alternate between two words.
_TICKETS = StatePool("the stencil's ticket claims")


class Trace:
    """Per-stage %globaltimer stamps of thread 0 of every block: issued, wait, ready, done (nanoseconds)."""

    limit_bytes = TRACE_LIMIT_BYTES  # the largest stamp buffer a traced launch may allocate

    def __init__(self):
        self.buffer = None
        self.blocks = self.capacity = self.stream = 0

    def prepare(self, blocks: int, capacity: int, stream: int) -> None:
        """A zeroed buffer for one launch on ``stream`` (zeroed there, so a non-blocking stream's kernel sees zeros).
        On a stream being captured into a CUDA graph the buffer is allocated in relaxed capture mode (a global-mode
        capture is invalidated by cuMemAlloc) and kept for the process, as every replay writes it; the buffer it
        replaces is kept too rather than freed (cuMemFree synchronizes, which no capture allows)."""
        from ..memory import DeviceBuffer, keep_for_graphs

        in_graph = capturing(stream)
        if in_graph:
            keep_for_graphs(self.buffer)
        self.blocks, self.capacity, self.stream = blocks, max(1, capacity), stream
        with relaxed_capture_mode() if in_graph else nullcontext():
            self.buffer = DeviceBuffer(blocks * self.capacity * len(TRACE_FIELDS) * 8, fill=None)
        if in_graph:
            keep_for_graphs(self.buffer)
        self.buffer.fill(0, stream=stream)

    def records(self) -> np.ndarray:
        """uint64 array [block, stage, field] (after the traced launch's stream has finished); a stage a block
        did not run is all zeros."""
        return self.buffer.to_host(np.uint64, self.stream).reshape(self.blocks, self.capacity, len(TRACE_FIELDS))
