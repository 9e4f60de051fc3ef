"""cuadv.pdl chains: each malformed chain (steps that are no list, a step of the wrong shape or types, a pdl or graph
flag of the wrong kind, a stream that is none) raises, naming the step and the rule, before a link is checked on the
GPU or launched. The cases of tests/test_pdl_api_cpu.py are not repeated here."""

import numpy as np
import pytest

import cuadv.pdl as pdl
from cuadv.errors import KernelArgumentError, LaunchConfigError
from cuadv.kernel import Kernel
from cuadv.launching import LaunchConfig

from .library_fakes import H200, forbid

CFG = LaunchConfig(grid=4, block=128)
ARGS = (np.uint64(0), np.uint32(5))


class FakeKernel(Kernel):
    """A Kernel taking (8-byte, 4-byte) parameters, nothing loaded."""

    def __init__(self, name="k"):
        self.name, self.module = name, None  # no module: no declared signature, sizes only
        self.__dict__["param_sizes"] = (8, 4)


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    forbid(monkeypatch, pdl, "prepare", "_caps", "_capture_stream")


@pytest.mark.parametrize("steps, kwargs, error, text", [
    ({"k": (FakeKernel(), CFG, ARGS)}, {}, KernelArgumentError, "steps must be a list of .*got dict"),
    ("kernel", {}, KernelArgumentError, "steps must be a list of .*got str"),
    ([(FakeKernel(), CFG, ARGS, "extra")], {}, KernelArgumentError, r"step 0: expected \(kernel, LaunchConfig, args\), "
                                                                    r"got tuple"),
    ([(FakeKernel(), CFG, {"x": 1})], {}, KernelArgumentError, r"step 0 \(k\): args must be a tuple or list of the "
                                                               r"kernel's arguments, got dict"),
    ([(FakeKernel(), {"grid": 4, "block": 128}, ARGS)], {}, KernelArgumentError,
     r"step 0 \(k\): dict .* is not a cuadv LaunchConfig"),
    ([(FakeKernel(), LaunchConfig, ARGS)], {}, KernelArgumentError,
     r"step 0 \(k\): type .* is not a cuadv LaunchConfig"),
    ([(None, CFG, ARGS)], {}, KernelArgumentError, "step 0: NoneType None is not a cuadv Kernel"),
    ([(FakeKernel(), CFG, ARGS), (FakeKernel("k2"), CFG, ARGS + (1,))], {}, KernelArgumentError,
     r"step 1 \(k2\): the kernel takes 2 arguments, got 3"),
    ([(FakeKernel(), CFG, ARGS)], dict(pdl="on"), ValueError, "pdl must be True, False or 'auto', got 'on'"),
    ([(FakeKernel(), CFG, ARGS)], dict(graph=1), ValueError, "graph must be True or False, got 1"),
    ([], dict(graph=True), LaunchConfigError, "a PDL chain needs at least one step"),
])
def test_chain_mistakes(monkeypatch, steps, kwargs, error, text):
    if "pdl" in kwargs:  # the flag is judged against the GPU's capabilities
        monkeypatch.setattr(pdl, "_caps", H200.as_dict)
    for call in (pdl.launch_chain, pdl.prepare_chain):
        with pytest.raises(error, match=text):
            call(steps, **kwargs)


def test_a_prepared_chain_refuses_what_is_no_stream(monkeypatch):
    launched = []
    monkeypatch.setattr(pdl, "_caps", H200.as_dict)
    monkeypatch.setattr(pdl, "prepare", lambda kernel, config: lambda *a, **k: launched.append(a))
    chain = pdl.prepare_chain([(FakeKernel(), CFG, ARGS)] * 2)
    with pytest.raises(KernelArgumentError, match="cannot use str as a stream"):
        chain(stream="default")
    assert launched == []


def test_an_array_on_another_gpu_in_a_later_link_raises_before_any_link_launches(monkeypatch):
    from .runtime_fakes import DeviceArray

    launched = []
    monkeypatch.setattr(pdl, "_caps", H200.as_dict)  # the chain runs on GPU 0
    monkeypatch.setattr(pdl, "prepare", lambda kernel, config: lambda *a, **k: launched.append(kernel.name))
    steps = [(FakeKernel("k0"), CFG, (DeviceArray(device=0), np.uint32(5))),
             (FakeKernel("k1"), CFG, (DeviceArray(device=1), np.uint32(5)))]
    for call in (pdl.launch_chain, pdl.prepare_chain):
        with pytest.raises(KernelArgumentError,
                           match=r"step 1 \(k1\): argument 0: the array is in the memory of GPU 1"):
            call(steps)
    assert launched == []
