"""TMA (Tensor Memory Accelerator, compute capability 9.0): tensor maps from any device array with the
driver's rules checked in Python first, 2-D copy and transpose ops over arrays, and the device header
``#include <cuadv/tma.cuh>`` for user kernels.

    import cupy as cp
    import cuadv

    x = cp.random.random((4096, 4093), dtype=cp.float32)[:, :4000]   # pitched rows are fine
    y = cuadv.tma.copy(x)                  # a new CuPy array (torch in, torch out)
    t = cuadv.tma.transpose(x)             # shape (4000, 4096)
    op = cuadv.tma.prepare_copy(x, y)      # checks, tensor maps and kernel once; op() launches

See docs/tma.md.
"""

from .kernels import TmaCopyConfig
from .ops import (BEST_COPY_CONFIG, TmaCopy, TmaTranspose, copy, default_copy_box, default_transpose_boxes,
                  empty_pitched, prepare_copy, prepare_transpose, transpose)
from .tensormap import TensorMap, TensorMapError, TiledLayout, describe_array, pitch_elements

__all__ = [
    "BEST_COPY_CONFIG", "TensorMap", "TensorMapError", "TiledLayout", "TmaCopy", "TmaCopyConfig", "TmaTranspose",
    "copy", "default_copy_box", "default_transpose_boxes", "describe_array", "empty_pitched", "pitch_elements",
    "prepare_copy", "prepare_transpose", "transpose",
]
