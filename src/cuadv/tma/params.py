"""The parameter structs of tma.cu's copy and transpose kernels, mirrored through ``cuadv.params``.

Each layout is checked against the size tma.cu's ``static_assert`` fixes; the bytes are those the kernels
read (two 128-byte tensor maps, then the tiling, padded to the 64-byte alignment of a CUtensorMap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..params import StructArgument, c_struct

TMA_PARAMS_BYTES, THREAD_PARAMS_BYTES = 320, 72

TMA_TILE_LAYOUT = c_struct("TmaTileParams", [
    ("src", "V128"), ("dst", "V128"),
    ("tiles_x", "<i4"), ("tiles_y", "<i4"), ("box_w", "<i4"), ("box_h", "<i4"), ("box_bytes", "<u4"),
    ("stages", "<i4"), ("lookahead", "<i4"), ("chunk", "<i4"), ("cache_hints", "<i4"), ("burst", "<i4"),
    ("_pad", "V24"),  # sizeof rounds up to alignas(64) of the tensor maps
], size=TMA_PARAMS_BYTES)

THREAD_TILE_LAYOUT = c_struct("ThreadTileParams", [
    ("src", "<u8"), ("dst", "<u8"), ("rows", "<i8"), ("cols", "<i8"), ("src_pitch", "<i8"), ("dst_pitch", "<i8"),
    ("esize", "<i4"), ("box_w", "<i4"), ("box_h", "<i4"), ("tiles_x", "<i4"), ("tiles_y", "<i4"), ("chunk", "<i4"),
], size=THREAD_PARAMS_BYTES)


@dataclass(frozen=True)
class TmaTileParams(StructArgument):
    """TmaTileParams of tma.cu (320 bytes: two 128-byte descriptors, then the tiling)."""

    LAYOUT: ClassVar[np.dtype] = TMA_TILE_LAYOUT
    src: Any  # a TensorMap (anything with kernel_param_bytes() of 128 bytes)
    dst: Any
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


@dataclass(frozen=True)
class ThreadTileParams(StructArgument):
    """ThreadTileParams of tma.cu (72 bytes)."""

    LAYOUT: ClassVar[np.dtype] = THREAD_TILE_LAYOUT
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
