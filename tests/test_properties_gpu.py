"""Property tests on a GPU (Hypothesis, derandomized and bounded): ``cuadv.histogram`` and ``cuadv.bincount``
equal NumPy exactly for random sizes, bin counts, ranges and input types, with sizes and bin counts at and
just over every internal boundary of the plans (the bins one block holds, the replica steps, each cluster
size's shard, the exchange's 16-bit mailbox limit, the skew-aware hot range, the skew sample, the exchange's
per-round chunk, a block's batch); and a TileKernel runs every tile exactly once for random tile grids
(1, primes, the resident grid and one more) under every policy this GPU has."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from cuadv import TileKernel, current_device
from cuadv.errors import LaunchConfigError, UnsupportedFeatureError
from cuadv.histograms import bincount, histogram
from cuadv.histograms.api import SAMPLES
from cuadv.histograms.plans import (CLUSTER_SIZES, EXCHANGE_CLUSTER_SIZES, EXCHANGE_MAX_LOCAL, MAX_REPLICAS,
                                    REPLICA_BUDGET, THREADS, exchange_chunk, hot_max)
from cuadv.timing import synchronize
from cuadv.work_stealing.policies import runnable_policies

pytestmark = pytest.mark.gpu

BOUNDED = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
VARIANTS = ("auto", "auto", "auto", "global", "shared", "dsm", "hot", "exchange")  # auto three times as often


def bin_boundaries() -> list[int]:
    """Bin counts at which the plan of int32 input changes on this GPU, each with the count one over it."""
    optin = current_device().caps.shared_mem_per_block_optin
    words = optin // 4  # 32-bit counters one block holds (the last slot takes out-of-range values)
    edges = {words - 1}  # the most bins the shared plan holds
    edges |= {REPLICA_BUDGET // (8 * r) - 1 for r in (2 ** i for i in range(MAX_REPLICAS.bit_length()))}
    edges |= {c * words - 1 for c in CLUSTER_SIZES} | {2 * c * words - 1 for c in CLUSTER_SIZES}  # 32- / 16-bit dsm
    edges |= {c * EXCHANGE_MAX_LOCAL for c in EXCHANGE_CLUSTER_SIZES}  # the exchange's 16-bit mailbox entries
    edges |= {hot_max(optin), 255, 256}
    return sorted({b + d for b in edges for d in (0, 1) if 1 <= b + d <= (1 << 21)})


def size_boundaries() -> list[int]:
    """Element counts at the histogram's internal steps, each with the count one over it."""
    steps = {SAMPLES, exchange_chunk(1), exchange_chunk(2), THREADS * 32}  # skew sample, exchange rounds, a batch
    return sorted({0, 1, 2, 97, 65_537, 1_000_003} | {s + d for s in steps for d in (-1, 0, 1)})


# Drawn from when first used (the bin boundaries need the GPU's shared-memory limit), not at collection.
BIN_BOUNDARIES = st.deferred(lambda: st.sampled_from(bin_boundaries()))
SIZE_BOUNDARIES = st.deferred(lambda: st.sampled_from(size_boundaries()))


def named_refusal(call, variant: str):
    """``call()``; None where a named variant refuses these bins or this input type by its rules (before any
    launch), as documented; 'auto' never refuses."""
    try:
        return call()
    except (LaunchConfigError, UnsupportedFeatureError):
        if variant == "auto":
            raise
    except ValueError as exc:
        if variant == "auto" or "is for int32 input" not in str(exc):
            raise
    return None


def input_data(rng: np.random.Generator, n: int, dtype: str, bins: int, lo: float, hi: float) -> np.ndarray:
    """Values over the range and a little beyond it (ignored ones), and some exactly on the edges."""
    span = hi - lo
    if dtype == "uint8":
        host = rng.integers(0, 256, size=n).astype(np.uint8)
    elif dtype == "int32":
        host = rng.integers(math.floor(lo - 0.05 * span) - 2, math.ceil(hi + 0.05 * span) + 2, size=n).astype(np.int32)
    else:
        host = (lo + (rng.random(n) * 1.1 - 0.05) * span).astype(np.float32)
    if n and dtype == "float32":
        edges = np.histogram_bin_edges(np.empty(0, np.float32), bins, range=(lo, hi))
        at = rng.integers(0, n, size=min(n, 64))
        host[at] = edges[rng.integers(0, edges.size, size=at.size)]  # on an edge: numpy's side of it
    return host


@BOUNDED
@given(dtype=st.sampled_from(["int32", "uint8", "float32"]),
       n=st.one_of(SIZE_BOUNDARIES, st.integers(0, 300_000)), bins=st.one_of(BIN_BOUNDARIES, st.integers(1, 5000)),
       unit=st.booleans(), lo=st.integers(-1000, 1000), width=st.integers(1, 1 << 20),
       variant=st.sampled_from(VARIANTS), seed=st.integers(0, 2**32 - 1))
