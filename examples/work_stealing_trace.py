"""Work stealing, seen: one tile grid of uneven tiles under fixed_blocks, steal, and steal with the tiles handed out
heaviest first (cuadv.TileOrder), each launch traced per tile (trace=True).

Tile i costs (i % 64 + 1) units, as the rows of a causal-attention block do (row r attends to r + 1 keys); a unit
here is a spin of UNIT_NS on %globaltimer, so the costs are exact. fixed_blocks walks the tiles in strides, so a
block takes whatever its stride lands on; steal hands the next tile to whichever block is free; in index order the
last heavy tiles are handed out near the end, and heaviest first gives the longest processing time (LPT) order.

    PYTHONPATH=src python examples/work_stealing_trace.py [out_dir]

Checks that every tile ran exactly once under each, prints each launch's makespan against the ideal (total work
over the resident blocks, or the longest tile), and writes a per-SM timeline per launch (timeline_*.png) and one
Chrome / Perfetto trace of all three (work_stealing.json.gz; open it in https://ui.perfetto.dev).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import cuadv
from cuadv.work_stealing import to_chrome_trace

UNIT_NS = 400  # one unit of a tile's work
PARAMS = "const unsigned int* units, unsigned int* runs"
PREAMBLE = "#include <cuadv/timer.cuh>\n"
BODY = r"""
      if (threadIdx.x == 0) {
        atomicAdd(&runs[tile.index], 1u);  // how many times this tile ran: 1 when the scheduler is right
        cuadv::timer::spin_ns(units[tile.index] * UNIT_NS_);
      }
      __syncthreads();  // the tile ends when its work does, for every thread of the block
"""
VARIANTS = (("fixed_blocks", "fixed_blocks", False), ("steal", "steal", False),
            ("steal, heaviest first", "steal", True))


def tile_kernel() -> cuadv.TileKernel:
    return cuadv.TileKernel(PARAMS, BODY, policy="steal", block=128,
                            preamble=PREAMBLE + f"#define UNIT_NS_ {UNIT_NS}ull\n", name="uneven_tiles")


def tile_units(tiles: int) -> np.ndarray:
    return (np.arange(tiles) % 64 + 1).astype(np.uint32)


def main(out_dir: str = "work_stealing_trace") -> None:
    import cupy as cp

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    k = tile_kernel()
    slots = k.resident_units("steal")
    tiles = 16 * slots  # about 16 tiles per resident block
    units = tile_units(tiles)
    units_dev = cp.asarray(units)
    heaviest_first = cuadv.TileOrder.heaviest_first(units)
    print(f"{cuadv.current_device().caps.name}: {tiles} tiles of 1 to 64 units of {UNIT_NS} ns")
    traces, labels = [], []
    for label, policy, ordered in VARIANTS:
        order = heaviest_first if ordered else None
        k(tiles, units_dev, cp.zeros(tiles, cp.uint32), policy=policy, order=order)  # compile, load, learn the grid
        runs = cp.zeros(tiles, cp.uint32)
        trace = k(tiles, units_dev, runs, policy=policy, order=order, trace=True)
        counts = cp.asnumpy(runs)
        if not (counts == 1).all():
            raise SystemExit(f"{label}: {int((counts == 0).sum())} tiles never ran, {int((counts > 1).sum())} ran "
                             "more than once")
        resident = k.resident_units(policy)
        ideal_ns = max(units.sum() * UNIT_NS / resident, units.max() * UNIT_NS)
        print(f"{label:>22}: makespan {trace.makespan_ns / 1e3:7.1f} us, {trace.makespan_ns / ideal_ns:.2f}x the "
              f"ideal over its {resident} resident blocks ({ideal_ns / 1e3:.1f} us); every tile ran once")
        trace.plot(out / f"timeline_{label.replace(', ', '_').replace(' ', '_')}.png", title=label)
        traces.append(trace)
        labels.append(label)
    to_chrome_trace(traces, out / "work_stealing.json.gz", names=labels)
    print(f"timelines and work_stealing.json.gz in {out}/")


if __name__ == "__main__":
    main(*sys.argv[1:2])
