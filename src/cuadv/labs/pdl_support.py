"""Lab-private pieces of the ``pdl`` lab: the producer/consumer pair of its race (buffers, kernels, one run
in a stream or a CUDA graph) and the facts every run of the pair is checked against. What users call lives
in ``cuadv.pdl``; the lab (``cuadv.labs.pdl``) measures and reports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import LaunchConfigError
from ..launching import LaunchConfig
from ..params import c_struct
from ..pdl import launch_chain, prepare_chain
from ..timing import synchronize, synchronize_device
from .base import readback

THREADS = 256
POISON = -7  # the producer's output buffer holds this until the producer writes
DEMO_MAX_CONSUMER_BLOCKS = 64  # all consumer blocks must be resident beside the producer
DEMO_PRODUCER_BLOCKS = 4
DEMO_DTYPE = c_struct("DemoParams", [("in_", "<u8"), ("mid", "<u8"), ("out", "<u8"), ("n", "<u4"),
                                      ("consumer_blocks", "<u4"), ("arrivals", "<u8"), ("observed", "<u8"),
                                      ("times", "<u8"), ("timeout_ns", "<u8")], size=64)  # DemoParams in pdl.cu
CONSUMERS = ("correct", "misplaced")


@dataclass
class DemoOutcome:
    """One run of the producer/consumer pair."""

    consumer: str
    pdl: bool
    n: int
    producer_blocks: int
    observed: int  # producer blocks that saw every consumer block arrive before writing
    right: int  # outputs equal to the correct value
    stale: int  # outputs computed from the poisoned (unwritten) buffer
    overlap_ns: int | None  # latest producer write minus earliest consumer start (> 0: the grids overlapped)

    @property
    def overlapped(self) -> bool:
        return self.observed == self.producer_blocks

    @property
    def all_right(self) -> bool:
        return self.right == self.n

    @property
    def all_stale(self) -> bool:
        return self.stale == self.n


def check_demo_size(n: int) -> int:
    """Consumer blocks for n elements; raises when they could not all be resident beside the producer."""
    if n < 1:
        raise LaunchConfigError(f"the PDL demo needs at least 1 element, got {n}")
    blocks = -(-n // THREADS)
    if blocks > DEMO_MAX_CONSUMER_BLOCKS:
        raise LaunchConfigError(f"the PDL demo's consumer of {blocks} blocks exceeds {DEMO_MAX_CONSUMER_BLOCKS} blocks "
                                f"(n = {n}, {THREADS} threads per block): every consumer block must be resident "
                                "while the producer waits for it")
    return blocks


class PdlDemo:
    """Buffers and kernels of the producer/consumer pair for n elements."""

    def __init__(self, module, n: int, stream):
        import cupy as cp

        self.cp = cp
        self.n, self.stream = n, stream
        self.consumer_blocks = check_demo_size(n)
        self.producer = module.kernel("pdl_demo_producer")
        self.consumers = {c: module.kernel(f"pdl_demo_consumer_{c}") for c in CONSUMERS}
        self.inp = cp.asarray(np.random.default_rng().integers(-1000, 1000, n, dtype=np.int32))
        self.mid = cp.empty(n, dtype=cp.int32)
        self.out = cp.empty(n, dtype=cp.int32)
        self.control = cp.zeros(2, dtype=cp.uint32)  # arrivals, observed
        self.times = cp.zeros(2, dtype=cp.uint64)
        self.expected = 2 * (3 * readback(self.inp).astype(np.int64) + 1)
        for consumer in CONSUMERS:  # load every kernel now: a first launch that loads its module (lazy
            self.run(consumer, False, 0)  # loading) waits for the running producer, so it never starts early

    def params(self, timeout_ns: int) -> bytes:
        rec = np.zeros((), DEMO_DTYPE)
        rec["in_"], rec["mid"], rec["out"] = self.inp.data.ptr, self.mid.data.ptr, self.out.data.ptr
        rec["n"], rec["consumer_blocks"] = self.n, self.consumer_blocks
        rec["arrivals"], rec["observed"] = self.control.data.ptr, self.control.data.ptr + 4
        rec["times"], rec["timeout_ns"] = self.times.data.ptr, timeout_ns
        return rec.tobytes()

    def reset(self) -> None:
        """Poison the buffers and clear the flags (on CuPy's stream, then wait for the device: the
        pair's stream is non-blocking and would not wait for the fills). Only between runs: every
        run ends in ``outcome``, which waits for the pair's stream first."""
        self.mid.fill(POISON)
        self.out.fill(-1)
        self.control.fill(0)
        self.times.set(np.array([0, np.iinfo(np.uint64).max], dtype=np.uint64))  # latest end, earliest start
        synchronize_device()

    def steps(self, consumer: str, timeout_ns: int) -> list:
        """The pair as a two-link cuadv.pdl chain (the consumer gets the PDL attribute when the chain has it)."""
        params = self.params(timeout_ns)
        return [(self.producer, LaunchConfig(grid=DEMO_PRODUCER_BLOCKS, block=THREADS), (params,)),
                (self.consumers[consumer], LaunchConfig(grid=self.consumer_blocks, block=THREADS), (params,))]

    def enqueue(self, consumer: str, pdl: bool, timeout_ns: int) -> None:
        launch_chain(self.steps(consumer, timeout_ns), pdl=pdl, stream=self.stream)

    def outcome(self, consumer: str, pdl: bool) -> DemoOutcome:
        synchronize(self.stream)
        out = readback(self.out).astype(np.int64)
        observed = int(readback(self.control)[1])
        t_end, t_start = (int(t) for t in readback(self.times))
        overlap = t_end - t_start if t_start != np.iinfo(np.uint64).max and t_end else None
        return DemoOutcome(consumer, pdl, self.n, DEMO_PRODUCER_BLOCKS, observed,
                           right=int((out == self.expected).sum()), stale=int((out == 2 * POISON).sum()),
                           overlap_ns=overlap)

    def run(self, consumer: str, pdl: bool, timeout_ns: int) -> DemoOutcome:
        self.reset()
        self.enqueue(consumer, pdl, timeout_ns)
        return self.outcome(consumer, pdl)

    def run_in_graph(self, consumer: str, pdl: bool, timeout_ns: int) -> tuple[DemoOutcome, dict | None]:
        """The same pair captured into a CUDA graph (launched on a stream first, as it always was)."""
        self.run(consumer, pdl, timeout_ns)
        with prepare_chain(self.steps(consumer, timeout_ns), pdl=pdl, graph=True) as graph:
            edges = graph.edge_types()
            self.reset()
            graph.launch(self.stream)
            return self.outcome(consumer, pdl), edges


def check_demo(o: DemoOutcome) -> str | None:
    """What is wrong with a demo outcome, or None. The guaranteed facts only:
    the correct consumer is always right; without PDL the grids never overlap and every output is
    right; when they overlapped the misplaced consumer read nothing but poison."""
    if not o.pdl and o.observed != 0:
        return f"without the PDL attribute {o.observed} producer blocks saw the consumer start early"
    if (o.consumer == "correct" or not o.pdl) and not o.all_right:
        return f"{o.n - o.right} of {o.n} outputs are wrong ({o.consumer} consumer, pdl={o.pdl})"
    if o.consumer == "misplaced" and o.pdl and o.overlapped and not o.all_stale:
        return f"the grids overlapped yet only {o.stale} of {o.n} outputs are stale"
    return None
