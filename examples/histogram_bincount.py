"""cuadv.histogram and cuadv.bincount as drop-ins for cupy.histogram / cupy.bincount, checked against NumPy.

Run: python examples/histogram_bincount.py   (needs a CUDA GPU and CuPy; torch optional)
"""

import numpy as np

import cuadv


def main() -> None:
    import cupy as cp

    rng = np.random.default_rng(0)

    # Float data, even bins over a given range (values outside it are ignored, the last bin is closed).
    x = rng.standard_normal(10_000_019).astype(np.float32)
    hist, edges = cuadv.histogram(cp.asarray(x), bins=4096, range=(-4.0, 4.0))
    want, want_edges = np.histogram(x, bins=4096, range=(-4.0, 4.0))
    assert np.array_equal(cp.asnumpy(hist), want) and np.array_equal(cp.asnumpy(edges), want_edges)

    # The default range is the data's (min, max), as in NumPy.
    ints = rng.integers(-1000, 1000, size=1_000_003, dtype=np.int64)
    hist, _ = cuadv.histogram(cp.asarray(ints), bins=7)
    assert np.array_equal(cp.asnumpy(hist), np.histogram(ints, bins=7)[0])

    # Skewed labels over a million bins: variant="auto" samples the data and takes the skew-aware path.
    bins = 1 << 20
    labels = np.minimum(rng.zipf(1.3, size=20_000_003) - 1, bins - 1).astype(np.int32)
    counts = cuadv.bincount(cp.asarray(labels), minlength=bins)
    assert np.array_equal(cp.asnumpy(counts), np.bincount(labels, minlength=bins))

    # int32 over range=(0, bins) is counted in place. With range given the call does not wait for the GPU:
    # auto's skew check runs there, and the kernel it picks is the one that counts.
    hist, _ = cuadv.histogram(cp.asarray(labels), bins=bins, range=(0, bins))
    assert np.array_equal(cp.asnumpy(hist), np.bincount(labels, minlength=bins))

    # Prepared: checks, kernels, plan and scratch kept for repeated calls on new data.
    step = cuadv.prepare_histogram(cp.asarray(x), bins=256, range=(-4.0, 4.0))
    for _ in range(3):
        y = rng.standard_normal(x.size).astype(np.float32)
        h, _ = step(cp.asarray(y))
        assert np.array_equal(cp.asnumpy(h), np.histogram(y, bins=256, range=(-4.0, 4.0))[0])

    # Prepared bincount: made once, called twice: with no argument (the array it was prepared with), then on new
    # data of the same dtype and size. Each call reads the data's max (one wait for the stream), so the length
    # max(x.max() + 1, minlength) follows the data.
    first = rng.integers(0, 500, size=1_000_003).astype(np.int32)
    second = rng.integers(0, 5000, size=1_000_003).astype(np.int32)
    count = cuadv.prepare_bincount(cp.asarray(first), minlength=1000)
    assert np.array_equal(cp.asnumpy(count()), np.bincount(first, minlength=1000))
    assert np.array_equal(cp.asnumpy(count(cp.asarray(second))), np.bincount(second, minlength=1000))

    # Below the drop-ins: which kernel a case gets (plan_histogram, no GPU needed) and a count with a variant named.
    plan = cuadv.histograms.plan_histogram(1 << 16, "int32")
    print(f"65,536 int32 bins: {plan.label} ({plan.threads} threads, {plan.shared_bytes:,} B of shared memory)")
    small = rng.integers(0, 1 << 16, size=4_000_037).astype(np.int32)
    for variant in ("auto", "global", "dsm"):
        got = cuadv.histograms.count_bins(cp.asarray(small), 1 << 16, variant=variant)
        assert np.array_equal(cp.asnumpy(got), np.bincount(small, minlength=1 << 16)), variant

    # torch in, torch out (when torch is installed).
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        t = torch.as_tensor(labels[:100_000], device="cuda")
        assert torch.equal(cuadv.bincount(t, minlength=10), torch.bincount(t, minlength=10))

    print("cuadv.histogram and cuadv.bincount match NumPy")


if __name__ == "__main__":
    main()
