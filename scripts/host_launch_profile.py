"""Host time per call of a TileKernel launch, by policy, and where it goes (cProfile), beside cuSPARSE's and
cuadv.histogram's; then the grid each steal launch of the lab's R-MAT matrix learned, and the SM clock (clock64
over %globaltimer in a 2 ms spin) before and after the timings.

    PYTHONPATH=src python3 scripts/host_launch_profile.py [--rows 2**22] [--calls 2000] [--top 25]

Each call is made with the GPU busy on a long spin, so the host's time is never waiting on a full queue; each
batch of calls is followed by a synchronize outside the timed region.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import cupy as cp
import numpy as np

import cuadv
from cuadv.compiler import compile_source
from cuadv.device import current_device
from cuadv.labs import spmv_support as sup
from cuadv.labs.spmv import MEAN, SEED
from cuadv.launching import LaunchConfig, launch
from cuadv.timing import queue_ahead

CLOCK_SRC = r"""
extern "C" __global__ void sm_clock(unsigned long long spin_ns, unsigned long long* out) {
  unsigned long long t0, t1, c0, c1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  c0 = clock64();
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)); } while (t1 - t0 < spin_ns);
  c1 = clock64();
  if (threadIdx.x == 0) { out[2 * blockIdx.x] = c1 - c0; out[2 * blockIdx.x + 1] = t1 - t0; }
}
"""


def sm_clock_mhz(spin_ns: int = 2_000_000) -> float:
    """Median over the SMs of cycles per microsecond of a 2 ms spin (one block per SM)."""
    kernel = compile_source(CLOCK_SRC, name="sm_clock", arch=current_device().caps.arch).kernel("sm_clock")
    sms = current_device().caps.sm_count
    out = cp.zeros(2 * sms, cp.uint64)
    launch(kernel, LaunchConfig(grid=sms, block=32), np.uint64(spin_ns), out)
    cp.cuda.Device().synchronize()
    pairs = out.get().reshape(-1, 2).astype(np.float64)
    return float(np.median(pairs[:, 0] / pairs[:, 1] * 1e3))


def host_us(fn, calls: int, top: int, label: str) -> None:
    """Median and 95th percentile of the host's time per call; with top, the cProfile of the calls (own time)."""
    fn()
    cp.cuda.Device().synchronize()
    times = []
    for start in range(0, calls, 100):
        queue_ahead(20_000.0, cp.cuda.get_current_stream().ptr)  # the GPU busy: no call waits on the queue
        for _ in range(min(100, calls - start)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        cp.cuda.Device().synchronize()
    t = np.array(times) * 1e6
    print(f"{label:34s} host us per call: median {np.median(t):6.1f}  p95 {np.percentile(t, 95):6.1f}  "
          f"max {t.max():7.1f}", flush=True)
    if top:
        prof = cProfile.Profile()
        prof.enable()
        for start in range(0, calls, 100):
            for _ in range(min(100, calls - start)):
                fn()
            cp.cuda.Device().synchronize()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
        print(s.getvalue(), flush=True)


def ops_host_times(calls: int, top: int) -> None:
    """Each public op, one-shot and prepared, on small inputs (host-bound), beside what a CuPy user calls instead."""
    from cuadv import cooperative, pipeline, tma

    ints = cp.random.randint(0, 4096, 1 << 16, dtype=cp.int32)
    floats = cp.random.random(1 << 16, dtype=cp.float32)
    grid = cp.random.random((256, 256), dtype=cp.float32)
    out = cp.empty_like(grid)
    cases = {
        "cupy.bincount": lambda: cp.bincount(ints, minlength=4096),
        "cuadv.bincount": lambda: cuadv.bincount(ints, minlength=4096),
        "cuadv.prepare_bincount(...)()": cuadv.prepare_bincount(ints, minlength=4096),
        "cupy.histogram": lambda: cp.histogram(ints, bins=4096, range=(0, 4096)),
        "cuadv.histogram": lambda: cuadv.histogram(ints, bins=4096, range=(0, 4096)),
        "cupy.sum(reshape)": lambda: floats.reshape(-1, 256).sum(axis=1),
        "cuadv.block_sum": lambda: cooperative.block_sum(floats),
        "cuadv.prepare_block_sum(...)()": (lambda bs=cooperative.prepare_block_sum(floats): bs(floats)),
        "cupy.copyto 256x256": lambda: cp.copyto(out, grid),
        "cuadv.tma.copy": lambda: tma.copy(grid, out),
        "cuadv.tma.prepare_copy(...)()": tma.prepare_copy(grid, out),
        "cuadv.pipeline.stencil": lambda: pipeline.stencil(grid, out, c_center=0.5, c_neighbour=0.125),
        "cuadv.pipeline.prepare_stencil(...)()": (lambda st=pipeline.prepare_stencil(
            grid, out, c_center=0.5, c_neighbour=0.125): st(grid, out)),
    }
    for label, fn in cases.items():
        host_us(fn, calls, top if label.startswith("cuadv") else 0, label)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=lambda s: int(eval(s, {})), default=1 << 16)
    ap.add_argument("--big-rows", type=lambda s: int(eval(s, {})), default=1 << 22)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--host-only", action="store_true", help="only the host times (no clock, no learned grids)")
    ap.add_argument("--ops-profile", action="store_true", help="profile each public op too")
    args = ap.parse_args()
    if not args.host_only:
        print(f"SM clock before: {sm_clock_mhz():.0f} MHz", flush=True)

    dev, _ref, _tol = sup.checked_case("R-MAT", args.rows, MEAN, SEED)
    kernel = sup.spmv_kernel()
    for policy in ("steal", "fixed_work", "atomic_counter"):
        host_us(lambda p=policy: dev.run(kernel, "split", p), args.calls, args.top, f"spmv R-MAT {args.rows} {policy}")
    cusparse = next(fn for kind, _label, fn in sup.peers(dev)[0] if kind == "cusparse")
    host_us(cusparse, args.calls, 0, "cuSPARSE (prepared)")

    body = "if (threadIdx.x == 0) out[tile.index] = 1;"
    tiny = cuadv.TileKernel("int* out", body, name="host_probe")
    out = cp.zeros(1024, cp.int32)
    for policy in ("steal", "fixed_work"):
        host_us(lambda p=policy: tiny(1024, out, policy=p), args.calls, args.top if policy == "steal" else 0,
                f"TileKernel 1024 tiles, 1 param, {policy}")

    data = cp.random.randint(0, 4096, 1 << 20, dtype=cp.int32)
    host_us(lambda: cuadv.histogram(data, bins=4096, range=(0, 4096)), args.calls, args.top,
            "histogram 1M int32 one-shot")
    prepared = cuadv.prepare_histogram(data, bins=4096, range=(0, 4096))
    host_us(lambda: prepared(data), args.calls, args.top, "histogram 1M int32 prepared")

    ops_host_times(args.calls, args.top if args.ops_profile else 0)
    if args.host_only:
        return
    # The grid each steal launch learns, on the lab's R-MAT matrix, launch after launch.
    big, _ref, _tol = sup.checked_case("R-MAT", args.big_rows, MEAN, SEED)
    k = sup.spmv_kernel()
    seen = []
    for _ in range(60):
        big.run(k, "split", "steal")
        rec = k.last_launch
        seen.append((rec.min_units, rec.config.grid[0]))
        cp.cuda.Device().synchronize()
    units = big.tilings["split"][0].count
    print(f"R-MAT {args.big_rows} rows, {units} tiles: steal (min_units, grid) over 60 launches:", flush=True)
    values, counts = np.unique(np.array(seen), axis=0, return_counts=True)
    for (mu, grid), n in zip(values, counts):
        print(f"  min_units {mu:3d} grid {grid:6d}: {n} launches", flush=True)
    print(f"SM clock after: {sm_clock_mhz():.0f} MHz", flush=True)


if __name__ == "__main__":
    main()
