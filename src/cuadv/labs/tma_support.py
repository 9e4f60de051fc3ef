"""Lab-private pieces of the ``tma`` lab: the multicast matrix-vector product (its parameter struct and
launch checks), the data generators and bit-exact checks every measurement runs, and the Nsight Compute
runner. What users call lives in ``cuadv.tma``; the lab (``cuadv.labs.tma``) measures and reports.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from ..errors import LaunchConfigError, ValidationError
from ..launching import LaunchConfig
from ..params import StructArgument, c_struct
from ..tma import kernels as _kernels
from ..tma.kernels import GEMV_VECTORS_PER_BLOCK, MAX_READING, Launch, Plan2D, TmaCopyConfig, _launcher
from ..tma.tensormap import describe_array, element_size, pitch_elements
from .base import readback

# Mirrors gemv_tma of tma.cu.
GEMV_PARAMS_BYTES = 192
COPY_THREADS, TILE_THREADS = 32, 256
GEMV_THREADS, GEMV_TILE_M, GEMV_TILE_K, GEMV_SLICES, GEMV_STAGES = 256, 64, 64, 8, 4
GEMV_TILE_BYTES = GEMV_TILE_M * GEMV_TILE_K * 4
GEMV_SHARED = GEMV_STAGES * GEMV_TILE_BYTES + 128
MAX_MULTICAST_CLUSTER = GEMV_SLICES

GEMV_LAYOUT = c_struct("GemvParams", [
    ("a", "V128"), ("x", "<u8"), ("y", "<u8"), ("m", "<i8"), ("k", "<i8"), ("x_pitch", "<i8"), ("y_pitch", "<i8"),
    ("_pad", "V16"),  # sizeof rounds up to alignas(64) of the tensor map
], size=GEMV_PARAMS_BYTES)


@dataclass(frozen=True)
class GemvParams(StructArgument):
    """GemvParams of tma.cu (192 bytes)."""

    LAYOUT: ClassVar[np.dtype] = GEMV_LAYOUT
    a: Any  # a TensorMap
    x: int
    y: int
    m: int
    k: int
    x_pitch: int  # elements
    y_pitch: int  # elements


class TmaOps(_kernels.TmaOps):
    """cuadv.tma's kernels plus the lab's multicast gemv (gemv_tma<Multicast, VB>, built in the same module)."""

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
        return _launcher(Launch(self.kernel(name), cfg, params), stream)


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
            host = readback(src)
            for method in ("tma", "threads"):
                dst = pitched(cp, rows, cols, dtype, extra=1)
                poison_against(cp, dst, host)
                ops.prepare_copy(src, dst, box, method=method, dtype=tdtype)()
                if not np.array_equal(_bits(readback(dst)), _bits(host)):
                    raise ValidationError(f"{method} copy wrong: {dtype} {rows}x{cols} box {box}")
                count += 1
                if box[0] * element_size(dtype) % 16 == 0:  # the transposed box's inner extent must be 16-byte legal
                    dst_t = pitched(cp, cols, rows, dtype)
                    poison_against(cp, dst_t, host.T)
                    ops.prepare_transpose(src, dst_t, box, method=method, dtype=tdtype)()
                    if not np.array_equal(_bits(readback(dst_t)), _bits(host.T)):
                        raise ValidationError(f"{method} transpose wrong: {dtype} {rows}x{cols} box {box}")
                    count += 1
    checks = [f"TMA and thread copies and transposes equal NumPy bit for bit for {', '.join(dtypes)} on "
              f"{len(cases)} shapes each (tails in both directions, pitched rows; {count} configurations; "
              "destinations poisoned with the complement of the expected bits); "
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
        got = readback(ops.load_tiles(src, box, dtype="bfloat16" if dtype == "bfloat16" else None, oob_fill=fill))
        ty, tx = got.shape[:2]
        host = readback(src)
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
            raise ValidationError(f"TMA NaN fill: {np.count_nonzero(~np.isnan(outside))} out-of-bounds elements "
                                  "not NaN")
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
        host = readback(src)
        for method in ("tma", "threads"):
            dst = pitched(cp, rows, cols, dtype, extra=1)
            poison_against(cp, dst, host)
            if method == "tma":
                ops.prepare_copy(src, dst, box, config=config)()
            else:
                ops.prepare_copy(src, dst, box, method="threads", chunk=config.chunk)()
            if not np.array_equal(_bits(readback(dst)), _bits(host)):
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

