"""CUB's ``DeviceHistogram::HistogramEven`` as a histogram peer, called directly with int32 counters.

Where the CUDA toolkit's ``nvcc`` is found, ``cub_histogram.cu`` is built into a small shared library
(``nvcc_build``: cached by the source, the nvcc version and the target) and loaded with ctypes. Without nvcc,
the ``cuda-cccl`` Python package's ``histogram_even`` (``cuda.compute``, or the older
``cuda.cccl.parallel.experimental``) stands in; with neither, ``load_cub`` returns the reason, which the lab
prints instead of a row.
"""

from __future__ import annotations

import ctypes
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import nvcc_build
from .nvcc_build import PeerUnavailable, find_nvcc, load_cub_library

SOURCE = Path(__file__).with_name("cub_histogram.cu")
DTYPE_CODES = {"int32": 0, "uint8": 1, "float32": 2}


def build_command(nvcc: str, sm: str, out: Path) -> list[str]:
    return nvcc_build.build_command(nvcc, sm, out, SOURCE)


def build_library(sm: str, nvcc: str | None = None) -> Path:
    """The shared library for target ``sm`` (e.g. 'sm_90'), cached or built now; raises PeerUnavailable."""
    return nvcc_build.build_library(SOURCE, sm, nvcc)


@dataclass
class CubHistogram:
    """``HistogramEven`` through the nvcc-built library: ``temp_bytes`` (CUB's size query) and ``run``."""

    path: Path
    how: str = "nvcc"

    def __post_init__(self):
        self._lib, self.version = load_cub_library(
            self.path, "cuadv_cub_histogram_even",
            [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
             ctypes.c_int, ctypes.c_double, ctypes.c_double, ctypes.c_longlong, ctypes.c_void_p])

    @property
    def name(self) -> str:
        return f"CUB {self.version} HistogramEven"

    def _call(self, temp: int, nbytes: int, samples: int, dtype: str, hist: int, bins: int, lo: float, hi: float,
              n: int, stream: int) -> int:
        size = ctypes.c_size_t(nbytes)
        err = self._lib.cuadv_cub_histogram_even(temp or None, ctypes.byref(size), samples or None,
                                                 DTYPE_CODES[dtype], hist or None, bins, lo, hi, n, stream or None)
        if err:
            raise RuntimeError(f"cub::DeviceHistogram::HistogramEven failed: "
                               f"{self._lib.cuadv_cub_error_string(err).decode()} (cudaError {err})")
        return size.value

    def temp_bytes(self, dtype: str, bins: int, lo: float, hi: float, n: int, samples: int = 0, hist: int = 0) -> int:
        """CUB's workspace for this case (the size query launches nothing)."""
        return self._call(0, 0, samples, dtype, hist, bins, lo, hi, n, 0)

    def run(self, temp: int, nbytes: int, samples: int, dtype: str, hist: int, bins: int, lo: float, hi: float,
            n: int, stream: int) -> None:
        """hist[0:bins] = int32 counts of samples[0:n] in [lo, hi), on ``stream`` (device pointers)."""
        self._call(temp, nbytes, samples, dtype, hist, bins, lo, hi, n, stream)


class CcclPythonHistogram:
    """The fallback without nvcc: ``histogram_even`` of the cuda-cccl Python package (it allocates its
    own workspace per call, so its time includes that)."""

    how = "cuda-cccl"

    def __init__(self):
        from importlib import metadata

        try:
            import cuda.compute as mod  # cuda-cccl >= 0.3
        except ImportError:
            import cuda.cccl.parallel.experimental as mod  # older cuda-cccl
        if not hasattr(mod, "histogram_even"):
            raise ImportError(f"{mod.__name__} has no histogram_even")
        self._mod = mod
        self.version = metadata.version("cuda-cccl")

    @property
    def name(self) -> str:
        return f"cuda-cccl {self.version} histogram_even"

    def temp_bytes(self, *args, **kwargs) -> int | None:
        return None  # not exposed by the one-call form

    def run_arrays(self, samples, hist, bins: int, lo, hi, n: int, stream=None) -> None:
        self._mod.histogram_even(samples, hist, bins + 1, lo, hi, n, stream)


def load_cub(sm: str) -> tuple[CubHistogram | CcclPythonHistogram | None, str]:
    """The CUB peer for target ``sm`` and how it was obtained, or (None, why not)."""
    nvcc, where = find_nvcc()
    reasons = []
    if nvcc is not None:
        try:
            return CubHistogram(build_library(sm, nvcc)), f"nvcc ({where})"
        except (PeerUnavailable, OSError, subprocess.SubprocessError) as exc:
            reasons.append(str(exc))
    else:
        reasons.append(where)
    try:
        return CcclPythonHistogram(), "the cuda-cccl Python package"
    except Exception as exc:  # not installed, or without histogram_even
        reasons.append(f"cuda-cccl Python package unavailable ({type(exc).__name__}: {exc})")
    return None, "CUB HistogramEven not measured: " + "; ".join(reasons)
