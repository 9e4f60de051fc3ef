"""The workloads whose performance targets cuadv misses (docs/results), each run once, for Nsight Compute to
profile.

    ncu --profile-from-start off ... -o prof python3 scripts/profile_cases.py hist spmv vecscale > ncu.log 2>&1
    python3 scripts/profile_cases.py --summary prof.ncu-rep ncu.log   (a compact table of the counters that say why)

Groups: hist (int32 256 / 64K / 1M bins, uint8: cuadv prepared, CUB HistogramEven, torch.bincount; the read-only
ceiling kernel), uint8 (uint8 at 256 bins: cuadv prepared, the same fed by register loads, its shared atomics alone,
the read-only ceiling kernel), one_block (int32 at 33,000 bins with 32-bit counters behind two rings and at 64K bins
with 16-bit ones, one block per SM; the read-only ceiling kernel), spmv (power-law, R-MAT and uniform matrices:
cuadv's tilings under both policies, the staged short-row body on split rows in fixed windows, and cuSPARSE),
segreduce (the segmented sum of each kind of segments on split tiles under fixed_work, steal and fixed_blocks),
vecscale (1 GiB: steal and fixed_work).
Each case runs once unprofiled (set-up, compile, the sample of a prepared call), then once inside the profiled
region (cudaProfilerStart/Stop), its name printed on stderr before it.
"""

from __future__ import annotations

import sys

GIB = 1 << 30