@example(dtype="int32", n=0, bins=1, unit=True, lo=0, width=1, variant="auto", seed=0)
@example(dtype="int32", n=1, bins=1, unit=False, lo=0, width=1, variant="auto", seed=0)
@example(dtype="uint8", n=1_000_003, bins=256, unit=True, lo=0, width=256, variant="auto", seed=1)
@example(dtype="int32", n=SAMPLES + 1, bins=58_112, unit=True, lo=0, width=1, variant="auto", seed=2)
@example(dtype="int32", n=65_537, bins=16 * EXCHANGE_MAX_LOCAL + 1, unit=True, lo=0, width=1, variant="auto", seed=3)
@example(dtype="float32", n=THREADS * 32 + 1, bins=4097, unit=False, lo=-3, width=7, variant="auto", seed=4)
def test_histogram_equals_numpy(cp, dtype, n, bins, unit, lo, width, variant, seed):
    if dtype == "uint8":
        bins = min(bins, 256)
        lo, hi = (0, 256) if unit else (lo % 200, lo % 200 + 1 + width % 300)  # (0, 256) with 256 bins: in place
    else:
        lo, hi = (0, bins) if unit else (lo, lo + width)  # (0, bins): int32 input is counted in place
    try:
        host = input_data(np.random.default_rng(seed), n, dtype, bins, lo, hi)
        want, want_edges = np.histogram(host, bins, range=(lo, hi))
    except ValueError as exc:  # float32 edges too close to be distinct: numpy refuses, and so must cuadv
        with pytest.raises(ValueError, match=str(exc)[:30]):
            histogram(cp.zeros(n, dtype=dtype), bins, range=(lo, hi), variant=variant)
        return
    got = named_refusal(lambda: histogram(cp.asarray(host), bins, range=(lo, hi), variant=variant), variant)
    if got is None:
        return
    hist, edges = got
    assert hist.dtype == cp.int64 and np.array_equal(cp.asnumpy(hist), want)
    assert edges.dtype == want_edges.dtype and np.array_equal(cp.asnumpy(edges), want_edges)


@BOUNDED
@given(dtype=st.sampled_from(["int32", "uint8"]),
       n=st.one_of(SIZE_BOUNDARIES, st.integers(0, 300_000)), top=st.one_of(BIN_BOUNDARIES, st.integers(1, 5000)),
       minlength=st.one_of(st.just(0), st.integers(0, 70_000)),
       variant=st.sampled_from(VARIANTS), seed=st.integers(0, 2**32 - 1))
@example(dtype="int32", n=0, top=1, minlength=0, variant="auto", seed=0)
@example(dtype="int32", n=1, top=1, minlength=0, variant="auto", seed=0)
@example(dtype="uint8", n=4097, top=256, minlength=300, variant="auto", seed=1)
def test_bincount_equals_numpy(cp, dtype, n, top, minlength, variant, seed):
    top = min(top, 256) if dtype == "uint8" else top
    host = np.random.default_rng(seed).integers(0, top, size=n).astype(dtype)  # values below top
    want = np.bincount(host, minlength=minlength)
    got = named_refusal(lambda: bincount(cp.asarray(host), minlength, variant=variant), variant)
    if got is None:
        return
    assert got.dtype == cp.int64 and np.array_equal(cp.asnumpy(got), want)


# -- tile scheduling -----------------------------------------------------------------------------

PARAMS = "unsigned int* count"
# Every thread of the block takes part, so a tile body run twice or by a partial block shows in the count.
BODY = """
      __syncthreads();
      if (threadIdx.x == blockDim.x - 1 && threadIdx.y == blockDim.y - 1) atomicAdd(&count[tile.index], 1u);
"""
_kernels: dict[tuple, TileKernel] = {}


def tile_kernel(policy: str, cluster: int, quantum_us: float | None) -> TileKernel:
    """One TileKernel per (policy, cluster, quantum) for the whole run: each compiles once."""
    key = (policy, cluster, quantum_us)
    if key not in _kernels:
        _kernels[key] = TileKernel(PARAMS, BODY, policy=policy, block=(32, 2), cluster=cluster, quantum_us=quantum_us,
                                   name="property_tiles")
    return _kernels[key]


def policies() -> tuple[str, ...]:
    return runnable_policies(current_device().caps.compute_capability)


PRIMES = [2, 3, 97, 1009, 7919, 65_537, 1_000_003]


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(policy=st.sampled_from(["fixed_work", "fixed_blocks", "atomic_counter", "auto", "steal", "clc"]),
       cluster=st.sampled_from([1, 1, 2, 4, 8]), quantum_us=st.sampled_from([None, 0.5, math.inf]),
       shape=st.sampled_from(["1", "prime", "resident-1", "resident", "resident+1", "random 2-D", "random 3-D"]),
       prime=st.sampled_from(PRIMES), x=st.integers(1, 400), y=st.integers(1, 97), z=st.integers(1, 13))
@example(policy="fixed_blocks", cluster=1, quantum_us=None, shape="1", prime=2, x=1, y=1, z=1)
@example(policy="steal", cluster=1, quantum_us=0.5, shape="resident+1", prime=2, x=1, y=1, z=1)
@example(policy="atomic_counter", cluster=2, quantum_us=None, shape="resident", prime=2, x=1, y=1, z=1)
def test_every_tile_exactly_once(cp, policy, cluster, quantum_us, shape, prime, x, y, z):
    caps = current_device().caps
    if policy not in policies() or (cluster > 1 and not caps.cluster_launch):
        return  # a policy or cluster this GPU does not run
    if policy not in ("steal", "auto"):
        quantum_us = None  # a quantum applies to steal only
    k = tile_kernel(policy, cluster, quantum_us)
    resident = k.resident_units()  # blocks (clusters) of this policy's kernel that fit at once
    tiles = {"1": (cluster,), "prime": (prime * cluster,), "resident-1": (max(resident - 1, 1) * cluster,),
             "resident": (resident * cluster,), "resident+1": ((resident + 1) * cluster,),
             "random 2-D": (x * cluster, y), "random 3-D": (x * cluster, y, z)}[shape]
    n = math.prod(tiles)
    count = cp.zeros(n, dtype=cp.uint32)
    synchronize()  # the zeros land before the launch (the kernel may run on another stream)
    k(tiles, count)
    synchronize(what=f"{policy} over {tiles} tiles")
    counts = cp.asnumpy(count)
    assert (counts == 1).all(), (policy, cluster, tiles, np.flatnonzero(counts != 1)[:10], counts[counts != 1][:10])
