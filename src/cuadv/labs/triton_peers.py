"""Triton peers of the ``tma`` and ``pipeline`` labs, and the tables that set cuadv's public ops beside them.

Shows: cuadv.tma.copy against a 2-D copy written in Triton with tensor descriptors (TMA loads and stores, one
tile per program, several tile shapes, the fastest reported), a Triton pointer copy (``tl.load``/``tl.store``)
and torch's device copy (``dst.copy_(src)``, the copy ceiling of this comparison); and cuadv.pipeline.stencil
against the same 5-point stencil written in Triton with tensor descriptors. Every kernel is checked element for
element before it is timed, and all are timed in the same interleaved rounds (``interleaved_rounds``).
Needs: triton with host-side tensor descriptors (``triton.tools.tensor_descriptor``, Triton 3.3 or newer) and
torch with CUDA; where either is missing the labs say so in a note (``missing()``) and skip this comparison.
Run: ``cuadv bench tma`` and ``cuadv bench pipeline`` (``--quick`` for 8192 x 8192).

Benchmark-only and lab-private: the library never imports this module, and triton and torch are imported inside
functions, so it imports on a machine without them.

The stencil is the library's (``cuadv.pipeline.stencil``): ``out = c_center * x + c_neighbour * (((up + down) +
left) + right)``, float32, zeros outside the array, every operation rounded in that order (no FMA contraction:
the Triton kernels are compiled with ``enable_fp_fusion=False``), so the results are equal bit for bit.
Two Triton forms: ``gather`` keeps to Triton's documented rule that a descriptor's innermost offset is a multiple
of 16 bytes (the rows above and below are descriptor loads at rows r - 1 and r + 1; the columns to the left and
right are the centre tile shifted in registers by ``tl.gather``, its edge columns from 4-column halo loads at
c - 4 and c + BN); ``shifted`` loads the five neighbour tiles directly (column offsets c - 1 and c + 1: outside
that documented rule, though the TMA unit takes any coordinate; the interpreter refuses it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import ValidationError
from ..report.results import LabResult, Table, spread_map
from .base import RunContext, import_torch, interleaved_rounds, missed_by, rates

# Tile shapes (rows, columns) of the Triton kernels; warps per program grow with the tile.
COPY_TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (64, 256), (256, 64), (256, 128))
COPY_TILES_QUICK = ((64, 128), (128, 128), (64, 256))
POINTER_TILES = ((16, 256), (32, 256), (64, 128))
POINTER_TILES_QUICK = ((32, 256),)
# tl.gather is lowered within a warp: rows of 256 columns, or of 128 with 16 rows, do not compile in Triton 3.6.
# Not 'shifted': on the H200 (2026-12-02, Triton 3.6.0) every 'shifted' kernel stopped with
# CUDA_ERROR_ILLEGAL_INSTRUCTION, which leaves the process's CUDA context unusable, so it is never launched.
STENCIL_TILES = (("gather", (64, 64)), ("gather", (32, 128)), ("gather", (64, 128)), ("gather", (128, 64)))
STENCIL_TILES_QUICK = (("gather", (64, 128)),)
# cuadv's tma_copy launched the way the Triton copy is: one unit of `chunk` side-by-side boxes per block, all its
# loads issued at once, as many blocks as units (the hardware block scheduler hands them to whichever SM has room)
# instead of a persistent grid with a static round-robin split.
PER_UNIT = (((8, 256), 4), ((16, 256), 2), ((8, 256), 8))
PER_UNIT_QUICK = (((8, 256), 4), ((16, 256), 2))
COPY_TARGET_X, COPY_TARGET_PCT, STENCIL_TARGET_X = 1.0, 97.0, 1.0
SIDE = {False: 16384, True: 8192}  # float32 side x side arrays; --quick: 8192
ROUNDS = {False: 9, True: 3}  # interleaved rounds of 10 CUDA-event timings per kernel
HALO_COLS = 4  # the narrowest descriptor box: 16 bytes of float32


def missing() -> str | None:
    """Why the Triton peers cannot run here, naming what is missing; None when they can."""
    try:
        import triton
        import triton.language  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return f"triton is not importable ({type(exc).__name__}: {exc}); the Triton peers need triton >= 3.3 and torch"
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return (f"triton {triton.__version__} has no host-side tensor descriptors "
                "(triton.tools.tensor_descriptor, Triton >= 3.3)")
    torch, why = import_torch()
    if torch is None:
        return f"{why}; Triton launches on torch tensors"
    if not _interpreting() and not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    return None


def versions() -> str:
    """'Triton 3.6.0, torch 2.x.y' (call only where missing() is None)."""
    import triton

    torch, _ = import_torch()

    return f"Triton {triton.__version__}, torch {torch.__version__}"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# Elements per thread: a TMA copy keeps its box in shared memory (no registers), the others hold it in registers.
PER_THREAD = {"tma": 64, "pointer": 16, "stencil": 32}


def _warps(tile: tuple[int, int], kind: str = "tma") -> int:
    """Warps per program: the tile over PER_THREAD[kind] x 32 threads, 4 to 16."""
    return max(4, min(16, tile[0] * tile[1] // (32 * PER_THREAD[kind])))


# ---------------------------------------------------------------------------------------------- the kernels

_BUILT: dict[bool, Any] = {}


def kernels() -> Any:
    """The Triton kernels (jit functions), built on first use; separately under TRITON_INTERPRET=1 (CPU)."""
    key = _interpreting()
    if key not in _BUILT:
        _BUILT[key] = _build()
    return _BUILT[key]


def _build() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def tma_copy(src_desc, dst_desc, BM: tl.constexpr, BN: tl.constexpr):
        # One tile per program: a TMA load into shared memory (to registers), a TMA store back out.
        r = tl.program_id(1) * BM
        c = tl.program_id(0) * BN
        dst_desc.store([r, c], src_desc.load([r, c]))

    @triton.jit
    def pointer_copy(src, dst, rows, cols, src_pitch, dst_pitch, BM: tl.constexpr, BN: tl.constexpr):
        r = tl.program_id(1).to(tl.int64) * BM + tl.arange(0, BM)[:, None]
        c = tl.program_id(0) * BN + tl.arange(0, BN)[None, :]
        inside = (r < rows) & (c < cols)
        tl.store(dst + r * dst_pitch + c, tl.load(src + r * src_pitch + c, mask=inside), mask=inside)

    @triton.jit
    def stencil_gather(x_desc, halo_desc, out_desc, c_center, c_neighbour, BM: tl.constexpr, BN: tl.constexpr):
        r = tl.program_id(1) * BM
        c = tl.program_id(0) * BN
        mid = x_desc.load([r, c])
        up = x_desc.load([r - 1, c])          # rows outside the array arrive as zeros (TMA's fill)
        down = x_desc.load([r + 1, c])
        west = halo_desc.load([r, c - 4])     # BM x 4: its column 3 is x[:, c - 1]
        east = halo_desc.load([r, c + BN])    # BM x 4: its column 0 is x[:, c + BN]
        j = tl.broadcast_to(tl.arange(0, BN)[None, :], (BM, BN))
        left = tl.gather(mid, tl.maximum(j - 1, 0), axis=1)
        left = tl.where(j == 0, tl.gather(west, tl.full((BM, BN), 3, tl.int32), axis=1), left)
        right = tl.gather(mid, tl.minimum(j + 1, BN - 1), axis=1)
        right = tl.where(j == BN - 1, tl.gather(east, tl.full((BM, BN), 0, tl.int32), axis=1), right)
        out_desc.store([r, c], c_center * mid + c_neighbour * (((up + down) + left) + right))

    @triton.jit
    def stencil_shifted(x_desc, out_desc, c_center, c_neighbour, BM: tl.constexpr, BN: tl.constexpr):
        r = tl.program_id(1) * BM
        c = tl.program_id(0) * BN
        mid = x_desc.load([r, c])
        total = ((x_desc.load([r - 1, c]) + x_desc.load([r + 1, c])) + x_desc.load([r, c - 1])) + \
            x_desc.load([r, c + 1])
        out_desc.store([r, c], c_center * mid + c_neighbour * total)

    return _Kernels(tma_copy, pointer_copy, stencil_gather, stencil_shifted)


@dataclass(frozen=True)
class _Kernels:
    tma_copy: Any
    pointer_copy: Any
    stencil_gather: Any
    stencil_shifted: Any


def _grid(shape: tuple[int, int], tile: tuple[int, int]) -> tuple[int, int]:
    """Programs along the columns (axis 0, so neighbouring programs take neighbouring tiles of a row), then rows."""
    return -(-shape[1] // tile[1]), -(-shape[0] // tile[0])


def prepare_tma_copy(src: Any, dst: Any, tile: tuple[int, int]) -> Callable[[], None]:
    """dst[...] = src by Triton tensor descriptors (host-side TensorDescriptor: no device allocator needed);
    one tile per program. torch tensors, 2-D, rows 16-byte aligned."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    k = kernels().tma_copy
    s, d = TensorDescriptor.from_tensor(src, list(tile)), TensorDescriptor.from_tensor(dst, list(tile))
    grid, warps = _grid(tuple(src.shape), tile), _warps(tile)
    return lambda: k[grid](s, d, BM=tile[0], BN=tile[1], num_warps=warps)


