"""A few cases of the histogram lab's peer comparison (`cuadv bench histogram`), measured the way the lab measures
them (its measure_case: every provider checked, then timed in interleaved rounds), for A/B runs of two trees
(scripts/tree_ab.sh) without the rest of the lab. Prints per case each provider's median ms, % of the read-only
ceiling measured in the same process, and x CUB; then each peer left out, with the reason (the lab's notes), and on
a crash the Python stacks (faulthandler).

    PYTHONPATH=src python3 scripts/hist_peers_probe.py [--no-cub] [group:bins ...]
        (default cases: int32-uniform:256 int32-uniform:4096 int32-uniform:65536 uint8-uniform:256)
"""

from __future__ import annotations

import faulthandler
import sys

DEFAULT = ("int32-uniform:256", "int32-uniform:4096", "int32-uniform:65536", "uint8-uniform:256")


def main(wanted: tuple[str, ...], with_cub: bool = True) -> None:
    faulthandler.enable()  # processes of this probe crashed at exit at times (2026-12-05): where, if again
    import cupy as cp

    from cuadv.device import current_device
    from cuadv.labs.histogram_peers import cases, measure_case, start_cub
    from cuadv.timing import read_ceiling

    caps = current_device().caps
    sm = f"sm_{caps.compute_capability[0]}{caps.compute_capability[1]}"
    # --no-cub: CUB's library (nvcc's static CUDA runtime beside CuPy's and torch's) never loaded, to see whether
    # the crashes at exit follow it
    cub, how = start_cub(sm).result() if with_cub else (None, "not loaded (--no-cub)")
    read_gbps = read_ceiling().bytes_per_s / 1e9
    print(f"read-only ceiling {read_gbps:.0f} GB/s; CUB: {how if cub is None else cub.name}", flush=True)
    skipped: list[str] = []
    for case in cases(False):
        if f"{case.dtype}-{case.dist}:{case.bins}" not in wanted:
            continue
        rows = measure_case(cp, case, 1 << 30, cub, 5, 5, skipped, [], sm)
        cub_ms = next((float(r.ms) for r in rows if r.kind == "cub"), float("nan"))
        for r in rows:
            print(f"{case.dtype}-{case.dist}:{case.bins:<8} {r.label:<44} {float(r.ms):.4f} ms "
                  f"{100 * float(r.gbps) / read_gbps:5.1f}% read  x{cub_ms / float(r.ms):.3f} CUB  {r.plan}",
                  flush=True)
    for why in dict.fromkeys(skipped):
        print(f"left out: {why}", flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--no-cub"]
    main(tuple(args) or DEFAULT, with_cub="--no-cub" not in sys.argv[1:])
