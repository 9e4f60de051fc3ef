"""Test data, references and exact checks of the histogram kernels, shared by the lab's validation,
its smoke run and the tests: Zipf(1.3) and uniform bin indices, numpy.bincount references, and
``check_variant`` (one histogram against the reference, output poisoned first)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ValidationError
from ..histograms.launcher import count_bins as histogram, engine
from ..histograms.plans import DTYPES, EXCHANGE_VECTORS

ZIPF_A = 1.3


def zipf_cdf(bins: int, a: float = ZIPF_A) -> np.ndarray:
    """CDF of the Zipf(a) law truncated to [0, bins): P(k) proportional to (k + 1)^-a."""
    p = np.arange(1, bins + 1, dtype=np.float64) ** -a
    cdf = np.cumsum(p)
    return cdf / cdf[-1]


def around_values(values: np.ndarray, dtype, ulps: int = 4) -> list[np.ndarray]:
    """``values`` in ``dtype`` and the ``ulps`` neighbours of each on either side (numpy.nextafter), as a list of
    arrays: the values that test a binning rule at its edges."""
    dtype = np.dtype(dtype)
    out = [np.asarray(values).astype(dtype)]
    for toward in (np.inf, -np.inf):
        w = out[0]
        for _ in range(ulps):
            w = np.nextafter(w, np.array(toward, dtype))
            out.append(w)
    return out


def make_data(cp, n: int, bins: int, dist: str, dtype: str, chunk: int = 1 << 25):
    """n fresh random bin indices on the GPU: 'uniform' over [0, bins) or 'zipf' (Zipf(1.3) truncated)."""
    out = cp.empty(n, dtype=DTYPES[dtype][1])
    cdf = cp.asarray(zipf_cdf(bins)) if dist == "zipf" else None
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        if dist == "uniform":
            part = cp.random.randint(0, bins, size=m, dtype=cp.int32)
        elif dist == "zipf":
            part = cp.minimum(cp.searchsorted(cdf, cp.random.random(m, dtype=cp.float64), side="right"), bins - 1)
        else:
            raise ValueError(f"distribution must be 'uniform' or 'zipf', got {dist!r}")
        out[start:start + m] = part.astype(out.dtype)
    return out


def host_data(rng: np.random.Generator, n: int, bins: int, dist: str, dtype: str, out_of_range: bool) -> np.ndarray:
    """Host-side test data; with out_of_range, about 5% of int32 values fall outside [0, bins)."""
    if dist == "uniform":
        x = rng.integers(0, bins, size=n)
    elif dist == "zipf":
        x = np.minimum(np.searchsorted(zipf_cdf(bins), rng.random(n), side="right"), bins - 1)
    elif dist == "constant":
        x = np.full(n, rng.integers(0, bins))
    else:
        raise ValueError(dist)
    if out_of_range and dtype == "int32" and n:
        mask = rng.random(n) < 0.05
        x = np.where(mask, rng.integers(-bins - 2, 2 * bins + 2, size=n), x)
    if dtype == "uint8" and out_of_range and n:
        mask = rng.random(n) < 0.05
        x = np.where(mask, rng.integers(bins, 256, size=n) if bins < 256 else x, x)
    return x.astype(DTYPES[dtype][1])


def reference_counts(x: np.ndarray, bins: int) -> np.ndarray:
    v = x.astype(np.int64)
    v = v[(v >= 0) & (v < bins)]
    return np.bincount(v, minlength=bins)[:bins]


def on_device(cp, host: np.ndarray, offset: int = 0):
    """A device copy of ``host`` starting ``offset`` elements into its allocation (offset 1: off 16 B)."""
    full = cp.asarray(np.concatenate([np.zeros(offset, dtype=host.dtype), host]))
    return full[offset:]


def check_variant(cp, host: np.ndarray, bins: int, offset: int = 0, *, dev=None, want=None, out_offset: int = 0,
                  **options) -> None:
    """One histogram of ``host`` against numpy.bincount; the output is poisoned first, so a bin the
    kernel never writes shows. ``dev`` / ``want``: the device copy and the reference, if already made;
    ``out_offset`` 1: the output starts 4 bytes past an 8-byte boundary (a view), which the packed one-block
    kernels flush bin by bin instead of by 64-bit pairs."""
    dev = on_device(cp, host, offset) if dev is None else dev
    want = reference_counts(host, bins) if want is None else want
    out = cp.full(bins + out_offset, 0xDEADBEEF, dtype=cp.uint32)[out_offset:]
    histogram(dev, bins, out=out, **options)
    got = cp.asnumpy(out).astype(np.int64)
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        raise ValidationError(
            f"histogram {options} bins={bins} n={host.size} offset={offset} dtype={host.dtype}: {bad.size} wrong bins, "
            f"first {bad[0]}: got {got[bad[0]]}, want {want[bad[0]]}")


def validate(cp, bins_list: Sequence[int], sizes: Sequence[int], dtypes=("int32", "uint8"),
             dists=("uniform", "zipf")) -> int:
    """Every variant x bins x size x dtype x distribution against numpy.bincount; returns the count checked.

    Inputs carry 5% out-of-range values; every other variant reads from 1 element off the 16-byte boundary.
    """
    rng = np.random.default_rng()
    checked = 0
    for dtype in dtypes:
        for bins in bins_list:
            if dtype == "uint8" and bins > 256:
                continue
            options = engine().options(bins, dtype)
            for n in sizes:
                for dist in dists:
                    host = host_data(rng, n, bins, dist, dtype, out_of_range=True)
                    want = reference_counts(host, bins)
                    devs = [on_device(cp, host, 0), on_device(cp, host, 1)]
                    for i, opts in enumerate(options):
                        check_variant(cp, host, bins, i % 2, dev=devs[i % 2], want=want, **opts)
                        checked += 1
    return checked


def validate_packed_wraps(cp) -> None:
    """16-bit counters that wrap many times (both halves, odd bin counts, aggregated adds of up to 32), in
    the one-block kernels (both halves of its first word, and its last two bins, either side of a word boundary
    beside the trash slot or, one bin fewer, as the last pair; the global bins updated by 64-bit pairs and, out=
    off an 8-byte boundary, one by one), in the DSM kernel and in the exchange (mailbox entries applied locally, and the
    overflow of full runs by remote atomics: every element of a chunk goes to one owner)."""
    rng = np.random.default_rng()
    n = (1 << 22) + 3
    eng = engine()
    wide = eng.caps.shared_mem_per_block_optin // 4 + 1  # one bin more than 32-bit counters hold in one block
    if wide % 2 == 0:
        wide += 1  # odd: the last bin in a low half, the one before it in the high half of the word before
    plan = eng.plan(wide, "int32", "shared")
    if plan.counter_bits != 16:
        raise ValidationError(f"{wide} bins should take 16-bit counters in one block, got {plan.label}")
    for value in (0, 1, wide - 2, wide - 1):
        host = np.full(n, value, dtype=np.int32)
        host[rng.integers(0, n, size=1000)] = rng.integers(-5, wide + 5, size=1000)
        for stages in ((None, 0) if eng.caps.tma else (None,)):  # the TMA-fed kernel and the register-fed one
            for out_offset in (0, 1):  # global bins updated by 64-bit pairs, and one by one
                check_variant(cp, host, wide, variant="shared", units=1, stages=stages, out_offset=out_offset)
                check_variant(cp, host, wide - 1, variant="shared", units=1, stages=stages, out_offset=out_offset)
    for bins, value in ((3, 0), (3, 1), (3, 2), (2, 1), (33, 17), (4097, 4096)):
        host = np.full(n, value, dtype=np.int32)
        host[rng.integers(0, n, size=1000)] = rng.integers(-5, bins + 5, size=1000)  # a few others, some out of range
        for cluster in (1, 2, 16):
            for aggregate in (False, True):
                for out_offset in ((0, 1) if cluster == 1 else (0,)):
                    check_variant(cp, host, bins, variant="dsm", cluster=cluster, counter_bits=16,
                                  aggregate=aggregate, units=1, out_offset=out_offset)
            if cluster > 1:
                for vectors in EXCHANGE_VECTORS:
                    check_variant(cp, host, bins, variant="exchange", cluster=cluster, counter_bits=16,
                                  vectors=vectors, units=1)
