"""Bounded host waits without a GPU: the polling loop against a fake query and a fake clock, the
timeout's sources (argument, scope, CUADV_TIMEOUT_S, default), the error's message, and what the
process does at exit after a timeout."""

import math
import threading

import pytest

from cuadv import waiting
from cuadv.errors import CudaDriverError, CuadvError, GpuTimeoutError


class FakeClock:
    """Time that passes when the loop sleeps, and a microsecond per reading (a poll's cost)."""

    def __init__(self):
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        self.now += 1e-6
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def ready_after(polls: int):
    calls = []

    def done() -> bool:
        calls.append(1)
        return len(calls) > polls
    return done, calls


SPIN_POLLS = round(waiting.SPIN_S / 1e-6)  # polls in the spin phase, a microsecond each on the fake clock


@pytest.mark.parametrize("polls", [0, 1, 5, SPIN_POLLS - 100, SPIN_POLLS + 1000, SPIN_POLLS + 2000])
def test_wait_returns_once_the_query_is_ready(polls):
    t = FakeClock()
    done, calls = ready_after(polls)
    waiting.wait_until(done, "kernel k", timeout_s=10, clock=t.clock, sleep=t.sleep)
    assert len(calls) == polls + 1 and len(t.sleeps) == polls
    spun = [s for s in t.sleeps if s == 0]  # the first SPIN_S (a microsecond a poll): polls that only yield
    assert t.sleeps[:len(spun)] == spun
    assert len(spun) == (polls if polls < SPIN_POLLS - 50 else pytest.approx(SPIN_POLLS, abs=2))
    slept = t.sleeps[len(spun):]
    assert slept == sorted(slept)  # then the pause between polls grows ...
    assert all(s <= waiting.LONGEST_PAUSE_S for s in slept)  # ... up to a bound
    if slept:
        assert slept[0] == waiting.FIRST_PAUSE_S


def test_a_query_that_never_turns_ready_raises_naming_the_work_and_the_timeout():
    t = FakeClock()
    with pytest.raises(GpuTimeoutError) as info:
        waiting.wait_until(lambda: False, "kernel spin_forever", timeout_s=1.5, clock=t.clock, sleep=t.sleep)
    assert t.now - 100.0 == pytest.approx(1.5, abs=1e-5)  # the last sleep stops at the deadline, not past it
    err = info.value
    assert isinstance(err, CuadvError) and err.what == "kernel spin_forever" and err.timeout_s == 1.5
    msg = str(err)
    assert msg.startswith("kernel spin_forever did not finish within the timeout of 1.5 s")
    assert "still busy" in msg and "end the process" in msg and "CUADV_TIMEOUT_S" in msg and "timeout_s=" in msg


def test_ready_at_the_deadline_is_not_a_timeout():
    """The query is asked once more after the last sleep, which ends at the deadline."""
    t = FakeClock()
    waiting.wait_until(lambda: t.now >= 100.01 - 1e-9, "k", timeout_s=0.01, clock=t.clock, sleep=t.sleep)


def test_real_clock_short_timeout():
    with pytest.raises(GpuTimeoutError, match=r"the probe did not finish within the timeout of 0.05 s"):
        waiting.wait_until(lambda: False, "the probe", timeout_s=0.05)


def test_the_error_names_the_activity_of_the_enclosing_scope():
    t = FakeClock()
    with waiting.scope(activity="lab histogram") as current:
        current.activity = "lab histogram: 256 bins"  # the runner's progress updates it
        with pytest.raises(GpuTimeoutError, match=r"^the copy \(during lab histogram: 256 bins\) did not finish"):
            waiting.wait_until(lambda: False, "the copy", timeout_s=1, clock=t.clock, sleep=t.sleep)
    with pytest.raises(GpuTimeoutError) as info:  # outside the scope: no activity
        waiting.wait_until(lambda: False, "the copy", timeout_s=1, clock=t.clock, sleep=t.sleep)
    assert info.value.activity is None and "during" not in str(info.value)


