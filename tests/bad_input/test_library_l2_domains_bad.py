"""cuadv.l2.persist and cuadv.domains: each mistake (a hit ratio, address, size or set-aside of the wrong kind or out
of range, a window over the device's maximum, an unknown domain, something that is no stream) raises, naming the
argument, the value and the limit, before the driver is reached. The cases of tests/test_l2_api_cpu.py and
tests/test_domains_cpu.py are not repeated here."""

import numpy as np
import pytest

import cuadv.domains as domains
import cuadv.l2 as l2
from cuadv.errors import KernelArgumentError, LaunchConfigError

from .library_fakes import H200, FakeArray, forbid


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    forbid(monkeypatch, l2, "driver")
    forbid(monkeypatch, domains, "driver")


@pytest.mark.parametrize("target, kwargs, error, text", [
    (0x10000, dict(nbytes=4096, hit_ratio=True), LaunchConfigError, r"hit_ratio must be in \[0, 1\], got True"),
    (0x10000, dict(nbytes=4096, hit_ratio=float("inf")), LaunchConfigError, r"hit_ratio must be in \[0, 1\], got inf"),
    (-4096, dict(nbytes=4096), LaunchConfigError, "a device address must be positive, got -4096"),
    (4096.0, dict(nbytes=4096), KernelArgumentError, "cannot use float as a device array"),
    (True, dict(nbytes=4096), KernelArgumentError, "cannot use bool as a device array"),
    (0x10000, dict(nbytes="4096"), LaunchConfigError, "nbytes must be a positive int .*got '4096'"),
    (0x10000, dict(nbytes=4096, set_aside="1MB"), LaunchConfigError, "set_aside must be an int number of bytes, got "
                                                                     "'1MB'"),
    (0x10000, dict(nbytes=4096, stream="s"), KernelArgumentError, "cannot use str as a stream"),
    (FakeArray((1 << 26,), "<f4"), {}, LaunchConfigError, "access-policy window of 268435456 B exceeds the maximum "
                                                          "window 134213632 B"),  # the whole array by default
    (FakeArray((1024,), "<f4"), dict(nbytes=0), LaunchConfigError, "nbytes must be a positive int .*got 0"),
])
def test_persist_mistakes(target, kwargs, error, text):
    with pytest.raises(error, match=text):
        l2.persist(target, caps=H200, **kwargs)


def test_persist_takes_numpy_byte_counts():
    """Not a mistake: NumPy's nbytes is a NumPy integer."""
    p = l2.persist(0x10000, np.int64(4096), set_aside=np.int64(1 << 20), stream=7, caps=H200)
    assert (p.nbytes, p.requested_set_aside) == (4096, 1 << 20)


@pytest.mark.parametrize("call, error, text", [
    (lambda: domains.set_stream_domain(0, "Remote"), LaunchConfigError, "memory sync domain must be 'default' or "
                                                                        "'remote', got 'Remote'"),
    (lambda: domains.set_stream_domain(0, ""), LaunchConfigError, "got ''"),
    (lambda: domains.set_stream_domain(0, ["remote"]), LaunchConfigError, r"got \['remote'\]"),
    (lambda: domains.set_stream_domain("stream", "remote"), KernelArgumentError, "cannot use str as a stream"),
    (lambda: domains.in_domain(0, 1).__enter__(), LaunchConfigError, "got 1"),
    (lambda: domains.in_domain(2.5, "remote").__enter__(), KernelArgumentError, "cannot use float as a stream"),
])
def test_domain_mistakes(call, error, text):
    with pytest.raises(error, match=text):
        call()
