"""Memory sync domains without a GPU: the kernels compile, the parameter layouts, the checks."""

from dataclasses import dataclass

import pytest

from cuadv.compiler import kernel_source
from cuadv.errors import LaunchConfigError
from cuadv.labs.domains import FENCE_DTYPE, WRITER_DTYPE, DomainsLab, build_module, check_domain, check_scope
from cuadv.launch import LaunchConfig


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_kernels_compile(arch):
    module = build_module(arch)
    assert {"dom_fence", "dom_writer"} <= set(module.resources)


def test_fence_scopes_reach_the_ptx():
    ptx = build_module("sm_90a").ptx
    assert "fence.sc.gpu" in ptx or "membar.gl" in ptx
    assert "fence.sc.sys" in ptx or "membar.sys" in ptx


def test_layouts():
    assert WRITER_DTYPE.itemsize == 48 and FENCE_DTYPE.itemsize == 64


def test_checks():
    check_domain(None)
    check_domain("remote")
    check_scope(2)
    with pytest.raises(LaunchConfigError, match="'default' or 'remote'"):
        check_domain("far")
    with pytest.raises(LaunchConfigError, match="fence scope must be 0"):
        check_scope(3)
    with pytest.raises(LaunchConfigError, match="memory sync domain must be 'default' or 'remote'"):
        LaunchConfig(grid=1, block=32, mem_sync_domain="peer")


@dataclass
class Caps:
    compute_capability: tuple = (9, 0)
    mem_sync_domain_count: int = 4

    def cc_string(self):
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"


def test_supported():
    assert DomainsLab().supported(Caps()) is None
    assert "2 or more domains (this GPU has 1)" in DomainsLab().supported(Caps(mem_sync_domain_count=1))
    assert "compute capability >= 9.0 (got 8.0)" in DomainsLab().supported(Caps(compute_capability=(8, 0)))


def test_every_fence_and_barrier_is_commented():
    for line in kernel_source("domains.cu").splitlines():
        if "__syncthreads()" in line or "__threadfence" in line:
            assert "//" in line, line
