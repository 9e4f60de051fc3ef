"""cuadv.l2.persist without a GPU: every bad input is refused before the driver is reached (fake
capabilities), naming the argument, the value and the limit, or the fallback where the GPU has no
persisting L2."""

from dataclasses import dataclass

import numpy as np
import pytest

import cuadv.l2 as l2
from cuadv.errors import KernelArgumentError, LaunchConfigError, UnsupportedFeatureError

MiB = 1 << 20


@dataclass
class Caps:
    compute_capability: tuple = (9, 0)
    persisting_l2_max_bytes: int = 39_321_600
    access_policy_max_window_bytes: int = 134_213_632


@pytest.fixture(autouse=True)
def no_driver(monkeypatch):
    """Any driver call fails the test: persist() must check everything before it touches the GPU."""
    def forbidden(*args, **kwargs):
        raise AssertionError("persist() reached the driver")

    monkeypatch.setattr(l2, "driver", forbidden)


def test_a_valid_request_only_describes_the_window():
    p = l2.persist(0x10000, 32 * MiB, stream=7, caps=Caps())
    assert (p.ptr, p.nbytes, p.stream, p.requested_set_aside) == (0x10000, 32 * MiB, 7, 39_321_600)
    assert not p.active and p.window is None
    p = l2.persist(0x10000, 4096, hit_ratio=0.5, set_aside=MiB, stream=7, caps={"persisting_l2_max_bytes": 2 * MiB,
                                                                               "access_policy_max_window_bytes": MiB})
    assert p.requested_hit_ratio == 0.5 and p.requested_set_aside == MiB


@pytest.mark.parametrize("caps", [Caps(persisting_l2_max_bytes=0), {"persisting_l2_max_bytes": 0}])
def test_no_persisting_l2_names_the_fallback(caps):
    with pytest.raises(UnsupportedFeatureError) as info:
        l2.persist(0x10000, 4096, stream=7, caps=caps)
    text = str(info.value)
    assert "L2 persistence" in text and "not MIG" in text and "0 B persisting L2" in text
    assert "plain caching" in text


def test_window_over_the_device_maximum_names_the_limit():
    with pytest.raises(LaunchConfigError, match="access-policy window of 134213633 B exceeds the maximum window "
                                                "134213632 B"):
        l2.persist(0x10000, 134_213_633, stream=7, caps=Caps())


def test_set_aside_outside_the_device_maximum():
    with pytest.raises(LaunchConfigError, match=r"set-aside of 39321601 B is outside \[0, 39321600\]"):
        l2.persist(0x10000, 4096, set_aside=39_321_601, stream=7, caps=Caps())
    with pytest.raises(LaunchConfigError, match=r"set-aside of -1 B is outside"):
        l2.persist(0x10000, 4096, set_aside=-1, stream=7, caps=Caps())
    with pytest.raises(LaunchConfigError, match="set_aside must be an int"):
        l2.persist(0x10000, 4096, set_aside=1.5, stream=7, caps=Caps())


@pytest.mark.parametrize("ratio", [-0.1, 1.5, float("nan"), "1"])
def test_hit_ratio_outside_0_1(ratio):
    with pytest.raises(LaunchConfigError, match=r"hit_ratio must be in \[0, 1\]"):
        l2.persist(0x10000, 4096, hit_ratio=ratio, stream=7, caps=Caps())


@pytest.mark.parametrize("nbytes", [0, -4, 2.5, True])
def test_nbytes_must_be_a_positive_int(nbytes):
    with pytest.raises(LaunchConfigError, match="nbytes must be a positive int"):
        l2.persist(0x10000, nbytes, stream=7, caps=Caps())


def test_an_address_needs_nbytes_and_must_be_positive():
    with pytest.raises(LaunchConfigError, match="needs nbytes"):
        l2.persist(0x10000, stream=7, caps=Caps())
    with pytest.raises(LaunchConfigError, match="must be positive, got 0"):
        l2.persist(0, 4096, stream=7, caps=Caps())


def test_host_arrays_are_refused():
    with pytest.raises(KernelArgumentError):
        l2.persist(np.zeros(16, np.float32), stream=7, caps=Caps())


class _FakeDeviceArray:
    """A device array by the CUDA Array Interface (no memory behind it: persist only reads the description)."""

    def __init__(self, ptr, n, shape=None, strides=None):
        self.__cuda_array_interface__ = {"shape": shape or (n,), "typestr": "<f4", "data": (ptr, False),
                                         "version": 3, "strides": strides, "stream": None}


@pytest.mark.parametrize("shape, strides, window", [
    ((100, 30), (512, 4), (0x20000, 99 * 512 + 30 * 4)),  # pitched rows: the padding between them is inside
    ((64, 8), (4, 256), (0x20000, 63 * 4 + 7 * 256 + 4)),  # a transposed view
    ((10,), (-4,), (0x20000 - 36, 40)),  # a reversed view starts below its pointer
])
def test_a_strided_array_window_covers_every_element(shape, strides, window):
    p = l2.persist(_FakeDeviceArray(0x20000, 0, shape, strides), stream=7, caps=Caps())
    assert (p.ptr, p.nbytes) == window


