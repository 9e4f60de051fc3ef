"""L2 persistence on the GPU: exact results with and without windows, per launch and per stream;
the set-aside is set, granted and put back; the stream window is cleared."""

import numpy as np
import pytest

from cuadv import current_device
from cuadv.l2 import SetAside, get_set_aside, reset_persisting_lines, set_stream_window, unsupported_reason
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
