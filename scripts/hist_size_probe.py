"""Where a histogram kernel's time goes, without counters: each case (the read-only ceiling kernel, and the plan
'auto' takes for int32 at 256, 4K, 33,000 and 64K bins and uint8 at 256) timed over inputs of 256 MiB to 2 GiB,
and a line t = fixed + bytes / rate fitted to the medians. `rate` is the kernel's steady streaming rate (against
the read-only kernel's), `fixed` what it pays once per launch (zeroing its counters, the first loads, the flush, the
tail). While each case runs for about a second at 1 GiB, `nvidia-smi` samples the SM clock, the power draw and the
clock-event reasons, so a kernel held back by its clock shows it. Every result is checked against cupy.bincount.

    PYTHONPATH=src python3 scripts/hist_size_probe.py [--bins=B,...] [--no-clocks]
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np

MIB = 1 << 20
SIZES_MIB = (256, 512, 1024, 2048)
CASES = (("int32", 256), ("int32", 4096), ("int32", 33000), ("int32", 65536), ("uint8", 256))
QUERY = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"


class ClockSampler:
    """`nvidia-smi` every 10 ms in the background; `window(t0, t1)` gives the samples read between two host times."""

    def __init__(self):
        self.samples: list[tuple[float, list[str]]] = []
        self.proc = None
        for query in (QUERY, QUERY.replace("clocks_event_reasons", "clocks_throttle_reasons")):
            probe = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                   capture_output=True, text=True)
            if probe.returncode == 0:
                self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
                                              "-lms", "10"], stdout=subprocess.PIPE, text=True)
                threading.Thread(target=self._read, daemon=True).start()
                break
        if self.proc is None:
            print("nvidia-smi cannot query clocks here: no clock samples", flush=True)

    def _read(self):
        for line in self.proc.stdout:
            self.samples.append((time.time(), [f.strip() for f in line.split(",")]))

    def window(self, t0: float, t1: float) -> str:
        rows = [f for t, f in self.samples if t0 <= t <= t1]
        if not rows:
            return "no clock samples"
        sm = np.array([float(r[0]) for r in rows])
        power = np.array([float(r[2]) for r in rows])
        reasons = sorted({r[4] for r in rows})
        return (f"SM clock median {np.median(sm):.0f} MHz (min {sm.min():.0f}), memory {rows[0][1]} MHz, power median "
                f"{np.median(power):.0f} W (max {power.max():.0f}), {rows[-1][3]} C, event reasons {reasons}, "
                f"{len(rows)} samples")

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()


def fit(sizes: list[int], ms: list[float]) -> tuple[float, float]:
    """Least-squares t = fixed + bytes / rate: (fixed in us, rate in GB/s)."""
    slope, intercept = np.polyfit(np.array(sizes, dtype=float), np.array(ms, dtype=float) * 1e-3, 1)
    return intercept * 1e6, 1 / slope / 1e9


def main(only: tuple[int, ...] = (), clocks: bool = True) -> None:
    import cupy as cp

    from cuadv.compiler import compile_source
    from cuadv.device import current_device
    from cuadv.histograms.launcher import engine
    from cuadv.launching import LaunchConfig, launch
    from cuadv.timing import _READ_SOURCE, time_gpu

    sampler = ClockSampler() if clocks else None
    caps = current_device().caps
    eng = engine()
    top = max(SIZES_MIB) * MIB

    def sustained(call, label: str):
        call()
        cp.cuda.Device().synchronize()
        t0 = time.time()
        while time.time() - t0 < 1.0:
            for _ in range(200):
                call()
            cp.cuda.Device().synchronize()
        t1 = time.time()
        time.sleep(0.05)  # the sampler's last lines
        print(f"  {label}: {sampler.window(t0 + 0.2, t1)}", flush=True)

    def sweep(label: str, make_call) -> float:
        ms = []
        for mib in SIZES_MIB:
            call = make_call(mib * MIB)
            ms.append(time_gpu(call, repeats=25).median_ms)
            if mib == 1024 and sampler is not None:
                sustained(call, label)
        fixed_us, gbps = fit([m * MIB for m in SIZES_MIB], ms)
        print(f"{label:<58} " + " ".join(f"{m:.4f}" for m in ms)
              + f" ms  -> fixed {fixed_us:6.1f} us, rate {gbps:5.0f} GB/s", flush=True)
        return gbps

    print(f"sizes (MiB): {SIZES_MIB}; each time the median of 25 calls", flush=True)
    src = cp.full(top // 4, 0x5A5A5A5A, dtype=cp.uint32)
    sink = cp.zeros(2 * caps.sm_count, dtype=cp.uint32)
    kernel = compile_source(_READ_SOURCE, name="cuadv_read_only").kernel("cuadv_read_only")
    read_config = LaunchConfig(grid=2 * caps.sm_count, block=1024)
    src_ptr = src.data.ptr
    read_gbps = sweep("read-only ceiling kernel", lambda nb: (
        lambda: launch(kernel, read_config, src_ptr, nb // 16, sink.data.ptr)))
    del src

    for dtype, bins in CASES:
        if only and bins not in only:
            continue
        itemsize = np.dtype(dtype).itemsize
        x = cp.random.randint(0, bins, size=top // itemsize, dtype=cp.int32).astype(dtype)
        out = cp.zeros(bins, dtype=cp.uint32)
        plan = eng.plan(bins, dtype)

        def make_call(nb, x=x, out=out, plan=plan, itemsize=itemsize):
            n = nb // itemsize
            kern, config = eng.launch_config(plan, n)
            args = plan.kernel_args(x.data.ptr, n, out.data.ptr)

            def call():
                out.fill(0)
                launch(kern, config, *args)

            call()
            want = cp.bincount(x[:n].astype(cp.int32), minlength=bins)
            if not bool((out.astype(cp.int64) == want).all()):
                raise SystemExit(f"{dtype} {bins}: WRONG counts at {nb // MIB} MiB")
            return call

        gbps = sweep(f"{dtype} {bins} bins ({plan.label})", make_call)
        fill_us = 1e3 * time_gpu(lambda out=out: out.fill(0), repeats=25).median_ms
        print(f"  steady rate {100 * gbps / read_gbps:.1f}% of the read-only kernel's; the zeroing of out alone "
              f"{fill_us:.1f} us (inside each timed call)", flush=True)
        del x, out
    if sampler is not None:
        sampler.stop()


if __name__ == "__main__":
    only = tuple(int(b) for a in sys.argv[1:] if a.startswith("--bins=") for b in a[len("--bins="):].split(","))
    main(only, clocks="--no-clocks" not in sys.argv)
