"""Memory sync domains without a GPU: the kernels compile, the parameter layouts, the checks."""

from dataclasses import dataclass

import pytest

from cuadv.compiler import kernel_source
from cuadv.errors import LaunchConfigError
from cuadv.labs.domains import FENCE_DTYPE, WRITER_DTYPE, DomainsLab, build_module, check_domain, check_scope
from cuadv.launching import LaunchConfig


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


# -- the library module cuadv.domains ----------------------------------------------------------------

def test_domain_names_are_those_launch_config_takes():
    from cuadv.domains import DOMAINS

    assert DOMAINS == ("default", "remote")
    for d in DOMAINS:
        assert LaunchConfig(grid=1, block=32, mem_sync_domain=d).mem_sync_domain == d


def test_why_not_reads_caps_objects_and_dicts():
    from cuadv.domains import why_not

    assert why_not(Caps()) is None
    assert why_not({"compute_capability": [9, 0], "mem_sync_domain_count": 4}) is None
    one = why_not({"compute_capability": (9, 0), "mem_sync_domain_count": 1})
    assert "2 or more domains (this GPU has 1)" in one and "fallback: launch in the default domain" in one
    assert "compute capability >= 9.0 (got 8.6)" in why_not(Caps(compute_capability=(8, 6), mem_sync_domain_count=1))
    assert DomainsLab().supported(Caps(mem_sync_domain_count=1)) == why_not(Caps(mem_sync_domain_count=1))


def test_registry_line_names_the_fallback():
    from cuadv.domains import registry_reason

    assert registry_reason({"mem_sync_domain_count": 4}) is None
    assert "fallback: the default domain" in registry_reason({"mem_sync_domain_count": 1})


def test_stream_domain_names_are_checked_before_the_driver(monkeypatch):
    import cuadv.domains as domains

    monkeypatch.setattr(domains, "driver", lambda: (_ for _ in ()).throw(AssertionError("reached the driver")))
    with pytest.raises(LaunchConfigError, match="memory sync domain must be 'default' or 'remote', got 'peer'"):
        domains.set_stream_domain(0, "peer")
    with pytest.raises(LaunchConfigError, match="got None"):
        with domains.in_domain(0, None):
            pass


def test_stream_domains_on_a_gpu_with_one_domain(monkeypatch):
    """'remote' raises naming the capability and the fallback; 'default' is what every launch gets already, so it
    sets nothing; and a stream's domain reads 'default'. None of it reaches the driver."""
    from types import SimpleNamespace

    import cuadv.device as device
    import cuadv.domains as domains
    from bad_input.runtime_fakes import AMPERE  # the bad-input corpus's fakes (pytest puts tests/ on the path)
    from cuadv.errors import UnsupportedFeatureError

    monkeypatch.setattr(device, "current_device", lambda: SimpleNamespace(caps=AMPERE))
    monkeypatch.setattr(domains, "ready_driver", lambda: pytest.fail("reached the driver"))
    with pytest.raises(UnsupportedFeatureError, match="memory sync domains.*fallback: launch in the default domain"):
        domains.set_stream_domain(7, "remote")
    with pytest.raises(UnsupportedFeatureError, match="fallback: launch in the default domain"):
        with domains.in_domain(7, "remote"):
            pytest.fail("entered the block")
    domains.set_stream_domain(7, "default")
    with domains.in_domain(7, "default"):
        assert domains.stream_domain(7) == "default"


def test_in_domain_with_stream_none_restores_the_stream_it_set(monkeypatch):
    """stream=None is the stream current on entry: that stream gets its previous domain back on exit, even where
    the block makes another stream current (CuPy's Stream.use()), which in_domain must leave alone."""
    from enum import Enum
    from types import SimpleNamespace

    import cuadv.domains as domains
    import cuadv.interop as interop

    class Domain(Enum):
        CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT = 0
        CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE = 1

    attrs, current = {}, {"stream": 100}

    class Driver:  # the stream attribute calls, on a dict
        CUlaunchMemSyncDomain = Domain
        CUstreamAttrID = SimpleNamespace(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN="MEM_SYNC_DOMAIN")
        CUstreamAttrValue = SimpleNamespace

        @staticmethod
        def CUstream(handle):
            return int(handle)

        @staticmethod
        def cuStreamSetAttribute(stream, attr, value):
            attrs[stream] = value.memSyncDomain
            return (0,)

        @staticmethod
        def cuStreamGetAttribute(stream, attr):
            return 0, SimpleNamespace(memSyncDomain=attrs.get(stream, Domain.CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT))

    monkeypatch.setattr(domains, "driver", Driver)
    monkeypatch.setattr(domains, "ready_driver", Driver)
    monkeypatch.setattr(domains, "_features", lambda: {"compute_capability": (9, 0), "mem_sync_domain_count": 4})
    monkeypatch.setattr(interop, "current_stream", lambda *like: current["stream"])
    with domains.in_domain(None, "remote"):
        assert domains.stream_domain(100) == "remote"
        current["stream"] = 200  # another stream becomes current inside the block
    assert domains.stream_domain(100) == "default" and 200 not in attrs
