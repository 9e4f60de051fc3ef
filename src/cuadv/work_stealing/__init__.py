"""Work stealing: one tile body under fixed-work, fixed-blocks, Cluster Launch Control and software CLC.

CUDA Programming Guide 4.12 (work stealing with Cluster Launch Control). The user writes a prologue and a tile body
once; cuadv wraps them in the scheduling loop of ``include/cuadv/work_stealing.cuh`` for the chosen policy:

- ``fixed_work``: one block per tile (hardware balancing and preemption, one prologue per tile);
- ``fixed_blocks``: SM count x occupancy blocks stride over the tiles (one prologue per block);
- ``atomic_counter``: the same grid, but after its first tile each block takes the next from a global
  counter (the FlashAttention-3 kind of dynamic scheduler users write on Hopper). The counter is zeroed
  by a memset enqueued before every launch (a memset node in a graph capture), and blocks never yield:
  the baseline that ``steal``'s self-resetting counter replaces;
- ``clc``: hardware Cluster Launch Control, compute capability 10.0+ (compiled and SASS-checked for
  sm_100a here; no Blackwell GPU was available to run it);
- ``steal``: software CLC for 9.x GPUs: a grid of one block per tile (or per ``min_tiles`` tiles, by
  default what one time slice held in the kernel's previous launch) whose blocks take tickets and give
  the SM back after ``quantum_us``, so higher-priority kernels get in;
- ``auto``: ``clc`` where the GPU has it, else ``steal`` (9.x), else ``fixed_work`` (below 9.0); compiled for a
  plain target from sm_100 on (sm_100, sm_120), which cannot build clc, ``steal``.

Example::

    scale = TileKernel(params="float* data, int n, float alpha",
                       body="int i = tile.x * blockDim.x + threadIdx.x; if (i < n) data[i] *= alpha;",
                       block=256)
    scale((n + 255) // 256, data, np.int32(n), np.float32(2.0))  # tiles first, then the kernel's arguments

Modules (this file only re-exports): ``policies`` (policy names, resolution, input checks),
``schedule`` (the ``Schedule`` kernel parameter, slice reports), ``trace`` (``TileOrder``, ``Trace``),
``tile_kernel`` (``TileKernel``), ``timeline`` (the per-SM plot of a trace), ``perfetto`` (a trace as Chrome /
Perfetto JSON). The per-launch scheduler counters are ``cuadv.state_pool.StatePool`` (re-exported here).
"""

from .policies import (DEFAULT_PROLOGUE_FACTOR, DEFAULT_QUANTUM_US, MAX_STEAL_UNITS, MAX_TILES, POLICIES,
                       policy_for_arch, resolve_policy)
from .schedule import Schedule, SliceReport
from ..state_pool import STATE_BYTES, StatePool  # noqa: F401 (re-exported)
from .tile_kernel import LaunchRecord, TileKernel
from .trace import TRACE_DTYPE, TileOrder, Trace
from .perfetto import to_chrome_trace

# The public names (docs/work_stealing.md). TileKernel's input checks, grid-sizing rules and the Schedule's packing
# live in .policies and .schedule and are internal.
__all__ = ["DEFAULT_PROLOGUE_FACTOR", "DEFAULT_QUANTUM_US", "LaunchRecord", "MAX_STEAL_UNITS", "MAX_TILES", "POLICIES",
           "STATE_BYTES", "Schedule", "SliceReport", "StatePool", "TRACE_DTYPE", "TileKernel", "TileOrder", "Trace",
           "policy_for_arch", "resolve_policy", "to_chrome_trace"]