def prepare_pointer_copy(src: Any, dst: Any, tile: tuple[int, int]) -> Callable[[], None]:
    """dst[...] = src by masked tl.load / tl.store of (rows, columns) tiles, one per program."""
    k = kernels().pointer_copy
    rows, cols = src.shape
    grid, warps = _grid((rows, cols), tile), _warps(tile, "pointer")
    ps, pd = src.stride(0), dst.stride(0)
    return lambda: k[grid](src, dst, rows, cols, ps, pd, BM=tile[0], BN=tile[1], num_warps=warps)


def prepare_stencil(x: Any, out: Any, tile: tuple[int, int], form: str, c_center: float,
                    c_neighbour: float) -> Callable[[], None]:
    """out = the library's 5-point stencil of x by Triton tensor descriptors, form 'gather' or 'shifted' (see
    the module docstring); one output tile per program, compiled without FMA contraction."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    if form not in ("gather", "shifted"):
        raise ValueError(f"form must be 'gather' or 'shifted'; got {form!r}")
    bm, bn = tile
    xd, od = TensorDescriptor.from_tensor(x, [bm, bn]), TensorDescriptor.from_tensor(out, [bm, bn])
    grid, warps = _grid(tuple(x.shape), tile), _warps(tile, "stencil")
    cc, cn = float(c_center), float(c_neighbour)  # exact in float32 (Triton passes Python floats as fp32)
    if form == "gather":
        k, hd = kernels().stencil_gather, TensorDescriptor.from_tensor(x, [bm, HALO_COLS])
        return lambda: k[grid](xd, hd, od, cc, cn, BM=bm, BN=bn, num_warps=warps, enable_fp_fusion=False)
    k = kernels().stencil_shifted
    return lambda: k[grid](xd, od, cc, cn, BM=bm, BN=bn, num_warps=warps, enable_fp_fusion=False)


def prepare_cuadv_per_unit(src: Any, dst: Any, box: tuple[int, int], chunk: int,
                           ops: Any = None) -> tuple[Callable[[], None], str]:
    """cuadv's tma_copy kernel, one unit of ``chunk`` side-by-side boxes per block (ring of ``chunk`` slots, all
    loads issued at once), as many blocks as units (``TmaCopyConfig(persistent=False)``, what cuadv.tma.copy
    does by default with chunk 4). Returns the launcher and a label."""
    import torch

    from ..launching import launch
    from ..tma.kernels import TmaCopyConfig, TmaOps

    config = TmaCopyConfig(stages=chunk, lookahead=chunk, chunk=chunk, burst=chunk, persistent=False)
    job = (ops or TmaOps()).copy_launch(src, dst, box, config=config)
    cfg, blob, kernel = job.config, job.params.kernel_param_bytes(), job.kernel
    label = f"box {box[0]} x {box[1]}, {chunk} boxes per block, {cfg.grid[0]} blocks"
    return (lambda: launch(kernel, cfg, blob, stream=torch.cuda.current_stream().cuda_stream)), label


# ---------------------------------------------------------------------------------------------- measuring

@dataclass
class _Row:
    what: str
    config: str
    fn: Callable[[], Any]
    # 'cuadv_default', 'cuadv_best', 'cuadv_unit', 'triton_tma', 'triton_pointer', 'triton_stencil', 'ceiling'
    kind: str
    ms: float = float("nan")

    @property
    def cuadv(self) -> bool:
        return self.kind.startswith("cuadv")


def _stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def _time(ctx: RunContext, rows: list[_Row], what: str) -> None:
    """Median ms of every row over interleaved rounds (each round: every row, 10 CUDA-event timings)."""
    from ..timing import time_gpu

    h = _stream()
    rounds = ROUNDS[ctx.quick]

    def one(fn):
        return lambda: list(time_gpu(fn, stream=h, repeats=10).samples)

    ms = interleaved_rounds({i: one(r.fn) for i, r in enumerate(rows)}, rounds,
                            lambda r: ctx.progress(f"{what}: round {r + 1} of {rounds}, {len(rows)} kernels"))
    for i, r in enumerate(rows):
        r.ms = ms[i]


def _tb_per_s(ms: float, nbytes: int) -> float:
    """TB/s of moving nbytes in ms (a Spread of rates from a Spread of times)."""
    return spread_map(lambda t: nbytes / (t * 1e-3) / 1e12, ms)


def _checked(candidates: list[_Row], target, expected, result: LabResult, what: str) -> list[_Row]:
    """The candidates whose output (poisoned with NaN first) equals expected; a peer that fails to build or
    differs is left out with a note, a cuadv one raises (ValidationError when it differs)."""
    import torch

    from ..errors import GpuTimeoutError
    from ..timing import synchronize_device

    rows = []
    for r in candidates:
        target.fill_(float("nan"))
        try:
            r.fn()
            synchronize_device()
        except GpuTimeoutError:  # the GPU is still busy: no later candidate can run either
            raise
        except Exception as exc:  # a tile that does not fit (OutOfResources), a compile error
            if r.cuadv:
                raise
            result.notes.append(f"{what}: {r.what} ({r.config}) left out: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        if not torch.equal(target, expected):
            bad = int((target != expected).sum())
            if r.cuadv:
                raise ValidationError(f"{what}: {r.what} ({r.config}): {bad} elements differ")
            result.notes.append(f"{what}: {r.what} ({r.config}) left out: {bad} elements differ from the expected "
                                "output")
            continue
        rows.append(r)
    return rows


def _verdict(x: float, pct: float | None) -> str:
    parts = [f"{x:.4g}x Triton: " + ("met" if x >= COPY_TARGET_X else missed_by(x, COPY_TARGET_X))]
    if pct is not None:
        parts.append(f"{pct:.4g}% of the copy: " + ("met" if pct >= COPY_TARGET_PCT else
                                                   missed_by(pct, COPY_TARGET_PCT, points=True)))
    return "; ".join(parts)


def compare_copy(ctx: RunContext, result: LabResult, best_box: tuple[int, int] | None = None,
                 best_config: Any = None) -> None:
    """The tma lab's Triton table: cuadv.tma.copy (public defaults; the lab's best configuration of this run;
    one unit per block) vs Triton TMA and pointer copies vs torch's dst.copy_(src), float32 side x side."""
    _guarded(result, lambda: _compare_copy(ctx, result, best_box, best_config))


