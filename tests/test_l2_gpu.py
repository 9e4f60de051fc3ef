"""L2 persistence on the GPU: exact results with and without windows, per launch and per stream;
the set-aside is set, granted and put back; the stream window is cleared. cuadv.l2.persist: the window
is on the stream inside the block (stream=None: the current stream of the array's library) and gone
after it; a kernel's results are the same with and without it."""

import numpy as np
import pytest

from cuadv import current_device
from cuadv.errors import LaunchConfigError
from cuadv.l2 import (SetAside, get_set_aside, get_stream_window, persist, reset_persisting_lines, set_stream_window,
                      unsupported_reason)
from cuadv.labs.l2 import Lookup, build_module, reference, validate_small
from cuadv.timing import synchronize

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def caps():
    caps = current_device().caps
    reason = unsupported_reason(caps)
    if reason:
        pytest.skip(reason)
    return caps


@pytest.fixture(scope="module")
def module(caps):
    return build_module(caps.arch)


@pytest.fixture
def stream(cp):
    return cp.cuda.Stream(non_blocking=True)


def test_set_aside_is_granted_and_restored(caps):
    before = get_set_aside()
    with SetAside(caps.persisting_l2_max_bytes, caps) as granted:
        assert 0 < granted <= caps.persisting_l2_max_bytes
        assert get_set_aside() == granted
    assert get_set_aside() == before


def test_results_are_exact_with_and_without_windows(caps, module, stream):
    with SetAside(caps.persisting_l2_max_bytes, caps):
        validate_small(module, caps, stream)


def test_stream_window_gives_the_same_result(cp, caps, module, stream):
    with SetAside(caps.persisting_l2_max_bytes, caps) as granted:
        run = Lookup(module, caps, stream, 50_001, 3_000_017, seed=5)
        want = reference(cp.asnumpy(run.inp).reshape(-1, 4), cp.asnumpy(run.table), 2, run.seed).ravel()
        set_stream_window(stream, run.window(min(1.0, granted / run.table.nbytes)), caps)
        try:
            run.out.fill(np.float32(np.nan))
            cp.cuda.Device().synchronize()
            run.launch(2)
            synchronize(stream)
        finally:
            set_stream_window(stream, None, caps)
        reset_persisting_lines()
        assert np.array_equal(cp.asnumpy(run.out), want)


def test_smoke():
    from cuadv.labs.l2 import L2Lab

    L2Lab().smoke()


# -- cuadv.l2.persist ------------------------------------------------------------------------

def test_window_inside_cleared_after_results_unchanged(cp, caps, module):
    stream = cp.cuda.Stream(non_blocking=True)
    run = Lookup(module, caps, stream, 50_001, 3_000_017, seed=9)
    want = reference(cp.asnumpy(run.inp).reshape(-1, 4), cp.asnumpy(run.table), 2, run.seed).ravel()
    before = get_set_aside()
    with stream:  # stream=None: CuPy's current stream, this non-blocking one
        with persist(run.table) as p:
            window = get_stream_window(stream)
            assert p.stream == stream.ptr and p.window == window
            assert (window.base_ptr, window.num_bytes) == (run.table.data.ptr, run.table.nbytes)
            assert window.hit == "persisting" and window.miss == "streaming"
            assert window.hit_ratio == pytest.approx(min(1.0, p.set_aside / run.table.nbytes), rel=1e-6)
            assert 0 < p.set_aside == get_set_aside() <= caps.persisting_l2_max_bytes
            run.out.fill(np.float32(np.nan))
            run.launch(2)  # no per-launch window: the stream's
    assert get_stream_window(stream) is None and not p.active
    assert get_set_aside() == before
    synchronize(stream)
    assert np.array_equal(cp.asnumpy(run.out), want)


def test_part_of_an_array_and_an_explicit_ratio(cp, caps):
    stream = cp.cuda.Stream(non_blocking=True)
    x = cp.zeros(1 << 20, dtype=cp.float32)
    with persist(x, 4096, hit_ratio=0.25, set_aside=1 << 20, stream=stream) as p:
        w = get_stream_window(stream)
        assert (w.num_bytes, w.hit_ratio) == (4096, 0.25) and p.set_aside >= 1 << 20
    assert get_stream_window(stream) is None


def test_window_over_the_maximum_is_refused_before_the_gpu(cp, caps):
    stream = cp.cuda.Stream(non_blocking=True)
    before = get_set_aside()
    x = cp.zeros(1, dtype=cp.float32)
    with pytest.raises(LaunchConfigError, match=f"maximum window {caps.access_policy_max_window_bytes} B"):
        persist(x.data.ptr, caps.access_policy_max_window_bytes + 1, stream=stream)
    assert get_set_aside() == before and get_stream_window(stream) is None


def test_an_exception_inside_still_puts_everything_back(cp, caps):
    stream = cp.cuda.Stream(non_blocking=True)
    before = get_set_aside()
    x = cp.zeros(1 << 16, dtype=cp.float32)
    with pytest.raises(RuntimeError, match="inside"):
        with persist(x, stream=stream):
            raise RuntimeError("inside")
    assert get_stream_window(stream) is None and get_set_aside() == before


def test_torch_side_stream(caps):
    torch = pytest.importorskip("torch")
    x = torch.arange(1 << 16, dtype=torch.float32, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        with persist(x) as p:  # stream=None: torch's current stream, the side stream
            assert p.stream == side.cuda_stream
            w = get_stream_window(side.cuda_stream)
            assert (w.base_ptr, w.num_bytes) == (x.data_ptr(), x.numel() * 4)
            y = x * 2
    assert get_stream_window(side.cuda_stream) is None
    torch.cuda.synchronize()
    assert torch.equal(y, torch.arange(1 << 16, dtype=torch.float32, device="cuda") * 2)