def test_timeout_sources_in_order(monkeypatch):
    monkeypatch.delenv(waiting.TIMEOUT_ENV, raising=False)
    assert waiting.resolve_timeout() == waiting.DEFAULT_TIMEOUT_S == 60.0
    monkeypatch.setenv(waiting.TIMEOUT_ENV, " 2.5 ")
    assert waiting.resolve_timeout() == 2.5
    monkeypatch.setenv(waiting.TIMEOUT_ENV, "inf")
    assert waiting.resolve_timeout() == math.inf
    with waiting.scope(timeout_s=7):
        assert waiting.resolve_timeout() == 7.0  # the scope's before the environment's
        assert waiting.resolve_timeout(0.25) == 0.25  # the argument before both
        with waiting.scope(activity="inner"):  # a scope without a timeout keeps the environment's
            assert waiting.resolve_timeout() == math.inf
    assert waiting.resolve_timeout() == math.inf


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan", "1s"])
def test_a_bad_environment_value_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv(waiting.TIMEOUT_ENV, raw)
    with pytest.raises(ValueError, match=rf"CUADV_TIMEOUT_S must be a number of seconds > 0 \(inf: no limit\), "
                                         rf"got '{raw}'"):
        waiting.resolve_timeout()


@pytest.mark.parametrize("value", [0, -0.5, math.nan, True, "5"])
def test_a_bad_timeout_argument_names_the_argument(value):
    with pytest.raises(ValueError, match=r"timeout_s must be a number of seconds > 0"):
        waiting.resolve_timeout(value)
    with pytest.raises(ValueError, match=r"timeout_s must be a number of seconds > 0"):
        with waiting.scope(timeout_s=value):
            pass


def test_driver_query_results():
    """NOT_READY is 'not yet', SUCCESS is 'done', any other status raises as a synchronize would."""
    from cuda.bindings import driver as drv

    results = iter([(drv.CUresult.CUDA_ERROR_NOT_READY,), (drv.CUresult.CUDA_SUCCESS,),
                    (drv.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,)])
    done = waiting._ready(lambda: next(results), "cuStreamQuery")
    assert done() is False
    assert done() is True
    with pytest.raises(CudaDriverError, match="cuStreamQuery failed: .*ILLEGAL_ADDRESS"):
        done()


def _sync_driver(monkeypatch, release: dict, result: str = "ok"):
    """A driver whose cuCtxSynchronize of a context returns once release[context] is set."""
    from cuda.bindings import driver as drv

    current = threading.local()

    class Driver:
        def cuCtxSetCurrent(self, context):
            current.context = context
            return (drv.CUresult.CUDA_SUCCESS,)

        def cuCtxSynchronize(self):
            release[current.context].wait(5)
            ok = result == "ok"
            return (drv.CUresult.CUDA_SUCCESS if ok else drv.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,)

    monkeypatch.setattr(waiting, "driver", Driver)


def test_exit_after_a_timeout_ends_the_process_only_while_a_timed_out_context_is_busy(monkeypatch, capsys):
    exits = []
    monkeypatch.setattr(waiting.os, "_exit", exits.append)
    monkeypatch.setattr(waiting, "EXIT_GRACE_S", 0.05)
    monkeypatch.setattr(waiting, "_watches", {})
    release = {1: threading.Event(), 2: threading.Event()}
    _sync_driver(monkeypatch, release)
    waiting._watch_until_idle(1)
    waiting._watch_until_idle(2)  # a second GPU's context timed out too
    release[1].set()
    waiting._end_if_still_busy()
    assert exits == [waiting.EXIT_STATUS] == [1]  # context 2 is still busy
    err = capsys.readouterr().err
    assert "GPU work that timed out is still running" in err and "status 1" in err

    exits.clear()
    release[2].set()
    waiting._end_if_still_busy()
    assert exits == []  # both idle: the usual teardown follows
    monkeypatch.setattr(waiting, "_watches", {})
    waiting._end_if_still_busy()
    assert exits == [1]  # no context known (the timeout could not start its watch): cannot tell, so ended


