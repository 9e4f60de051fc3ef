"""A persistent kernel over a task queue: one launch runs N small tasks, each for the price of an atomic.

Launching one kernel per small task costs microseconds each (about 6 us from Python, 1 us as a CUDA
graph node on an H200); a persistent kernel pays one launch and then one atomic per ticket. The user
writes the task body once; cuadv wraps it in the queue protocol of ``<cuadv/persistent_queue.cuh>``:

- the grid is the SMs x the blocks of this kernel that fit on an SM at once (its own occupancy), capped
  at what the tasks need; every warp is a worker;
- a worker takes ``tasks_per_ticket`` tasks per fetch-and-add on one global ticket (1: one atomic per
  task, the hot spot; 16 cut the atomics 16-fold and measured 8x cheaper per task at N = 100,000);
- every task below n runs exactly once; the last block to leave zeroes the counters, so launches back to
  back and replays of a captured CUDA graph need no host reset. Each stream (and each graph capture)
  gets its own counters, so launches on different streams may overlap.

Example::

    bump = PersistentKernel(params="unsigned int* counts",
                            task="if (lane == 0) atomicAdd(counts + task, 1u);")
    bump(n, counts)                         # counts[i] += 1 for every i < n, once each
    run = bump.prepare(n, counts, tasks_per_ticket=16)
    run(stream=s)                           # checked once; one launch per call

The task body sees ``task`` (``unsigned long long``, the task index), ``lane`` (0..31) and the
parameters; it is run by the 32 threads of one warp while other warps run other tasks, so it must not
call ``__syncthreads()``; a ``return`` ends the task. The prologue runs once per block before the queue
and must not return. Any GPU runs it (no feature needed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from ..args import PackedArguments
from ..compiler import CompiledModule, compile_source
from ..dims import is_int
from ..errors import KernelArgumentError, LaunchConfigError
from ..interop import stream_handle
from ..kernel import Kernel, max_active_blocks_per_sm
from ..launching import LaunchConfig, Launcher, check_block, prepare
from ..params import StructArgument, c_struct
from ..signature import split_params
from ..state_pool import StatePool

WARP = 32
DEFAULT_BLOCK = 128
MAX_TASKS = 2**62  # tickets and the overshoot of the last tickets fit the 64-bit counter (persistent_queue.cuh)
MAX_TASKS_PER_TICKET = 2**31
HEADER = "cuadv/persistent_queue.cuh"  # a public header: user kernels may include it too
QUEUE_LAYOUT = c_struct("cuadv::persistent::Queue", [("state", "<u8"), ("n", "<u8"), ("per_ticket", "<u4"),
                                                      ("reserved", "<u4")], size=24)


@dataclass(frozen=True)
class Queue(StructArgument):
    """The generated kernel's first parameter (cuadv::persistent::Queue)."""

    LAYOUT: ClassVar[np.dtype] = QUEUE_LAYOUT
    state: int
    n: int
    per_ticket: int


def check_task_count(n: Any, limit: int = MAX_TASKS) -> int:
    """The number of tasks: an int in [0, limit]."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"the task count (n_tasks) must be an int, got {type(n).__name__} {n!r}")
    n = int(n)
    if not 0 <= n <= limit:
        raise LaunchConfigError(f"task count {n} is outside [0, {limit}]")
    return n


def check_tasks_per_ticket(k: Any) -> int:
    """Tasks per ticket: an int in [1, 2**31]."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"tasks_per_ticket must be an int, got {type(k).__name__} {k!r}")
    k = int(k)
    if not 1 <= k <= MAX_TASKS_PER_TICKET:
        raise LaunchConfigError(f"tasks per ticket must be in [1, {MAX_TASKS_PER_TICKET}], got {k}")
    return k


