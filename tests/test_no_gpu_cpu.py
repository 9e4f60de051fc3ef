"""Without a usable GPU every public call that reaches the CUDA driver raises NoGpuError with one clear line, not
the driver loader's error from its first driver call (README, Errors). Skipped where a GPU is present."""

import pytest

import cuadv
from cuadv import domains, l2
from cuadv.errors import NoGpuError
from cuadv.waiting import wait_device

from gpu_presence import GPU_REASON

pytestmark = pytest.mark.skipif(GPU_REASON is None, reason="a GPU is present: these calls would reach it")


@pytest.mark.parametrize("call", [
    lambda: cuadv.wait(),
    lambda: cuadv.wait(0),
    lambda: wait_device(),
    lambda: cuadv.time_gpu(lambda: None),
    lambda: l2.get_set_aside(),
    lambda: l2.reset_persisting_lines(),
    lambda: l2.get_stream_window(0),
    lambda: l2.set_stream_window(0, None, caps=object()),
    lambda: domains.stream_domain(0),
    lambda: domains.set_stream_domain(0, "remote"),
], ids=["wait", "wait(0)", "wait_device", "time_gpu", "get_set_aside", "reset_persisting_lines",
        "get_stream_window", "set_stream_window", "stream_domain", "set_stream_domain"])
def test_no_gpu_raises_no_gpu_error(call):
    with pytest.raises(NoGpuError, match="^no CUDA GPU"):
        call()