def test_where_no_thread_may_start_at_exit_the_watches_of_the_timeouts_answer(monkeypatch):
    """Python 3.12.0 to 3.12.2 refuse a new thread in an exit handler; the old check's refused thread fell through to
    the teardown that waits for ever. The watches started at the timeouts answer instead."""
    exits = []
    monkeypatch.setattr(waiting.os, "_exit", exits.append)
    monkeypatch.setattr(waiting, "EXIT_GRACE_S", 0.05)
    monkeypatch.setattr(waiting, "_watches", {})
    release = {7: threading.Event()}
    _sync_driver(monkeypatch, release)
    waiting._watch_until_idle(7)

    def refused(*args, **kwargs):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(waiting.threading.Thread, "start", refused)
    waiting._end_if_still_busy()
    assert exits == [1]
    exits.clear()
    release[7].set()
    waiting._end_if_still_busy()
    assert exits == []


@pytest.mark.parametrize("sync_result", ["ok", "fault"])
def test_one_watch_per_context_set_when_the_context_drains_or_fails(monkeypatch, sync_result):
    monkeypatch.setattr(waiting, "_watches", {})
    release = {5: threading.Event()}
    _sync_driver(monkeypatch, release, sync_result)
    started = []
    real_sync = waiting._context_sync
    monkeypatch.setattr(waiting, "_context_sync", lambda c, name: started.append(c) or real_sync(c, name))
    for _ in range(3):  # a loop of timed-out waits on one context: one blocked thread, not three
        waiting._watch_until_idle(5)
    (context, idle), = waiting._watches.values()
    assert started == [5] and context == 5 and not idle.wait(0.05)  # the work still runs
    release[5].set()
    assert idle.wait(5)
    waiting._watch_until_idle(5)  # that watch has ended: a later timeout starts another
    assert started == [5, 5]


def test_events_of_each_library_are_told_from_streams():
    from cuda.bindings import driver as drv

    class Event:  # as cuda.core's (handle) and CuPy's (ptr) name theirs
        def __init__(self, **fields):
            self.__dict__.update(fields)

    assert int(waiting._event(Event(handle=0x1230))) == 0x1230
    assert int(waiting._event(Event(ptr=0x4560))) == 0x4560
    raw = drv.CUevent(0x7890)
    assert waiting._event(raw) is raw
    assert waiting._event(None) is None and waiting._event(0) is None  # streams: the current one, the legacy one


def test_a_torch_event_is_an_event_and_another_event_class_is_refused():
    """torch names its event's handle cuda_event (0 until its first record: nothing to wait for); a threading.Event
    is no CUDA event: TypeError, not an AttributeError from inside cuadv."""
    import threading

    class Event:  # as torch.cuda.Event names its handle
        def __init__(self, cuda_event):
            self.cuda_event = cuda_event

    assert int(waiting._event(Event(0xABC0))) == 0xABC0
    assert waiting._event(Event(0)) is waiting._NEVER_RECORDED
    waiting.wait(Event(0))  # returns at once: no GPU needed
    with pytest.raises(TypeError, match=r"cannot wait for a threading.Event: it names no CUDA event"):
        waiting.wait(threading.Event())


