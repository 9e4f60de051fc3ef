"""cuadv.stencil-style public op on a GPU: every named variant exact against NumPy on shapes with tails, CuPy and
torch inputs (output in the input's library), out= given, stream=None inside a non-blocking CuPy stream and a
torch side stream, a prepared stencil reused, and bad input refused with the user's arrays untouched."""

import numpy as np
import pytest

import cuadv.pipeline as pipeline
from cuadv.errors import LaunchConfigError
from cuadv.pipeline import STENCIL_VARIANTS, reference

pytestmark = pytest.mark.gpu

COEF = dict(c_center=0.5, c_neighbour=0.125)
SHAPES = [(1, 1), (3, 5), (1000, 999), (2049, 4097), (65, 256)]  # the last: rows of whole 16-byte units


def padded(cp, host):
    """A device copy whose rows start 16-byte aligned (what the TMA variants need), as a pitched view."""
    rows, cols = host.shape
    storage = cp.zeros((rows, -(-cols // 4) * 4), dtype=cp.float32)
    storage[:, :cols] = cp.asarray(host)
    return storage[:, :cols]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ["auto", *STENCIL_VARIANTS])
def test_every_variant_exact(cp, name, shape):
    host = np.random.default_rng(7).standard_normal(shape, dtype=np.float32)
    expected = reference(host, 0.5, 0.125)
    tma = STENCIL_VARIANTS.get(name, STENCIL_VARIANTS["thread"]).kind == "tma"
    x = padded(cp, host) if tma else cp.asarray(host)
    out = padded(cp, np.full(shape, np.nan, np.float32)) if name == "tma_store" else None
    if out is not None and shape[1] % 4:  # TMA stores write whole 16-byte units: past such rows of the caller's
        with pytest.raises(LaunchConfigError, match="16-byte units"):
            pipeline.stencil(x, out, variant=name, **COEF)
        return
    got = pipeline.stencil(x, out, variant=name, **COEF)
    assert isinstance(got, cp.ndarray) and got.shape == shape and got.dtype == cp.float32
    assert np.array_equal(cp.asnumpy(got), expected)


def test_out_given_and_pitched(cp):
    host = np.random.default_rng(1).standard_normal((300, 257), dtype=np.float32)
    storage = cp.full((300, 272), cp.nan, dtype=cp.float32)
    out = storage[:, :257]
    assert pipeline.stencil(cp.asarray(host), out, **COEF) is out
    assert np.array_equal(cp.asnumpy(out), reference(host, 0.5, 0.125))
    assert np.isnan(cp.asnumpy(storage[:, 257:])).all()


def test_cupy_non_blocking_stream(cp):
    host = np.random.default_rng(2).standard_normal((2049, 4097), dtype=np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        x = cp.asarray(host)
        y = pipeline.stencil(x, **COEF)  # stream=None: CuPy's current stream, ordered after the copy above
        z = y * 2  # ordered after the stencil on the same stream
    stream.synchronize()
    assert np.array_equal(cp.asnumpy(z), reference(host, 0.5, 0.125) * 2)


def test_torch_input_and_side_stream():
    torch = pytest.importorskip("torch")
    host = np.random.default_rng(3).standard_normal((1000, 999), dtype=np.float32)
    x = torch.from_numpy(host).cuda()
    y = pipeline.stencil(x, **COEF)
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == torch.float32
    assert np.array_equal(y.cpu().numpy(), reference(host, 0.5, 0.125))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x2 = x * 1  # queued on the side stream
        y2 = pipeline.stencil(x2, **COEF)  # stream=None: torch's current (side) stream
        z = y2 + 0
    side.synchronize()
    assert np.array_equal(z.cpu().numpy(), reference(host, 0.5, 0.125))


def test_prepared_stencil_reused(cp):
    rng = np.random.default_rng(4)
    first = rng.standard_normal((1000, 999), dtype=np.float32)
    prepared = pipeline.prepare_stencil(cp.asarray(first), **COEF)
    out = cp.empty((1000, 999), dtype=cp.float32)
    for _ in range(3):
        host = rng.standard_normal((1000, 999), dtype=np.float32)
        assert prepared(cp.asarray(host), out) is out
        assert np.array_equal(cp.asnumpy(out), reference(host, 0.5, 0.125))
    with pytest.raises(LaunchConfigError, match="prepared for"):
        prepared(cp.zeros((10, 10), dtype=cp.float32))


def test_misaligned_x_for_named_tma_is_refused_untouched(cp):
    from cuadv.device import current_device

    if current_device().caps.compute_capability < (9, 0):
        pytest.skip("TMA needs compute capability 9.0")
    storage = cp.asarray(np.random.default_rng(5).standard_normal((70, 300), dtype=np.float32))
    x = storage[:, 1:]  # base 4 bytes past a 16-byte boundary
    out = cp.full(x.shape, cp.nan, dtype=cp.float32)
    before = cp.asnumpy(storage)
    with pytest.raises(LaunchConfigError, match="TMA rule.*fallback"):
        pipeline.stencil(x, out, variant="tma", **COEF)
    assert np.isnan(cp.asnumpy(out)).all() and np.array_equal(cp.asnumpy(storage), before)
    got = pipeline.stencil(x, out, **COEF)  # auto falls back to cp.async
    assert np.array_equal(cp.asnumpy(got), reference(cp.asnumpy(x), 0.5, 0.125))


def test_bad_out_refused(cp):
    x = cp.zeros((8, 8), dtype=cp.float32)
    with pytest.raises(LaunchConfigError, match="x's shape"):
        pipeline.stencil(x, cp.zeros((8, 9), dtype=cp.float32), **COEF)
    with pytest.raises(LaunchConfigError, match="in place"):
        pipeline.stencil(x, x, variant="mbar", **COEF)


def test_out_whose_rows_end_inside_16_bytes_is_not_stored_by_tma(cp):
    """auto takes thread stores for such an out (a TMA store would overwrite the bytes after each row: on the
    H200 it writes whole 16-byte units), and naming the TMA-store variant raises before anything runs."""
    host = np.random.default_rng(3).standard_normal((40, 61)).astype(np.float32)
    x = padded(cp, host)
    storage = cp.full((40, 64), 7.0, dtype=cp.float32)
    out = storage[:, :61]
    pipeline.stencil(x, out, c_center=0.5, c_neighbour=0.125)
    assert np.array_equal(cp.asnumpy(out), reference(host, 0.5, 0.125))
    assert bool((storage[:, 61:] == 7.0).all())
    with pytest.raises(LaunchConfigError, match="16-byte units"):
        pipeline.stencil(x, out, c_center=0.5, c_neighbour=0.125, variant="tma_store")
