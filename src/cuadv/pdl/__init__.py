"""A chain of dependent kernels launched with programmatic dependent launch (PDL), in a stream or a CUDA graph.

PDL (compute capability 9.0+) lets a kernel start while the previous kernel in its stream is still
running, so its launch and any setup that needs nothing from that kernel overlap the previous one.
A chain is a list of steps, each ``(kernel, LaunchConfig, args)``; cuadv sets the
programmatic-stream-serialization attribute on every link after the first and launches them in order
on one stream, or captures them once into a CUDA graph whose edges are then programmatic.

Where the user's kernels put the two device calls (``#include <cuadv/pdl.cuh>``)::

    independent setup -> cuadv::pdl::wait() -> cuadv::pdl::launch_dependents() -> work on the input

- ``cuadv::pdl::wait()`` (``griddepcontrol.wait``) returns once the previous grid has completed and its
  memory is visible. Nothing the previous kernel writes may be read before it.
- ``cuadv::pdl::launch_dependents()`` (``griddepcontrol.launch_dependents``) lets the next grid be
  scheduled; it publishes no memory. Right after the wait it keeps the overlap to one kernel ahead,
  which measured fastest without setup (docs/pdl.md); before the setup every later kernel may be
  scheduled as far as blocks fit, which hides the most setup. Never called: the trigger is implicit
  when each block exits.
- Without the attribute both calls are no-ops, so the same kernels run with ``pdl=False``.

Example::

    chain = cuadv.pdl.prepare_chain([(layer, cfg, (x, y, c0, n)), (layer, cfg, (y, x, c1, n))], graph=True)
    chain(stream=s)            # checked once, captured once; each call is one graph launch

``pdl=True`` raises UnsupportedFeatureError on a GPU without PDL (fallback: ``pdl=False``, plain
stream order, or ``pdl="auto"``, which takes PDL where the GPU has it).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Sequence, Union

from .._cuda import new_nonblocking_stream
from ..args import PackedArguments
from ..errors import KernelArgumentError, LaunchConfigError
from ..features import require, why_not
from ..graphs import Graph
from ..interop import capturing, stream_handle
from ..kernel import Kernel
from ..launching import LaunchConfig, Launcher, prepare

PDL_CHOICES = (True, False, "auto")
PDL_FALLBACK = "pdl=False (plain stream order: each kernel starts after the previous one ends) or pdl='auto'"


@dataclass(frozen=True)
class Step:
    """One link of a chain: a loaded kernel, its launch configuration and its arguments."""

    kernel: Kernel
    config: LaunchConfig
    args: tuple = ()


StepLike = Union[Step, Sequence[Any]]


def as_steps(steps: Sequence[StepLike]) -> tuple[Step, ...]:
    """Steps from ``Step`` objects or ``(kernel, config[, args])`` tuples; raises for an empty chain and
    for a step that is not a kernel with a LaunchConfig and a tuple of arguments (pure checks, no GPU)."""
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence):
        raise KernelArgumentError(f"steps must be a list of (kernel, LaunchConfig, args), got {type(steps).__name__}")
    if len(steps) == 0:
        raise LaunchConfigError("a PDL chain needs at least one step (kernel, LaunchConfig, args); got an empty chain")
    out = []
    for i, step in enumerate(steps):
        if not isinstance(step, Step):
            if isinstance(step, (str, bytes)) or not isinstance(step, Sequence) or len(step) not in (2, 3):
                raise KernelArgumentError(f"step {i}: expected (kernel, LaunchConfig, args), got {_what(step)}")
            step = Step(step[0], step[1], *step[2:])
        if not isinstance(step.kernel, Kernel):
            raise KernelArgumentError(f"step {i}: {_what(step.kernel)} is not a cuadv Kernel "
                                      "(get one with CompiledModule.kernel(name))")
        if not isinstance(step.config, LaunchConfig):
            raise KernelArgumentError(f"step {i} ({step.kernel.name}): {_what(step.config)} is not a cuadv "
                                      "LaunchConfig")
        if not isinstance(step.args, (tuple, list)):
            raise KernelArgumentError(f"step {i} ({step.kernel.name}): args must be a tuple or list of the kernel's "
                                      f"arguments, got {_what(step.args)}")
        out.append(Step(step.kernel, step.config, tuple(step.args)))
    return tuple(out)


def check_arguments(steps: Sequence[Step], device: int | None = None) -> None:
    """Each step's arguments against its kernel's parameters (count, then packing: types and sizes; with
    ``device``, the GPU whose memory each array is in), so a bad argument in link 5 raises before link 0 is
    launched."""
    for i, s in enumerate(steps):
        sizes = s.kernel.param_sizes
        if len(s.args) != len(sizes):
            raise KernelArgumentError(f"step {i} ({s.kernel.name}): the kernel takes {len(sizes)} arguments, "
                                      f"got {len(s.args)}")
        try:
            PackedArguments(s.args, sizes, s.kernel.signature, device)
        except KernelArgumentError as exc:
            raise KernelArgumentError(f"step {i} ({s.kernel.name}): {exc}") from None


def resolve_pdl(pdl: bool | str, caps: dict) -> bool:
    """Whether the chain launches with PDL: True raises on a GPU without it (naming the fallback);
    'auto' takes it where the GPU has it; False never."""
    if not any(pdl is c or (isinstance(pdl, str) and pdl == c) for c in PDL_CHOICES):
        raise ValueError(f"pdl must be True, False or 'auto', got {pdl!r}")
    if pdl == "auto":
        return why_not("pdl", caps) is None
    if pdl:
        require("pdl", caps, name="programmatic dependent launch (a cuadv.pdl chain with pdl=True)",
                fallback=PDL_FALLBACK)
    return bool(pdl)


def link_configs(steps: Sequence[Step], pdl: bool) -> tuple[LaunchConfig, ...]:
    """The configuration each link is launched with: with PDL every link after the first gets the
    programmatic-stream-serialization attribute (the first keeps its own, since it follows whatever the
    caller queued before the chain); without PDL no link has it."""
    return tuple(s.config if (i == 0 and pdl) else dataclasses.replace(s.config, pdl=pdl) for i, s in enumerate(steps))


class Chain:
    """A checked chain of dependent kernels; call it to launch the chain (``chain(stream=None)``).

    Made by ``prepare_chain``: the steps are checked, every link's configuration passes the device
    checks once (``cuadv.prepare``), and with ``graph=True`` the links are captured once into a CUDA
    graph (on a private stream; nothing runs then) whose arguments are fixed from then on.
    ``stream=None`` is the current stream of the arguments' library (torch's for tensors, else CuPy's).
    """

    def __init__(self, steps: Sequence[StepLike], *, pdl: bool | str = True, graph: bool = False):
        self.steps = as_steps(steps)
        if not isinstance(graph, bool):
            raise ValueError(f"graph must be True or False, got {graph!r}")
        check_arguments(self.steps)  # counts and types: no GPU needed
        caps = _caps()
        self.pdl = resolve_pdl(pdl, caps)
        check_arguments(self.steps, caps["ordinal"])  # and every array in the memory of the GPU the chain runs on
        self.configs = link_configs(self.steps, self.pdl)
        self.launchers: tuple[Launcher, ...] = tuple(prepare(s.kernel, c) for s, c in zip(self.steps, self.configs))
        self._like = tuple(a for s in self.steps for a in s.args)  # what stream=None follows
        self.graph: Graph | None = None
        if graph:
            stream = _capture_stream()
            with _one_capture:  # the capture stream is shared: two threads must not capture on it at once
                self.graph = Graph.capture(stream, lambda: self.enqueue(stream))

    def enqueue(self, stream: int) -> None:
        """Launch every link on ``stream`` (a raw handle), in order."""
        for launcher, step in zip(self.launchers, self.steps):
            launcher(*step.args, stream=stream)

    def __call__(self, stream: Any = None) -> None:
        handle = stream_handle(stream, *self._like)
        if self.graph is not None and self.graph.exec is None:
            raise LaunchConfigError("this chain's CUDA graph was closed; prepare the chain again")
        # A stream being captured takes the links themselves (kernel nodes and their programmatic edges in the
        # caller's graph) rather than a launch of the chain's own graph into the capture.
        if self.graph is not None and not capturing(handle):
            self.graph.launch(handle)
        else:
            self.enqueue(handle)

    launch = __call__

    def edge_types(self) -> dict[str, int] | None:
        """The captured graph's edges by type ({'default': n, 'programmatic': m}); None for a stream chain
        or where the driver cannot say. With PDL a chain of k links has k - 1 programmatic edges."""
        return self.graph.edge_types() if self.graph is not None else None

    def close(self) -> None:
        """Free the graph (launches in flight still complete)."""
        if self.graph is not None:
            self.graph.close()

    def __enter__(self) -> "Chain":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        return (f"Chain({len(self.steps)} links, pdl={self.pdl}, "
                f"{'graph' if self.graph is not None else 'stream'})")


def prepare_chain(steps: Sequence[StepLike], *, pdl: bool | str = True, graph: bool = False) -> Chain:
    """Check a chain once (and capture it when ``graph=True``); returns the callable ``Chain``."""
    return Chain(steps, pdl=pdl, graph=graph)


def launch_chain(steps: Sequence[StepLike], *, pdl: bool | str = True, graph: bool = False,
                 stream: Any = None) -> None:
    """Launch a chain of dependent kernels once, in a stream or as a CUDA graph. Everything is checked
    before the first link is launched. Use ``prepare_chain`` to launch the same chain many times."""
    chain = Chain(steps, pdl=pdl, graph=graph)
    try:
        chain(stream=stream)
    finally:
        chain.close()  # a graph in flight is freed when it completes


def _caps() -> dict:
    from ..device import current_device

    return current_device().caps.as_dict()


_capture_streams: dict[int, int] = {}
_capture_lock = threading.Lock()
_one_capture = threading.Lock()


def _capture_stream() -> int:
    """A non-blocking stream of this process, per device, that chains are captured on: capture needs a
    created stream, and one of our own leaves the caller's streams (and the legacy default) alone."""
    from ..device import current_device

    ordinal = current_device().ordinal
    with _capture_lock:
        handle = _capture_streams.get(ordinal)
        if handle is None:
            handle = _capture_streams[ordinal] = new_nonblocking_stream()
    return handle


def _what(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


# The public names (docs/pdl.md). as_steps, check_arguments, resolve_pdl, link_configs and PDL_CHOICES are the
# checks Chain runs: importable from here, but internal.
__all__ = ["Chain", "Step", "launch_chain", "prepare_chain"]
