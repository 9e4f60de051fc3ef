"""What the spmv probe scripts share (run from the repository root: scripts/ is then on sys.path): the barrier they
append to the lab's body, a TileKernel of that body, the warm-up and check of a call against the reference, and the
timing of labelled calls against cuSPARSE."""

from __future__ import annotations

from typing import Callable

import cupy as cp
import numpy as np

from cuadv import TileKernel
from cuadv.compiler import kernel_source
from cuadv.labs.base import interleaved_rounds
from cuadv.labs.spmv_support import BODY, MIN_BLOCKS, PARAMS, PROLOGUE, STAGE, THREADS, DeviceCsr, peers
from cuadv.timing import time_gpu

BARRIER = "      __syncthreads();  // every warp has finished this tile before any leaves or starts the next\n"


def body_kernel(dynamic: str, name: str, *, barrier: bool = False, policy: str = "auto",
                quantum_us: float | None = None) -> TileKernel:
    """The lab's register body (split or whole rows, THREADS threads, MIN_BLOCKS per SM) with batches `dynamic` (a
    C++ bool expression, as spmv_support.BATCHES), and BARRIER after it where `barrier`."""
    body = BODY.format(threads=THREADS, short="kRegisters", stage=STAGE, dynamic=dynamic) + (BARRIER if barrier else "")
    return TileKernel(PARAMS, body, PROLOGUE.format(dynamic=dynamic), policy=policy, block=THREADS,
                      preamble=kernel_source("spmv.cuh"), name=name, min_blocks_per_sm=MIN_BLOCKS,
                      quantum_us=quantum_us)


def warmed_and_checked(dev: DeviceCsr, run: Callable[[], object], ref: np.ndarray, tol: np.ndarray, what: str) -> None:
    """Runs `run` three times (steal learns its grid over its first launches), y poisoned with NaN before each, then
    stops the script if a row of y is out of tolerance of the float64 reference or was never written."""
    for _ in range(3):
        dev.y.fill(np.nan)
        run()
    if not (np.abs(cp.asnumpy(dev.y) - ref) <= tol).all():
        raise SystemExit(f"{what}: a row is wrong")


def print_against_cusparse(kind: str, dev: DeviceCsr, calls: dict[str, Callable[[], object]], rounds: int,
                           width: int = 46) -> None:
    """Times each call and cuSPARSE on `dev`'s matrix (medians of `rounds` interleaved rounds of 10 CUDA-event timings)
    and prints one line per call, fastest first, with its ratio to cuSPARSE."""
    calls = dict(calls)
    calls["cuSPARSE"] = next(fn for peer_kind, _label, fn in peers(dev)[0] if peer_kind == "cusparse")
    calls["cuSPARSE"]()  # its first call sets it up
    ms = interleaved_rounds({label: (lambda fn=fn: [time_gpu(fn, repeats=10).median_ms])
                             for label, fn in calls.items()}, rounds)
    base = float(ms["cuSPARSE"])
    for label, t in sorted(ms.items(), key=lambda kv: kv[1]):
        print(f"{kind:10s} {label:{width}s} {float(t) * 1e3:8.1f} us  x cuSPARSE {base / float(t):.3f}", flush=True)
