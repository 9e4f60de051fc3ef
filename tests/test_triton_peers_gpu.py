"""The Triton peers of the tma and pipeline labs on a GPU: every Triton copy and stencil (each tile shape the labs
measure) gives exactly cuadv's result at small odd shapes with pitched rows (skipped, with the reason, where
triton or torch is missing); cuadv's tma_copy launched one unit per block (the lab's non-persistent launch) is
exact too; and a TMA store of cuadv's copy into a column slice leaves the columns past the slice alone."""

import numpy as np
import pytest

import cuadv
from cuadv.labs import triton_peers
from cuadv.pipeline.stencil import C_CENTER, C_NEIGHBOUR, reference

pytestmark = pytest.mark.gpu

SHAPES = [(37, 61), (130, 257)]  # tails both ways; rows 244 and 1028 B: pitched to 256 and 1040 B


@pytest.fixture(scope="module")
def torch():
    reason = triton_peers.missing()
    if reason is not None:
        pytest.skip(reason)
    import torch

    return torch


def _pitched(torch, shape, fill=float("nan")):
    rows, cols = shape
    return torch.full((rows, -(-cols // 4) * 4), fill, dtype=torch.float32, device="cuda")[:, :cols]


def _random(torch, shape):
    host = np.random.default_rng().standard_normal(shape, dtype=np.float32)
    x = _pitched(torch, shape, 0.0)
    x.copy_(torch.from_numpy(host))
    return x, host


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tile", triton_peers.COPY_TILES)
def test_triton_tma_copy_equals_cuadv(torch, shape, tile):
    src, _ = _random(torch, shape)
    dst = _pitched(torch, shape)
    triton_peers.prepare_tma_copy(src, dst, tile)()
    mine = cuadv.tma.copy(src)
    torch.cuda.synchronize()
    assert torch.equal(dst, src) and torch.equal(dst, mine)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tile", triton_peers.POINTER_TILES)
def test_triton_pointer_copy_equals_cuadv(torch, shape, tile):
    src, _ = _random(torch, shape)
    dst = _pitched(torch, shape)
    triton_peers.prepare_pointer_copy(src, dst, tile)()
    assert torch.equal(dst, src) and torch.equal(dst, cuadv.tma.copy(src))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("box, chunk", triton_peers.PER_UNIT)
def test_cuadv_copy_one_unit_per_block_is_exact(torch, shape, box, chunk):
    src, _ = _random(torch, shape)
    dst = _pitched(torch, shape)
    fn, label = triton_peers.prepare_cuadv_per_unit(src, dst, box, chunk)
    fn()
    assert torch.equal(dst, src), label


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("form, tile", triton_peers.STENCIL_TILES)
def test_triton_stencil_equals_cuadv_bit_for_bit(torch, shape, form, tile):
    x, host = _random(torch, shape)
    out = _pitched(torch, shape)
    triton_peers.prepare_stencil(x, out, tile, form, C_CENTER, C_NEIGHBOUR)()
    mine = cuadv.pipeline.stencil(x, c_center=C_CENTER, c_neighbour=C_NEIGHBOUR)
    got = out.cpu().numpy()
    assert np.array_equal(got, reference(host)), f"{int((got != reference(host)).sum())} elements differ from NumPy"
    assert torch.equal(out, mine)


def test_validate_stencils_passes_every_form(torch):
    _, passed = triton_peers.validate_stencils(triton_peers.STENCIL_TILES)  # raises on the first that differs
    assert passed == list(triton_peers.STENCIL_TILES)


def test_cuadv_copy_leaves_the_columns_past_a_slice_alone(torch):
    # A TMA store writes only the in-bounds part of a box (docs/tma.md). Triton reports that on an H100 its
    # descriptor stores also wrote the elements up to the next 16-byte boundary of a row whose width is not a
    # multiple of 16 bytes (triton-lang/triton#11583): the same would happen here, to the user's data past dst.
    src, _ = _random(torch, (37, 61))
    storage = torch.full((37, 64), 7.0, dtype=torch.float32, device="cuda")
    cuadv.tma.copy(src, storage[:, :61])
    torch.cuda.synchronize()
    assert torch.equal(storage[:, :61], src)
    assert bool((storage[:, 61:] == 7.0).all()), "cuadv.tma.copy wrote past the destination's columns"