def compare_stencil(ctx: RunContext, result: LabResult) -> None:
    """The pipeline lab's Triton table: cuadv.pipeline's public stencil ('auto') vs the Triton descriptor stencils,
    float32 side x side, with torch's dst.copy_(src) as the copy ceiling."""
    _guarded(result, lambda: _compare_stencil(ctx, result))


def _guarded(result: LabResult, compare: Callable[[], None]) -> None:
    """Run a comparison where the peers can run (else a note with the reason); give torch's cached blocks back."""
    reason = missing()
    if reason is not None:
        result.notes.append(f"Triton comparison skipped: {reason}")
        return
    compare()
    import torch

    torch.cuda.empty_cache()  # the comparison's arrays are gone: let CuPy have the memory torch kept


def _compare_copy(ctx: RunContext, result: LabResult, best_box: tuple[int, int] | None, best_config: Any) -> None:
    import torch

    import cuadv

    side = SIDE[ctx.quick]
    ctx.progress(f"tma: Triton comparison at {side} x {side} (compiling and checking)")
    src = torch.randn(side, side, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    op = cuadv.tma.prepare_copy(src, dst)
    cands = [_Row("cuadv.tma.prepare_copy(src, dst)", f"public defaults: box {op.box[0]} x {op.box[1]}, "
                  f"{op.config.describe()}", op, "cuadv_default")]
    if best_box is not None and best_config is not None:
        cands.append(_Row("cuadv.tma.prepare_copy(src, dst, box=, config=)", f"the sweep's best this run: box "
                          f"{best_box[0]} x {best_box[1]}, {best_config.describe()}",
                          cuadv.tma.prepare_copy(src, dst, box=best_box, config=best_config), "cuadv_best"))
    from ..tma.kernels import TmaOps

    ops = TmaOps()
    for box, chunk in PER_UNIT_QUICK if ctx.quick else PER_UNIT:
        fn, label = prepare_cuadv_per_unit(src, dst, box, chunk, ops)
        cands.append(_Row("cuadv tma_copy, one unit per block (lab launch, not persistent)", label, fn, "cuadv_unit"))
    for tile in COPY_TILES_QUICK if ctx.quick else COPY_TILES:
        cands.append(_Row("Triton TMA copy", f"tile {tile[0]} x {tile[1]}, {_warps(tile)} warps",
                          prepare_tma_copy(src, dst, tile), "triton_tma"))
    for tile in POINTER_TILES_QUICK if ctx.quick else POINTER_TILES:
        cands.append(_Row("Triton pointer copy", f"tile {tile[0]} x {tile[1]}, {_warps(tile, 'pointer')} warps",
                          prepare_pointer_copy(src, dst, tile), "triton_pointer"))
    cands.append(_Row("torch dst.copy_(src)", "the copy ceiling of this table", lambda: dst.copy_(src), "ceiling"))
    rows = _checked(cands, dst, src, result, "Triton comparison")
    if not any(r.kind == "triton_tma" for r in rows):
        result.notes.append("Triton comparison: no Triton TMA copy passed its check; nothing to compare against")
        return
    _time(ctx, rows, "tma: Triton comparison")
    fastest = {k: min((r for r in rows if r.kind == k), key=lambda r: r.ms, default=None)
               for k in ("triton_tma", "triton_pointer", "cuadv_unit")}
    tri, ceiling = fastest["triton_tma"], next(r for r in rows if r.kind == "ceiling")
    nbytes = 2 * 4 * side * side
    table, f = [], result.figures
    for r in rows:
        pct, x = 100 * ceiling.ms / r.ms, tri.ms / r.ms
        table.append([r.what + (" (fastest)" if r in fastest.values() else ""), r.config, r.ms, _tb_per_s(r.ms, nbytes),
                      pct, rates(r.ms, nbytes, ctx.ceiling)[1], x, _verdict(x, pct) if r.cuadv else "-"])
    f["tma_triton_torch_copy_tb_per_s"] = nbytes / (ceiling.ms * 1e-3) / 1e12
    f["tma_triton_tma_pct_torch_copy"] = 100 * ceiling.ms / tri.ms
    if fastest["triton_pointer"] is not None:
        f["tma_triton_pointer_pct_torch_copy"] = 100 * ceiling.ms / fastest["triton_pointer"].ms
    mine = {"default": rows[0], "best": next((r for r in rows if r.kind == "cuadv_best"), None),
            "per_unit": fastest["cuadv_unit"]}
    for key, r in mine.items():
        if r is not None:
            f[f"tma_cuadv_{key}_x_triton_tma"] = tri.ms / r.ms
            f[f"tma_cuadv_{key}_pct_torch_copy"] = 100 * ceiling.ms / r.ms
    rounds = ROUNDS[ctx.quick]
    result.tables.append(Table(
        f"cuadv.tma.copy vs Triton ({versions()}), float32 {side} x {side}: TMA copy through tensor descriptors, "
        "pointer copy, torch's device copy",
        ["copy", "configuration", "median ms", "TB/s", "% of torch copy", "% of memcpy ceiling",
         "x Triton TMA (fastest tile)",
         f"target: >= {COPY_TARGET_X:.1f}x Triton, >= {COPY_TARGET_PCT:.0f}% of the copy"],
        table,
        note=f"bytes = 8 per element (read + write); the copy ceiling of this table is torch's dst.copy_(src) measured "
             f"in the same rounds ({f['tma_triton_torch_copy_tb_per_s']:.2f} TB/s); memcpy ceiling "
             f"{ctx.ceiling.tb_per_s:.2f} TB/s (cuMemcpyDtoD, 2 GiB, before the labs). Contiguous torch tensors; "
             "every kernel's output poisoned with NaN, then compared with the source element for element before "
             f"timing. Medians over {rounds} interleaved rounds of 10 CUDA-event timings each (every kernel once per "
             "round, each timing queued behind a 150 us spin so Python's launch time is not timed). cuadv through "
             "its public prepare_copy (the one-shot cuadv.tma.copy prepares on every call); 'one unit per block': "
             "the library's tma_copy kernel and checks with a non-persistent grid (a lab launch: the library "
             "always launches a persistent grid). Triton: host-side TensorDescriptor.from_tensor, one tile per "
             "program, grid (columns, rows)"))
    result.notes.append(
        f"Triton comparison at {side} x {side}: fastest Triton TMA copy {tri.config}, "
        f"{f['tma_triton_tma_pct_torch_copy']:.1f}% of torch's copy; cuadv with its public defaults "
        f"{f['tma_cuadv_default_pct_torch_copy']:.1f}% ({f['tma_cuadv_default_x_triton_tma']:.3f}x Triton)")


def _compare_stencil(ctx: RunContext, result: LabResult) -> None:
    import torch

    import cuadv
    from ..pipeline.stencil import C_CENTER, C_NEIGHBOUR

    configs = STENCIL_TILES_QUICK if ctx.quick else STENCIL_TILES
    ctx.progress("pipeline: Triton stencils at a small odd shape (against NumPy)")
    check, configs = validate_stencils(configs, result)  # a form that fails here is left out, with a note
    result.checks.append(check)
    side = SIDE[ctx.quick]
    ctx.progress(f"pipeline: Triton comparison at {side} x {side} (compiling and checking)")
    x = torch.randn(side, side, device="cuda", dtype=torch.float32)
    out, ref, copy_dst = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    op = cuadv.pipeline.prepare_stencil(x, out, c_center=C_CENTER, c_neighbour=C_NEIGHBOUR)
    op(x, ref)  # cuadv's result: each Triton stencil must equal it (cuadv's own tests check it against NumPy)
    cands = [_Row("cuadv.pipeline.prepare_stencil (variant 'auto')", op.variant.label, lambda: op(x, out),
                  "cuadv_default")]
    for form, tile in configs:
        cands.append(_Row(f"Triton descriptor stencil, {form}",
                          f"tile {tile[0]} x {tile[1]}, {_warps(tile, 'stencil')} warps",
                          prepare_stencil(x, out, tile, form, C_CENTER, C_NEIGHBOUR), "triton_stencil"))
    rows = _checked(cands, out, ref, result, "Triton stencil comparison")
    if not any(r.kind == "triton_stencil" for r in rows):
        result.notes.append("Triton stencil comparison: no Triton stencil passed its check; nothing to compare "
                            "against")
        return
    rows.append(_Row("torch dst.copy_(src)", "the copy ceiling", lambda: copy_dst.copy_(x), "ceiling"))
    _time(ctx, rows, "pipeline: Triton comparison")
    tri = min((r for r in rows if r.kind == "triton_stencil"), key=lambda r: r.ms)
    mine, ceiling = rows[0], rows[-1]
    nbytes = 2 * 4 * side * side
    table = []
    for r in rows:
        x_tri = tri.ms / r.ms
        verdict = (f"{x_tri:.4g}x: " + ("met" if x_tri >= STENCIL_TARGET_X else missed_by(x_tri, STENCIL_TARGET_X))
                   if r.cuadv else "-")
        table.append([r.what + (" (fastest)" if r is tri else ""), r.config, r.ms, _tb_per_s(r.ms, nbytes),
                      100 * ceiling.ms / r.ms, x_tri, verdict])
    f = result.figures
    f["pipeline_triton_stencil_cuadv_x_triton"] = tri.ms / mine.ms
    f["pipeline_triton_stencil_cuadv_pct_torch_copy"] = 100 * ceiling.ms / mine.ms
    f["pipeline_triton_stencil_triton_pct_torch_copy"] = 100 * ceiling.ms / tri.ms
    result.tables.append(Table(
        f"cuadv.pipeline.stencil vs Triton ({versions()}): 5-point stencil, float32 {side} x {side}",
        ["stencil", "configuration", "median ms", "TB/s", "% of torch copy", "x Triton (fastest)",
         f"target: >= {STENCIL_TARGET_X:.1f}x Triton"],
        table,
        note="bytes = 8 per element (read + write; halo re-reads not counted), as in the table above; the copy "
             "ceiling is torch's dst.copy_(src) of the same array in the same rounds. Every Triton stencil listed "
             "equals cuadv's output bit for bit at this size (outputs poisoned with NaN first) and NumPy's float32 "
             "reference on a pitched 37 x 61 array. Triton: host-side TensorDescriptor.from_tensor, one output tile "
             "per program, enable_fp_fusion=False (the stencil's rounding order has no FMA); 'gather' keeps "
             "descriptor offsets 16-byte aligned and shifts columns with tl.gather, 'shifted' loads the tiles one "
             "column left and right directly. cuadv through its public prepare_stencil, variant 'auto'. Medians "
             f"over {ROUNDS[ctx.quick]} interleaved rounds of 10 CUDA-event timings each"))
    result.notes.append(
        f"Triton stencil comparison at {side} x {side}: cuadv 'auto' ({mine.config}) "
        f"{f['pipeline_triton_stencil_cuadv_x_triton']:.3f}x the fastest Triton descriptor stencil ({tri.what}, "
        f"{tri.config})")


def validate_stencils(configs, result: LabResult | None = None,
                      shape: tuple[int, int] = (37, 61)) -> tuple[str, list[tuple[str, tuple[int, int]]]]:
    """Each (form, tile) Triton stencil against NumPy's float32 reference (cuadv.pipeline.reference) on a pitched
    array of ``shape`` (rows 16-byte aligned, as descriptors need), output poisoned with NaN first. A failing
    one is left out with a note when ``result`` is given, else raises ValidationError. Returns the check in
    words and the configurations that passed."""
    import torch

    from ..pipeline.stencil import C_CENTER, C_NEIGHBOUR, reference

    rows, cols = shape
    pitch = -(-cols // 4) * 4
    device = "cpu" if _interpreting() else "cuda"
    host = np.random.default_rng().standard_normal((rows, cols), dtype=np.float32)
    x = torch.zeros((rows, pitch), dtype=torch.float32, device=device)[:, :cols]
    x.copy_(torch.from_numpy(host))
    expected = reference(host)
    passed = []
    for form, tile in configs:
        out = torch.full((rows, pitch), float("nan"), dtype=torch.float32, device=device)[:, :cols]
        try:
            prepare_stencil(x, out, tile, form, C_CENTER, C_NEIGHBOUR)()
            got = out.cpu().numpy()
            ok = np.array_equal(got, expected)
            why = "" if ok else f"{int((got != expected).sum())} elements differ from NumPy"
        except Exception as exc:
            ok, why = False, f"{type(exc).__name__}: {str(exc)[:200]}"
        if not ok:
            if result is None:
                raise ValidationError(f"Triton stencil {form} {tile} at {rows} x {cols}: {why}")
            result.notes.append(f"Triton stencil {form} {tile} left out (checked at {rows} x {cols}): {why}")
            continue
        passed.append((form, tile))
    names = ", ".join(f"{form} {tile[0]}x{tile[1]}" for form, tile in passed) or "none"
    return (f"Triton descriptor stencils equal NumPy's float32 stencil bit for bit at {rows} x {cols} (pitched, "
            f"tails both ways): {names}"), passed