def test_event_done_takes_what_wait_takes_and_refuses_a_stream(monkeypatch):
    """Every library's event and a bare handle reach one cuEventQuery; a never-recorded torch Event is done; a
    stream or a threading.Event is refused with TypeError before any query."""
    import threading

    from cuda.bindings import driver as drv

    queried = []
    fake = type("driver", (), {"CUevent": drv.CUevent, "CUresult": drv.CUresult,
                               "cuEventQuery": staticmethod(lambda e: queried.append(int(e)) or
                                                            (drv.CUresult.CUDA_SUCCESS,))})
    monkeypatch.setattr(waiting, "driver", lambda: fake)

    class Event:  # as cuda.core (handle), CuPy (ptr) and torch (cuda_event) name their handles
        def __init__(self, **fields):
            self.__dict__.update(fields)

    assert waiting.event_done(Event(handle=0x10)) and waiting.event_done(Event(ptr=0x20))
    assert waiting.event_done(Event(cuda_event=0x30)) and waiting.event_done(0x40)
    assert waiting.event_done(Event(cuda_event=0))  # never recorded: nothing to wait for
    assert queried == [0x10, 0x20, 0x30, 0x40]
    with pytest.raises(TypeError, match="event_done takes a CUevent"):
        waiting.event_done(None)
    with pytest.raises(TypeError, match="names no CUDA event"):
        waiting.event_done(threading.Event())
    assert queried == [0x10, 0x20, 0x30, 0x40]


def test_a_device_generic_torch_event_is_an_event_on_cuda_only():
    """torch.Event (device-generic, torch >= 2.4) names its handle event_id (0 until its first record); one made for
    another device than CUDA names no CUDA event: TypeError saying so."""
    class Event:  # as torch.Event names its handle and device
        def __init__(self, event_id, device="cuda"):
            self.event_id, self.device = event_id, type("device", (), {"type": device})()

    assert int(waiting._event(Event(0xABC0))) == 0xABC0
    assert waiting._event(Event(0)) is waiting._NEVER_RECORDED
    waiting.wait(Event(0))  # returns at once: no GPU needed
    with pytest.raises(TypeError, match=r"Event of device 'cpu': it names no CUDA event; make it with device='cuda'"):
        waiting.wait(Event(0, device="cpu"))


def test_numpy_numbers_are_timeouts():
    import numpy as np

    assert waiting.resolve_timeout(np.float32(0.5)) == 0.5 and waiting.resolve_timeout(np.int64(3)) == 3.0
    with waiting.scope(timeout_s=np.float64(2.0)):
        assert waiting.resolve_timeout() == 2.0
    with pytest.raises(ValueError, match=r"timeout_s must be a number of seconds > 0"):
        waiting.resolve_timeout(np.int64(0))


def test_after_a_timeout_device_memory_is_not_freed(monkeypatch):
    """Freeing synchronizes: after a timeout it could wait for the timed-out work for ever, so it is skipped."""
    from cuadv import memory

    freed = []
    monkeypatch.setattr(memory, "driver", lambda: type("Driver", (), {"cuMemFree": staticmethod(freed.append)}))
    monkeypatch.setattr(memory, "timed_out", lambda: False)
    memory.free(0x1000)
    monkeypatch.setattr(memory, "timed_out", lambda: True)
    memory.free(0x2000)
    assert freed == [0x1000]


def test_the_first_timeout_arms_the_exit_check_once_and_each_starts_a_watch(monkeypatch):
    registered, watched = [], []
    monkeypatch.setattr(waiting, "_timed_out", waiting.threading.Lock())
    monkeypatch.setattr(waiting.atexit, "register", lambda fn, *args: registered.append((fn, args)))
    monkeypatch.setattr(waiting, "_current_context", lambda: "context")
    monkeypatch.setattr(waiting, "_watch_until_idle", watched.append)
    assert not waiting.timed_out()
    waiting._guarded(lambda: None)  # a wait that ends arms nothing
    assert not registered and not watched
    for _ in range(2):
        with pytest.raises(GpuTimeoutError):
            waiting._guarded(lambda: waiting.wait_until(lambda: False, "k", timeout_s=0.01))
    assert waiting.timed_out() and registered == [(waiting._end_if_still_busy, ())]
    assert watched == ["context", "context"]


