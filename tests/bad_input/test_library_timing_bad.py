"""cuadv.time_gpu and copy_ceiling: each mistake (something to time that is not callable, counts that are no
positive int, a queue-ahead that is no finite number of microseconds, something that is no stream) raises, naming
the argument, the value and the rule, before anything is enqueued."""

import pytest

import cuadv
from cuadv import device, timing
from cuadv.errors import KernelArgumentError

from .library_fakes import forbid


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    forbid(monkeypatch, timing, "driver", "queue_ahead")
    forbid(monkeypatch, device, "current_device")


def work():
    raise AssertionError("timed although the arguments are bad")


@pytest.mark.parametrize("fn, kwargs, error, text", [
    (5, {}, TypeError, "fn must be a callable that enqueues the GPU work to time, got int 5"),
    (None, {}, TypeError, "fn must be a callable .*got NoneType None"),
    (work, dict(setup=3), TypeError, "setup must be None or a callable, got int 3"),
    (work, dict(repeats=0), ValueError, r"repeats \(timed runs; the median needs one\) must be an int >= 1, got 0"),
    (work, dict(repeats=2.5), ValueError, "repeats .* must be an int >= 1, got 2.5"),
    (work, dict(warmup=-1), ValueError, "warmup must be an int >= 0, got -1"),
    (work, dict(warmup=True), ValueError, "warmup must be an int >= 0, got True"),
    (work, dict(queue_ahead_us=-1), ValueError, "queue_ahead_us must be a finite number of microseconds >= 0 "
                                                r"\(0: off\), got -1"),
    (work, dict(queue_ahead_us=float("nan")), ValueError, "queue_ahead_us must be .*got nan"),
    (work, dict(queue_ahead_us="150"), ValueError, "queue_ahead_us must be .*got '150'"),
    (work, dict(stream="s", warmup=0), KernelArgumentError, "cannot use str as a stream"),
])
def test_time_gpu_mistakes(fn, kwargs, error, text):
    with pytest.raises(error, match=text):
        cuadv.time_gpu(fn, **kwargs)


@pytest.mark.parametrize("args, error, text", [
    ((0,), ValueError, r"nbytes \(bytes copied\) must be an int >= 1, got 0"),
    ((-1,), ValueError, "got -1"),
    ((1.5e9,), ValueError, "got 1500000000.0"),
    ((1 << 20, 0), ValueError, r"repeats \(timed runs; the median needs one\) must be an int >= 1, got 0"),
])
def test_copy_ceiling_mistakes(args, error, text):
    with pytest.raises(error, match=text):
        cuadv.copy_ceiling(*args)
