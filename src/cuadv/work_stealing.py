"""Work stealing: one tile body under fixed-work, fixed-blocks, Cluster Launch Control and software CLC.

Seed 000 of the docs. The user writes a prologue and a tile body once; cuadv wraps them in the
scheduling loop of ``kernels/cuadv/work_stealing.cuh`` for the chosen policy:

- ``fixed_work``: one block per tile (hardware balancing and preemption, one prologue per tile);
- ``fixed_blocks``: SM count x occupancy blocks stride over the tiles (one prologue per block);
- ``clc``: hardware Cluster Launch Control, compute capability 10.0+ (compiled and SASS-checked for
  sm_100a here; no Blackwell GPU was available to run it);
- ``steal``: software CLC for 9.x GPUs: a grid of one block per tile (or per ``min_tiles`` tiles, by
  default what one time slice held in the kernel's previous launch) whose blocks take tickets and give
  the SM back after ``quantum_us``, so higher-priority kernels get in;
- ``auto``: ``clc`` where the GPU has it, else ``steal``.

Example::

    scale = TileKernel(params="float* data, int n, float alpha",
                       body="int i = tile.x * blockDim.x + threadIdx.x; if (i < n) data[i] *= alpha;",
                       block=256)
    scale(tiles=ceil_div(n, 256), data, np.int32(n), np.float32(2.0))
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ._cuda import check, driver
from .compiler import CompiledModule, compile_source
from .errors import LaunchConfigError, UnsupportedFeatureError
from .launch import MAX_CLUSTER_SIZE, Dim3, Kernel, LaunchConfig, as_dim3, launch, stream_handle, volume
from .memory import DeviceBuffer, HostWords

POLICIES = ("fixed_work", "fixed_blocks", "clc", "steal", "auto")
_POLICY_TYPE = {"fixed_work": "FixedWork", "fixed_blocks": "FixedBlocks", "clc": "ClusterLaunchControl",
                "steal": "Steal"}
DEFAULT_QUANTUM_US = 50.0
DEFAULT_PROLOGUE_FACTOR = 19  # a block's prologue costs at most 1/20 of its life
MAX_TILES = (2**31 - 1, 65535, 65535)
MAX_STEAL_UNITS = 2**31 - 1  # tickets (at most units + grid) fit the low 32 bits of the state word (work_stealing.cuh)
COUNT_EXITS = 1  # Schedule flags: kCountExits in work_stealing.cuh

SCHEDULE_DTYPE = np.dtype([("tiles", "<u4", (3,)), ("cluster", "<u4", (3,)), ("quantum_ns", "<u8"),
                           ("prologue_factor", "<u4"), ("flags", "<u4"), ("state", "<u8"), ("trace", "<u8"),
                           ("order", "<u8"), ("min_units", "<u4"), ("reserved", "<u4"), ("report", "<u8")])
TRACE_DTYPE = np.dtype([("smid", "<u4"), ("block", "<u4"), ("start_ns", "<u8"), ("end_ns", "<u8")])
STATE_BYTES = 16
assert SCHEDULE_DTYPE.itemsize == 80 and TRACE_DTYPE.itemsize == 24  # mirrors work_stealing.cuh


def resolve_policy(policy: str, cc: tuple[int, int]) -> str:
    """The concrete policy for a GPU; raises for one it cannot run, naming the capability and fallback."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    if policy == "auto":
        return "clc" if cc >= (10, 0) else "steal"
    cc_text = f"{cc[0]}.{cc[1]}"
    if policy == "clc" and cc < (10, 0):
        raise UnsupportedFeatureError("Cluster Launch Control (policy 'clc')", "compute capability >= 10.0", cc_text,
                                      "policy='steal' (software CLC, same loop) or policy='auto'")
    if policy == "steal" and cc < (9, 0):
        raise UnsupportedFeatureError("software CLC (policy 'steal')",
                                      "compute capability >= 9.0 (mbarrier transaction counts)", cc_text,
                                      "policy='fixed_work' or 'fixed_blocks'")
    return policy


