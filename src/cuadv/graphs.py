"""CUDA graphs through the driver: stream capture, instantiation (also for device launch), upload,
launch, and a look at the captured edges (programmatic dependencies from PDL launches).

Anything cuadv's ``launch`` enqueues on a capturing stream becomes a kernel node. Launch each
kernel once with the same configuration before capturing: the first launch of a configuration runs
device queries that a capture in global mode would refuse (this module captures in relaxed mode).

Example::

    graph = Graph.capture(stream, lambda: [launch(k, cfg, x, stream=stream) for _ in range(100)])
    graph.launch(stream)

Why the driver and not cuda.core's GraphBuilder: the launches captured here go through
``cuLaunchKernelEx`` with attributes cuda.core's launch cannot set (priority, memory sync domain,
access-policy window), captures must be relaxed (see above), graphs may be instantiated for device
launch, and the edge types of a captured graph are read back (PDL's programmatic edges).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from ._cuda import check, driver
from .interop import stream_handle


class Graph:
    """A captured graph and its executable instance. ``device_launch=True`` instantiates it for
    launch from device code (``cudaGraphLaunch`` in a kernel); ``exec_handle`` is then what the
    kernel receives as its ``cudaGraphExec_t``."""

    def __init__(self, graph, graph_exec, device_launch: bool):
        self.graph = graph
        self.exec = graph_exec
        self.device_launch = device_launch

    @classmethod
    def capture(cls, stream: Any, enqueue: Callable[[], Any], *, device_launch: bool = False) -> "Graph":
        """Capture what ``enqueue()`` puts on ``stream`` (not the legacy default stream) and instantiate it."""
        drv = driver()
        handle = stream_handle(stream)
        if handle == 0:
            raise ValueError("stream capture needs a created stream, not the legacy default stream (0)")
        h = drv.CUstream(handle)
        check(drv.cuStreamBeginCapture(h, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
              "cuStreamBeginCapture")
        try:
            enqueue()
        except BaseException:
            status, graph = drv.cuStreamEndCapture(h)  # leave the stream usable; the partial graph is dropped
            if int(status) == 0 and graph is not None:
                drv.cuGraphDestroy(graph)
            raise
        graph = check(drv.cuStreamEndCapture(h), "cuStreamEndCapture")
        flags = int(drv.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) if device_launch else 0
        try:
            graph_exec = check(drv.cuGraphInstantiate(graph, flags),
                               "cuGraphInstantiate" + (" (device launch)" if device_launch else ""))
        except BaseException:
            drv.cuGraphDestroy(graph)
            raise
        return cls(graph, graph_exec, device_launch)

    @property
    def exec_handle(self) -> int:
        """The CUgraphExec as an integer (a kernel's cudaGraphExec_t parameter)."""
        return int(self.exec)

    def upload(self, stream: Any) -> None:
        """Give the graph its device resources now (required before a device-side launch)."""
        drv = driver()
        check(drv.cuGraphUpload(self.exec, drv.CUstream(stream_handle(stream))), "cuGraphUpload")

    def launch(self, stream: Any) -> None:
        drv = driver()
        check(drv.cuGraphLaunch(self.exec, drv.CUstream(stream_handle(stream))), "cuGraphLaunch")

    def node_count(self) -> int:
        _nodes, count = check(driver().cuGraphGetNodes(self.graph, 0), "cuGraphGetNodes")
        return int(count)

    def edge_types(self) -> dict[str, int] | None:
        """Edges by dependency type ({'default': n, 'programmatic': m}); None if the driver cannot say.

        A launch captured with the PDL attribute after a kernel becomes a programmatic edge, which
        is what lets a graph overlap the two kernels as a stream does.
        """
        drv = driver()
        try:
            *_, count = check(drv.cuGraphGetEdges(self.graph, 0), "cuGraphGetEdges")
            count = int(count)
            if count == 0:
                return {"default": 0, "programmatic": 0}
            _from, _to, data, count = check(drv.cuGraphGetEdges(self.graph, count), "cuGraphGetEdges")
            programmatic = int(drv.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
            kinds = Counter("programmatic" if int(d.type) == programmatic else "default"
                            for d in list(data)[:int(count)])
        except Exception:  # older drivers or bindings: the edge data is optional information
            return None
        return {"default": kinds.get("default", 0), "programmatic": kinds.get("programmatic", 0)}

    def close(self) -> None:
        drv = driver()
        if self.exec is not None:
            drv.cuGraphExecDestroy(self.exec)
            self.exec = None
        if self.graph is not None:
            drv.cuGraphDestroy(self.graph)
            self.graph = None

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
