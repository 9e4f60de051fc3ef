"""L2 persistence without a GPU: the kernel compiles, the NumPy hash mirrors the kernel's, the
checks that run before any driver call, and the messages where persistence is unavailable."""

from dataclasses import dataclass

import numpy as np
import pytest

from cuadv.errors import LaunchConfigError
from cuadv.l2 import hit_ratio_for, set_set_aside, set_stream_window, unsupported_reason
from cuadv.labs.l2 import (MAX_LOOKUPS, PARAMS_DTYPE, L2Lab, build_module, check_lookup_args, mix32, reference,
                           table_indices)
from cuadv.launching import AccessPolicyWindow

MiB = 1 << 20


@dataclass
class Caps:
    compute_capability: tuple = (9, 0)
    persisting_l2_max_bytes: int = 39_321_600
    access_policy_max_window_bytes: int = 134_213_632

    def cc_string(self):
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_kernel_compiles(arch):
    module = build_module(arch)
    assert "l2_lookup_stream" in module.resources


def _mix32_python(x: int) -> int:
    m = 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & m
    x ^= x >> 15
    x = (x * 0x846CA68B) & m
    x ^= x >> 16
    return x


def test_numpy_mixer_matches_integer_arithmetic():
    keys = np.array([0, 1, 2, 12345, 0xFFFFFFFF, 0x80000000], dtype=np.uint32)
    assert mix32(keys).tolist() == [_mix32_python(int(k)) for k in keys]


def test_indices_stay_in_the_table_and_spread():
    for length in (1, 7, 1000, 20_971_520):
        idx = table_indices(100_000, 3, 99, length)
        assert idx.min() >= 0 and idx.max() < length
    idx = table_indices(1 << 20, 0, 7, 1024)
    counts = np.bincount(idx, minlength=1024)
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()


def test_reference_sums_in_kernel_order():
    inp = np.arange(8, dtype=np.float32).reshape(2, 4)
    table = np.array([10.0], dtype=np.float32)
    assert np.array_equal(reference(inp, table, 3, 0), inp + 30.0)


def test_params_layout():
    assert PARAMS_DTYPE.itemsize == 48


def test_lookup_argument_checks():
    check_lookup_args(0, 1, 1)
    with pytest.raises(LaunchConfigError, match=r"streamed float4 count 536870912 is outside \[0, 536870912\)"):
        check_lookup_args(1 << 29, 1, 1)
    with pytest.raises(LaunchConfigError, match="table length 0"):
        check_lookup_args(1, 0, 1)
    with pytest.raises(LaunchConfigError, match=f"lookups per float4 must be in \\[1, {MAX_LOOKUPS}\\], got 9"):
        check_lookup_args(1, 1, 9)


def test_hit_ratio_fills_the_set_aside():
    assert hit_ratio_for(30 * MiB, 15 * MiB) == 1.0
    assert hit_ratio_for(40 * MiB, 80 * MiB) == 0.5
    assert hit_ratio_for(1, 0) == 0.0


def test_unavailable_under_mig_names_the_reason_and_fallback():
    reason = unsupported_reason(Caps(persisting_l2_max_bytes=0))
    assert "persisting-L2 maximum is 0 B" in reason and "MIG" in reason and "fallback" in reason
    assert "compute capability >= 8.0 (got 7.5)" in unsupported_reason(Caps(compute_capability=(7, 5)))
    assert unsupported_reason(Caps()) is None
    assert L2Lab().supported(Caps(persisting_l2_max_bytes=0)) == reason


def test_set_aside_and_window_limits_are_checked_before_the_driver():
    caps = Caps()
    with pytest.raises(LaunchConfigError, match=r"set-aside of 39321601 B is outside \[0, 39321600\]"):
        set_set_aside(39_321_601, caps)
    with pytest.raises(LaunchConfigError, match="exceeds the maximum window 134213632 B"):
        set_stream_window(0, AccessPolicyWindow(0x1000, 134_213_633), caps)
    with pytest.raises(TypeError, match="set-aside must be an int number of bytes, got str '1M'"):
        set_set_aside("1M", caps)
    for bad in (1.5, True):
        with pytest.raises(TypeError, match="set-aside must be an int number of bytes"):
            set_set_aside(bad, caps)
    with pytest.raises(TypeError, match=r"window must be a cuadv.AccessPolicyWindow or None, got tuple"):
        set_stream_window(0, (0x1000, 4096), caps)


def test_a_set_aside_on_a_gpu_without_persisting_l2_names_the_capability_and_the_fallback(monkeypatch):
    import cuadv.l2 as l2
    from cuadv.errors import UnsupportedFeatureError

    monkeypatch.setattr(l2, "ready_driver", lambda: pytest.fail("reached the driver"))
    with pytest.raises(UnsupportedFeatureError, match=r"an L2 set-aside for persisting accesses needs .*fallback: "
                                                      r"plain caching"):
        set_set_aside(1 << 20, Caps(persisting_l2_max_bytes=0))


def test_persist_takes_an_address_as_a_numpy_integer():
    import numpy as np

    from cuadv.l2 import persist

    window = persist(np.uint64(0x7F00_0000_0000), 4096, caps=Caps(), stream=0)
    assert (window.ptr, window.nbytes) == (0x7F00_0000_0000, 4096) and not window.active
