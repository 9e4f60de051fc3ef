"""The spmv lab's tile body over a grid of settings against cuSPARSE, on the lab's three matrices (4M rows, 8
non-zeros per row on average, seed 18): threads per block and blocks per SM (the __launch_bounds__ register cap: at
256 threads 5, 6, 8 give 48, 40, 32 registers; pairs over the SM's threads are skipped), short-row body, how
the register body's warps share a tile's batches of rows, tile list, group (non-zeros per short-row tile; long
rows and slices scale with it), policy and, for steal, its time slice. Every result is checked against SciPy in
float64 first. Every tile list lies on one copy of the arrays, cuSPARSE's too (copies alone moved R-MAT by up to
1.3%, docs/spmv.md); guided windows are sized for each --blocks-per-sm.

    python3 scripts/spmv_sweep.py --blocks-per-sm 5 6 8 --short registers staged --tiling split whole --windows fixed
    python3 scripts/spmv_sweep.py --group 2048 4096 --quantum-us 50 200 inf --policy steal fixed_work
    python3 scripts/spmv_sweep.py --batches dynamic static --flag-tiles model every --policy steal fixed_work
    python3 scripts/spmv_sweep.py --widest 8192 16384 --windows-per-slot 1 2 --policy steal
    python3 scripts/spmv_sweep.py --threads 256 128 --blocks-per-sm 6 12 16 --policy steal fixed_work

--threads and --blocks-per-sm give every pair of the two lists (256 x 6, 128 x 6, 128 x 12, 128 x 16 above) whose
threads fit the SM; --blocks-per-sm is the __launch_bounds__ hint, so a kernel whose shared memory allows fewer
blocks (the staged body's stage at 128 threads) runs fewer than its label says.

One line per variant, fastest first: its median time (3 interleaved rounds of 10 CUDA-event timings) and its
ratio to cuSPARSE's prepared SpMV measured in the same rounds.
"""

from __future__ import annotations

import argparse
import itertools
import math

import cupy as cp
import numpy as np

from cuadv.device import current_device
from cuadv.labs.spmv import MATRICES, MEAN, SEED
from cuadv.labs.spmv_support import (BATCHES, GROUP_NNZ, MIN_BLOCKS, THREADS, WIDEST_NNZ, DeviceCsr, build_tiles,
                                     generate, reference, spmv_kernel, tolerance)
from spmv_probes import print_against_cusparse, warmed_and_checked


FLAGS = {"model": None, "every": True}  # build_tiles' dynamic=