def test_a_watch_that_cannot_start_leaves_the_timeout_the_error_and_stops_the_frees(monkeypatch):
    registered = []
    monkeypatch.setattr(waiting, "_timed_out", waiting.threading.Lock())
    monkeypatch.setattr(waiting.atexit, "register", lambda fn, *args: registered.append(fn))
    monkeypatch.setattr(waiting, "_current_context", lambda: "context")

    def no_thread(context):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(waiting, "_watch_until_idle", no_thread)
    with pytest.raises(GpuTimeoutError):
        waiting._guarded(lambda: waiting.wait_until(lambda: False, "k", timeout_s=0.01))
    assert waiting.timed_out() and registered == [waiting._end_if_still_busy]


def test_a_copy_to_the_host_waits_bounded_then_copies_on_the_stream(monkeypatch):
    """The copy waits for its stream (bounded) first and runs on that stream: a synchronous copy on the legacy
    stream would also wait, without a bound, for every blocking stream."""
    import ctypes

    import numpy as np

    from cuadv import memory

    calls = []

    def copy_async(dst, src, nbytes, stream):
        np.frombuffer((ctypes.c_char * nbytes).from_address(dst), dtype=np.uint8)[:] = 7
        calls.append(("cuMemcpyDtoHAsync", src, nbytes, stream))
        return (0,)

    fake = type("Driver", (), {"cuMemcpyDtoHAsync": staticmethod(copy_async)})
    monkeypatch.setattr(memory, "driver", lambda: fake)
    monkeypatch.setattr(memory, "check", lambda result, call: result[0])
    monkeypatch.setattr(memory, "wait", lambda stream, what=None: calls.append(("wait", stream, what)))
    out = memory.copy_to_host(0xABC0, 8, np.uint32, 0x51, "kernel k")
    assert out.dtype == np.uint32 and out.tolist() == [0x07070707] * 2
    assert calls == [("wait", 0x51, "kernel k"), ("cuMemcpyDtoHAsync", 0xABC0, 8, 0x51),
                     ("wait", 0x51, "the copy to the host after kernel k")]

    from cuadv.errors import GpuTimeoutError

    def timed_out(stream, what=None):
        if what.startswith("the copy"):
            raise GpuTimeoutError(what, 1.0)

    monkeypatch.setattr(memory, "wait", timed_out)
    monkeypatch.setattr(memory, "_LANDING", landing := [])
    with pytest.raises(GpuTimeoutError):
        memory.copy_to_host(0xABC0, 8, np.uint32, 0x51, "kernel k")
    assert len(landing) == 1 and landing[0].nbytes == 8  # the copy may land yet: its array is never freed


@pytest.mark.parametrize("nbytes, repeats, message", [
    (8, 20, r"nbytes \(bytes read, a multiple of 16\) must be an int >= 16, got 8"),
    (1000, 20, r"must be a multiple of 16, got 1000"),
    (1.5e9, 20, r"must be an int >= 16"),
    (1 << 20, 0, r"repeats \(timed runs; the median needs one\) must be an int >= 1, got 0"),
])
def test_the_read_ceiling_refuses_a_bad_size_before_the_gpu(monkeypatch, nbytes, repeats, message):
    from cuadv import device, timing

    monkeypatch.setattr(device, "current_device", lambda: pytest.fail("reached the GPU"))
    with pytest.raises(ValueError, match=message):
        timing.read_ceiling(nbytes, repeats)


def test_the_copy_ceiling_frees_its_source_when_the_second_buffer_fails(monkeypatch):
    """copy_ceiling allocates two buffers of 2 GiB: where the second allocation fails (out of memory) the first is
    freed before the error reaches the caller."""
    from cuadv import device, timing

    class Driver:
        def cuMemAlloc(self, nbytes):
            self.allocs = getattr(self, "allocs", 0) + 1
            return (0, 0xA000) if self.allocs == 1 else (2, None)  # CUDA_ERROR_OUT_OF_MEMORY the second time

    freed = []
    monkeypatch.setattr(device, "current_device", lambda: None)
    monkeypatch.setattr(timing, "driver", Driver)
    monkeypatch.setattr(timing, "check", lambda result, what: result[1] if result[0] == 0 else
                        (_ for _ in ()).throw(CudaDriverError(f"{what} failed: out of memory")))
    monkeypatch.setattr(timing, "free", freed.append)
    monkeypatch.setattr(timing, "_ceiling", None)
    with pytest.raises(CudaDriverError, match="cuMemAlloc failed"):
        timing.copy_ceiling(1 << 31)
    assert freed == [0xA000]


