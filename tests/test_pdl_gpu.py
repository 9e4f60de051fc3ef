"""PDL on the GPU: the misplaced wait gives wrong results (deterministically), the correct wait never
does, no overlap without the attribute, the chain is exact in streams and graphs, and the
programmatic dependency survives stream capture."""

import numpy as np
import pytest

from cuadv import current_device
from cuadv.labs.pdl import AFTER_WAIT, MODES, OFF, PDL_MODES, Chain, PdlDemo, build_module, check_demo

pytestmark = pytest.mark.gpu

WITH_PDL_TIMEOUT = 1_000_000_000  # the producer waits up to 1 s for the consumer to start early
WITHOUT_PDL_TIMEOUT = 2_000_000


@pytest.fixture(scope="module")
def module():
    caps = current_device().caps
    if caps.compute_capability < (9, 0):
        pytest.skip("PDL needs compute capability 9.0")
    return build_module(caps.arch)


@pytest.fixture
def stream(cp):
    return cp.cuda.Stream(non_blocking=True)


@pytest.mark.parametrize("n", [1, 255, 4099])
def test_misplaced_wait_reads_stale_data(module, stream, n):
    """PDL permits an early start and does not promise one, but with the kernels loaded and room beside the
    producer the H200 starts the consumer early every time; three tries allow for other tests' kernels
    (pytest-xdist) holding the SMs for a whole second."""
    demo = PdlDemo(module, n, stream)
    for _ in range(3):
        o = demo.run("misplaced", True, WITH_PDL_TIMEOUT)
        if o.overlapped:
            break
    assert o.overlapped, (f"the consumer never started early ({o.observed} of {o.producer_blocks} producer blocks "
                          "saw it)")
    assert o.all_stale, f"only {o.stale} of {n} outputs are stale"
    assert o.overlap_ns is not None and o.overlap_ns > 0


@pytest.mark.parametrize("n", [1, 255, 4099])
def test_correct_wait_is_right_with_and_without_pdl(module, stream, n):
    demo = PdlDemo(module, n, stream)
    for pdl in (True, False):
        o = demo.run("correct", pdl, WITH_PDL_TIMEOUT if pdl else WITHOUT_PDL_TIMEOUT)
        assert check_demo(o) is None
        assert o.all_right


def test_no_overlap_without_the_attribute(module, stream):
    demo = PdlDemo(module, 1000, stream)
    for consumer in ("misplaced", "correct"):
        o = demo.run(consumer, False, WITHOUT_PDL_TIMEOUT)
        assert o.observed == 0, "a consumer block started before the producer finished"
        assert o.all_right
        assert o.overlap_ns is None or o.overlap_ns <= 0


def test_pdl_survives_stream_capture(module, stream):
    demo = PdlDemo(module, 4099, stream)
    o, edges = demo.run_in_graph("misplaced", True, WITH_PDL_TIMEOUT)
    assert o.overlapped and o.all_stale, "captured into a graph the PDL pair no longer overlapped"
    if edges is not None:
        assert edges["programmatic"] == 1
    o, _ = demo.run_in_graph("correct", True, WITH_PDL_TIMEOUT)
    assert o.all_right


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.key)
@pytest.mark.parametrize("setup", [0, 2000])
def test_chain_is_exact(module, stream, mode, setup):
    caps = current_device().caps
    chain = Chain(module, caps, stream, n=caps.sm_count * 256 * 2 + 7)
    chain.reset()
    chain.enqueue(20, mode.pdl, mode.trigger, setup)
    chain.check(20)
    samples, runs = chain.time_stream(10, mode.pdl, mode.trigger, setup, repeats=2)
    assert len(samples) >= 1 and min(samples) > 0
    chain.check(20 + 10 * runs)


@pytest.mark.parametrize("path", ["stream", "graph"])
def test_time_modes_checks_every_mode(module, stream, path):
    """Every mode timed, in turns over two rounds; time_modes itself checks the chain's result after all of them."""
    caps = current_device().caps
    chain = Chain(module, caps, stream, n=caps.sm_count * 256 + 3)
    us = chain.time_modes(path, 6, 0, repeats=2, rounds=2)
    assert set(us) == set(MODES) and all(v > 0 for v in us.values())
    if path == "graph" and chain.graph_edges[AFTER_WAIT] is not None:  # what the lab reports as the chain's edges
        assert chain.graph_edges[AFTER_WAIT]["programmatic"] == 5 and chain.graph_edges[OFF]["programmatic"] == 0


@pytest.mark.parametrize("mode", PDL_MODES, ids=lambda m: m.key)
def test_chain_in_a_graph(module, stream, mode):
    caps = current_device().caps
    chain = Chain(module, caps, stream)
    chain.reset()
    with chain.capture(16, mode.pdl, mode.trigger, 0) as graph:
        edges = graph.edge_types()
        for _ in range(3):
            graph.launch(stream)
        chain.check(2 + 3 * 16)
    if edges is not None:
        assert edges["programmatic"] == 15
    with chain.capture(16, False, 0, 0) as graph:
        edges = graph.edge_types()
        graph.launch(stream)
        chain.check(2 + 3 * 16 + 2 + 16)
    if edges is not None:
        assert edges["programmatic"] == 0


def test_smoke_and_quick_run(tmp_path):
    from cuadv.labs.base import RunContext
    from cuadv.labs.pdl import PdlLab
    from cuadv.timing import copy_ceiling

    lab = PdlLab()
    lab.smoke()
    caps = current_device().caps
    result = lab.run(RunContext(out_dir=tmp_path, quick=True, caps=caps, ceiling=copy_ceiling(1 << 28, repeats=3)))
    assert result.tables and result.plots and result.selection
    assert (tmp_path / result.plots[0]).exists()
    assert np.isfinite(result.figures["pdl_saved_us_per_boundary_graph_setup0ns"])


@pytest.mark.parametrize("graph", [False, True])
def test_boundary_gaps_are_measured(module, stream, graph):
    """Every boundary's next link starts its dependent part after the previous link's last block (PDL or not:
    griddepcontrol.wait returns only after the previous grid completed), and the chain stays exact."""
    caps = current_device().caps
    chain = Chain(module, caps, stream, n=caps.sm_count * 256 + 5)
    for m in MODES:
        gaps = chain.boundary_gaps(12, m.pdl, m.trigger, graph=graph)
        assert gaps.shape == (11,) and (gaps >= 0).all(), (m.label, gaps)
        chain.check(12 + (2 if graph else 0))