def quantum(text: str) -> float:
    return math.inf if text == "inf" else float(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=[THREADS], help="threads per block")
    p.add_argument("--blocks-per-sm", type=int, nargs="+", default=[MIN_BLOCKS])
    p.add_argument("--short", nargs="+", default=["registers"], choices=["registers", "staged"])
    p.add_argument("--tiling", nargs="+", default=["split"], choices=["split", "whole"])
    p.add_argument("--batches", nargs="+", default=["dynamic"], choices=list(BATCHES),
                   help="how a tile's warps share its batches of short rows (register body)")
    p.add_argument("--group", type=int, nargs="+", default=[GROUP_NNZ])
    p.add_argument("--windows", default="guided", choices=["guided", "fixed"],
                   help="short-row tiles in guided windows (group to 4 x group, the lab's) or fixed ones (the staged "
                        "body's stage holds only these)")
    p.add_argument("--widest", type=int, nargs="+", default=[None],
                   help="guided windows: the widest, in weight (default: WIDEST_NNZ scaled with --group)")
    p.add_argument("--windows-per-slot", type=float, nargs="+", default=[2.0],
                   help="guided windows: a window is the weight left over this many windows per resident block")
    p.add_argument("--policy", nargs="+", default=["steal", "fixed_work"],
                   choices=["steal", "fixed_work", "fixed_blocks", "atomic_counter"])
    p.add_argument("--quantum-us", type=quantum, nargs="+", default=[50.0], help="steal's time slices ('inf': none)")
    p.add_argument("--flag-tiles", nargs="+", default=["model"], choices=list(FLAGS),
                   help="which short-row tiles get dynamic batches: where the host's model finds them faster, or all")
    p.add_argument("--matrix", nargs="+", default=list(MATRICES), choices=list(MATRICES))
    a = p.parse_args()
    guided = a.windows == "guided"
    if not guided and (a.widest != [None] or a.windows_per_slot != [2.0]):
        p.error("--widest and --windows-per-slot shape guided windows; --windows fixed takes neither")
    shapes = list(dict.fromkeys(itertools.product(a.widest, a.windows_per_slot))) if guided else [(None, 2.0)]
    # One TileKernel per setting and tile list (window shape included), so steal's learned grid comes from launches
    # over the same tiles.
    for t in a.threads:
        if t % 32 or not 32 <= t <= 1024:
            p.error(f"--threads must be whole warps, 32 to 1024; got {t}")
    max_threads = current_device().caps.max_threads_per_sm
    pairs = [(t, mb) for t in a.threads for mb in a.blocks_per_sm]
    blocks = [(t, mb) for t, mb in pairs if t * mb <= max_threads]
    skipped = [f"{t} x {mb}" for t, mb in pairs if t * mb > max_threads]
    if skipped:
        print(f"skipped (over the SM's {max_threads} threads): {', '.join(skipped)}", flush=True)
    if not blocks:
        p.error(f"no --threads x --blocks-per-sm pair fits an SM's {max_threads} threads")
    kernels = {}
    for (threads, mb), short, batches, tiling, group, q, flags, shape in itertools.product(
            blocks, a.short, a.batches, a.tiling, a.group, a.quantum_us, a.flag_tiles, shapes):
        if short == "staged" and batches != a.batches[0]:
            continue  # batches are the register body's
        if flags != a.flag_tiles[0] and (short, batches) != ("registers", "dynamic"):
            continue  # the flags matter only to the register body with dynamic batches
        name = f"spmv_t{threads}_mb{mb}_{tiling}_g{group}_q{'inf' if math.isinf(q) else int(q)}_{flags}"
        kernels[(threads, mb), short, batches, tiling, group, q, flags, shape] = spmv_kernel(
            threads=threads, min_blocks=mb, short_rows=short, name=name, quantum_us=q, batches=batches,
            stage=2 * group)

    def list_name(tiling: str, group: int, flags: str, threads: int, mb: int, widest: int | None,
                  per_slot: float) -> str:
        if not guided:  # fixed windows: one list for every mb (the lane widths' model still counts warps)
            return f"{tiling} {group} {flags} t{threads} any"
        return f"{tiling} {group} {flags} t{threads} {mb} w{widest or WIDEST_NNZ * group // GROUP_NNZ}/{per_slot:g}"

    for kind in a.matrix:
        m = generate(kind, 1 << 22, MEAN, SEED)
        x = np.random.default_rng(SEED + 1).uniform(-1, 1, m.n_cols).astype(np.float32)
        ref, abs_sum, _ = reference(m, x)
        tol = tolerance(m.lengths, abs_sum)
        # every list on one copy of the arrays (DeviceCsr.add_tiling), its guided windows sized for the blocks per
        # SM of the kernels that run it
        dev = DeviceCsr(m, x)
        slots = current_device().caps.sm_count
        for group, flags, (threads, mb), tiling, (wide, per_slot) in itertools.product(a.group, a.flag_tiles,
                                                                                        blocks, a.tiling, shapes):
            name = list_name(tiling, group, flags, threads, mb, wide, per_slot)
            if name not in dev.tilings:
                widest = (wide or WIDEST_NNZ * group // GROUP_NNZ) if guided else None
                dev.add_tiling(name, build_tiles(
                    m.offsets, tiling == "split", group, 4 * group, threads=threads, dynamic=FLAGS[flags],
                    widest=widest, slots=slots * mb, windows_per_slot=per_slot))
        calls = {}
        for ((threads, mb), short, batches, tiling, group, q, flags, (wide, per_slot)), k in kernels.items():
            tiles = list_name(tiling, group, flags, threads, mb, wide, per_slot)
            if not dev.holds(k, tiles):
                print(f"{kind}: the staged body skipped on {tiling} rows in guided windows (its stage holds fixed "
                      "ones: --windows fixed)", flush=True)
                continue
            window = tiles.split()[-1]  # the list's window shape (w<widest>/<windows per slot>, or 'any')
            for policy in a.policy:
                if policy != "steal" and q != a.quantum_us[0]:
                    continue  # a time slice is steal's alone
                run = lambda k=k, dev=dev, tiles=tiles, policy=policy: dev.run(k, tiles, policy)
                warmed_and_checked(dev, run, ref, tol, f"{kind}: {threads} x {mb} blocks/SM, {short}, {batches}, "
                                                       f"{tiling}, group {group}, windows {window}, {policy}")
                slice_ = f", Q={q:g} us" if policy == "steal" else ""
                flagged = f", {flags}" if batches == "dynamic" else ""
                body = short if short == "staged" else f"{short} ({batches}{flagged})"
                windows = f", windows {window}" if len(shapes) > 1 else ""
                calls[f"{threads}x{mb}/SM, {body}, {tiling}, group {group}{windows}, {policy}{slice_}"] = run
        print_against_cusparse(kind, dev, calls, 3, width=76)
        del dev
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