def test_a_copy_from_the_host_waits_bounded_first(monkeypatch):
    """A synchronous copy from pageable memory synchronizes the legacy stream without a bound: a bounded wait for
    that stream comes first, so work that never ends raises GpuTimeoutError instead of hanging the upload."""
    import numpy as np

    from cuadv import memory

    calls = []
    fake = type("Driver", (), {"cuMemcpyHtoD": staticmethod(lambda dst, src, n: calls.append(("copy", dst, n))
                                                           or (0,))})
    monkeypatch.setattr(memory, "driver", lambda: fake)
    monkeypatch.setattr(memory, "check", lambda result, call: result[0])
    monkeypatch.setattr(memory, "wait", lambda stream, what=None: calls.append(("wait", stream)))
    buffer = object.__new__(memory.DeviceBuffer)
    buffer.ptr, buffer.nbytes = 0xD000, 16
    buffer.from_host(np.arange(4, dtype=np.uint32))
    assert calls == [("wait", 0), ("copy", 0xD000, 16)]

    def hung(stream, what=None):
        raise GpuTimeoutError(what, 1.0)

    calls.clear()
    monkeypatch.setattr(memory, "wait", hung)
    with pytest.raises(GpuTimeoutError):
        buffer.from_host(np.arange(4, dtype=np.uint32))
    assert calls == []  # nothing reached the copy
    buffer.ptr = 0  # the fake buffer frees nothing


@pytest.mark.parametrize("raw, ordinal", [(None, 0), ("", 0), (" 1 ", 1), ("3", 3)])
def test_the_device_ordinal_from_the_environment(monkeypatch, raw, ordinal):
    from cuadv import device

    if raw is None:
        monkeypatch.delenv("CUADV_DEVICE", raising=False)
    else:
        monkeypatch.setenv("CUADV_DEVICE", raw)
    assert device.device_ordinal() == ordinal


@pytest.mark.parametrize("raw", ["gpu1", "1.5", "cuda:0"])
def test_a_bad_device_ordinal_names_the_variable(monkeypatch, raw):
    from cuadv import device

    monkeypatch.setenv("CUADV_DEVICE", raw)
    with pytest.raises(ValueError, match=rf"CUADV_DEVICE must be a device ordinal \(an integer: 0, 1, ...\), "
                                         rf"got '{raw}'"):
        device.device_ordinal()


def test_a_wait_for_a_stream_being_captured_refuses_before_querying_it(monkeypatch):
    """cuStreamQuery on a stream being captured into a CUDA graph fails and invalidates the capture: wait() raises
    UnsupportedFeatureError naming the stream and the way out, and queries nothing; a stream not captured is
    queried until its work is done."""
    from cuadv import _cuda
    from cuadv.errors import UnsupportedFeatureError

    queried = []

    class Driver:  # the real bindings' types; stream queries recorded
        def __getattr__(self, name):
            return getattr(_cuda.driver(), name)

        def cuStreamQuery(self, stream):
            queried.append(int(stream))
            return (_cuda.driver().CUresult.CUDA_SUCCESS,)

    monkeypatch.setattr(waiting, "driver", Driver)
    monkeypatch.setattr(waiting, "init_driver", lambda: None)
    monkeypatch.setattr(waiting, "capturing", lambda stream: stream == 0x99)
    with pytest.raises(UnsupportedFeatureError, match=r"waiting for the graph's inputs needs .* stream 0x99 being "
                                                      r"captured into a CUDA graph\).*wait for the graph's replay"):
        waiting.wait(0x99, what="the graph's inputs")
    assert queried == []
    waiting.wait(0x7)
    assert queried == [0x7]