def policy_for_arch(policy: str, arch: str) -> str:
    from .compiler import parse_arch

    return resolve_policy(policy, parse_arch(arch))


def check_tiles(tiles: int | Sequence[int], cluster: Dim3) -> Dim3:
    """Validate a tile grid (zero allowed: nothing to do) against the grid limits and the cluster shape."""
    t = (tiles, 1, 1) if isinstance(tiles, (int, np.integer)) else tuple(int(v) for v in tiles) + (1,) * (3 - len(tiles))
    if len(t) != 3:
        raise LaunchConfigError(f"a tile grid has at most 3 dimensions, got {tiles!r}")
    t = tuple(int(v) for v in t)
    for axis, (n, limit) in enumerate(zip(t, MAX_TILES)):
        if not 0 <= n <= limit:
            raise LaunchConfigError(f"tile count {'xyz'[axis]} = {n} is outside [0, {limit}]")
        if n % cluster[axis]:
            raise LaunchConfigError(
                f"cluster dimension {'xyz'[axis]} = {cluster[axis]} does not divide tile count {'xyz'[axis]} = {n}; "
                "each cluster takes a cluster-shaped group of tiles")
    return t  # type: ignore[return-value]


def check_quantum(quantum_us: float | None, policy: str) -> int:
    """Quantum in nanoseconds (0: never yield). Only 'steal' (or 'auto') takes one."""
    if quantum_us is None:
        return int(DEFAULT_QUANTUM_US * 1000) if policy in ("steal", "auto") else 0
    if policy not in ("steal", "auto"):
        raise LaunchConfigError(f"a quantum applies to policy 'steal' only, not {policy!r}")
    if quantum_us == math.inf:
        return 0
    if not (isinstance(quantum_us, (int, float)) and math.isfinite(quantum_us) and quantum_us > 0):
        raise LaunchConfigError(f"quantum_us must be a positive number of microseconds or math.inf, got {quantum_us!r}")
    return max(int(quantum_us * 1000), 1)


@dataclass(frozen=True)
class Schedule:
    """The scheduler's kernel parameter (cuadv::ws::Schedule)."""

    tiles: Dim3
    cluster: Dim3
    quantum_ns: int = 0
    prologue_factor: int = 0
    state_ptr: int = 0
    trace_ptr: int = 0
    order_ptr: int = 0
    count_exits: bool = False  # steal: reset the counter by counting exits (graph captures; kCountExits)
    min_units: int = 1  # steal: units a block runs before its slice may end
    report_ptr: int = 0  # steal: where a spent slice is reported (SliceReport), 0: nowhere

    def kernel_param_bytes(self) -> bytes:
        rec = np.zeros((), dtype=SCHEDULE_DTYPE)
        rec["tiles"], rec["cluster"] = self.tiles, self.cluster
        rec["quantum_ns"], rec["prologue_factor"] = self.quantum_ns, self.prologue_factor
        rec["state"], rec["trace"], rec["order"] = self.state_ptr, self.trace_ptr, self.order_ptr
        rec["flags"] = COUNT_EXITS if self.count_exits else 0
        rec["min_units"], rec["report"] = self.min_units, self.report_ptr
        return rec.tobytes()


@dataclass(frozen=True)
class SliceReport:
    """What the first block of a steal launch to spend its time slice saw (report_slice in work_stealing.cuh).
    It ran while the whole grid competed for the GPU, so its pace is the launch's, not the lighter tail's."""

    units_per_slice: int  # slice / time per unit, rounded up: units a block runs in one slice at that pace
    ns_per_unit: int  # its time per unit, its prologue spread over them

    @classmethod
    def from_word(cls, word: int) -> SliceReport | None:
        return cls(word >> 32, word & 0xFFFFFFFF) if word else None


