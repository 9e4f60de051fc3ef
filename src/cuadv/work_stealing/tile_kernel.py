"""``TileKernel``: a prologue and a tile body written once, wrapped in the scheduling loop of
``cuadv/work_stealing.cuh`` for the chosen policy, compiled per (target, policy) and launched with
the grid that policy needs."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .._cuda import check, driver
from ..args import pack_argument
from ..compiler import CompiledModule, compile_source
from ..device import current_device
from ..dims import MAX_GRID, Dim3, is_int, volume
from ..errors import KernelArgumentError, LaunchConfigError
from ..features import require
from ..interop import capturing, relaxed_capture_mode, stream_handle
from ..kernel import MAX_LAUNCHERS, Kernel, max_active_blocks_per_sm, max_active_clusters
from ..launching import LaunchConfig, Launcher, check_block, check_config, checked_priority, prepare
from ..memo import BoundedMemo
from ..memory import DeviceBuffer, HostWords, keep_for_graphs
from .policies import (_POLICY_TYPE, DEFAULT_PROLOGUE_FACTOR, MAX_U32, RESIDENT_GRID, TAKES_QUANTUM, check_cluster,
                       check_policy, check_quantum, check_steal_units, check_tiles, policy_for_arch, resolve_policy)
from .schedule import Schedule, SliceReport, learned_min_units, steal_grid_units
from ..state_pool import StatePool, _new_event, _record
from .trace import TRACE_DTYPE, TileOrder, Trace

_reports = HostWords()  # page-locked words steal launches report their spent slices to (one per TileKernel)

_TEMPLATE = r"""
#include <cuadv/work_stealing.cuh>
{preamble}
extern "C" __global__ void __launch_bounds__({threads}, {min_blocks})
{name}(const __grid_constant__ cuadv::ws::Schedule cuadv_schedule{params}) {{
  using cuadv_policy = cuadv::ws::{policy_type};
  cuadv::ws::Scheduler<cuadv_policy> cuadv_scheduler(cuadv_schedule);
  if (!cuadv_scheduler.begin()) return;
  {{
{prologue}
    cuadv_scheduler.for_each([&](const cuadv::ws::Tile& tile) {{
{body}
    }});
  }}
}}
"""

_pool = StatePool("work stealing")  # the TileKernel scheduler's counters
# atomic_counter's counters, zeroed by a memset (a memset node in a capture) before every launch: a pool of their own,
# so the steal counters (which reset themselves) never see a value left by one; every captured launch takes a slot.
_counters = StatePool("the atomic-counter scheduler", slots=4096)


@dataclass(frozen=True)
class LaunchRecord:
    """What a TileKernel call enqueued: the concrete policy, the launch configuration (its grid is the
    one that policy's own kernel needs), the stream handle and the units a block ran before it could yield."""

    policy: str
    config: LaunchConfig
    stream: int
    min_units: int


class TileKernel:
    """A kernel made of a prologue (once per running block) and a tile body (once per tile).

    ``params``: the kernel's parameters as C++ (``"float* data, int n"``), passed after the schedule.
    ``body`` sees ``tile`` (``.x .y .z .index``) and the parameters and prologue locals; a ``return``
    in it ends the current tile. Prologue and body also see the type ``cuadv_policy`` (``cuadv::ws::Steal``, ...):
    ``cuadv::ws::kBarrierBetweenTiles<cuadv_policy>`` says whether the block's threads pass a barrier between two of
    its tiles (steal, atomic_counter, clc), so state in shared memory may be reused from tile to tile.
    ``preamble``: code placed before the kernel (helpers, includes).
    ``min_blocks_per_sm``: the second __launch_bounds__ argument; raising it caps registers so more
    blocks stay resident (more memory requests in flight for a long-lived block).
    ``quantum_us`` (steal): a block stops taking tiles after this long and gives its SM back, so
    higher-priority work gets in within about one quantum plus one tile; math.inf: never. None: 200 us (also
    for a call with ``policy="steal"`` on a kernel built for another policy, which takes no quantum).
    ``prologue_factor`` (steal): the slice is stretched to this many times the block's own prologue
    when that is longer, so the prologue costs at most 1/(factor+1) of the block's time; 0: off; at most 2**32 - 1.
    ``min_tiles`` (steal with a quantum): a block runs at least this many tiles (units, with clusters)
    before its slice may end, so ceil(units / min_tiles) blocks take every tile; the grid is that many
    plus one spare wave of the blocks that fit at once (``steal_grid_units``: the last blocks to replace
    those that yielded refill every SM rather than some), or only the blocks that fit at once where those
    take every tile. Each block launched after the work is gone
    still costs a launch (about 0.14 us per block per SM on an H200), so for short tiles it should be
    near quantum / time of one tile: the grid then has about as many blocks as will find work (and the
    spare wave), and a block still yields after about one quantum. None (default): learned, as what one
    slice held in the latest ``slice_report`` of this kernel (the full tile grid until a block has given
    its SM back or found the work gone); where each SM slot's share of the tiles is at most two slices, only the
    blocks that fit at once, none yielding while work is left (``learned_min_units``); 1: always the full tile grid.

    ``policy="atomic_counter"``: the grid of fixed_blocks, each block then taking tiles from a global
    counter (FlashAttention-3's kind of scheduler); every launch enqueues a memset of its counter on its
    stream before the kernel (so a captured graph holds a memset node per launch), which is counted in
    its time, and its blocks never give their SM back. ``steal`` is the same idea with a counter that
    resets itself and a time slice.

    Each policy compiles to its own kernel with its own registers, so the grid of a policy that
    launches only what fits at once (fixed_blocks, atomic_counter, steal with quantum_us=math.inf) is sized from the
    occupancy of that policy's kernel (``resident_units``). ``last_launch`` records what was launched.
    """

    def __init__(self, params: str, body: str, prologue: str = "", *, policy: str = "auto",
                 block: int | Sequence[int] = 256, cluster: int | Sequence[int] = 1, quantum_us: float | None = None,
                 preamble: str = "", name: str = "cuadv_tiles", shared_mem: int = 0, min_blocks_per_sm: int = 1,
                 prologue_factor: int = DEFAULT_PROLOGUE_FACTOR, min_tiles: int | None = None):
        check_policy(policy)
        for part, text in (("params", params), ("body", body), ("prologue", prologue), ("preamble", preamble)):
            if not isinstance(text, str):
                raise TypeError(f"TileKernel {part} must be C++ source text (a str), got {type(text).__name__}")
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"name must be a C identifier (it names the kernel), got {name!r}")
        if not is_int(shared_mem) or shared_mem < 0:
            raise LaunchConfigError(f"shared_mem must be an int >= 0 bytes, got {shared_mem!r}")
        if not is_int(min_blocks_per_sm) or min_blocks_per_sm < 1:
            raise LaunchConfigError(f"min_blocks_per_sm must be an int >= 1, got {min_blocks_per_sm!r}")
        self.params, self.body, self.prologue, self.preamble = params.strip(), body, prologue, preamble
        self.policy, self.name, self.shared_mem = policy, name, int(shared_mem)
        self.min_blocks_per_sm = int(min_blocks_per_sm)  # __launch_bounds__ occupancy hint (caps registers)
        self.block = LaunchConfig(grid=1, block=block).block
        self.cluster = check_cluster(cluster)
        check_quantum(quantum_us, policy)  # a quantum given to a policy that takes none raises
        # The quantum of this kernel's steal launches: also those of a call with policy="steal" (or "auto" resolving
        # to it) on a kernel built for another policy, which could not be given one, so the default.
        self.quantum_ns = check_quantum(quantum_us if policy in TAKES_QUANTUM else None, "steal")
        if not is_int(prologue_factor) or prologue_factor < 0:
            raise LaunchConfigError(f"prologue_factor must be an int >= 0, got {prologue_factor!r}")
        if prologue_factor > MAX_U32:  # Schedule.prologue_factor is 32 bits: checked here, not at every call
            raise LaunchConfigError(f"prologue_factor must be at most 2**32 - 1 (a 32-bit field of the schedule), "
                                    f"got {prologue_factor}")
        self.prologue_factor = int(prologue_factor)
        if min_tiles is not None and (not is_int(min_tiles) or not 1 <= min_tiles <= MAX_U32):
            raise LaunchConfigError(f"min_tiles must be None or an int from 1 to 2**32 - 1, got {min_tiles!r}")
        if min_tiles is not None and min_tiles > 1 and (policy not in TAKES_QUANTUM or self.quantum_ns == 0):
            raise LaunchConfigError("min_tiles applies to policy 'steal' with a finite quantum only "
                                    f"(policy {policy!r}, quantum_us {quantum_us!r})")
        self.min_tiles = None if min_tiles is None else int(min_tiles)  # None: learned from this kernel's slice reports
        self._report: np.ndarray | None = None  # host view of the word steal launches report their slices to
        self._report_ptr = 0
        self._modules: dict[tuple[str, str], CompiledModule] = {}
        # Blocks (clusters) resident at once, per compiled kernel: each (target, policy) has its own kernel,
        # registers and so occupancy; one count per TileKernel sized fixed_blocks from steal's kernel.
        self._resident: dict[Kernel, int] = {}
        self._launchers = BoundedMemo(MAX_LAUNCHERS)  # _launcher's: one per launch configuration met
        self.last_launch: LaunchRecord | None = None

    # -- code -------------------------------------------------------------------------------------
    def source(self, policy: str) -> str:
        if policy not in _POLICY_TYPE:
            raise ValueError(f"source() needs a concrete policy ({', '.join(_POLICY_TYPE)}), got {policy!r}")
        return _TEMPLATE.format(preamble=self.preamble, threads=volume(self.block), min_blocks=self.min_blocks_per_sm,
                                name=self.name,
                                params=(", " + self.params) if self.params else "", policy_type=_POLICY_TYPE[policy],
                                prologue=self.prologue, body=self.body)

    def compile(self, arch: str, policy: str | None = None) -> CompiledModule:
        """Compile for a target (no GPU needed). ``policy`` defaults to this kernel's, resolved for arch
        (``policy_for_arch``: on a plain target such as sm_100, auto is steal and clc raises before compiling)."""
        # None, not any false value, means the kernel's policy: policy="" raises as every other non-name does
        concrete = policy_for_arch(self.policy if policy is None else policy, arch)
        key = (arch, concrete)
        module = self._modules.get(key)
        if module is None:  # threads compiling at once keep the first module: one loaded kernel per policy
            module = compile_source(self.source(concrete), name=f"{self.name}_{concrete}", arch=arch)
            module = self._modules.setdefault(key, module)
        return module

    def kernel(self, policy: str | None = None) -> tuple[Kernel, str]:
        """The loaded kernel of a policy (default: this kernel's) on the current GPU, and the concrete policy."""
        caps = current_device().caps
        concrete = resolve_policy(self.policy if policy is None else policy, caps.compute_capability)
        if volume(self.cluster) > 1:
            require("cluster_launch", caps.as_dict(), name=f"TileKernel {self.name!r} with cluster {self.cluster}",
                    fallback="cluster=1 (tiles of one block each)")
        return self.compile(caps.arch, concrete).kernel(self.name), concrete

    # -- grid sizing ------------------------------------------------------------------------------
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
        if report is None:  # nothing learned yet: the full tile grid, without an occupancy query
            return 1
        return learned_min_units(report, units, self._resident_units(kernel))

    def launch_config(self, kernel: Kernel | None, policy: str, tiles: int | Sequence[int],
                      priority: int | None = None, min_units: int | None = None) -> LaunchConfig:
        """The launch configuration of ``policy`` over ``tiles`` (an int or 1 to 3 ints, at least one tile);
        ``kernel`` must be that policy's own kernel (``self.kernel(policy)[0]``): its occupancy sizes the grids
        that fit at once. ``policy``: one of POLICIES, "auto" resolved for the current GPU as a call resolves it.
        ``min_units``: the units a steal block runs before its slice may end (None: this kernel's, learned)."""
        tiles = check_tiles(tiles, self.cluster)
        if volume(tiles) == 0:
            raise LaunchConfigError(f"tiles {tiles} hold no tile: a launch over none has no configuration (a "
                                    "TileKernel call with no tiles launches nothing)")
        policy = check_policy(policy)
        if policy == "auto":
            policy = resolve_policy(policy, current_device().caps.compute_capability)
        if min_units is not None and (not is_int(min_units) or not 1 <= min_units <= MAX_U32):
            raise LaunchConfigError(f"min_units must be None or an int from 1 to 2**32 - 1, got {min_units!r}")
        check_steal_units(policy, volume(tiles) // volume(self.cluster))
        priority = checked_priority(priority)  # before an occupancy query
        cluster = self.cluster if volume(self.cluster) > 1 else None
        # fixed_blocks, and steal that never yields: a grid that fits at once. Steal with a quantum needs
        # ceil(units / min_units) blocks, whose later ones replace those that gave their SM back, and a spare wave
        # (steal_grid_units; once the work is gone, each block still launches, reads the counter and exits: see
        # docs/work_stealing.md), or only the blocks that fit at once where those take every unit.
        units = volume(tiles) // volume(self.cluster)
        k = self.min_units(kernel, policy, units) if min_units is None else min_units
        smaller = policy == "steal" and k > 1
        needed = steal_grid_units(units, k, self._resident_units(kernel)) if smaller else units
        if policy in RESIDENT_GRID or (policy == "steal" and self.quantum_ns == 0):
            grid = (min(self._resident_units(kernel), units) * self.cluster[0], self.cluster[1], self.cluster[2])
        elif smaller and needed * self.cluster[0] <= MAX_GRID[0]:
            grid = (needed * self.cluster[0], self.cluster[1], self.cluster[2])
        else:  # the tile grid (also when the smaller grid would not fit in x: it has more blocks than needed)
            grid = tiles
        return LaunchConfig(grid=grid, block=self.block, cluster=cluster, shared_mem=self.shared_mem, priority=priority)

    def resident_units(self, policy: str | None = None) -> int:
        """Blocks (or clusters) of ``policy``'s kernel that fit on the current GPU at once."""
        return self._resident_units(self.kernel(policy)[0])

    def _resident_units(self, kernel: Kernel) -> int:
        """Blocks (or clusters) of this compiled kernel that fit on the GPU at once: the fixed_blocks grid."""
        n = self._resident.get(kernel)
        if n is None:
            if volume(self.cluster) > 1:
                # A launch's device checks on one cluster first (as fixed_work's launch runs them): a cluster larger
                # than the kernel can use would make the occupancy query give 0 or fail in the driver.
                self._check_one_cluster(kernel)
                n = max_active_clusters(kernel, self.block, self.cluster, self.shared_mem)
            else:
                # Before the query, which answers 0 for a block the kernel cannot run, or raises naming no limit.
                check_block(kernel, self.block, self.shared_mem, current_device().caps)
                n = max_active_blocks_per_sm(kernel, self.block, self.shared_mem) * current_device().caps.sm_count
            if n < 1:
                raise LaunchConfigError(f"no block of {volume(self.block)} threads and {self.shared_mem} B shared "
                                        "memory fits on an SM")
            self._resident[kernel] = n
        return n

    def _check_one_cluster(self, kernel: Kernel, priority: int | None = None) -> int:
        """A launch's device checks (cuadv.launching.check_config: block, shared memory, cluster size, priority)
        for a grid of one cluster; the GPU's ordinal."""
        cluster = self.cluster if volume(self.cluster) > 1 else None
        return check_config(kernel, LaunchConfig(grid=self.cluster, block=self.block, cluster=cluster,
                                                 shared_mem=self.shared_mem, priority=priority))

    def _launcher(self, kernel: Kernel, policy: str, tiles: Dim3, priority: int | None, min_units: int) -> Launcher:
        """The checked launcher of ``launch_config(kernel, policy, tiles, priority, min_units)``: made (and its
        device checks run) once per those and the kernel's block, cluster, shared memory and quantum, which are
        all it depends on, so a repeated launch builds no configuration."""
        priority = checked_priority(priority)  # before the lookup: False == 0 and -1.0 == -1 as keys
        key = (kernel, policy, tiles, priority, min_units, self.block, self.cluster, self.shared_mem, self.quantum_ns)
        launcher = self._launchers.get(key)
        if launcher is None:
            launcher = self._launchers.put(key, prepare(kernel, self.launch_config(kernel, policy, tiles, priority,
                                                                                   min_units)))
        return launcher

    # -- launch -----------------------------------------------------------------------------------
    def __call__(self, tiles: int | Sequence[int], *args: Any, stream: Any = None, trace: bool = False,
                 priority: int | None = None, policy: str | None = None,
                 order: TileOrder | None = None) -> Trace | None:
        """Launch over a tile grid. With ``trace=True`` returns the per-tile Trace (read when first used).
        ``order``: a TileOrder over the units (tiles / cluster size) to hand them out in that order.
        ``stream=None``: the current stream of the arguments' library (torch's for tensors, else CuPy's).
        ``policy``: this launch's policy, any of POLICIES (None: the kernel's), resolved for the current GPU as the
        kernel's is; each compiles to its own kernel. A launch that runs steal takes the kernel's ``quantum_us``
        and ``min_tiles`` (a kernel built for a policy without them: the 200 us default and a learned min_tiles);
        launches of other policies ignore them, as ``auto`` does where it runs fixed_work or clc.
        With no tiles nothing is launched, after the same checks of the stream, priority and arguments."""
        t = check_tiles(tiles, self.cluster)
        units = volume(t) // volume(self.cluster)
        if not isinstance(trace, (bool, np.bool_)):
            raise TypeError(f"trace must be True or False, got {trace!r}")
        if order is not None and not isinstance(order, TileOrder):
            raise TypeError(f"order must be a TileOrder (TileOrder(permutation)), got {type(order).__name__}")
        if order is not None and order.units != units:
            raise LaunchConfigError(f"the tile order has {order.units} units but the launch has "
                                    f"{units} (tiles / cluster size)")
        kernel, concrete = self.kernel(policy)
        expected = len(kernel.param_sizes) - 1  # the schedule comes first, passed here
        if len(args) != expected:
            raise KernelArgumentError(f"TileKernel {self.name!r} takes {expected} "
                                      f"argument{'s' if expected != 1 else ''} after tiles ({self.params or 'none'}), "
                                      f"got {len(args)}")
        quantum = self.quantum_ns if concrete == "steal" else 0
        check_steal_units(concrete, units)
        handle = stream_handle(stream, *args)
        if volume(t) == 0:  # nothing to launch, but a bad call raises as it would with tiles
            device = self._check_one_cluster(kernel, priority)
            for index, (value, size) in enumerate(zip(args, kernel.param_sizes[1:]), start=1):
                pack_argument(value, size, index, kernel.signature, device)
            return Trace(concrete, t, records=np.zeros(0, TRACE_DTYPE)) if trace else None
        min_units = self.min_units(kernel, concrete, units)  # read once: grid and device agree
        launcher = self._launcher(kernel, concrete, t, priority, min_units)  # before a trace buffer or a state slot
        config = launcher.config
        trace_buf = None
        if trace or (quantum and self._report is None):
            # In relaxed capture mode: a capture in the global mode (torch.cuda.graph's), of this stream or
            # another, is invalidated by this thread's cuMemAlloc or cuMemHostAlloc.
            with relaxed_capture_mode():
                if trace:  # poisoned on the launch's stream (in ``before``): the kernel's records come after it
                    trace_buf = DeviceBuffer(volume(t) * TRACE_DTYPE.itemsize, fill=None)
                if quantum and self._report is None:
                    self._report, self._report_ptr = _reports.take()
        pool = _pool if concrete == "steal" else _counters if concrete == "atomic_counter" else None
        try:
            with pool.use(handle) if pool else nullcontext((0, False)) as (state_ptr, captured):

                def before() -> None:  # enqueued ahead of the kernel once its arguments have passed their checks
                    if trace_buf is not None:
                        trace_buf.fill(0xFF, stream=handle)
                    if concrete == "atomic_counter":  # zeroed before every launch, as users of such a scheduler do
                        check(driver().cuMemsetD32Async(state_ptr, 0, 2, handle), "cuMemsetD32Async")

                # steal's stream launches alternate between the two states of their slot (the phase); a captured one
                # counts exits in the first
                with _pool.phase(state_ptr) if concrete == "steal" and not captured else nullcontext(0) as phase:
                    schedule = Schedule.of_launch(tiles=t, cluster=self.cluster, quantum_ns=quantum,
                                                  prologue_factor=self.prologue_factor, state_ptr=state_ptr,
                                                  trace_ptr=trace_buf.ptr if trace_buf else 0,
                                                  order_ptr=order.buffer.ptr if order else 0, count_exits=captured,
                                                  phase=phase, min_units=min_units,
                                                  report_ptr=self._report_ptr if quantum else 0)
                    # a bad argument raises before the fill or the memset is enqueued
                    launcher(schedule, *args, stream=handle,
                             before=before if trace_buf is not None or concrete == "atomic_counter" else None)
        except BaseException:
            if trace_buf is not None and capturing(handle):  # freed now, its cuMemFree would invalidate a global-
                keep_for_graphs(trace_buf)  # mode capture: kept for the process, as captured ones
            raise
        self.last_launch = LaunchRecord(concrete, config, handle, min_units)
        if trace_buf is None and order is None:
            return None
        in_graph = captured if pool else capturing(handle)
        if in_graph:  # every replay reads the order and writes the trace: both live as long as the process (as the
            keep_for_graphs(trace_buf, order)  # launch's state slot does), whatever the caller keeps
        if trace_buf is None:
            return None
        done = None
        if not in_graph:  # an event recorded in a capture cannot be waited for
            # The stream may be destroyed before the records are read: they wait for this event instead.
            done = _new_event()
            _record(done, handle)
        return Trace(concrete, t, buffer=trace_buf, stream=handle, done=done, captured=in_graph)

    launch = __call__
