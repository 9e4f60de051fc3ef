"""Two Python threads launching at once, each on its own non-blocking stream, 50 times each: TileKernel
(steal and fixed_blocks, one object shared by both threads), prepare_histogram (with and without a range:
the latter waits on the host for its min/max), histogram, a prepared TMA copy, block_sum and
prepare_block_sum. Every result is compared exactly with NumPy."""

import threading

import numpy as np
import pytest

import cuadv
from cuadv import TileKernel, current_device
from cuadv.timing import synchronize

pytestmark = pytest.mark.gpu

THREADS = 2
CALLS = 50
TILES = 3001  # a prime: the last wave of every policy is partial

PARAMS = "unsigned int* count"
# Every thread of the block takes part, so a tile run twice or by a partial block shows in the count.
BODY = """
      __syncthreads();
      if (threadIdx.x == blockDim.x - 1) atomicAdd(&count[tile.index], 1u);
"""


def run_threads(work) -> None:
    """``work(t)`` on THREADS threads started together; re-raises the first exception a thread raised."""
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def body(t: int) -> None:
        try:
            current_device().activate()  # the context is current per thread
            start.wait(timeout=120)
            work(t)
        except BaseException as exc:  # reported below: a thread's exception would otherwise vanish
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    assert not any(th.is_alive() for th in threads), "a thread did not finish within 600 s"
    if errors:
        raise errors[0]


def policies() -> list[str]:
    caps = current_device().caps
    return ["fixed_blocks"] + (["steal"] if caps.compute_capability >= (9, 0) else [])


def test_tile_kernels_shared_by_two_threads(cp):
    kernels = {p: TileKernel(PARAMS, BODY, policy=p, block=64, name=f"threads_{p}") for p in policies()}
    counts = {(t, p): cp.zeros(TILES, dtype=cp.uint32) for t in range(THREADS) for p in kernels}
    synchronize()

    def work(t: int) -> None:
        stream = cp.cuda.Stream(non_blocking=True)
        for _ in range(CALLS):
            for p, k in kernels.items():
                k(TILES, counts[t, p], stream=stream)
        synchronize(stream, what=f"thread {t}'s tile kernels")

    run_threads(work)
    for (t, p), count in counts.items():
        assert (cp.asnumpy(count) == CALLS).all(), (t, p)


def test_histograms_from_two_threads(cp):
    bins = 1000
    rng = np.random.default_rng(5)
    hosts = [rng.integers(-50, bins + 50, size=100_003).astype(np.int32) for _ in range(THREADS)]
    floats = [rng.standard_normal(65_537).astype(np.float32) for _ in range(THREADS)]
    want_range = [np.histogram(h, bins, range=(0, bins))[0] for h in hosts]
    want_auto = [np.histogram(f, bins) for f in floats]
    results: dict[int, dict[str, list]] = {}

    def work(t: int) -> None:
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            x, f = cp.asarray(hosts[t]), cp.asarray(floats[t])
        ranged = cuadv.prepare_histogram(x, bins, range=(0, bins), stream=stream)
        auto = cuadv.prepare_histogram(f, bins, stream=stream)  # default range: a min/max pass, a host wait
        mine = results[t] = {"prepared": [], "auto": [], "one-shot": []}
        for _ in range(CALLS):
            mine["prepared"].append(ranged()[0])
            mine["auto"].append(auto())
            mine["one-shot"].append(cuadv.histogram(x, bins, range=(0, bins), stream=stream)[0])
        synchronize(stream, what=f"thread {t}'s histograms")

    run_threads(work)
    for t, mine in results.items():
        for hist in mine["prepared"] + mine["one-shot"]:
            assert np.array_equal(cp.asnumpy(hist), want_range[t]), t
        for hist, edges in mine["auto"]:
            assert np.array_equal(cp.asnumpy(hist), want_auto[t][0]), t
            assert np.array_equal(cp.asnumpy(edges), want_auto[t][1]), t


def test_tma_copies_from_two_threads(cp):
    if not current_device().caps.tma:
        pytest.skip("TMA needs compute capability 9.0")
    shape = (257, 1000)
    sums = {}

    def work(t: int) -> None:
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:  # CuPy's fills and sums go to this thread's stream, ordered with the copies
            src = cp.empty(shape, dtype=cp.int32)
            dst = cp.empty(shape, dtype=cp.int32)
            acc = cp.zeros(shape, dtype=cp.int64)
            op = cuadv.tma.prepare_copy(src, dst, stream=stream)
            for i in range(CALLS):
                src.fill(1000 * t + i)
                op()
                acc += dst
        synchronize(stream, what=f"thread {t}'s TMA copies")
        sums[t] = acc

    run_threads(work)
    for t, acc in sums.items():
        assert (cp.asnumpy(acc) == sum(1000 * t + i for i in range(CALLS))).all(), t


def test_block_sums_from_two_threads(cp):
    n, block = 100_003, 256
    rng = np.random.default_rng(9)
    hosts = [rng.integers(-1000, 1000, size=n).astype(np.int32) for _ in range(THREADS)]
    padded = [np.concatenate([h, np.zeros(-n % block, np.int32)]) for h in hosts]
    want_partial = [p.reshape(-1, block).sum(axis=1, dtype=np.int32) for p in padded]
    results: dict[int, tuple[list, list]] = {}

    def work(t: int) -> None:
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            x = cp.asarray(hosts[t])
        total = cuadv.prepare_block_sum(x, block, total=True)  # per thread: its scratch is its own
        partials, totals = results[t] = ([], [])
        for _ in range(CALLS):
            partials.append(cuadv.block_sum(x, block, stream=stream))
            totals.append(total(x, stream=stream))
        synchronize(stream, what=f"thread {t}'s block sums")

    run_threads(work)
    for t, (partials, totals) in results.items():
        for p in partials:
            assert np.array_equal(cp.asnumpy(p), want_partial[t]), t
        for s in totals:
            assert cp.asnumpy(s).tolist() == [int(hosts[t].sum(dtype=np.int32))], t
