"""cuadv.pdl without a GPU: every bad chain raises before anything is launched (empty chain, a step that
is not a kernel, a wrong argument count, PDL on a GPU without it), and the links' configurations."""

import numpy as np
import pytest

import cuadv.pdl as pdl
from cuadv.errors import KernelArgumentError, LaunchConfigError, UnsupportedFeatureError
from cuadv.kernel import Kernel
from cuadv.launching import LaunchConfig

HOPPER = {"compute_capability": (9, 0), "pdl": True}
AMPERE = {"compute_capability": (8, 6), "pdl": False}


class FakeKernel(Kernel):
    """A Kernel with known parameter sizes and nothing loaded (launching it would fail)."""

    def __init__(self, name="k", sizes=(8, 8, 4)):
        self.name, self.module = name, None  # no module: no declared signature, sizes only
        self.__dict__["param_sizes"] = tuple(sizes)


CFG = LaunchConfig(grid=4, block=128)
ARGS = (np.uint64(0), np.uint64(0), np.uint32(5))


@pytest.fixture
def no_launch(monkeypatch):
    """Any attempt to check a configuration on the GPU (the step before a launch) fails the test."""
    def refuse(*a, **k):
        raise AssertionError("the chain reached prepare() although its input is bad")

    monkeypatch.setattr(pdl, "prepare", refuse)


def test_empty_chain_is_refused(no_launch):
    with pytest.raises(LaunchConfigError, match="at least one step .* got an empty chain"):
        pdl.launch_chain([])
    with pytest.raises(LaunchConfigError, match="empty chain"):
        pdl.prepare_chain((), graph=True)


def test_steps_must_be_a_list(no_launch):
    with pytest.raises(KernelArgumentError, match="steps must be a list"):
        pdl.launch_chain(FakeKernel())


@pytest.mark.parametrize("step, match", [
    (("not a kernel", CFG, ARGS), "step 0: str 'not a kernel' is not a cuadv Kernel"),
    ((FakeKernel(), "cfg", ARGS), r"step 0 \(k\): str 'cfg' is not a cuadv LaunchConfig"),
    ((FakeKernel(), CFG, np.uint32(1)), r"step 0 \(k\): args must be a tuple or list"),
    ((FakeKernel(),), r"step 0: expected \(kernel, LaunchConfig, args\)"),
    (42, r"step 0: expected \(kernel, LaunchConfig, args\), got int 42"),
])
def test_non_kernel_steps_are_refused(no_launch, step, match):
    with pytest.raises(KernelArgumentError, match=match):
        pdl.launch_chain([step])


def test_a_bad_step_later_in_the_chain_names_its_index(no_launch):
    good = (FakeKernel(), CFG, ARGS)
    with pytest.raises(KernelArgumentError, match="step 2: "):
        pdl.launch_chain([good, good, (object(), CFG, ARGS)])


def test_wrong_argument_count_is_refused(no_launch):
    good = (FakeKernel(), CFG, ARGS)
    with pytest.raises(KernelArgumentError, match=r"step 1 \(k2\): the kernel takes 3 arguments, got 2"):
        pdl.launch_chain([good, (FakeKernel("k2"), CFG, ARGS[:2])])


def test_wrong_argument_type_is_refused_before_the_first_link(no_launch):
    good = (FakeKernel(), CFG, ARGS)
    with pytest.raises(KernelArgumentError, match=r"step 1 \(k\): .*NumPy array lives in host memory"):
        pdl.launch_chain([good, (FakeKernel(), CFG, (np.zeros(3), np.uint64(0), np.uint32(1)))])


def test_pdl_on_a_gpu_without_it_names_the_fallback(no_launch, monkeypatch):
    monkeypatch.setattr(pdl, "_caps", lambda: AMPERE)
    with pytest.raises(UnsupportedFeatureError) as info:
        pdl.launch_chain([(FakeKernel(), CFG, ARGS), (FakeKernel(), CFG, ARGS)], pdl=True)
    text = str(info.value)
    assert "needs compute capability >= 9.0 (got 8.6)" in text
    assert "fallback: pdl=False (plain stream order" in text and "pdl='auto'" in text