def test_array_window_defaults_to_the_whole_array_and_stays_inside_it():
    p = l2.persist(_FakeDeviceArray(0x20000, 1024), stream=7, caps=Caps())
    assert (p.ptr, p.nbytes) == (0x20000, 4096)
    assert l2.persist(_FakeDeviceArray(0x20000, 1024), 1000, stream=7, caps=Caps()).nbytes == 1000
    with pytest.raises(LaunchConfigError, match="nbytes = 4097 exceeds the array's 4096 B"):
        l2.persist(_FakeDeviceArray(0x20000, 1024), 4097, stream=7, caps=Caps())


def test_default_window_ratio_fills_the_set_aside():
    assert l2.hit_ratio_for(39_321_600, 80 * MiB) == pytest.approx(0.46875)


def _fake_gpu(monkeypatch, wait_error=None, reset_error=None):
    """persist()'s driver calls recorded on fakes: the set-aside, the stream window, the reset and the wait."""
    calls, limit = [], {"bytes": 100}

    def set_set_aside(nbytes, caps=None):
        limit["bytes"] = nbytes
        calls.append(("set_aside", nbytes))
        return nbytes

    def reset():
        calls.append(("reset",))
        if reset_error is not None:
            raise reset_error

    def wait(*args, **kwargs):
        if wait_error is not None:
            raise wait_error

    class Driver:
        class CUlimit:
            CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 1

        def cuCtxSetLimit(self, _limit, value):
            limit["bytes"] = value
            calls.append(("restore", value))
            return (0,)

    monkeypatch.setattr(l2, "get_set_aside", lambda: limit["bytes"])
    monkeypatch.setattr(l2, "set_set_aside", set_set_aside)
    monkeypatch.setattr(l2, "set_stream_window",
                        lambda stream, w, caps=None: calls.append(("window", stream,
                                                                   None if w is None else w.num_bytes)))
    monkeypatch.setattr(l2, "reset_persisting_lines", reset)
    monkeypatch.setattr(l2, "wait", wait)
    monkeypatch.setattr(l2, "driver", Driver)
    monkeypatch.setattr(l2, "capturing", lambda stream: stream == 0x99)  # 0x99: a stream being captured
    return calls, limit


@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("the wait for the stream failed")])
def test_exit_clears_the_window_and_restores_even_when_the_wait_raises(monkeypatch, error):
    """A wait that raises on exit (a timeout, Ctrl-C, a failed kernel) must not leave the window on the stream."""
    calls, limit = _fake_gpu(monkeypatch, wait_error=error)
    p = l2.persist(0x10000, 4096, stream=7, caps=Caps())
    with pytest.raises(type(error)):
        with p:
            assert p.active and calls == [("set_aside", 39_321_600), ("window", 7, 4096)]
    assert calls[2:] == [("window", 7, None), ("reset",), ("restore", 100)]
    assert limit["bytes"] == 100 and not p.active and p.window is None and p.set_aside == 0


def test_an_active_block_entered_again_raises_before_touching_the_gpu(monkeypatch):
    """The README's one refusal outside (CuadvError, ValueError, TypeError): a persist() block is not re-entrant."""
    calls, limit = _fake_gpu(monkeypatch)
    p = l2.persist(0x10000, 4096, stream=7, caps=Caps())
    with p:
        before = list(calls)
        with pytest.raises(RuntimeError, match="already active; make another persist"):
            p.__enter__()
        assert calls == before and p.active
    assert not p.active and limit["bytes"] == 100


def test_the_previous_set_aside_comes_back_even_when_the_reset_raises(monkeypatch):
    calls, limit = _fake_gpu(monkeypatch, reset_error=RuntimeError("reset failed"))
    with pytest.raises(RuntimeError, match="reset failed"):
        with l2.persist(0x10000, 4096, stream=7, caps=Caps()):
            pass
    assert calls[-2:] == [("reset",), ("restore", 100)] and limit["bytes"] == 100
    with pytest.raises(RuntimeError, match="reset failed"):
        with l2.SetAside(MiB, Caps()):
            pass
    assert calls[-2:] == [("reset",), ("restore", 100)] and limit["bytes"] == 100


def test_a_persist_block_on_a_stream_being_captured_is_refused_before_any_driver_call(monkeypatch):
    """The set-aside, the window and the exit's wait act when the block is entered and left, which no graph replay
    repeats (and the wait would invalidate the capture): UnsupportedFeatureError naming the way out, nothing done."""
    calls, limit = _fake_gpu(monkeypatch)
    p = l2.persist(0x10000, 4096, stream=0x99, caps=Caps())
    with pytest.raises(UnsupportedFeatureError, match=r"persist\(\) needs a stream that runs its work .* a stream "
                                                      r"being captured into a CUDA graph.*SetAside.*access_policy"):
        with p:
            pass
    assert calls == [] and limit["bytes"] == 100 and not p.active
