"""Memory sync domains on the GPU: the fence kernel and the writer run to completion in every
scope and domain, their outputs are complete; the overlap is reported, not asserted."""

import pytest

from cuadv import current_device
from cuadv.errors import UnsupportedFeatureError
from cuadv.labs.domains import CONDITIONS, SCOPES, DomainsLab, FenceExperiment, build_module, peer_destination

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def experiment():
    caps = current_device().caps
    reason = DomainsLab().supported(caps)
    if reason:
        pytest.skip(reason)
    return FenceExperiment(build_module(caps.arch), caps, iterations=32, writer_bytes=64 << 20)


@pytest.mark.parametrize("scope", list(SCOPES.values()))
@pytest.mark.parametrize("domain", list(CONDITIONS.values()))
def test_fence_beside_writer(experiment, scope, domain):
    sample = experiment.run_once(scope, domain)
    assert sample.loop_us >= 0
    if domain is not None:
        assert sample.writer_passes > 0
        experiment.check_writer_output()


def test_peer_style_destination(cp):
    caps = current_device().caps
    if DomainsLab().supported(caps):
        pytest.skip(DomainsLab().supported(caps))
    dst = cp.zeros((8 << 20) // 4, dtype=cp.uint32)
    exp = FenceExperiment(build_module(caps.arch), caps, iterations=8, writer_bytes=dst.nbytes, fence_blocks=2,
                          writer_dst=dst)
    exp.run_once(2, "remote")
    exp.check_writer_output()
    assert int(dst.reshape(-1, 4)[-1, 1]) == dst.size // 4 - 1


def test_writer_into_a_peer_gpu(cp):
    """The seed's case: the writer streams into a second GPU's memory; both kernels complete and
    every element arrives. Needs 2 GPUs with peer access (else the error names what is missing)."""
    caps = current_device().caps
    if DomainsLab().supported(caps):
        pytest.skip(DomainsLab().supported(caps))
    if cp.cuda.runtime.getDeviceCount() < 2:
        with pytest.raises(UnsupportedFeatureError, match="second GPU"):
            peer_destination(1 << 20, caps.ordinal)
        pytest.skip("one GPU: the peer experiment needs two")
    dst = peer_destination(16 << 20, caps.ordinal)
    assert dst.device.id != caps.ordinal
    exp = FenceExperiment(build_module(caps.arch), caps, iterations=8, writer_bytes=dst.nbytes, fence_blocks=2,
                          writer_dst=dst)
    for domain in CONDITIONS.values():
        exp.run_once(2, domain)
    exp.check_writer_output()


def test_smoke():
    DomainsLab().smoke()


def test_stream_domain_round_trip(cp):
    """cuadv.domains: a stream's default domain is set, read back and put back by in_domain; the fence
    kernel launched on that stream still completes with its full output."""
    from cuadv.domains import in_domain, set_stream_domain, stream_domain, why_not

    caps = current_device().caps
    if why_not(caps):
        pytest.skip(why_not(caps))
    stream = cp.cuda.Stream(non_blocking=True)
    assert stream_domain(stream) == "default"
    with in_domain(stream, "remote"):
        assert stream_domain(stream) == "remote"
        exp = FenceExperiment(build_module(caps.arch), caps, iterations=8, writer_bytes=1 << 20, fence_blocks=2)
        exp.fence_stream = stream
        exp.run_once(1, None)  # the fence kernel on that stream; run_once checks every slot
    assert stream_domain(stream) == "default"
    set_stream_domain(stream.ptr, "remote")
    assert stream_domain(stream.ptr) == "remote"
    set_stream_domain(stream, "default")
