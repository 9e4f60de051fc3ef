"""The CUB peer on a GPU: HistogramEven through the nvcc-built library equals cupy.bincount (int32, uint8)
and cupy.histogram (float32), with its workspace from CUB's own size query; the read-only ceiling runs."""

import numpy as np
import pytest

from cuadv.labs.peers import cub_histogram as cubmod

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cub():
    from cuadv.device import current_device

    cc = current_device().caps.compute_capability
    peer, why = cubmod.load_cub(f"sm_{cc[0]}{cc[1]}")
    if peer is None or not hasattr(peer, "run"):
        pytest.skip(why if peer is None else "CUB through nvcc unavailable (only the cuda-cccl fallback)")
    return peer


@pytest.mark.parametrize("dtype, bins", [("int32", 256), ("int32", 4099), ("int32", 1 << 20), ("uint8", 256),
                                         ("float32", 4096)])
@pytest.mark.parametrize("n", [0, 1, 1_000_003])
def test_cub_histogram_even_equals_cupy(cp, cub, dtype, bins, n):
    rng = np.random.default_rng(bins + n)
    if dtype == "float32":
        host = rng.random(n, dtype=np.float32)
        lo, hi = 0.0, 1.0
        want = np.histogram(host, bins, range=(lo, hi))[0]
    else:
        host = rng.integers(-5, bins + 5, size=n).astype(dtype) if dtype == "int32" else \
            rng.integers(0, 256, size=n).astype(np.uint8)
        lo, hi = 0, bins
        v = host.astype(np.int64)
        want = np.bincount(v[(v >= 0) & (v < bins)], minlength=bins)
    x = cp.asarray(host)
    hist = cp.full(bins, -1, dtype=cp.int32)  # poisoned: CUB must write every bin
    ptr = x.data.ptr if n else 0
    temp = cub.temp_bytes(dtype, bins, lo, hi, n, ptr, hist.data.ptr)
    assert temp > 0
    buf = cp.empty(temp, dtype=cp.uint8)
    # The poison and the upload ran on CuPy's stream, which a non-blocking stream does not wait for: without
    # this wait CUB's zeroing could land before the poison (seen once at 1M bins and n = 0).
    cp.cuda.get_current_stream().synchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        cub.run(buf.data.ptr, temp, ptr, dtype, hist.data.ptr, bins, lo, hi, n, stream.ptr)
    stream.synchronize()
    assert np.array_equal(cp.asnumpy(hist).astype(np.int64), want)
    if dtype != "float32" and n:
        ref = cp.bincount(x[(x >= 0) & (x < bins)].astype(cp.int64), minlength=bins)
        assert np.array_equal(cp.asnumpy(hist).astype(np.int64), cp.asnumpy(ref))


def test_cub_errors_are_raised_with_cudas_message(cub):
    with pytest.raises(RuntimeError, match="HistogramEven failed"):
        cub.temp_bytes("int32", 0, 0, 0, 10)  # no bins: refused before CUB


def test_read_ceiling_measures_once(cp):
    from cuadv.timing import read_ceiling

    first = read_ceiling(64 << 20, repeats=3)
    assert first.bytes_per_s > 0 and first.nbytes == 64 << 20
    assert read_ceiling(64 << 20) is first
