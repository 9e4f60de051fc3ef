"""Does `import torch` fail, or the process crash at exit, after cuadv ran in the same process? (2026-12-04/05 on the
H200: some hist_peers_probe.py processes left torch out, its import raising `expected ident but found ')' here:
annotate(strtag) -> ()`, and exactly those processes crashed at exit; nearly all were a tree's first process, which
compiled its kernels, and none was a second one, whose kernels came from the compile cache.)

Each trial is a fresh Python process that does one thing first, then imports torch, then checks that the
interpreter's one-character singletons are intact, and exits normally:

    none      import cupy and cuadv only
    compile   cuadv compiles the histogram module for this GPU (no launch)
    run       cuadv.histogram of 1M int32 values over 65,536 bins (compiles, launches, reads back)
    cub       the CUB peer's library loaded and queried (nvcc's static CUDA runtime in the process)
    torch1st  torch imported first, then "run"

each with a fresh compile cache (`cold`) and, for run, with the cache the cold trials left (`warm`). Prints one line
per trial (torch: ok / the first line of its error; exit: 0 / the signal; on a failed exit the stderr's tail) and a
table of counts. Trials run --jobs at a time (each a process of its own).

    PYTHONPATH=src python3 scripts/torch_import_probe.py [--repeats=3] [--timeout=180] [--jobs=6]
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

STEPS = {
    "none": "import cupy, cuadv",
    "compile": (
        "import cupy, cuadv\n"
        "from cuadv.device import current_device\n"
        "from cuadv.histograms.api import binning_module\n"
        "from cuadv.histograms.launcher import build_module\n"
        "arch = current_device().caps.arch\n"
        "binning_module(arch)\n"
        "build_module(arch)\n"
    ),
    "run": (
        "import cupy as cp, cuadv\n"
        "x = cp.random.randint(0, 65536, 1 << 20, dtype=cp.int32)\n"
        "h = cuadv.histogram(x, bins=65536, range=(0, 65536))[0]\n"
        "assert int(h.sum()) == 1 << 20\n"
    ),
    "cub": (
        "import cupy, cuadv\n"
        "from cuadv.device import current_device\n"
        "from cuadv.labs.peers.cub_histogram import load_cub\n"
        "caps = current_device().caps\n"
        "cub, how = load_cub(f'sm_{caps.compute_capability[0]}{caps.compute_capability[1]}')\n"
        "print('cub:', how, file=sys.stderr)\n"
    ),
}
STEPS["torch1st"] = "import torch\n" + STEPS["run"]

AFTER = (
    "try:\n"
    "    import torch\n"
    "    torch_ok = 'ok'\n"
    "except Exception as exc:\n"
    "    torch_ok = f'{type(exc).__name__}: {str(exc).splitlines()[0][:120]}'\n"
    "intact = b' ' == bytes([32]) and ' ' == chr(32) and ' '.join(['a', 'b']) == 'a b'\n"
    "print(f'RESULT torch={torch_ok!r} singletons_intact={intact}', flush=True)\n"
)


RESULT = re.compile(r"RESULT torch=(.*) singletons_intact=(True|False)$")


def trial(step: str, cache_dir: str, timeout_s: float) -> tuple[str, str, str]:
    """(torch: 'ok' or its error, 'singletons intact' / 'singletons broken' / '-', how the process ended)"""
    code = "\n".join(("import faulthandler, sys", "faulthandler.enable()", STEPS[step], AFTER))
    env = dict(os.environ, CUADV_CACHE_DIR=cache_dir)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s,
                              env=env)
    except subprocess.TimeoutExpired:
        return "timeout", "-", "timeout"
    found = next((m for m in map(RESULT.match, done.stdout.splitlines()) if m), None)
    if found:
        torch = ast.literal_eval(found[1])
        singletons = "singletons intact" if found[2] == "True" else "singletons broken"
    else:
        torch, singletons = "no result: " + (done.stderr.strip().splitlines() or ["?"])[-1], "-"
    code = done.returncode
    ended = "exit 0" if code == 0 else (f"signal {-code}" if code < 0 else f"exit {code}")
    if code != 0:
        tail = "\n    ".join(done.stderr.strip().splitlines()[-12:])
        print(f"    stderr tail:\n    {tail}", flush=True)
    return torch, singletons, ended


def main(repeats: int, timeout_s: float, jobs: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    warm_cache = tempfile.mkdtemp(prefix="cuadv-warm-")
    print("priming the warm cache:", *trial("run", warm_cache, timeout_s), flush=True)
    plan = [(r, step, cache) for r in range(repeats)
            for step, cache in [(s, "cold") for s in STEPS] + [("run", "warm")]]

    def one(item):
        r, step, cache = item
        cache_dir = warm_cache if cache == "warm" else tempfile.mkdtemp(prefix="cuadv-cold-")
        torch, singletons, ended = trial(step, cache_dir, timeout_s)
        print(f"{r} {step:<9} {cache:<5} torch={torch:<60} {singletons:<18} {ended}", flush=True)
        return step, cache, "torch ok" if torch == "ok" else "torch failed", singletons, ended

    with ThreadPoolExecutor(max_workers=jobs) as pool:  # trials in parallel processes: the GPU is shared, as in CI
        counts = Counter(pool.map(one, plan))
    print("\nstep      cache torch         singletons         end        trials")
    for (step, cache, torch, singletons, ended), n in sorted(counts.items()):
        print(f"{step:<9} {cache:<5} {torch:<13} {singletons:<18} {ended:<10} {n}")


if __name__ == "__main__":
    opts = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
    main(int(opts.get("repeats", 3)), float(opts.get("timeout", 180)), int(opts.get("jobs", 6)))