def learned_min_units(report: SliceReport | None, units: int, resident: int) -> int:
    """min_tiles=None: every block runs what one slice held in the latest report before it may yield, so the
    grid needs one block per that many units, about as many as will find work. At most units / resident,
    so the grid still fills the GPU; 1 (the full tile grid) before any report."""
    if report is None:
        return 1
    return max(1, min(report.units_per_slice, units // max(resident, 1)))


_reports = HostWords()


class TileOrder:
    """The order in which units of work (tiles, or cluster-shaped groups of tiles) are handed out:
    the i-th unit any policy hands out is ``permutation[i]``. Giving the heaviest tiles first (when
    their cost is known, as in causal attention) lets an online scheduler approach the ideal makespan.
    Checked to be a permutation (so every tile still runs exactly once) and uploaded once."""

    def __init__(self, permutation):
        perm = np.asarray(permutation)
        if perm.ndim != 1 or perm.dtype.kind not in "iu":
            raise LaunchConfigError(f"a tile order is a 1-D integer array, got {perm.dtype} of shape {perm.shape}")
        if perm.size and (perm.min() < 0 or perm.max() >= perm.size or
                          np.bincount(perm.astype(np.int64), minlength=perm.size).max() != 1):
            raise LaunchConfigError(f"a tile order must be a permutation of 0 .. {perm.size - 1}: every unit exactly once")
        if perm.size > 2**32 - 1:
            raise LaunchConfigError(f"a tile order holds at most 2**32 - 1 units, got {perm.size}")
        self.units = int(perm.size)
        self.buffer = DeviceBuffer(max(perm.size, 1) * 4, fill=None)
        self.buffer.from_host(perm.astype(np.uint32))

    @classmethod
    def heaviest_first(cls, costs) -> "TileOrder":
        """Units sorted by decreasing cost (longest processing time first)."""
        return cls(np.argsort(-np.asarray(costs, dtype=np.float64), kind="stable"))


class StatePool:
    """Per-launch scheduler counters: one slot per stream (launches on one stream run in order and
    each launch restarts the count under its own grid id), and a fresh slot for every graph
    capture, so a graph replay never shares counters with a stream it may overlap. Replays of one
    graph share a grid id, so captured launches reset their counter by counting exits instead.
    Slots start at zero; a kernel that keeps its own self-resetting counter in a slot (the stencil's
    ticket) takes its own pool, so no two protocols share a word."""

    def __init__(self, user: str, slots: int = 256):
        self.user = user  # what the counters are for, named when the slots run out
        self._buffer: DeviceBuffer | None = None
        self._slots = slots
        self._by_stream: dict[int, int] = {}
        self._next = 0
        self._lock = threading.Lock()

    def slot_for(self, stream: int) -> tuple[int, bool]:
        """The state's address for a launch on ``stream``, and whether that launch is being captured."""
        with self._lock:
            capturing = _is_capturing(stream)
            if self._buffer is None:
                self._buffer = DeviceBuffer(self._slots * STATE_BYTES, fill=0)
                if not capturing:  # the zeros land before a launch on any stream, non-blocking ones included
                    check(driver().cuStreamSynchronize(driver().CUstream(0)), "cuStreamSynchronize")
            if not capturing and stream in self._by_stream:
                return self._by_stream[stream], False
            if self._next >= self._slots:
                raise LaunchConfigError(f"more than {self._slots} streams and graph captures use {self.user} in this "
                                        "process; its self-resetting counters are exhausted")
            address = self._buffer.ptr + self._next * STATE_BYTES
            self._next += 1
            if not capturing:
                self._by_stream[stream] = address
            return address, capturing


_pool = StatePool("work stealing")


def _is_capturing(stream: int) -> bool:
    drv = driver()
    status = check(drv.cuStreamIsCapturing(drv.CUstream(stream)), "cuStreamIsCapturing")
    return int(status) != int(drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)


class Trace:
    """Which SM ran which tile when: one record per tile (``TRACE_DTYPE``), nanoseconds of %globaltimer.

    Returned by a traced launch without waiting for it; ``records`` waits for the launch on first use.
    """

    def __init__(self, policy: str, tiles: Dim3, records: np.ndarray | None = None,
                 buffer: DeviceBuffer | None = None, stream: int = 0):
        self.policy, self.tiles = policy, tiles
        self._records, self._buffer, self._stream = records, buffer, stream

    @property
    def records(self) -> np.ndarray:
        if self._records is None:
            self._records = self._buffer.to_host(np.uint8, stream=self._stream).view(TRACE_DTYPE)
            self._buffer = None
        return self._records

    @property
    def written(self) -> np.ndarray:
        return self.records["end_ns"] != np.iinfo(np.uint64).max

    @property
    def start_ns(self) -> int:
        return int(self.records["start_ns"][self.written].min()) if self.written.any() else 0

    @property
    def makespan_ns(self) -> int:
        w = self.written
        return int(self.records["end_ns"][w].max() - self.records["start_ns"][w].min()) if w.any() else 0

    def plot(self, path, title: str | None = None, sm_count: int | None = None, highlight=()) -> None:
        from .plots import plot_sm_timeline

        plot_sm_timeline(self, path, title=title or f"{self.policy}: tiles per SM over time", sm_count=sm_count,
                         highlight=highlight)


_TEMPLATE = r"""
#include <cuadv/work_stealing.cuh>
{preamble}
extern "C" __global__ void __launch_bounds__({threads}, {min_blocks})
{name}(const __grid_constant__ cuadv::ws::Schedule cuadv_schedule{params}) {{
  cuadv::ws::Scheduler<cuadv::ws::{policy_type}> cuadv_scheduler(cuadv_schedule);
  if (!cuadv_scheduler.begin()) return;
  {{
{prologue}
    cuadv_scheduler.for_each([&](const cuadv::ws::Tile& tile) {{
{body}
    }});
  }}
}}
"""


class TileKernel:
    """A kernel made of a prologue (once per running block) and a tile body (once per tile).

    ``params``: the kernel's parameters as C++ (``"float* data, int n"``), passed after the schedule.
    ``body`` sees ``tile`` (``.x .y .z .index``) and the parameters and prologue locals; a ``return``
    in it ends the current tile. ``preamble``: code placed before the kernel (helpers, includes).
    ``min_blocks_per_sm``: the second __launch_bounds__ argument; raising it caps registers so more
    blocks stay resident (more memory requests in flight for a long-lived block).
    ``quantum_us`` (steal): a block stops taking tiles after this long and gives its SM back, so
    higher-priority work gets in within about one quantum plus one tile; math.inf: never.
    ``prologue_factor`` (steal): the slice is stretched to this many times the block's own prologue
    when that is longer, so the prologue costs at most 1/(factor+1) of the block's time; 0: off.
    ``min_tiles`` (steal with a quantum): a block runs at least this many tiles (units, with clusters)
    before its slice may end, so ceil(units / min_tiles) blocks take every tile and the grid shrinks
    by that factor. Each block launched after the work is gone still costs a launch (about 0.14 us
    per block per SM on an H200), so for short tiles it should be near quantum / time of one tile: the
    grid then has about as many blocks as will find work, and a block still yields after about one
    quantum. None (default): learned, as what one slice held in the latest ``slice_report`` of this
    kernel (the full tile grid until a block has given its SM back); 1: always the full tile grid.
    """

    def __init__(self, params: str, body: str, prologue: str = "", *, policy: str = "auto",
                 block: int | Sequence[int] = 256, cluster: int | Sequence[int] = 1, quantum_us: float | None = None,
                 preamble: str = "", name: str = "cuadv_tiles", shared_mem: int = 0, min_blocks_per_sm: int = 1,
                 prologue_factor: int = DEFAULT_PROLOGUE_FACTOR, min_tiles: int | None = None):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
        self.params, self.body, self.prologue, self.preamble = params.strip(), body, prologue, preamble
        self.policy, self.name, self.shared_mem = policy, name, shared_mem
        if min_blocks_per_sm < 1:
            raise LaunchConfigError(f"min_blocks_per_sm must be >= 1, got {min_blocks_per_sm}")
        self.min_blocks_per_sm = min_blocks_per_sm  # __launch_bounds__ occupancy hint (caps registers)
        self.block = LaunchConfig(grid=1, block=block).block
        self.cluster = as_dim3(cluster)
        if min(self.cluster) < 1 or volume(self.cluster) > MAX_CLUSTER_SIZE:
            raise LaunchConfigError(f"cluster {self.cluster} must have 1 to {MAX_CLUSTER_SIZE} blocks")
        self.quantum_ns = check_quantum(quantum_us, policy)
        if not isinstance(prologue_factor, int) or prologue_factor < 0:
            raise LaunchConfigError(f"prologue_factor must be an int >= 0, got {prologue_factor!r}")
        self.prologue_factor = prologue_factor
        if min_tiles is not None and (not isinstance(min_tiles, int) or not 1 <= min_tiles < 2**32):
            raise LaunchConfigError(f"min_tiles must be None or an int from 1 to 2**32 - 1, got {min_tiles!r}")
        if min_tiles is not None and min_tiles > 1 and (policy not in ("steal", "auto") or self.quantum_ns == 0):
            raise LaunchConfigError("min_tiles applies to policy 'steal' with a finite quantum only "
                                    f"(policy {policy!r}, quantum_us {quantum_us!r})")
        self.min_tiles = min_tiles  # None: learned from this kernel's slice reports
        self._report: np.ndarray | None = None  # host view of the word steal launches report their slices to
        self._report_ptr = 0
        self._modules: dict[tuple[str, str], CompiledModule] = {}
        self._fixed_blocks_grid: dict[tuple, int] = {}

    def source(self, policy: str) -> str:
        if policy not in _POLICY_TYPE:
            raise ValueError(f"source() needs a concrete policy ({', '.join(_POLICY_TYPE)}), got {policy!r}")
        return _TEMPLATE.format(preamble=self.preamble, threads=volume(self.block), min_blocks=self.min_blocks_per_sm,
                                name=self.name,
                                params=(", " + self.params) if self.params else "", policy_type=_POLICY_TYPE[policy],
                                prologue=self.prologue, body=self.body)

    def compile(self, arch: str, policy: str | None = None) -> CompiledModule:
        """Compile for a target (no GPU needed). ``policy`` defaults to this kernel's, resolved for arch."""
        concrete = policy_for_arch(policy or self.policy, arch)
        key = (arch, concrete)
        if key not in self._modules:
            self._modules[key] = compile_source(self.source(concrete), name=f"{self.name}_{concrete}", arch=arch)
        return self._modules[key]

    def kernel(self, policy: str | None = None) -> tuple[Kernel, str]:
        from .device import current_device

        caps = current_device().caps
        concrete = resolve_policy(policy or self.policy, caps.compute_capability)
        return self.compile(caps.arch, concrete).kernel(self.name), concrete

    @property
    def slice_report(self) -> SliceReport | None:
        """The slice report of this kernel's latest steal launch to have one (None before any); read without
        waiting, so it may come from a launch still running."""
        return SliceReport.from_word(int(self._report[0])) if self._report is not None else None

    def min_units(self, kernel: Kernel | None, policy: str, units: int) -> int:
        """Units a block of this launch runs before its slice may end: min_tiles, or learned when None
        (steal with a quantum; 1 otherwise)."""
        if policy != "steal" or self.quantum_ns == 0:
            return 1
        if self.min_tiles is not None:
            return self.min_tiles
        report = self.slice_report
        return learned_min_units(report, units, self._resident_units(kernel)) if report else 1

    def launch_config(self, kernel: Kernel | None, policy: str, tiles: Dim3, priority: int | None = None,
                      min_units: int | None = None) -> LaunchConfig:
        cluster = self.cluster if volume(self.cluster) > 1 else None
        # fixed_blocks, and steal that never yields: a grid that fits at once. Steal with a quantum needs
        # ceil(units / min_units) blocks, whose later ones replace those that gave their SM back (and, once the
        # work is gone, each still launches, reads the counter and exits: see docs/work_stealing.md).
        units = volume(tiles) // volume(self.cluster)
        k = self.min_units(kernel, policy, units) if min_units is None else min_units
        needed = -(-units // k)  # steal: blocks (clusters) that take every unit
        if policy == "fixed_blocks" or (policy == "steal" and self.quantum_ns == 0):
            grid = (min(self._resident_units(kernel), units) * self.cluster[0], self.cluster[1], self.cluster[2])
        elif policy == "steal" and k > 1 and needed * self.cluster[0] <= MAX_TILES[0]:
            grid = (needed * self.cluster[0], self.cluster[1], self.cluster[2])
        else:  # the tile grid (also when the smaller grid would not fit in x: it has more blocks than needed)
            grid = tiles
        return LaunchConfig(grid=grid, block=self.block, cluster=cluster, shared_mem=self.shared_mem, priority=priority)

    def _resident_units(self, kernel: Kernel) -> int:
        """Blocks (or clusters) that fit on the GPU at once: the fixed_blocks grid."""
        key = (self.block, self.cluster, self.shared_mem)
        if key not in self._fixed_blocks_grid:
            from .device import current_device
            from .occupancy import max_active_blocks_per_sm, max_active_clusters

            if volume(self.cluster) > 1:
                n = max_active_clusters(kernel, self.block, self.cluster, self.shared_mem)
            else:
                n = max_active_blocks_per_sm(kernel, self.block, self.shared_mem) * current_device().caps.sm_count
            if n < 1:
                raise LaunchConfigError(f"no block of {volume(self.block)} threads and {self.shared_mem} B shared "
                                        "memory fits on an SM")
            self._fixed_blocks_grid[key] = n
        return self._fixed_blocks_grid[key]

    def __call__(self, tiles: int | Sequence[int], *args: Any, stream: Any = None, trace: bool = False,
                 priority: int | None = None, policy: str | None = None,
                 order: TileOrder | None = None) -> Trace | None:
        """Launch over a tile grid. With ``trace=True`` returns the per-tile Trace (read when first used).
        ``order``: a TileOrder over the units (tiles / cluster size) to hand them out in that order."""
        t = check_tiles(tiles, self.cluster)
        if order is not None and order.units != volume(t) // volume(self.cluster):
            raise LaunchConfigError(f"the tile order has {order.units} units but the launch has "
                                    f"{volume(t) // volume(self.cluster)} (tiles / cluster size)")
        kernel, concrete = self.kernel(policy)
        quantum = self.quantum_ns if concrete == "steal" else 0
        if concrete == "steal" and volume(t) // volume(self.cluster) > MAX_STEAL_UNITS:
            raise LaunchConfigError(f"policy 'steal' takes at most {MAX_STEAL_UNITS} units of work (tiles / cluster "
                                    f"size); got {volume(t) // volume(self.cluster)}")
        if volume(t) == 0:
            return Trace(concrete, t, records=np.zeros(0, TRACE_DTYPE)) if trace else None
        handle = stream_handle(stream)
        trace_buf = None
        if trace:  # poisoned on the launch's stream, so the kernel's records come after the poison
            trace_buf = DeviceBuffer(volume(t) * TRACE_DTYPE.itemsize, fill=None)
            trace_buf.fill(0xFF, stream=handle)
        state_ptr, captured = _pool.slot_for(handle) if concrete == "steal" else (0, False)
        if quantum and self._report is None:
            self._report, self._report_ptr = _reports.take()
        min_units = self.min_units(kernel, concrete, volume(t) // volume(self.cluster))  # read once: grid and device agree
        schedule = Schedule(tiles=t, cluster=self.cluster, quantum_ns=quantum, prologue_factor=self.prologue_factor,
                            state_ptr=state_ptr, trace_ptr=trace_buf.ptr if trace_buf else 0,
                            order_ptr=order.buffer.ptr if order else 0, count_exits=captured, min_units=min_units,
                            report_ptr=self._report_ptr if quantum else 0)
        launch(kernel, self.launch_config(kernel, concrete, t, priority, min_units), schedule, *args, stream=handle)
        return Trace(concrete, t, buffer=trace_buf, stream=handle) if trace_buf else None

    launch = __call__
