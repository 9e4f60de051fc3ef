"""Lab-private pieces of the ``spmv`` lab: the seeded CSR matrix generators, the tile list built on the host,
the TileKernel whose body is ``spmv.cuh``, the reference check against SciPy and the peers (cuSPARSE through
CuPy, torch.sparse). Everything here is host code or benchmark-only; the scheduler is ``cuadv.work_stealing``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..compiler import kernel_source
from ..errors import ValidationError
from ..timing import synchronize_device
from ..work_stealing import TileKernel
from .base import import_torch

THREADS = 256
GROUP_NNZ = 2048  # a short-row tile holds rows whose weight (non-zeros + 2 per row) ends in one window this wide
LONG_NNZ = GROUP_NNZ // 4  # rows longer than this are tiles of their own (build_tiles' default)
STAGE = 2 * GROUP_NNZ  # floats of shared memory: a short-row tile has fewer non-zeros than this
SLICE_NNZ = 4 * GROUP_NNZ  # "split": rows longer than this become slices of it, summed by the last slice
WIDEST_NNZ = 4 * GROUP_NNZ  # guided windows (build_tiles): the widest, where the work left is many windows per slot
# The most non-zeros a matrix may have: int32 offsets and columns, with headroom for spmv.cuh's int index steps past
# the last one (block_row_sum's base += THREADS * 6 = 1536, register_rows' a + 2 * step, the padding), which
# would overflow for a row ending within that distance of 2**31
MAX_NNZ = 2**31 - 2**12
MIN_BLOCKS = 6  # __launch_bounds__ occupancy hint: 6 blocks of 256 threads per SM (at most 40 registers: no spill)
PARAMS = ("const int4* __restrict__ tiles, const int2* __restrict__ splits, const int* __restrict__ offsets, "
          "const int* __restrict__ cols, const float* __restrict__ vals, const float* __restrict__ x, "
          "float* __restrict__ y, float* partials, unsigned int* counts")
BODY = ("      cuadv_spmv::run_tile<{threads}, cuadv_spmv::ShortRows::{short}, {stage}, {dynamic}, {gather}>"
        "(tile.index, tiles, splits, offsets, cols, vals, x, y, partials, counts);\n")
PROLOGUE = "    cuadv_spmv::begin_block<{dynamic}>();\n"
SHORT_ROWS = {"registers": "kRegisters", "staged": "kStaged"}  # short-row tile bodies (spmv.cuh ShortRows)
# How the warps of a block share a tile's batches of short rows (register body): "dynamic", claimed from a counter
# in shared memory under the policies with a barrier between tiles (static under the others, whose warps do not
# wait for each other), or "static" (warp w takes batches w, w + warps, ...) under every policy.
BATCHES = {"dynamic": "cuadv::ws::kBarrierBetweenTiles<cuadv_policy>", "static": "false"}
MATRICES = ("power-law", "R-MAT", "uniform")


# -- matrices ------------------------------------------------------------------------------------------
@dataclass
class Csr:
    """A CSR matrix on the host: int32 row offsets and columns (sorted, unique within a row), float32 values."""

    name: str
    offsets: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    n_cols: int

    @property
    def n_rows(self) -> int:
        return self.offsets.size - 1

    @property
    def nnz(self) -> int:
        return int(self.offsets[-1])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def stats(self) -> dict[str, float]:
        lens = self.lengths
        mean = self.nnz / max(self.n_rows, 1)
        return {"rows": self.n_rows, "nnz": self.nnz, "max_row": int(lens.max(initial=0)),
                "max_over_mean": float(lens.max(initial=0) / mean) if mean else 0.0, "gini": gini(lens),
                "empty_rows": int((lens == 0).sum())}

    def effective_bytes(self) -> int:
        """Bytes SpMV must move at least: values + columns, the row offsets, x gathered once, y written."""
        return 8 * self.nnz + 4 * (self.n_rows + 1) + 4 * self.n_cols + 4 * self.n_rows


def gini(lengths: np.ndarray) -> float:
    """Gini coefficient of the row lengths: 0 when every row has the same length, towards 1 when a few rows hold
    every non-zero."""
    x = np.sort(lengths.astype(np.float64))
    n, total = x.size, x.sum()
    if n == 0 or total == 0:
        return 0.0
    return float(2 * np.dot(np.arange(1, n + 1), x) / (n * total) - (n + 1) / n)


def _exact_total(raw: np.ndarray, nnz: int, n_cols: int, rng: np.random.Generator) -> np.ndarray:
    """Row lengths floor(raw * s), at most n_cols, with s found so they sum to about nnz; the last few non-zeros
    are then added to (or taken from) distinct random rows, so the total is exactly nnz."""
    scale = nnz / max(raw.sum(), 1e-30)
    for _ in range(8):
        lens = np.minimum(np.floor(raw * scale), n_cols).astype(np.int64)
        if abs(int(lens.sum()) - nnz) <= lens.size // 4:
            break
        scale *= nnz / max(int(lens.sum()), 1)
    rest = nnz - int(lens.sum())
    rows = np.flatnonzero(lens < n_cols) if rest > 0 else np.flatnonzero(lens > 0)
    if abs(rest) > rows.size:
        raise ValueError(f"cannot place {nnz} non-zeros in {lens.size} rows of {n_cols} columns")
    lens[rng.choice(rows, abs(rest), replace=False)] += 1 if rest > 0 else -1
    return lens


def _rows_to_csr(name: str, lens: np.ndarray, n_cols: int, rng: np.random.Generator) -> Csr:
    """Columns for given row lengths, sorted and unique within each row: row r's L columns are one per stratum of
    width n_cols // L, at a random place in it, after a random start, so they spread over the whole of x."""
    offsets = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    nnz = int(offsets[-1])
    _check_nnz(nnz)
    width = n_cols // np.maximum(lens, 1)  # >= 1 as every row length is at most n_cols
    start = np.floor(rng.random(lens.size) * (n_cols - lens * width + 1)).astype(np.int32)
    w = np.repeat(width.astype(np.int32), lens)
    cols = (np.arange(nnz, dtype=np.int32) - np.repeat(offsets[:-1].astype(np.int32), lens)) * w
    cols += (rng.random(nnz) * w).astype(np.int32)  # float64: the product stays below w
    cols += np.repeat(start, lens)
    return Csr(name, offsets.astype(np.int32), cols, _values(nnz, rng), n_cols)


