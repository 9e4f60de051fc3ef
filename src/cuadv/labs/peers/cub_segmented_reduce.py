"""CUB's ``DeviceSegmentedReduce::Sum`` as the segreduce lab's peer, called directly (float32 values, int32
offsets): ``cub_segmented_reduce.cu`` built by nvcc into a small shared library (``nvcc_build``) and loaded with
ctypes. Without nvcc, ``load_cub_segmented_sum`` returns the reason, which the lab prints instead of a row.
"""

from __future__ import annotations

import ctypes
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .nvcc_build import PeerUnavailable, build_library, find_nvcc, load_cub_library

SOURCE = Path(__file__).with_name("cub_segmented_reduce.cu")


@dataclass
class CubSegmentedSum:
    """``DeviceSegmentedReduce::Sum`` through the nvcc-built library: ``temp_bytes`` (CUB's size query) and
    ``run`` (device pointers; the stream as a handle)."""

    path: Path

    def __post_init__(self):
        self._lib, self.version = load_cub_library(
            self.path, "cuadv_cub_segmented_sum",
            [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong,
             ctypes.c_void_p, ctypes.c_void_p])

    @property
    def name(self) -> str:
        return f"CUB {self.version} DeviceSegmentedReduce::Sum"

    def _call(self, temp: int, nbytes: int, values: int, sums: int, segments: int, offsets: int, stream: int) -> int:
        size = ctypes.c_size_t(nbytes)
        err = self._lib.cuadv_cub_segmented_sum(temp or None, ctypes.byref(size), values or None, sums or None,
                                                segments, offsets or None, stream or None)
        if err:
            raise RuntimeError(f"cub::DeviceSegmentedReduce::Sum failed: "
                               f"{self._lib.cuadv_cub_error_string(err).decode()} (cudaError {err})")
        return size.value

    def temp_bytes(self, segments: int) -> int:
        """CUB's workspace for this many segments (the size query launches nothing)."""
        return self._call(0, 0, 0, 0, segments, 0, 0)

    def run(self, temp: int, nbytes: int, values: int, sums: int, segments: int, offsets: int, stream: int) -> None:
        """sums[s] = sum of values[offsets[s]:offsets[s + 1]] for s < segments, on ``stream``."""
        self._call(temp, nbytes, values, sums, segments, offsets, stream)


def load_cub_segmented_sum(sm: str) -> tuple[CubSegmentedSum | None, str]:
    """The CUB peer for target ``sm`` and how it was obtained, or (None, why not)."""
    nvcc, where = find_nvcc()
    if nvcc is None:
        return None, f"CUB DeviceSegmentedReduce not measured: {where}"
    try:
        return CubSegmentedSum(build_library(SOURCE, sm, nvcc)), f"nvcc ({where})"
    except (PeerUnavailable, OSError, subprocess.SubprocessError) as exc:
        return None, f"CUB DeviceSegmentedReduce not measured: {exc}"
