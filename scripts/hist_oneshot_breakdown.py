"""Where a one-shot ``cuadv.histogram`` spends the time a prepared call does not, at 1M bins (1 GiB of int32).

    python3 scripts/hist_oneshot_breakdown.py > oneshot.log

Prints, per data set: the median GPU time of the prepared call and of the one-shot call (CUDA events, each call
behind a 1 ms and a 3 ms spin as ``cuadv bench histogram`` times it); the host timeline of three one-shot calls
behind a 1 ms spin (microseconds from the call to each launch, to the start and end of the skew sample's wait,
and to the return); the one-shot time with the GPU's default memory pool keeping its memory (to rule out pool
trimming); and a cProfile of 20 one-shot calls. The skewed data here is NumPy's Zipf(1.3) with values past the
last bin put in it, not the lab's generator: its times are not the lab's.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import cupy as cp
import numpy as np

import cuadv
import cuadv.histograms.api as api
from cuadv.timing import queue_ahead, time_gpu

BINS = 1 << 20
N = 1 << 28  # 1 GiB of int32


def data() -> dict[str, cp.ndarray]:
    rng = np.random.default_rng(1)
    zipf = rng.zipf(1.3, N)
    return {"uniform": cp.asarray(rng.integers(0, BINS, N, dtype=np.int32)),
            "zipf": cp.asarray(np.where(zipf <= BINS, zipf - 1, BINS - 1).astype(np.int32))}


def one_shot(x):
    return lambda: cuadv.histogram(x, bins=BINS, range=(0, BINS))


def median_ms(fn, stream: int, queue_ahead_us: float = 1000.0) -> float:
    return time_gpu(fn, stream=stream, warmup=2, repeats=15, queue_ahead_us=queue_ahead_us).median_ms


def timeline(x, stream: int) -> str:
    """Host microseconds from the call to each launch and to the sample's wait, for one call behind a 1 ms spin."""
    import cuadv.launching as launch_module
    marks: list[tuple[str, float]] = []
    launch, copy_to_host = launch_module.launch, api.copy_to_host

    def traced_launch(kernel, config, *args, **kw):
        marks.append((f"launch {getattr(kernel, 'name', '?')[:40]}", time.perf_counter()))
        return launch(kernel, config, *args, **kw)

    def traced_copy(*args, **kw):
        marks.append(("wait start", time.perf_counter()))
        out = copy_to_host(*args, **kw)
        marks.append(("wait end", time.perf_counter()))
        return out

    launch_module.launch, api.copy_to_host = traced_launch, traced_copy
    try:
        queue_ahead(1000.0, stream)
        t0 = time.perf_counter()
        one_shot(x)()
        marks.append(("return", time.perf_counter()))
    finally:
        launch_module.launch, api.copy_to_host = launch, copy_to_host
    cp.cuda.Device().synchronize()
    return " | ".join(f"{name} {1e6 * (t - t0):.0f}" for name, t in marks)


def main() -> None:
    stream = cp.cuda.get_current_stream().ptr
    for name, x in data().items():
        prepared = cuadv.prepare_histogram(x, bins=BINS, range=(0, BINS))
        prepared()
        print(f"{name}: prepared {median_ms(prepared, stream):.3f} ms, one-shot {median_ms(one_shot(x), stream):.3f} "
              f"ms (behind 3 ms: {median_ms(one_shot(x), stream, 3000.0):.3f} ms)", flush=True)
        for rep in range(3):
            print(f"{name} timeline {rep}: {timeline(x, stream)}", flush=True)
        runtime = cp.cuda.runtime
        pool = runtime.deviceGetDefaultMemPool(runtime.getDevice())
        threshold = runtime.cudaMemPoolAttrReleaseThreshold
        kept = runtime.memPoolGetAttribute(pool, threshold)
        runtime.memPoolSetAttribute(pool, threshold, 2**62)
        try:
            print(f"{name}: one-shot with the pool keeping its memory {median_ms(one_shot(x), stream):.3f} ms",
                  flush=True)
        finally:
            runtime.memPoolSetAttribute(pool, threshold, kept)
        profile = cProfile.Profile()
        cp.cuda.Device().synchronize()
        profile.enable()
        for _ in range(20):
            one_shot(x)()
        profile.disable()
        cp.cuda.Device().synchronize()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(22)
        print(text.getvalue()[:6000], flush=True)


if __name__ == "__main__":
    main()
