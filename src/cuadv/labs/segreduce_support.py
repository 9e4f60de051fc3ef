"""Lab-private pieces of the ``segreduce`` lab: seeded segments (the spmv lab's row-length distributions, float32
values uniform in [-1, 1]), the float64 reference, and the peers (CUB's ``DeviceSegmentedReduce::Sum`` built with
nvcc, ``torch.segment_reduce`` and torch's scatter-add ``index_add_``). The kernel is the spmv lab's tile body
compiled as a segmented sum (``spmv_kernel(gather=False)``) on the spmv lab's tile lists, built for the lab's block
(``segreduce.segment_tiles``).
"""

from __future__ import annotations

import numpy as np

from .base import import_torch
from .spmv_support import (Csr, DeviceCsr, _check_nnz, _values, power_law_lengths, rmat_out_degrees,
                           uniform_lengths)

KINDS = ("power-law", "R-MAT", "uniform")


def generate_segments(kind: str, segments: int, mean: int, seed: int) -> Csr:
    """`segments` segments (a power of two for R-MAT) of about `mean` elements each, as a Csr without columns:
    power-law (Pareto(1.3) lengths, the longest capped at segments / 8), R-MAT (the out-degrees of an R-MAT
    multigraph, a, b, c = 0.57, 0.19, 0.19, labels scrambled) or uniform (the mean +- 25%)."""
    rng = np.random.default_rng(seed)
    total = segments * mean
    if kind == "power-law":
        lens = power_law_lengths(segments, total, rng)
    elif kind == "uniform":
        lens = uniform_lengths(segments, total, rng)
    elif kind == "R-MAT":
        if segments & (segments - 1) or segments < 2:
            raise ValueError(f"R-MAT segments must be a power of two of at least 2, got {segments}")
        lens = rmat_out_degrees(segments.bit_length() - 1, total, rng)
    else:
        raise ValueError(f"unknown segments {kind!r}; one of {', '.join(KINDS)}")
    offsets = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    _check_nnz(int(offsets[-1]))
    return Csr(kind, offsets.astype(np.int32), np.empty(0, np.int32), _values(int(offsets[-1]), rng), 0)


def segment_bytes(m: Csr) -> int:
    """Bytes a segmented sum must move at least: the values, the offsets, one sum per segment."""
    return 4 * m.nnz + 4 * (m.n_rows + 1) + 4 * m.n_rows


def reference(m: Csr) -> tuple[np.ndarray, np.ndarray]:
    """Each segment's sum and sum of magnitudes in float64, from running sums (their rounding, about 1e-16 of the
    running total, is far below a float32 sum's tolerance)."""
    out = []
    values = m.vals.astype(np.float64)
    for v in (values, np.abs(values)):
        run = np.zeros(v.size + 1)
        np.cumsum(v, out=run[1:])
        out.append(run[m.offsets[1:]] - run[m.offsets[:-1]])
    return out[0], out[1]


def peers(dev: DeviceCsr, cub_peer: tuple) -> tuple[list[tuple[str, str, object]], dict[str, str]]:
    """(kind, label naming the version, callable returning the sums) for each peer present, kind one of "cub",
    "torch" (segment_reduce) and "index_add" (torch's scatter-add of each value into its segment's sum, with
    atomics); and name -> why absent. ``cub_peer``: what ``load_cub_segmented_sum`` returned (loaded once per run).
    Every peer reads the same device values and offsets as cuadv."""
    import cupy as cp

    from ..interop import stream_handle

    n = dev.host.n_rows
    out, missing = [], {}
    cub, how = cub_peer
    if cub is None:
        missing["CUB DeviceSegmentedReduce"] = how
    else:
        sums = cp.full(n, cp.nan, cp.float32)  # poisoned: the first check shows a sum CUB did not write
        nbytes = cub.temp_bytes(n)
        temp = cp.empty(max(nbytes, 1), cp.uint8)
        args = (temp.data.ptr, nbytes, dev.vals.data.ptr, sums.data.ptr, n, dev.offsets.data.ptr)
        out.append(("cub", f"{cub.name}, workspace {nbytes:,} B",
                    lambda: (cub.run(*args, stream_handle(None)), sums)[1]))
    torch, why = import_torch()
    if torch is None:
        missing["torch.segment_reduce"] = missing["torch index_add_"] = why
        return out, missing
    values = torch.as_tensor(dev.vals, device="cuda")
    offsets = torch.as_tensor(dev.offsets, device="cuda").to(torch.int64)
    ids = torch.repeat_interleave(torch.arange(n, device="cuda"), offsets.diff())
    version = f"torch {torch.__version__}, CUDA {torch.version.cuda}"
    out.append(("torch", f"torch.segment_reduce sum ({version})",
                lambda: torch.segment_reduce(values, "sum", offsets=offsets, unsafe=True)))
    out.append(("index_add", f"torch index_add_ of each value into its segment ({version}; int64 segment ids)",
                lambda: torch.zeros(n, dtype=torch.float32, device="cuda").index_add_(0, ids, values)))
    return out, missing