class _case:
    """The profiled region of one case: ncu runs with --profile-from-start off, so only the kernels launched
    inside it are profiled (not the set-up, the warm-up or the first call that samples the data)."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        import cupy as cp

        cp.cuda.Device().synchronize()
        print(f"CASE {self.name}", file=sys.stderr, flush=True)
        cp.cuda.profiler.start()

    def __exit__(self, *exc):
        import cupy as cp

        cp.cuda.Device().synchronize()
        cp.cuda.profiler.stop()


def hist() -> None:
    import cupy as cp

    from cuadv.device import current_device
    from cuadv.labs.histogram_peers import CUADV_PREPARED, Case, _data, _providers, start_cub

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
                with _case(f"{case.key}: {label}"):
                    call()
        del data, calls
        cp.get_default_memory_pool().free_all_blocks()
    _read_only()


def _read_only() -> None:
    """The read-only ceiling's kernel over 1 GiB, profiled."""
    import cupy as cp

    from cuadv.compiler import compile_source
    from cuadv.device import current_device
    from cuadv.launching import LaunchConfig, launch
    from cuadv.timing import _READ_SOURCE

    sms = current_device().caps.sm_count
    kernel = compile_source(_READ_SOURCE, name="cuadv_read_only").kernel("cuadv_read_only")
    src = cp.empty(GIB, dtype=cp.uint8)
    out = cp.empty(2 * sms, dtype=cp.uint32)
    config = LaunchConfig(grid=2 * sms, block=1024)
    launch(kernel, config, src.data.ptr, GIB // 16, out.data.ptr)
    with _case("read-only ceiling (1 GiB)"):
        launch(kernel, config, src.data.ptr, GIB // 16, out.data.ptr)


def uint8() -> None:
    """What shares an SM's shared-memory data path in the uint8 histogram at 256 bins: cuadv's prepared call (a TMA
    ring filled in shared memory, read back, one shared atomic per byte), the same counting fed by register loads
    instead of the ring (variant 'shared', stages=0: no ring traffic in shared memory), the same atomics with no
    input read (scripts/atoms_rate.py's lanes256), and the read-only ceiling's kernel."""
    import cupy as cp

    import cuadv
    from atoms_rate import SOURCE
    from cuadv.compiler import compile_source
    from cuadv.device import current_device
    from cuadv.histograms.launcher import count_bins
    from cuadv.launching import LaunchConfig, launch

    data = cp.random.randint(0, 256, GIB, dtype=cp.uint8)
    prepared = cuadv.prepare_histogram(data, bins=256, range=(0, 256))
    prepared(data)
    with _case("uint8 uniform 256 bins: cuadv.prepare_histogram (auto)"):
        prepared(data)
    out = cp.zeros(256, dtype=cp.uint32)
    count_bins(data, 256, variant="shared", stages=0, out=out)
    with _case("uint8 uniform 256 bins: count_bins(variant='shared', stages=0), register loads"):
        count_bins(data, 256, variant="shared", stages=0, out=out)
    del data, out
    sms = current_device().caps.sm_count
    grid = 2 * sms
    kernel = compile_source(SOURCE, name="atoms_rate").kernel("lanes256")
    out = cp.zeros(grid * 1024, dtype=cp.uint32)
    iters = -(-(GIB // 4) // (grid * 1024))  # 4 increments per step: one per byte of a 1 GiB input
    config = LaunchConfig(grid=grid, block=1024, shared_mem=256 * 32 * 4)
    launch(kernel, config, iters, out.data.ptr)
    with _case("uint8 256 bins, shared atomics alone (atoms_rate lanes256)"):
        launch(kernel, config, iters, out.data.ptr)
    _read_only()


def one_block() -> None:
    """Int32 bins that one block per SM holds, 1 GiB uniform: 32-bit counters at 33,000 bins behind a ring of 6 x 16
    KB and behind auto's (3 x 32 KB), and 16-bit counters at 64K bins behind 3 x 32 KB (auto's), to tell what the
    16-bit kernel does differently (it reads about 3 points less of the read-only ceiling than the 32-bit one behind
    the same ring) and why 6 x 16 KB is not auto's; then the read-only ceiling's kernel."""
    import cupy as cp

    from cuadv.histograms.launcher import count_bins

    for bins, ring in ((33_000, {"stages": 6, "vectors": 1}), (33_000, {}), (65_536, {})):
        data = cp.random.randint(0, bins, GIB // 4, dtype=cp.int32)
        out = cp.zeros(bins, dtype=cp.uint32)
        options = {"variant": "shared", **ring} if ring else {}
        count_bins(data, bins, out=out, **options)
        with _case(f"int32 uniform {bins} bins: count_bins({options or 'auto'})"):
            count_bins(data, bins, out=out, **options)
        del data, out
    _read_only()


def spmv() -> None:
    import cupy as cp
    import numpy as np

    from cuadv.labs.spmv import MEAN, SEED, TILINGS
    from cuadv.labs.spmv_support import DeviceCsr, generate, peers, spmv_kernel

    for kind in ("power-law", "R-MAT", "uniform"):
        m = generate(kind, 1 << 22, MEAN, SEED)
        x = np.random.default_rng(SEED + 1).uniform(-1, 1, m.n_cols).astype(np.float32)
        dev = DeviceCsr(m, x)
        kernels = {t: spmv_kernel() for t in TILINGS}
        for tiling, k in kernels.items():
            for policy in ("fixed_work", "steal"):
                dev.run(k, tiling, policy)
                with _case(f"spmv {kind}: {tiling} {policy}"):
                    dev.run(k, tiling, policy)
        staged = spmv_kernel(short_rows="staged")  # the short-row body the register one replaced, on fixed windows
        dev.run(staged, "split_fixed", "steal")
        with _case(f"spmv {kind}: split_fixed steal, staged short rows"):
            dev.run(staged, "split_fixed", "steal")
        for peer_kind, label, call in peers(dev)[0]:
            if peer_kind == "cusparse":
                call()
                with _case(f"spmv {kind}: {label}"):
                    call()
        del dev
        cp.get_default_memory_pool().free_all_blocks()


def segreduce() -> None:
    import cupy as cp

    from cuadv.labs.segreduce import MEAN, SEED, segment_tiles, segsum_kernel
    from cuadv.labs.segreduce_support import KINDS, generate_segments

    kernel = segsum_kernel()  # the lab's block size and blocks per SM
    for kind in KINDS:
        dev = segment_tiles(generate_segments(kind, 1 << 22, MEAN, SEED))
        for policy in ("fixed_work", "steal", "fixed_blocks"):
            for _ in range(3):  # steal learns its grid over its first launches
                dev.run(kernel, "split", policy)
            with _case(f"segreduce {kind}: split {policy}"):
                dev.run(kernel, "split", policy)
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
        with _case(f"vecscale 1 GiB: {policy}"):
            k(tiles_for(n), data, n, np.float32(1.0), 0)


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


def _scale(unit: str, base: str) -> float:
    """The factor from ``unit`` to seconds (base "s": 'usecond' or 'us') or bytes (base "b": 'Mbyte' or 'MB')."""
    prefixes = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    unit = unit.strip()
    for word in (("second", "s") if base == "s" else ("byte", "B")):
        unit = unit.replace(word, base.upper() if base == "b" else base)
    suffix = "B" if base == "b" else "s"
    return prefixes.get(unit[:-1], float("nan")) if unit.endswith(suffix) else float("nan")


def summary(report: str, log: str) -> None:
    """One line per profiled kernel: its counters and its four largest warp-stall reasons, under the case
    that launched it (from the order of the CASE and ==PROF== lines in ncu's log)."""
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

    case_of, current = [], "?"
    for line in open(log, errors="replace"):
        if line.startswith("CASE "):
            current = line[5:].strip()
        elif line.startswith("==PROF== Profiling"):
            case_of.append(current)
    shown = None
    for k, row in enumerate(body):
        if k < len(case_of) and case_of[k] != shown:
            shown = case_of[k]
            print(f"--- {shown}")
        name = row[col.get("Kernel Name", 0)][:60]
        cells = []
        for label, metric in SUMMARY.items():
            if metric in col:
                v = num(row, col[metric])
                unit = units[col[metric]]
                if label == "dramGB":
                    v = v * _scale(unit, "b") / 1e9
                if label == "us":
                    v = v * _scale(unit, "s") * 1e6
                cells.append(f"{label}={v:.3g}")
        stalls = sorted(((num(row, i), n.split("stalled_")[1].split("_per")[0].split(".")[0]) for n, i in stall),
                        reverse=True)[:4]
        cells.append("stalls: " + ", ".join(f"{s} {v:.2f}" for v, s in stalls))
        print(f"{name:60s} " + " ".join(cells))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summary"]:
        summary(sys.argv[2], sys.argv[3])
    else:
        for group in sys.argv[1:] or ["hist", "spmv", "vecscale"]:
            globals()[group]()
