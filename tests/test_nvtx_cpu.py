"""NVTX ranges without a GPU or a profiler: the backend is pluggable, ranges stay balanced."""

import pytest

from cuadv import nvtx


@pytest.fixture
def recorder(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(nvtx, "_calls", lambda: (lambda m: calls.append(f"push {m}"), lambda: calls.append("pop")))
    return calls


def test_annotate_pops_also_when_the_block_raises(recorder):
    with pytest.raises(ValueError):
        with nvtx.annotate("cuadv lab demo"):
            raise ValueError("boom")
    assert recorder == ["push cuadv lab demo", "pop"]


def test_steps_end_the_previous_range(recorder):
    steps = nvtx.Steps()
    steps.step("a")
    steps.step("b")
    steps.close()
    steps.close()  # closing twice pops once
    assert recorder == ["push a", "pop", "push b", "pop"]


def test_without_a_backend_the_calls_do_nothing(monkeypatch):
    monkeypatch.setattr(nvtx, "_calls", lambda: None)
    with nvtx.annotate("nothing"):
        nvtx.push("x")()


def test_a_range_is_closed_by_the_backend_that_opened_it(monkeypatch):
    """A range opened before CuPy or torch was imported (no backend: nothing opened) is not closed by the
    backend found afterwards."""
    calls: list[str] = []
    found = iter([None, (lambda m: calls.append(f"push {m}"), lambda: calls.append("pop"))])
    monkeypatch.setattr(nvtx, "_calls", lambda: next(found))
    with nvtx.annotate("lab"):
        with nvtx.annotate("step"):
            pass
    assert calls == ["push step", "pop"]


def test_a_timed_call_that_raises_still_closes_its_range(recorder, monkeypatch):
    """time_gpu's range around each timed launch is closed when the launch raises (else later ranges nest in it)."""
    from cuadv import timing

    class Events:
        def record_start(self, stream):
            pass

        def record_stop(self, stream):
            pass

    monkeypatch.setattr(timing, "init_driver", lambda: 1)
    monkeypatch.setattr(timing, "synchronize", lambda *args, **kwargs: None)
    monkeypatch.setattr(timing, "EventPair", Events)
    calls = []

    def launch():
        calls.append(1)
        if len(calls) > 1:  # the warm-up call passes, the first timed one raises
            raise RuntimeError("launch failed")

    with pytest.raises(RuntimeError, match="launch failed"):
        timing.time_gpu(launch, stream=0x10, warmup=1, repeats=3, queue_ahead_us=0)
    assert recorder == [f"push cuadv timed {launch.__qualname__}", "pop"]
