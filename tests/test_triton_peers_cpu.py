"""The Triton peers of the tma and pipeline labs without a GPU: the module imports without triton and torch and
names what is missing; the labs then skip the comparison with that reason. Where triton and torch are installed,
the kernels run in Triton's interpreter (TRITON_INTERPRET=1, on the CPU) at a small odd shape, exactly."""

import sys

import pytest

from cuadv.labs import triton_peers
from cuadv.labs.base import RunContext
from cuadv.report.results import LabResult


def test_missing_triton_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    reason = triton_peers.missing()
    assert reason is not None and reason.startswith("triton is not importable")
    assert "torch" in reason


def test_missing_torch_is_named(monkeypatch):
    pytest.importorskip("triton")
    from cuadv.labs import base

    monkeypatch.setattr(base, "_torch_import_failure", None)  # torch's import not tried yet in this process
    monkeypatch.setitem(sys.modules, "torch", None)
    reason = triton_peers.missing()
    assert reason == "torch is not installed; Triton launches on torch tensors"


@pytest.mark.parametrize("compare", [triton_peers.compare_copy, triton_peers.compare_stencil])
def test_labs_skip_with_the_reason(monkeypatch, tmp_path, compare):
    monkeypatch.setitem(sys.modules, "triton", None)
    result = LabResult("x", "x")
    compare(RunContext(tmp_path, quick=True, caps=None, ceiling=None), result)
    assert not result.tables and not result.figures
    assert len(result.notes) == 1 and result.notes[0].startswith("Triton comparison skipped: triton is not importable")


def test_tile_shapes_are_legal_descriptor_boxes():
    # TMA boxes: at most 256 per dimension, the inner one at least 16 bytes; Triton blocks: powers of two.
    tiles = list(triton_peers.COPY_TILES) + [t for _, t in triton_peers.STENCIL_TILES]
    for rows, cols in tiles + [(rows, triton_peers.HALO_COLS) for _, (rows, _c) in triton_peers.STENCIL_TILES]:
        assert rows <= 256 and cols <= 256 and cols * 4 >= 16
        assert rows & (rows - 1) == 0 and cols & (cols - 1) == 0
    assert set(triton_peers.COPY_TILES_QUICK) <= set(triton_peers.COPY_TILES)
    assert set(triton_peers.STENCIL_TILES_QUICK) <= set(triton_peers.STENCIL_TILES)
    assert 4 <= min(triton_peers._warps(t, k) for t in tiles for k in triton_peers.PER_THREAD)
    assert max(triton_peers._warps(t, k) for t in tiles for k in triton_peers.PER_THREAD) <= 16


@pytest.fixture
def interpreted(monkeypatch):
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return torch


def _pitched(torch, rows, cols, fill=None):
    storage = torch.full((rows, -(-cols // 4) * 4), float("nan") if fill is None else fill, dtype=torch.float32)
    return storage[:, :cols]


def test_interpreted_copies_are_exact(interpreted):
    torch = interpreted
    src = _pitched(torch, 37, 61)
    src.copy_(torch.randn(37, 61))
    for tile in ((16, 32), (64, 64)):
        for prepare in (triton_peers.prepare_tma_copy, triton_peers.prepare_pointer_copy):
            dst = _pitched(torch, 37, 61)
            prepare(src, dst, tile)()
            assert torch.equal(dst, src), (prepare.__name__, tile)


def test_interpreted_gather_stencil_equals_numpy(interpreted):
    configs = [("gather", (16, 32)), ("gather", (32, 64))]
    check, passed = triton_peers.validate_stencils(configs)
    assert "gather 16x32, gather 32x64" in check and passed == configs


def test_interpreter_refuses_the_shifted_stencil(interpreted):
    # Its column offsets c - 1 and c + 1 are not 16-byte multiples: outside Triton's documented descriptor rule,
    # which the interpreter enforces (the GPU test checks what the TMA unit does with them).
    result = LabResult("x", "x")
    check, passed = triton_peers.validate_stencils([("shifted", (16, 32))], result)
    assert check.endswith(": none") and not passed and "16-byte aligned" in result.notes[0]



def test_verdicts_agree_with_their_figures():
    assert triton_peers._verdict(1.02, 98.0) == "1.02x Triton: met; 98% of the copy: met"
    # 0.9996x was shown as "1.000x ... missed by 0.0%", 96.96% as "97.0% ... missed by 0.0 points"
    assert triton_peers._verdict(0.9996, 96.96) == ("0.9996x Triton: missed by 0.04%; "
                                                    "96.96% of the copy: missed by 0.04 points")
    assert triton_peers._verdict(0.988, None) == "0.988x Triton: missed by 1.2%"
