"""The workloads whose targets issue 18 misses, each run once, for Nsight Compute to profile.

    ncu --section SpeedOfLight ... -o prof python3 scripts/profile_cases.py hist spmv vecscale
    python3 scripts/profile_cases.py --summary prof.ncu-rep      (a compact table of the counters that say why)

Groups: hist (int32 256 / 64K / 1M bins, uint8: cuadv prepared, CUB HistogramEven, torch.bincount; the read-only
ceiling kernel), spmv (power-law matrix: cuadv's variants and cuSPARSE), vecscale (1 GiB: steal and fixed_work).
Every kernel of a group is launched once after its set-up, so each appears once in the profile (in order, with the
case printed before it on stderr).
"""

from __future__ import annotations

import sys

GIB = 1 << 30


def _case(name: str) -> None:
    print(f"CASE {name}", file=sys.stderr, flush=True)


def hist() -> None:
    import cupy as cp

    from cuadv.compiler import compile_source
    from cuadv.device import current_device
    from cuadv.labs.histogram_peers import CUADV_PREPARED, Case, _data, _providers, start_cub
    from cuadv.launch import LaunchConfig, launch
    from cuadv.timing import _READ_SOURCE

    caps = current_device().caps
    cc = caps.compute_capability
    cub = start_cub(f"sm_{cc[0]}{cc[1]}").result()[0]
    for case in (Case("int32", "uniform", 256), Case("uint8", "uniform", 256), Case("int32", "uniform", 65536),
                 Case("int32", "uniform", 1 << 20)):
        n = GIB // (4 if case.dtype == "int32" else 1)
        data = _data(cp, case, n)
        calls, _ = _providers(cp, case, data, cub, [])
        for label, (call, _kind) in calls.items():
            if label == CUADV_PREPARED or label.startswith("CUB") or (label.startswith("torch") and case.bins > 256):
                call()  # the first call of a prepared histogram samples the data: outside the profiled call
                cp.cuda.Device().synchronize()
                _case(f"{case.key}: {label}")
                call()
                cp.cuda.Device().synchronize()
        del data, calls
        cp.get_default_memory_pool().free_all_blocks()
    kernel = compile_source(_READ_SOURCE, name="cuadv_read_only").kernel("cuadv_read_only")
    src = cp.empty(GIB, dtype=cp.uint8)
    out = cp.empty(2 * caps.sm_count, dtype=cp.uint32)
    _case("read-only ceiling (1 GiB)")
    launch(kernel, LaunchConfig(grid=2 * caps.sm_count, block=1024), src.data.ptr, GIB // 16, out.data.ptr)
    cp.cuda.Device().synchronize()


def spmv() -> None:
    import cupy as cp
    import numpy as np

    from cuadv.labs.spmv import MEAN, SEED, TILINGS
    from cuadv.labs.spmv_support import DeviceCsr, generate, peers, spmv_kernel

    for kind in ("power-law", "uniform"):
        m = generate(kind, 1 << 22, MEAN, SEED)
        x = np.random.default_rng(SEED + 1).uniform(-1, 1, m.n_cols).astype(np.float32)
        dev = DeviceCsr(m, x)
        kernels = {t: spmv_kernel() for t in TILINGS}
        for tiling, k in kernels.items():
            for policy in ("fixed_work", "steal"):
                dev.run(k, tiling, policy)
                cp.cuda.Device().synchronize()
                _case(f"spmv {kind}: {tiling} {policy}")
                dev.run(k, tiling, policy)
                cp.cuda.Device().synchronize()
        for peer_kind, label, call in peers(dev)[0]:
            if peer_kind == "cusparse":
                call()
                cp.cuda.Device().synchronize()
                _case(f"spmv {kind}: {label}")
                call()
                cp.cuda.Device().synchronize()
        del dev
        cp.get_default_memory_pool().free_all_blocks()


def vecscale() -> None:
    import cupy as cp
    import numpy as np

    from cuadv.labs.vecscale import tiles_for, vecscale_kernel

    n = GIB // 4
    data = cp.ones(n, dtype=cp.float32)
    for policy in ("fixed_work", "steal"):
        k = vecscale_kernel(policy)
        for _ in range(3):  # steal learns its grid over its first launches
            k(tiles_for(n), data, n, np.float32(1.0), 0)
        cp.cuda.Device().synchronize()
        _case(f"vecscale 1 GiB: {policy}")
        k(tiles_for(n), data, n, np.float32(1.0), 0)
        cp.cuda.Device().synchronize()


# Counters that say why a kernel is short of the bandwidth ceiling (ncu --page raw names).
SUMMARY = {
    "us": "gpu__time_duration.sum",
    "dram%": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dramGB": "dram__bytes_read.sum",
    "sm%": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "occ%": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "issue%": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "regs": "launch__registers_per_thread",
    "grid": "launch__grid_size",
    "block": "launch__block_size",
}


def summary(report: str) -> None:
    """One line per profiled kernel: its counters and its three largest warp-stall reasons."""
    import csv
    import io
    import subprocess

    raw = subprocess.run(["ncu", "-i", report, "--csv", "--page", "raw"], capture_output=True, text=True,
                         check=True).stdout
    rows = list(csv.reader(io.StringIO(raw)))
    header, units, body = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    stall = [(name, i) for name, i in col.items()
             if name.startswith("smsp__average_warp_latency_issue_stalled_") and name.endswith(".ratio")
             or name.startswith("smsp__average_warps_issue_stalled_") and name.endswith("_per_issue_active.ratio")]

    def num(row, i):
        try:
            return float(row[i].replace(",", ""))
        except (ValueError, IndexError):
            return float("nan")

    for row in body:
        name = row[col.get("Kernel Name", 0)][:60]
        cells = []
        for label, metric in SUMMARY.items():
            if metric in col:
                v = num(row, col[metric])
                unit = units[col[metric]]
                if label == "dramGB":
                    v = v * {"byte": 1e-9, "Kbyte": 1e-6, "Mbyte": 1e-3, "Gbyte": 1.0}.get(unit, float("nan"))
                if label == "us":
                    v = v * {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, float("nan"))
                cells.append(f"{label}={v:.3g}")
        stalls = sorted(((num(row, i), n.split("stalled_")[1].split("_per")[0].split(".")[0]) for n, i in stall),
                        reverse=True)[:4]
        cells.append("stalls: " + ", ".join(f"{s} {v:.2f}" for v, s in stalls))
        print(f"{name:60s} " + " ".join(cells))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summary"]:
        summary(sys.argv[2])
    else:
        for group in sys.argv[1:] or ["hist", "spmv", "vecscale"]:
            globals()[group]()
