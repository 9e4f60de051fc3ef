"""cuadv.cooperative on a GPU: exact results against NumPy, inputs from CuPy and torch, the caller's
stream, the co-residency check and the cluster helpers."""

import numpy as np
import pytest

from cuadv import LaunchConfig, current_device
from cuadv import cooperative as co
from cuadv.errors import LaunchConfigError
from repo_files import load_example

pytestmark = pytest.mark.gpu


def padded_sums(host: np.ndarray, block: int) -> np.ndarray:
    padded = np.zeros(-(-host.size // block) * block, dtype=np.int64)
    padded[:host.size] = host
    return padded.reshape(-1, block).sum(axis=1)


def wrap32(v: int) -> int:
    return ((int(v) + 2**31) % 2**32) - 2**31


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
@pytest.mark.parametrize("n", [0, 1, 1_000_003])
@pytest.mark.parametrize("block", [32, 256, 1000, 1024])
def test_block_sum_partials_and_total_are_exact(cp, dtype, n, block):
    rng = np.random.default_rng(n + block)
    lo = 1000 if dtype == np.int32 else 3  # float32: every partial and the total stay below 2^24 (exact)
    host = rng.integers(-lo, lo + 1, size=n).astype(dtype)
    x = cp.asarray(host)
    sums = co.block_sum(x, block)
    assert isinstance(sums, cp.ndarray) and sums.dtype == dtype and sums.shape == (-(-n // block),)
    assert np.array_equal(cp.asnumpy(sums).astype(np.int64), padded_sums(host, block))
    total = co.block_sum(x, block, total=True)
    assert total.shape == (1,) and total.dtype == dtype
    want = int(host.astype(np.int64).sum())
    assert int(cp.asnumpy(total)[0]) == (wrap32(want) if dtype == np.int32 else want)
    assert np.array_equal(cp.asnumpy(x), host)  # the input is untouched


def test_block_sum_int32_wraps_like_numpy(cp):
    host = np.full(3 * 1024 + 5, 2**30, dtype=np.int32)
    total = co.block_sum(cp.asarray(host), 1024, total=True)
    assert int(total.get()[0]) == int(host.sum(dtype=np.int32))


def test_prepared_block_sum_reuses_and_checks_out(cp):
    host = np.arange(70_001, dtype=np.int32) % 97
    bs = co.prepare_block_sum(cp.asarray(host), 128, total=True)
    out = cp.full(1, -7, dtype=cp.int32)
    for k in range(3):
        assert bs(cp.asarray(host + k), out=out) is out
        assert int(out.get()[0]) == int((host + k).astype(np.int64).sum())
    with pytest.raises(ValueError, match="out must have 1"):
        bs(cp.asarray(host), out=cp.zeros(2, dtype=cp.int32))
    with pytest.raises(ValueError, match="prepared for 70001"):
        bs(cp.asarray(host[:10]))
    with pytest.raises(TypeError, match="int32"):
        bs(cp.asarray(host.astype(np.float32)))
    empty = co.block_sum(cp.zeros(0, dtype=cp.float32), total=True)
    assert empty.tolist() == [0.0]


def test_block_sum_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    host = np.random.default_rng(1).integers(-1000, 1001, size=100_003).astype(np.int32)
    x = torch.as_tensor(host, device="cuda")
    sums = co.block_sum(x, 256)
    assert isinstance(sums, torch.Tensor) and sums.dtype == torch.int32 and sums.device == x.device
    assert np.array_equal(sums.cpu().numpy().astype(np.int64), padded_sums(host, 256))
    total = co.block_sum(x.float(), 512, total=True)
    assert isinstance(total, torch.Tensor) and float(total.item()) == float(host.astype(np.int64).sum())


def test_block_sum_follows_a_non_blocking_cupy_stream(cp):
    n = 1 << 24
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.ones(n, dtype=cp.int32)
        x *= 3  # queued on s just before: block_sum must run after it on s
        total = co.block_sum(x, 1024, total=True)
        got = int(total.get(stream=s)[0])
    assert got == 3 * n


def test_block_sum_follows_a_torch_side_stream():
    torch = pytest.importorskip("torch")
    n = 1 << 24
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.ones(n, dtype=torch.int32, device="cuda")
        x.mul_(5)  # queued on the side stream just before
        total = co.block_sum(x, 512, total=True)
        after = total * 2  # torch work on the side stream after cuadv's
    side.synchronize()
    assert int(after.item()) == 10 * n


@pytest.mark.parametrize("rounds", [0, 1, 3])
def test_two_phase_grid_sync_equals_two_kernels_and_numpy(cp, rounds):
    host = np.random.default_rng(rounds).integers(0, 2**32, size=1_000_003, dtype=np.uint64).astype(np.uint32)
    results = {}
    for mode in co.MODES:
        x = cp.asarray(host)
        co.two_phase(x, rounds, mode=mode)
        results[mode] = cp.asnumpy(x)
    assert np.array_equal(results["grid_sync"], results["two_kernels"])
    assert np.array_equal(results["grid_sync"], co.two_phase_reference(host, rounds))


def test_prepared_two_phase_in_a_cupy_stream(cp):
    host = np.arange(50_001, dtype=np.uint32)
    for mode in co.MODES:
        tp = co.prepare_two_phase(cp.asarray(host), 2, mode=mode, grid=64)
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            x = cp.asarray(host)
            tp(x)
            got = x.get(stream=s)
        assert np.array_equal(got, co.two_phase_reference(host, 2)), mode


def test_grid_sync_launch_checks_the_co_resident_maximum(cp):
    k = co.kernel("sync_loop")
    top = co.max_cooperative_grid(k, 256)
    assert top == co.co_resident_max(k, 256) and top >= current_device().caps.sm_count
    done = cp.zeros(1, dtype=cp.uint32)
    config = co.grid_sync_launch(k, 256, np.uint32(10), done)  # grid=None: the maximum
    assert config.grid_blocks == top and config.cooperative and int(done.get()[0]) == 10
    with pytest.raises(LaunchConfigError, match=rf"cooperative grid of {top + 1} blocks exceeds the co-resident "
                                                rf"maximum {top} .*fallback"):
        co.grid_sync_launch(k, 256, np.uint32(11), done, grid=top + 1)
    assert int(done.get()[0]) == 10  # nothing ran


def test_cluster_helpers():
    import cupy as cp

    caps = current_device().caps
    if not caps.cluster_launch:
        pytest.skip("no thread block clusters on this GPU")
    ring, fixed = co.kernel("cluster_ring"), co.kernel("cluster_ring_fixed")
    assert co.largest_cluster(ring, co.RING_BLOCK) == caps.max_cluster_size_portable
    assert co.largest_cluster(ring, co.RING_BLOCK, non_portable=True) == caps.max_cluster_size_nonportable
    assert co.active_clusters(ring, co.RING_BLOCK, 2) > 0
    for c, grid in ((2, 8), (4, 16), (caps.max_cluster_size_nonportable, 2 * caps.max_cluster_size_nonportable)):
        out = cp.full(3 * grid, -1, dtype=cp.int32)
        config = co.cluster_launch(ring, grid, co.RING_BLOCK, out, cluster=c)
        assert config.cluster_size == c
        assert np.array_equal(cp.asnumpy(out).reshape(grid, 3), co.ring_expected(grid, c))
    out = cp.full(3 * 8, -1, dtype=cp.int32)
    co.cluster_launch(fixed, 8, co.RING_BLOCK, out)  # compile-time __cluster_dims__(2, 1, 1)
    assert np.array_equal(cp.asnumpy(out).reshape(8, 3), co.ring_expected(8, 2))
    with pytest.raises(LaunchConfigError, match="declares __cluster_dims__"):
        co.cluster_config(fixed, 8, co.RING_BLOCK, cluster=2)  # never both
    with pytest.raises(LaunchConfigError, match="does not divide"):
        co.cluster_config(fixed, 7, co.RING_BLOCK)
    with pytest.raises(LaunchConfigError, match="exceeds the largest cluster"):
        co.cluster_config(ring, 64 * 32, 1024, cluster=32)


def test_example_runs():
    pytest.importorskip("cupy")
    load_example("cooperative_grid_sync").main(100_003)


@pytest.mark.parametrize("n", [1, 255, 257, 100_003])
def test_cluster_halo_example_runs(n):
    """Its own checks against NumPy at every cluster size, on sizes with a partial last block and cluster."""
    pytest.importorskip("cupy")
    load_example("cluster_halo_stencil").main(n)


def test_launch_config_is_what_cuadv_launch_takes(cp):
    k = co.kernel("sync_loop")
    done = cp.zeros(1, dtype=cp.uint32)
    config = co.grid_sync_launch(k, 128, np.uint32(3), done, grid=4)
    assert config == LaunchConfig(grid=4, block=128, cooperative=True)