def resident_grid(kernel: Kernel, block: int, shared_mem: int = 0) -> int:
    """SMs x the blocks of ``kernel`` resident per SM (its own occupancy): a grid that runs at once."""
    from ..device import current_device

    caps = current_device().caps
    check_block(kernel, block, shared_mem, caps)  # a clear limit before the occupancy query asks the driver
    per_sm = max_active_blocks_per_sm(kernel, block, shared_mem)
    if per_sm < 1:
        extra = f" and {shared_mem} B dynamic shared memory" if shared_mem else ""
        raise LaunchConfigError(f"{kernel.name} does not fit an SM with {block} threads{extra} per block")
    return per_sm * caps.sm_count


def grid_for(resident: int, block: int, n: int, per_ticket: int) -> int:
    """The persistent grid for n tasks: the resident grid, or fewer blocks when the tickets would not give
    every warp one (extra blocks would only take a ticket past the end and leave)."""
    tickets = -(-n // per_ticket)
    needed = -(-tickets // (block // WARP))
    return max(1, min(resident, needed))


def count_params(params: str) -> int:
    """Parameters in a C++ parameter list (commas at the top level: templates and parentheses nest)."""
    return len(split_params(params))


_pool = StatePool("the persistent queue")  # per stream / per capture counters, zero between launches

_TEMPLATE = r"""
#include "{header}"
{preamble}
extern "C" __global__ void __launch_bounds__({threads}, {min_blocks})
{name}(const __grid_constant__ cuadv::persistent::Queue cuadv_queue{params}) {{
  const unsigned int lane = threadIdx.x & 31u;
  (void)lane;
{prologue}
  cuadv::persistent::run_queue(cuadv_queue, [&](const unsigned long long task) {{
{task}
  }});
}}
"""


class PersistentKernel:
    """A persistent kernel: a task body run once per task index over a global ticket queue.

    ``params``: the kernel's parameters as C++ (``"float* data, unsigned long long n"``), passed after the
    queue. ``task`` sees ``task``, ``lane`` and the parameters. ``prologue``: code run once per block
    before the queue (it must not return: every thread must reach the exit protocol); the task sees its
    locals (captured by reference). ``block``: threads per block, a multiple of 32 (each warp is
    a worker). ``min_blocks_per_sm``: the second __launch_bounds__ argument (caps registers so more blocks
    are resident).
    """

    def __init__(self, params: str, task: str, prologue: str = "", *, block: int = DEFAULT_BLOCK,
                 preamble: str = "", name: str = "cuadv_persistent", shared_mem: int = 0, min_blocks_per_sm: int = 1):
        for what, text in (("params", params), ("task", task), ("prologue", prologue), ("preamble", preamble)):
            if not isinstance(text, str):
                raise TypeError(f"{what} must be C++ source as a str, got {type(text).__name__} {text!r}")
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or not WARP <= block <= 1024 \
                or block % WARP:
            raise LaunchConfigError(f"block must be a multiple of {WARP} threads from {WARP} to 1024 (each warp is "
                                    f"a worker), got {block!r}")
        if not is_int(min_blocks_per_sm) or min_blocks_per_sm < 1:
            raise LaunchConfigError(f"min_blocks_per_sm must be an int >= 1, got {min_blocks_per_sm!r}")
        if not is_int(shared_mem) or shared_mem < 0:
            raise LaunchConfigError(f"shared_mem must be an int >= 0 bytes, got {shared_mem!r}")
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"name must be a C identifier, got {name!r}")
        self.params, self.task, self.prologue, self.preamble = params.strip(), task, prologue, preamble
        self.block, self.name, self.shared_mem = int(block), name, int(shared_mem)
        self.min_blocks_per_sm = int(min_blocks_per_sm)
        self.n_params = count_params(self.params)  # the user's arguments after n_tasks
        self._modules: dict[str, CompiledModule] = {}
        self._resident: dict[str, int] = {}  # arch -> this kernel's resident grid on the current device

    def source(self) -> str:
        return _TEMPLATE.format(header=HEADER, preamble=self.preamble, threads=self.block,
                                min_blocks=self.min_blocks_per_sm, name=self.name,
                                params=(", " + self.params) if self.params else "", prologue=self.prologue,
                                task=self.task)

    def compile(self, arch: str) -> CompiledModule:
        """Compile for a target (no GPU needed)."""
        module = self._modules.get(arch)
        if module is None:  # threads compiling at once keep the first module: one loaded kernel
            module = self._modules.setdefault(arch, compile_source(self.source(), name=self.name, arch=arch))
        return module

    def kernel(self) -> Kernel:
        from ..device import current_device

        return self.compile(current_device().caps.arch).kernel(self.name)

    def resident_blocks(self) -> int:
        """SMs x resident blocks of this kernel (its own occupancy), queried once per device."""
        from ..device import current_device

        arch = current_device().caps.arch
        if arch not in self._resident:
            self._resident[arch] = resident_grid(self.kernel(), self.block, self.shared_mem)
        return self._resident[arch]

    def check_args(self, args: Sequence[Any]) -> None:
        if len(args) != self.n_params:
            raise KernelArgumentError(f"{self.name} takes {self.n_params} argument{'s' if self.n_params != 1 else ''} "
                                      f"after n_tasks ({self.params or 'none'}), got {len(args)}")

    def prepare(self, n_tasks: int, *args: Any, tasks_per_ticket: int = 1) -> "PreparedQueue":
        """Check everything once and return the callable launch (``run(stream=None)``)."""
        n = check_task_count(n_tasks)
        k = check_tasks_per_ticket(tasks_per_ticket)
        self.check_args(args)
        kernel = self.kernel()
        try:
            PackedArguments((Queue(0, n, k), *args), kernel.param_sizes, kernel.signature)  # before any launch
        except KernelArgumentError as exc:
            raise KernelArgumentError(f"{self.name}: {exc}") from None
        config = LaunchConfig(grid=grid_for(self.resident_blocks(), self.block, n, k), block=self.block,
                              shared_mem=self.shared_mem)
        return PreparedQueue(self.name, n, k, tuple(args), prepare(kernel, config))

    def __call__(self, n_tasks: int, *args: Any, tasks_per_ticket: int = 1, stream: Any = None) -> None:
        """Run tasks 0 .. n_tasks - 1, each once, on ``stream`` (None: the arguments' current stream)."""
        self.prepare(n_tasks, *args, tasks_per_ticket=tasks_per_ticket)(stream=stream)

    launch = __call__


@dataclass(frozen=True)
class PreparedQueue:
    """A checked launch of a PersistentKernel over n tasks with fixed arguments; call it to run."""

    name: str
    n_tasks: int
    tasks_per_ticket: int
    args: tuple
    launcher: Launcher

    @property
    def grid(self) -> int:
        return self.launcher.config.grid[0]

    def __call__(self, stream: Any = None) -> None:
        if self.n_tasks == 0:
            return  # nothing to run: no launch
        handle = stream_handle(stream, *self.args)
        with _pool.use(handle) as (state, _captured):  # the protocol resets itself, captured or not
            self.launcher(Queue(state, self.n_tasks, self.tasks_per_ticket), *self.args, stream=handle)


def prepare_persistent(kernel: PersistentKernel, n_tasks: int, *args: Any, tasks_per_ticket: int = 1) -> PreparedQueue:
    """``kernel.prepare(...)``: the checked launch of a persistent kernel over n tasks."""
    if not isinstance(kernel, PersistentKernel):
        raise TypeError(f"kernel must be a PersistentKernel, got {type(kernel).__name__}")
    return kernel.prepare(n_tasks, *args, tasks_per_ticket=tasks_per_ticket)


# The public names (docs/persistent.md). check_task_count, check_tasks_per_ticket, grid_for and QUEUE_LAYOUT
# (Queue.LAYOUT) are what PersistentKernel checks and sizes with: importable from here, but internal.
__all__ = ["PersistentKernel", "PreparedQueue", "Queue", "prepare_persistent", "resident_grid", "MAX_TASKS"]
