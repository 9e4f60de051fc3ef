"""Cooperative groups, grid sync and clusters on a GPU: exact results and the refused launches."""

import numpy as np
import pytest

from cuadv import LaunchConfig, current_device
from cuadv.errors import LaunchConfigError
from cuadv.labs import cooperative as co

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
@pytest.mark.parametrize("block", [1, 32, 96, 128, 1000, 1024])
@pytest.mark.parametrize("n", [1, 4099, 100_003])
def test_block_sum_is_exact(cp, dtype, block, n):
    host = np.random.default_rng().integers(-1000, 1001, size=n).astype(dtype)
    got = cp.asnumpy(co.block_sums(cp.asarray(host), block)).astype(np.int64)
    padded = np.zeros(-(-n // block) * block, dtype=np.int64)
    padded[:n] = host
    assert np.array_equal(got, padded.reshape(-1, block).sum(axis=1))


@pytest.mark.parametrize("tile", co.TILE_SIZES)
def test_warp_reductions_are_exact(cp, tile):
    n = 100_003
    host = np.random.default_rng().integers(-(2**20), 2**20, size=n).astype(np.int32)
    by_reduce, by_shuffle = (cp.asnumpy(a) for a in co.tile_sums(cp.asarray(host), tile))
    padded = np.zeros(by_reduce.size * tile, dtype=np.int64)
    padded[:n] = host
    want = padded.reshape(-1, tile).sum(axis=1)
    assert np.array_equal(by_reduce, want) and np.array_equal(by_shuffle, want)


def test_coalesced_groups(cp):
    assert co.validate_groups(cp, n=65_537)


@pytest.mark.parametrize("mode", ["grid_sync", "two_kernels"])
@pytest.mark.parametrize("rounds", [0, 1, 2, 5])
def test_two_phase_is_exact(cp, mode, rounds):
    host = np.random.default_rng().integers(0, 2**32, size=1_000_003, dtype=np.uint64).astype(np.uint32)
    x = cp.asarray(host)
    co.two_phase(x, rounds, mode=mode)
    assert np.array_equal(cp.asnumpy(x), co.two_phase_reference(host, rounds))


def test_grid_sync_validation_and_co_residency_error(cp):
    checks = co.validate_grid_sync(cp)
    assert any("co-resident maximum" in c for c in checks)


def test_co_residency_error_names_the_maximum(cp):
    k = co.kernel("sync_loop")
    top = co.co_resident_max(k, 256)
    done = cp.zeros(1, dtype=cp.uint32)
    co._launch(k, LaunchConfig(grid=top, block=256, cooperative=True), 10, done)  # the maximum itself runs
    assert int(done.get()[0]) == 10
    with pytest.raises(LaunchConfigError, match=rf"cooperative grid of {top + 1} blocks exceeds the co-resident "
                                                rf"maximum {top}"):
        co._launch(k, LaunchConfig(grid=top + 1, block=256, cooperative=True), 10, done)


def test_two_kernels_in_a_cuda_graph(cp):
    host = np.arange(70_001, dtype=np.uint32)
    x = cp.asarray(host)
    grid = 2 * current_device().caps.sm_count
    partials = cp.zeros(2 * grid, dtype=cp.uint32)
    co.kernel("phase1"), co.kernel("phase2")  # loaded before the capture
    cp.cuda.Device().synchronize()
    graph = co.CapturedGraph(lambda s: co.enqueue_two_phase(x, partials, 3, "two_kernels", grid, 256, stream=s,
                                                            backend="driver"))
    assert np.array_equal(cp.asnumpy(x), host)  # capturing ran nothing
    graph.launch()
    cp.cuda.runtime.streamSynchronize(graph.handle)
    assert np.array_equal(cp.asnumpy(x), co.two_phase_reference(host, 3))


def test_clusters_at_every_size_and_the_refusals():
    checks = co.validate_clusters(current_device().caps.max_cluster_size_nonportable)
    assert "__cluster_dims__" in checks[1] and "does not divide" in checks[1]


def test_non_portable_cluster_after_a_portable_query(cp):
    # A portable-size occupancy query clears the non-portable attribute; a cached 16-block launch must still run.
    largest = current_device().caps.max_cluster_size_nonportable
    if largest <= 8:
        pytest.skip("no non-portable cluster sizes on this GPU")
    k = co.kernel("cluster_ring")
    assert np.array_equal(co.cluster_ring(largest, 2 * largest), co.ring_expected(2 * largest, largest))
    co.cluster_occupancy(k, co.RING_BLOCK, 0, [4])
    assert np.array_equal(co.cluster_ring(largest, 2 * largest), co.ring_expected(2 * largest, largest))


def test_occupancy_rows():
    k = co.kernel("cluster_ring")
    rows = co.cluster_occupancy(k, co.RING_BLOCK, 0)
    assert [r[0] for r in rows] == list(range(1, 17))
    largest = current_device().caps.max_cluster_size_nonportable
    assert all(r[1] > 0 for r in rows if r[0] <= largest)
    assert all(r[2] == r[0] * r[1] for r in rows)


def test_smoke():
    co.CooperativeLab().smoke()