def test_resolve_pdl():
    assert pdl.resolve_pdl(True, HOPPER) is True
    assert pdl.resolve_pdl(False, AMPERE) is False and pdl.resolve_pdl(False, HOPPER) is False
    assert pdl.resolve_pdl("auto", HOPPER) is True and pdl.resolve_pdl("auto", AMPERE) is False
    with pytest.raises(UnsupportedFeatureError, match="programmatic dependent launch"):
        pdl.resolve_pdl(True, AMPERE)
    for bad in ("yes", 1, None):
        with pytest.raises(ValueError, match="pdl must be True, False or 'auto'"):
            pdl.resolve_pdl(bad, HOPPER)


def test_graph_flag_must_be_a_bool(no_launch, monkeypatch):
    monkeypatch.setattr(pdl, "_caps", lambda: HOPPER)
    with pytest.raises(ValueError, match="graph must be True or False"):
        pdl.launch_chain([(FakeKernel(), CFG, ARGS)], graph="yes")


def test_every_link_after_the_first_gets_the_attribute():
    steps = pdl.as_steps([(FakeKernel(), CFG, ARGS)] * 3 + [pdl.Step(FakeKernel(), CFG.__class__(grid=2, block=32))])
    assert len(steps) == 4 and steps[3].args == ()
    with_pdl = pdl.link_configs(steps, True)
    assert [c.pdl for c in with_pdl] == [False, True, True, True]
    assert with_pdl[1].grid == CFG.grid and with_pdl[3].grid == (2, 1, 1)
    first_pdl = pdl.as_steps([(FakeKernel(), LaunchConfig(grid=1, block=32, pdl=True), ())] * 2)
    assert [c.pdl for c in pdl.link_configs(first_pdl, True)] == [True, True]  # the caller's choice for link 0
    assert [c.pdl for c in pdl.link_configs(first_pdl, False)] == [False, False]  # plain stream order: none


def test_header_documents_trigger_and_wait():
    from cuadv.compiler import kernel_source

    text = kernel_source("pdl.cuh")
    assert "griddepcontrol.launch_dependents" in text and "griddepcontrol.wait" in text
    assert "cuadv.pdl" in text  # points at the Python side


def test_a_graph_chain_called_on_a_stream_being_captured_enqueues_its_links(monkeypatch):
    """A chain prepared with graph=True launches its graph on a stream, but on a stream being captured it enqueues
    its links (kernel nodes with their programmatic edges in the caller's graph) instead of launching a graph into
    the capture."""
    from types import SimpleNamespace

    import cuadv.pdl as pdl

    launched = []

    class Graph:
        exec = object()

        def launch(self, handle):
            launched.append(("graph", handle))

    chain = object.__new__(pdl.Chain)
    chain.graph, chain._like = Graph(), ()
    chain.launchers = tuple(lambda *args, stream, i=i: launched.append(("link", i, stream)) for i in range(2))
    chain.steps = (SimpleNamespace(args=()),) * 2
    monkeypatch.setattr(pdl, "stream_handle", lambda stream, *like: stream)
    monkeypatch.setattr(pdl, "capturing", lambda handle: handle == 9)
    chain(7)
    chain(9)
    assert launched == [("graph", 7), ("link", 0, 9), ("link", 1, 9)]


def test_a_closed_graph_chain_refuses_on_a_capturing_stream_too(monkeypatch):
    from types import SimpleNamespace

    import cuadv.pdl as pdl

    chain = object.__new__(pdl.Chain)
    chain.graph, chain._like = SimpleNamespace(exec=None), ()
    chain.launchers, chain.steps = (), ()
    monkeypatch.setattr(pdl, "stream_handle", lambda stream, *like: stream)
    monkeypatch.setattr(pdl, "capturing", lambda handle: True)
    with pytest.raises(LaunchConfigError, match="this chain's CUDA graph was closed"):
        chain(9)