def _check_nnz(nnz: int) -> None:
    if nnz > MAX_NNZ:
        raise ValueError(f"{nnz} non-zeros do not fit int32 offsets with the kernel's headroom (at most {MAX_NNZ})")


def _values(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, n).astype(np.float32)


def power_law_lengths(n_rows: int, nnz: int, rng: np.random.Generator, alpha: float = 1.3,
                      cap: int | None = None) -> np.ndarray:
    """Row lengths from a Pareto distribution of shape alpha (minimum 1 before scaling), scaled to nnz in all and
    capped at `cap` (default n_rows / 8): most rows hold a few non-zeros and the longest about n_rows ** (1 / alpha)
    times the shortest (a few hundred thousand at 2**22 rows of mean 8)."""
    return _exact_total(rng.pareto(alpha, n_rows) + 1, nnz, cap or max(n_rows // 8, 1), rng)


def uniform_lengths(n_rows: int, nnz: int, rng: np.random.Generator, cap: int | None = None) -> np.ndarray:
    """Every row about the same length: the mean +- 25%, but a few rows one shorter (about 0.4% at mean 8: 5
    non-zeros), where _exact_total takes its scaled floors' excess off random rows."""
    mean = nnz / n_rows
    return _exact_total(rng.uniform(0.75 * mean, 1.25 * mean, n_rows), nnz, cap or n_rows, rng)


def power_law(n_rows: int, nnz: int, seed: int, alpha: float = 1.3) -> Csr:
    """A matrix of power_law_lengths, n_rows columns."""
    rng = np.random.default_rng(seed)
    return _rows_to_csr("power-law", power_law_lengths(n_rows, nnz, rng, alpha), n_rows, rng)


def uniform(n_rows: int, nnz: int, seed: int) -> Csr:
    """A matrix of uniform_lengths, n_rows columns."""
    rng = np.random.default_rng(seed)
    return _rows_to_csr("uniform", uniform_lengths(n_rows, nnz, rng), n_rows, rng)


def rmat(scale: int, edges: int, seed: int, a: float = 0.57, b: float = 0.19, c: float = 0.19) -> Csr:
    """An R-MAT graph of 2**scale vertices (Chakrabarti, Zhan and Faloutsos, SDM 2004): each edge picks a
    quadrant (a, b, c, d = 1 - a - b - c) at each of `scale` levels; vertex labels are then permuted at random
    (as the Graph500 generator does; here by an invertible hash, cheaper than a table) and duplicate edges
    merged, so nnz is at most `edges`. Four levels are drawn at once from a table of 2**22 entries (the 4**4
    quadrant sequences, probabilities rounded to 2**-22)."""
    rng = np.random.default_rng(seed)
    n = 1 << scale
    src, dst = _rmat_edges(scale, edges, rng, a, b, c)
    mix = _label_hash(scale, rng)
    key = np.sort((mix(src).astype(np.int64) << scale) | mix(dst))
    key = key[np.concatenate(([True], key[1:] != key[:-1]))] if key.size else key
    _check_nnz(key.size)  # before the int32 offsets below, which would wrap
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(key >> scale, minlength=n), out=offsets[1:])
    return Csr("R-MAT", offsets.astype(np.int32), (key & (n - 1)).astype(np.int32), _values(key.size, rng), n)


def _rmat_edges(scale: int, edges: int, rng: np.random.Generator, a: float, b: float, c: float,
                dst: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Sources and (with dst) destinations of `edges` R-MAT edges, before relabelling."""
    src = np.zeros(edges, np.int32)
    out = np.zeros(edges, np.int32) if dst else None
    done = 0
    while done < scale:
        k = min(4, scale - done)
        lut = _rmat_lut(k, a, b, c)
        code = lut[rng.integers(0, lut.size, edges, dtype=np.uint32)]
        src = (src << k) | (code >> 4)
        if out is not None:
            out = (out << k) | (code & 15)
        done += k
    return src, out


def rmat_out_degrees(scale: int, edges: int, rng: np.random.Generator, a: float = 0.57, b: float = 0.19,
                     c: float = 0.19) -> np.ndarray:
    """The out-degrees of an R-MAT multigraph (rmat's edges, duplicates kept, so they sum to `edges`) of 2**scale
    vertices, labels permuted as rmat does: row lengths like an R-MAT matrix's without drawing its columns."""
    src, _ = _rmat_edges(scale, edges, rng, a, b, c, dst=False)
    return np.bincount(_label_hash(scale, rng)(src), minlength=1 << scale).astype(np.int64)


def _label_hash(scale: int, rng: np.random.Generator):
    """A random bijection of [0, 2**scale): multiplication by an odd number and a right xor-shift, twice, each
    invertible modulo 2**scale."""
    mask = np.uint32((1 << scale) - 1)
    odd = (rng.integers(0, 1 << 31, 2, dtype=np.uint32) | 1) & mask | 1
    shift = max(scale // 2, 1)

    def mix(v: np.ndarray) -> np.ndarray:
        v = v.astype(np.uint32)
        for m in odd:
            v = (v * m) & mask
            v ^= v >> np.uint32(shift)
        return v.astype(np.int32)

    return mix


def _rmat_lut(k: int, a: float, b: float, c: float, bits: int = 22) -> np.ndarray:
    """A table of 2**bits codes (source bits << 4 | destination bits of k levels), each quadrant sequence
    filling a share of it equal to its probability: a uniform index into it draws k levels at once."""
    quad = np.array([a, b, c, 1 - a - b - c])  # (src bit, dst bit) = (0, 0), (0, 1), (1, 0), (1, 1)
    prob, src, dst = np.ones(1), np.zeros(1, np.int64), np.zeros(1, np.int64)
    for _ in range(k):
        prob = np.outer(prob, quad).ravel()
        src = (np.repeat(src, 4) << 1) | np.tile([0, 0, 1, 1], src.size)
        dst = (np.repeat(dst, 4) << 1) | np.tile([0, 1, 0, 1], dst.size)
    bounds = np.round(np.cumsum(prob) * (1 << bits)).astype(np.int64)
    bounds[-1] = 1 << bits
    return np.repeat(((src << 4) | dst).astype(np.uint8), np.diff(bounds, prepend=0))


def generate(kind: str, n_rows: int, mean: int, seed: int) -> Csr:
    """One of MATRICES with n_rows rows (a power of two for R-MAT) and about n_rows * mean non-zeros."""
    if kind == "power-law":
        return power_law(n_rows, n_rows * mean, seed)
    if kind == "uniform":
        return uniform(n_rows, n_rows * mean, seed)
    if kind == "R-MAT":
        return rmat(int(n_rows).bit_length() - 1, n_rows * mean, seed)
    raise ValueError(f"unknown matrix {kind!r}; one of {', '.join(MATRICES)}")


# -- tiles -------------------------------------------------------------------------------------------------
@dataclass
class Tiles:
    """The tile list of one matrix (int4 per tile, see spmv.cuh) and the split rows (int2: first tile, slices)."""

    tiles: np.ndarray  # (n, 4) int32
    splits: np.ndarray  # (m, 2) int32
    split_rows: bool

    @property
    def count(self) -> int:
        return self.tiles.shape[0]

    def nnz(self) -> np.ndarray:
        return (self.tiles[:, 3] - self.tiles[:, 2]).astype(np.int64)

    def short_extent(self) -> tuple[int, int]:
        """The most non-zeros and the most rows of any short-row tile (0, 0 where there is none)."""
        short = self.tiles[self.tiles[:, 1] > 0]
        if not short.size:
            return 0, 0
        return int((short[:, 3] - short[:, 2]).max()), int((short[:, 1] >> 5).max())

    def kinds(self) -> dict[str, int]:
        info = self.tiles[:, 1]
        return {"short-row tiles": int((info > 0).sum()), "long rows": int((info == 0).sum()),
                "slices": int((info < 0).sum())}


# The lane width of a short-row tile is chosen on the host from a model of register_rows' SASS (spmv.cuh), its
# loops counted in the kernels of every policy auto and the static ones run on sm_90a and sm_100a with NVRTC 13 (the
# most of any; test_spmv_cpu keeps the kernels within these counts): a warp takes a batch of 32 / lanes consecutive
# rows for BATCH_INSTR + SHUFFLE_INSTR * log2(lanes) instructions, plus ROUND_INSTR per round (a slot of ROW_UNROLL
# elements per lane) up to OWN_ROUNDS, as many as the batch's longest row needs, plus for each row longer than
# that, ASSIST_INSTR and ROUND_INSTR per round of the whole warp (32 slots) over what the row has left.
ROW_UNROLL = 4  # kRowUnroll: cols and vals must be readable ROW_UNROLL - 1 elements past the last non-zero
OWN_ROUNDS = 2  # kOwnRounds
ROUND_INSTR = 50  # one round: per slot element its column, value and x loads (past the row, of x[0]) and its masked add
BATCH_INSTR = 56  # one batch outside its loops: the rows' offsets, the loops' set-up, the ballot, the store of y
SHUFFLE_INSTR = 7  # one step of the lanes' butterfly (a loop: the width is known at run time)
ASSIST_INSTR = 38  # one row the warp finishes, outside its rounds: its bounds, the warp's sum
CLAIM_INSTR = 39  # dynamic batches (steal, atomic_counter, clc): a batch's claim, its hand-over, the tile's reset
LANES_MASK = 7  # a short-row tile's info bits (spmv.cuh kLanesMask): log2 of its lanes per row
DYNAMIC_BATCHES = 8  # a short-row tile's info bit (spmv.cuh kDynamicFlag): its warps claim its batches
MIN_LANES_LOG2 = 1  # at least 2 lanes per row: at 1, each load instruction of a warp spans 32 rows' cache lines


def _greedy_busiest(cost: np.ndarray, first_batch: np.ndarray, batches: np.ndarray, warps: int) -> np.ndarray:
    """Per tile, the busiest warp's modelled instructions with dynamic batches, replayed in the kernel's order: warp
    w starts batch w, and a warp claims its next batch as it starts one (register_rows), so the claims go out in
    the order the warps start their batches (at the first, in warp order) and claim c is batch warps + c; every
    batch costs CLAIM_INSTR more for its claim (cost: per batch, the tiles' batches consecutive from first_batch)."""
    tiles = batches.size
    lane = np.arange(warps)
    start = np.where(lane < batches[:, None], 0.0, np.inf)  # when each warp started the batch it has not claimed for
    current = np.broadcast_to(lane, (tiles, warps)).copy()
    end = np.zeros((tiles, warps))
    for c in range(int(batches.max(initial=0))):  # a tile makes one claim per batch
        live = np.flatnonzero(batches > c)
        w = start[live].argmin(axis=1)
        done = start[live, w] + cost[first_batch[live] + current[live, w]] + CLAIM_INSTR
        more = warps + c < batches[live]
        start[live, w] = np.where(more, done, np.inf)
        current[live, w] = np.where(more, warps + c, current[live, w])
        end[live, w] = done
    return end.max(axis=1)


def _lane_widths(lens: np.ndarray, first: np.ndarray, rows: np.ndarray, warps: int,
                 widths: Sequence[int] = range(MIN_LANES_LOG2, 6)) -> tuple[np.ndarray, np.ndarray]:
    """log2 of the lanes per row (MIN_LANES_LOG2 to 5) for each short-row tile (rows [first, first + rows)): the
    width whose modelled instructions, over the warps plus the busiest warp's (warp w takes batches w, w + warps,
    ...), are fewest, so both the instructions issued and the time the tile holds its block count. Many short rows
    want narrow groups (more rows per batch), rows of a few rounds wide ones; a row far longer than its batch's
    others costs the warp's rounds over its rest, not the batch's idle lanes. The staged body
    (ShortRows::kStaged) sums with the same widths. Also, per tile, whether dynamic batches (the warps claiming
    them, under the policies with a barrier between tiles) leave its busiest warp less to do at that width.
    ``widths``: the candidates (one, where build_tiles is given a width)."""
    tiles = first.size
    if tiles == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    pos = np.arange(int(rows.sum())) - np.repeat(np.cumsum(rows) - rows, rows)  # each short row's place in its tile
    length = lens[np.repeat(first, rows) + pos]
    best, best_key = np.full(tiles, widths[0], np.int64), np.full(tiles, np.inf)
    dynamic = np.zeros(tiles, bool)
    for lanes_log2 in widths:
        per_batch, step = 32 >> lanes_log2, ROW_UNROLL << lanes_log2
        batches = -(-rows // per_batch)
        first_batch = np.cumsum(batches) - batches
        batch = np.repeat(first_batch, rows) + pos // per_batch
        starts = np.flatnonzero(np.concatenate(([True], batch[1:] != batch[:-1])))  # every batch has a row
        own = np.minimum(-(-length // step), OWN_ROUNDS)
        rest = np.maximum(length - OWN_ROUNDS * step, 0)
        assist = np.where(rest > 0, ASSIST_INSTR + ROUND_INSTR * -(-rest // (32 * ROW_UNROLL)), 0)
        cost = (BATCH_INSTR + SHUFFLE_INSTR * lanes_log2 + ROUND_INSTR * np.maximum.reduceat(own, starts)
                + np.add.reduceat(assist, starts))
        tile = np.repeat(np.arange(tiles), batches)
        warp = (np.arange(batch[-1] + 1) - np.repeat(first_batch, batches)) % warps
        busiest = np.bincount(tile * warps + warp, cost, tiles * warps).reshape(tiles, warps).max(axis=1)
        key = np.bincount(tile, cost, tiles) / warps + busiest
        better = key < best_key
        best[better], best_key[better] = lanes_log2, key[better]
        dynamic[better] = _greedy_busiest(cost, first_batch, batches, warps)[better] < busiest[better]
    return best, dynamic


def build_tiles(offsets: np.ndarray, split: bool, group: int = GROUP_NNZ, slice_nnz: int = SLICE_NNZ,
                long_nnz: int | None = None, threads: int = THREADS, lanes_log2: int | None = None,
                dynamic: bool | None = None, widest: int | None = None,
                slots: int = 132 * MIN_BLOCKS, windows_per_slot: float = 2) -> Tiles:
    """Cut the rows into tiles. Rows of at most `long_nnz` non-zeros (default group // 4) are grouped by where
    their weight (non-zeros plus two per row, for its offsets, its y and its turn in the sums) ends: the rows whose
    running weight ends in the same window of `group` form a tile, so a tile holds less than 2 * group non-zeros
    (the stage in shared memory of ShortRows::kStaged) and at most group // 2 rows (its offsets there).
    Guided windows (`widest` > group): a window is as wide as the weight left after it over
    `windows_per_slot` (default 2) x `slots` (the blocks the kernel keeps resident, at least 1), between group and
    widest, so the list begins with tiles of less than widest + long_nnz non-zeros and at most widest // 2 rows
    and ends with tiles of group: a block that loops over tiles pays its per-tile costs (a claim, the wait for its
    slowest warp) on fewer tiles, and the last tiles still even out the slots (guided self-scheduling,
    Polychronopoulos and Kuck, IEEE Trans. Computers 1987, with the halved chunks of factoring). Long rows and
    slices are cut as with fixed windows. Each short-row tile gets the lane width (lanes per row) the model of
    _lane_widths finds cheapest for its rows, or every one `lanes_log2` (0 to 5) where given (the tests run each
    width), and the flag DYNAMIC_BATCHES where the model finds dynamic batches faster (`dynamic` None), on every
    such tile (True) or on none (False).
    A longer row is a tile of its own, or with `split` (if longer than slice_nnz) slices of slice_nnz.
    Raises ValueError for a matrix of more than MAX_NNZ non-zeros."""
    if widest is not None and slots < 1:
        raise ValueError(f"slots (the blocks the kernel keeps resident) must be at least 1, got {slots}")
    if not windows_per_slot > 0:
        raise ValueError(f"windows_per_slot must be positive, got {windows_per_slot!r}")
    offsets = np.asarray(offsets, np.int64)
    n = offsets.size - 1
    _check_nnz(int(offsets[-1]))
    lens = np.diff(offsets)
    long_ = lens > (group // 4 if long_nnz is None else long_nnz)
    weight_end = offsets[1:] + 2 * np.arange(1, n + 1)
    if widest is None or widest <= group or n == 0:
        key = weight_end // group
    else:  # each row advances the window count by its weight over the width where it ends
        width = np.clip((weight_end[-1] - weight_end) / (windows_per_slot * slots), group, widest)
        key = np.floor(np.cumsum(np.diff(weight_end, prepend=0) / width)).astype(np.int64)
    prev_key = np.concatenate(([-1], key[:-1]))
    prev_long = np.concatenate(([True], long_[:-1]))
    start = ~long_ & (prev_long | (key != prev_key))
    bounds = np.flatnonzero(start | long_)
    first = np.flatnonzero(start)
    end = np.append(bounds, n)[np.searchsorted(bounds, first, side="right")]  # next start or long row, or n
    rows = end - first
    k0, k1 = offsets[first], offsets[end]
    if lanes_log2 is not None and (not isinstance(lanes_log2, (int, np.integer)) or not 0 <= lanes_log2 <= 5):
        raise ValueError(f"lanes_log2 must be 0 to 5 (1 to 32 lanes per row), got {lanes_log2!r}")
    candidates = range(MIN_LANES_LOG2, 6) if lanes_log2 is None else [int(lanes_log2)]
    widths, modelled = _lane_widths(lens, first, rows, threads // 32, candidates)
    flagged = modelled if dynamic is None else np.full(first.size, bool(dynamic))
    short = np.stack([first, (rows << 5) | np.where(flagged, DYNAMIC_BATCHES, 0) | widths, k0, k1], axis=1)

    long_rows = np.flatnonzero(long_)
    pieces = np.where(split & (lens[long_rows] > slice_nnz), -(-lens[long_rows] // slice_nnz), 1)
    row = np.repeat(long_rows, pieces)
    piece = np.arange(row.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    lk0 = offsets[row] + piece * slice_nnz
    lk1 = np.where(np.repeat(pieces, pieces) > 1, np.minimum(lk0 + slice_nnz, offsets[row + 1]), offsets[row + 1])
    split_id = np.repeat(np.cumsum(pieces > 1) - 1, pieces)
    info = np.where(np.repeat(pieces, pieces) > 1, ~split_id, 0)
    longs = np.stack([row, info, lk0, lk1], axis=1)

    tiles = np.concatenate([short.reshape(-1, 4), longs.reshape(-1, 4)])
    tiles = tiles[np.lexsort((tiles[:, 2], tiles[:, 0]))]  # row order, a split row's slices in order
    sliced = np.flatnonzero(tiles[:, 1] < 0)
    sid = ~tiles[sliced, 1]
    first_tile = np.full(int(sid.max(initial=-1)) + 1, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_tile, sid, sliced)
    splits = np.stack([first_tile, np.bincount(sid, minlength=first_tile.size)], axis=1)
    return Tiles(tiles.astype(np.int32), splits.astype(np.int32), split)


# -- the kernel --------------------------------------------------------------------------------------------
def spmv_kernel(policy: str = "auto", threads: int = THREADS, stage: int = STAGE, min_blocks: int = MIN_BLOCKS,
                name: str = "spmv", short_rows: str = "registers", quantum_us: float | None = None,
                batches: str = "dynamic", min_tiles: int | None = None, gather: bool = True) -> SpmvKernel:
    """The SpMV TileKernel: any policy can be chosen at launch (``k(tiles, ..., policy="fixed_blocks")``).
    ``short_rows``: how a tile of short rows is summed, "registers" (each row by a group of lanes, in registers)
    or "staged" (products staged in shared memory, then summed from there); ``stage`` applies to "staged";
    ``batches`` applies to "registers" (see BATCHES); ``quantum_us`` and ``min_tiles``: steal's time slice and the
    units a block runs before its slice may end (TileKernel's; None: learned). ``gather=False``: the segmented sum
    (y[r] = the sum of row r's values; cols and x are not read), the segreduce lab's kernel."""
    if short_rows not in SHORT_ROWS:
        raise ValueError(f"short_rows must be one of {', '.join(SHORT_ROWS)}; got {short_rows!r}")
    if batches not in BATCHES:
        raise ValueError(f"batches must be one of {', '.join(BATCHES)}; got {batches!r}")
    dynamic = BATCHES[batches] if short_rows == "registers" else "false"
    suffix = (f"regs_{batches}" if short_rows == "registers" else f"staged_{stage}") + ("" if gather else "_segsum")
    body = BODY.format(threads=threads, short=SHORT_ROWS[short_rows], stage=stage, dynamic=dynamic,
                       gather="true" if gather else "false")
    return SpmvKernel(PARAMS, body,
                      PROLOGUE.format(dynamic=dynamic), policy=policy, block=threads,
                      preamble=kernel_source("spmv.cuh"), name=f"{name}_{threads}_{suffix}",
                      min_blocks_per_sm=min_blocks, quantum_us=quantum_us, min_tiles=min_tiles,
                      stage=stage if short_rows == "staged" else None, gather=gather)


class SpmvKernel(TileKernel):
    """The SpMV TileKernel, with the stage of its staged short-row body (None: the register body, which takes
    tiles of any size), which DeviceCsr.run checks a tile list against before the launch, and whether it gathers
    x (SpMV) or sums the values alone (the segmented sum), which DeviceCsr.run checks against its arrays."""

    def __init__(self, *args, stage: int | None, gather: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.stage = stage
        self.gather = gather


class DeviceCsr:
    """A matrix and its tile lists on the GPU, with x, y and the split rows' scratch (partials, counts: zeroed
    once, reset by the kernel). One launch at a time per DeviceCsr: launches share y and a list's counts.
    Tile lists: "whole" and "split" rows (build_tiles), in guided windows from ``group`` to 4 x group (``guided``)
    or fixed windows of ``group``, and with guided windows also "split_fixed", split rows in fixed windows, whose
    tiles the staged body's stage holds. ``slots``: the blocks the kernel keeps resident, which sets where the
    windows narrow (default: this GPU's SMs x MIN_BLOCKS x THREADS / threads).
    ``group``, ``lanes_log2``, ``dynamic`` and ``threads`` (the block size the kernel will run, for the model's
    warps): build_tiles' (small groups, a fixed lane width and dynamic batches on every tile or none make the tests
    take every path). ``x=None``: the segmented sum of the segreduce lab (a kernel with ``gather=False``): only
    the row offsets and values of ``m`` go to the GPU, and y[r] is the sum of row r's values."""

    def __init__(self, m: Csr, x: np.ndarray | None, group: int = GROUP_NNZ, lanes_log2: int | None = None,
                 dynamic: bool | None = None, threads: int = THREADS, guided: bool = True,
                 slots: int | None = None):
        import cupy as cp

        from ..device import current_device

        widest = WIDEST_NNZ * group // GROUP_NNZ if guided else None
        if slots is None:
            slots = current_device().caps.sm_count * max(1, MIN_BLOCKS * THREADS // threads)
        self.host = m
        self.offsets = cp.asarray(m.offsets)
        # register_rows reads up to ROW_UNROLL - 1 elements past a row (and masks them): past the last row, zeros
        self.vals = _padded(cp, m.vals, ROW_UNROLL - 1)
        self.cols = None if x is None else _padded(cp, m.cols, ROW_UNROLL - 1)
        self.x = None if x is None else cp.asarray(x)
        self.y = cp.empty(m.n_rows, cp.float32)
        lists = {"whole": (False, widest), "split": (True, widest)}
        if guided:
            lists["split_fixed"] = (True, None)
        self.tilings = {}
        self._short_extent = {}
        for name, (split, wide) in lists.items():
            self.add_tiling(name, build_tiles(m.offsets, split, group, 4 * group, threads=threads,
                                              lanes_log2=lanes_log2, dynamic=dynamic, widest=wide, slots=slots))

    def add_tiling(self, name: str, t: Tiles) -> None:
        """Adds (or replaces) the tile list `name`, built by build_tiles for this matrix. Tile lists meant to be
        compared belong on one DeviceCsr, so that they read the same x, columns and values at the same addresses:
        under steal on R-MAT, two lists read 2.3 points apart on copies of their own and 0.3 points apart, the
        other way, on one copy (docs/spmv.md)."""
        import cupy as cp

        self.tilings[name] = (t, cp.asarray(t.tiles), cp.asarray(t.splits.reshape(-1)),
                              cp.zeros(max(t.count, 1), cp.float32), cp.zeros(max(t.splits.shape[0], 1), cp.uint32))
        # once here, not per launch: a scan of the tile list per call would hold timed launches back on the host
        self._short_extent[name] = t.short_extent()

    def holds(self, kernel: TileKernel, tiling: str) -> bool:
        """Whether the kernel's short-row body takes every tile of the list (a staged body only fewer non-zeros
        than its stage, and at most half as many rows)."""
        stage = getattr(kernel, "stage", None)
        if stage is None:
            return True
        nnz, rows = self._short_extent[tiling]
        return nnz < stage and rows <= stage // 2

    def run(self, kernel: TileKernel, tiling: str, policy: str | None = None, **launch):
        """y = A x with the tile list `tiling` (a key of ``tilings``); launch: TileKernel's (order=, trace=, ...).
        Raises ValueError, before any launch, where the kernel's staged body cannot hold the list's short-row tiles."""
        t, tiles, splits, partials, counts = self.tilings[tiling]
        gathers = getattr(kernel, "gather", True)
        if gathers != (self.x is not None):
            raise ValueError("an SpMV kernel (gather=True) needs a DeviceCsr with x, a segmented sum's kernel "
                             f"(gather=False) one without (x=None); got a gather={gathers} kernel and "
                             f"{'no x' if self.x is None else 'an x'}")
        if not self.holds(kernel, tiling):
            stage = kernel.stage
            nnz, rows = self._short_extent[tiling]
            raise ValueError(f"the staged short-row body holds tiles of fewer than {stage} non-zeros and at most "
                             f"{stage // 2} rows; tile list {tiling!r} has one of {nnz} non-zeros and one of {rows} "
                             "rows: take a list of fixed windows ('split_fixed', or DeviceCsr(..., guided=False))")
        # a segmented sum's kernel reads no cols and no x: null pointers
        cols, x = (0, 0) if self.x is None else (self.cols, self.x)
        return kernel(t.count, tiles, splits, self.offsets, cols, self.vals, x, self.y, partials, counts,
                      policy=policy, **launch)


def checked_case(kind: str, n_rows: int, mean: int, seed: int) -> tuple[DeviceCsr, np.ndarray, np.ndarray]:
    """A generated matrix of this kind on the GPU with x uniform in [-1, 1] (from seed + 1), its reference A x in
    float64 and the tolerance per row (for scripts that time the lab's matrices outside the lab)."""
    m = generate(kind, n_rows, mean, seed)
    x = np.random.default_rng(seed + 1).uniform(-1, 1, m.n_cols).astype(np.float32)
    ref, abs_sum, _ = reference(m, x)
    return DeviceCsr(m, x), ref, tolerance(m.lengths, abs_sum)


def _padded(cp, a: np.ndarray, pad: int):
    """A device copy of a followed by pad zeros in the same allocation, as a view of a's length (what the peers
    and the kernel are given: the kernel may read the zeros, nothing else sees them)."""
    out = cp.zeros(a.size + pad, a.dtype)
    out[:a.size].set(np.ascontiguousarray(a))
    return out[:a.size]


# -- reference ---------------------------------------------------------------------------------------------
def reference(m: Csr, x: np.ndarray, use_scipy: bool = True) -> tuple[np.ndarray, np.ndarray, str]:
    """A x and |A| |x| in float64, and what computed them: SciPy's csr_matrix where SciPy is installed (and
    use_scipy), else NumPy."""
    try:
        if not use_scipy:
            raise ImportError("NumPy asked for")
        import scipy.sparse as sp
    except ImportError:
        prod = m.vals.astype(np.float64) * x.astype(np.float64)[m.cols]
        row = np.repeat(np.arange(m.n_rows), m.lengths)
        return (np.bincount(row, prod, m.n_rows), np.bincount(row, np.abs(prod), m.n_rows),
                "NumPy's float64 sums" + ("" if not use_scipy else " (SciPy is not installed)"))
    import scipy

    a = sp.csr_matrix((m.vals.astype(np.float64), m.cols, m.offsets), shape=(m.n_rows, m.n_cols))
    x64 = x.astype(np.float64)
    ref = a @ x64
    a.data = np.abs(a.data)
    return ref, a @ np.abs(x64), f"SciPy {scipy.__version__} csr_matrix @ x in float64"


def tolerance(lengths: np.ndarray, abs_sum: np.ndarray) -> np.ndarray:
    """|y - A x| allowed per row: 4 float32 epsilons x (log2(row length) + 2) x sum_j |a_ij x_j|. Rounding the
    products costs one epsilon of that sum; a sum of n terms in any order of pairwise and serial additions
    costs about log2(n) more with random signs (the lab's values and x are uniform in [-1, 1]); an empty row
    must be exactly 0."""
    return 4 * np.finfo(np.float32).eps * (np.log2(np.maximum(lengths, 1)) + 2) * abs_sum


def check(what: str, y: np.ndarray, ref: np.ndarray, tol: np.ndarray, lab: str = "spmv") -> float:
    """Raises ValidationError naming the lab and the worst row when any row is out of tolerance (NaN included);
    returns the largest error over tolerance (<= 1)."""
    err = np.abs(y.astype(np.float64) - ref)
    bad = ~(err <= tol)
    if bad.any():
        r = int(np.flatnonzero(bad)[np.argmax(np.where(np.isnan(err[bad]), np.inf, err[bad]))])
        raise ValidationError(f"{lab} {what}: {int(bad.sum())} rows out of tolerance; row {r}: got {y[r]!r}, "
                              f"reference {ref[r]!r}, tolerance {tol[r]:.3g}")
    ratio = np.divide(err, tol, out=np.zeros_like(err), where=tol > 0)
    return float(ratio.max(initial=0.0))


def checked_timings(ctx, lab: str, kind: str, dev: DeviceCsr, fns, labels, found_peers, ref, tol, rounds: int,
                    repeats: int, queue_ahead_us: float):
    """What both labs over DeviceCsr measure: validate every variant and peer (fns: label -> a call; labels: label ->
    ("cuadv", ...) for cuadv's, which write dev.y, poisoned with NaN first; found_peers: the labs' `peers(...)`, whose
    calls return their result and join fns and labels as ("peer", kind), the absent ones named in a progress line),
    time them all in interleaved rounds (each the median of `repeats` CUDA-event timings behind a `queue_ahead_us`
    spin), and validate cuadv's again (steal then runs the grid it learned). Returns label -> ms and the largest error
    over its tolerance."""
    import cupy as cp

    from ..timing import time_gpu
    from .base import interleaved_rounds

    peer_list, missing = found_peers
    for peer_kind, label, fn in peer_list:
        fns[label], labels[label] = fn, ("peer", peer_kind)
    for name, why in missing.items():
        ctx.progress(f"{lab}: {name} skipped: {why}")
    worst = 0.0

    def validate(cuadv_only: bool) -> None:
        nonlocal worst
        for label, fn in fns.items():
            if labels[label][0] == "cuadv":
                dev.y.fill(cp.nan)
                fn()
                y = dev.y
            elif cuadv_only:
                continue
            else:
                y = fn()
            worst = max(worst, check(f"{kind}, {label}", to_host(y), ref, tol, lab=lab))

    validate(False)
    times = interleaved_rounds(
        {label: (lambda f=fn: [time_gpu(f, repeats=repeats, queue_ahead_us=queue_ahead_us).median_ms])
         for label, fn in fns.items()}, rounds,
        lambda r: ctx.progress(f"{lab} {kind}: round {r + 1} of {rounds}, {len(fns)} variants"))
    validate(True)
    return times, worst


# -- peers -------------------------------------------------------------------------------------------------
CUSPARSE_SPMV_ALG_DEFAULT = 0  # cusparseSpMVAlg_t (cusparse.h): the default is CUSPARSE_SPMV_CSR_ALG1 for CSR
CUDA_R_32F = 0  # cudaDataType_t


def cusparse_version() -> str:
    """cuSPARSE's version as CuPy loads it (cusparseGetVersion: major * 1000 + minor * 100 + patch)."""
    import cupy as cp

    try:
        from cupy_backends.cuda.libs import cusparse as lib

        v = lib.getVersion(cp.cuda.device.get_cusparse_handle())
        return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"
    except Exception as exc:  # a CuPy without the binding: say so rather than guess
        return f"unknown ({type(exc).__name__})"


class CusparsePrepared:
    """cusparseSpMV (CSR, float32, the default algorithm) through CuPy's bindings, with the descriptors and the
    workspace made once and y written in place (beta = 0): cuSPARSE itself, without the per-call set-up of
    ``csr_matrix @ x``."""

    def __init__(self, matrix, x, y):
        import cupy as cp
        import cupyx.cusparse as cs
        from cupy_backends.cuda.libs import cusparse as lib

        self.lib, self.cp = lib, cp
        self.descs = (cs.SpMatDescriptor.create(matrix), cs.DnVecDescriptor.create(x), cs.DnVecDescriptor.create(y))
        self.alpha, self.beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        handle = cp.cuda.device.get_cusparse_handle()
        size = lib.spMV_bufferSize(handle, lib.CUSPARSE_OPERATION_NON_TRANSPOSE, self.alpha.ctypes.data,
                                   self.descs[0].desc, self.descs[1].desc, self.beta.ctypes.data, self.descs[2].desc,
                                   CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT)
        self.work = cp.empty(max(int(size), 1), cp.int8)

    def __call__(self) -> None:
        lib = self.lib
        handle = self.cp.cuda.device.get_cusparse_handle()  # bound to CuPy's current stream
        lib.spMV(handle, lib.CUSPARSE_OPERATION_NON_TRANSPOSE, self.alpha.ctypes.data, self.descs[0].desc,
                 self.descs[1].desc, self.beta.ctypes.data, self.descs[2].desc, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT,
                 self.work.data.ptr)


def peers(dev: DeviceCsr) -> tuple[list[tuple[str, str, object]], dict[str, str]]:
    """(kind, label naming the version, callable returning y) for each peer present, kind one of "cusparse"
    (the prepared call), "cupyx" and "torch"; and name -> why absent. Every peer reads the same device arrays
    as cuadv (no copy)."""
    import cupy as cp
    import cupyx.scipy.sparse as cusp

    m = dev.host
    a = cusp.csr_matrix((dev.vals, dev.cols, dev.offsets), shape=(m.n_rows, m.n_cols))
    if not a.has_canonical_format:  # computed once by CuPy and kept: @ then sorts nothing
        raise ValidationError(f"spmv {m.name}: CuPy finds the columns not sorted and unique within each row")
    y = cp.empty(m.n_rows, cp.float32)
    prepared = CusparsePrepared(a, dev.x, y)
    version = f"cuSPARSE {cusparse_version()}, CuPy {cp.__version__}"
    out = [("cusparse", f"cuSPARSE SpMV, prepared once ({version})", lambda: (prepared(), y)[1]),
           ("cupyx", f"cupyx csr_matrix @ x ({version})", lambda: a @ dev.x)]
    missing = {}
    torch, why = import_torch()
    if torch is None:
        missing["torch.sparse"] = why
    else:
        t = torch_csr(torch, dev.offsets, dev.cols, dev.vals, (m.n_rows, m.n_cols))
        xt = torch.as_tensor(dev.x, device="cuda")
        out.append(("torch", f"torch.sparse_csr_tensor @ x (torch {torch.__version__}, CUDA {torch.version.cuda})",
                    lambda: t @ xt))
    return out, missing


def torch_csr(torch, offsets, cols, vals, shape: tuple[int, int]):
    """A torch CSR tensor over the same device arrays, made without torch's two UserWarnings about its sparse
    support (beta state; invariant checks left implicit), which would otherwise land in every `cuadv run` log.
    The invariants are waived on purpose: CuPy has already found the columns sorted and unique per row. torch 2.11
    warns that the checks are implicit even with check_invariants=False (GPU tests, 2026-12-05), and only the
    process-wide setting counts as explicit, which is the caller's, so that warning is filtered here too."""
    with warnings.catch_warnings():
        for message in ("Sparse CSR tensor support is in beta state",
                        "Sparse invariant checks are implicitly disabled"):
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        return torch.sparse_csr_tensor(*(torch.as_tensor(a, device="cuda") for a in (offsets, cols, vals)),
                                       size=shape, check_invariants=False)


def to_host(y) -> np.ndarray:
    """A CuPy array or a torch tensor on the GPU, as a NumPy array, after a bounded wait for the device (the
    peers run on their libraries' streams)."""
    synchronize_device(what="the work before the spmv readback")
    if hasattr(y, "detach"):
        return y.detach().cpu().numpy()
    return y.get()
