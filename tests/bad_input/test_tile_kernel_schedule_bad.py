"""A bad cuadv.Schedule (the scheduler's kernel parameter, built by hand for a kernel of one's own): every field is
checked when it is made, naming the field, not when a launch packs it (where NumPy raised OverflowError) or on the
GPU (a tile grid of 5 packed as 5 x 5 x 5)."""

import pytest

from cuadv import Schedule
from cuadv.errors import LaunchConfigError


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(tiles=0), LaunchConfigError, r"a Schedule takes at least one tile along each axis, got tiles \(0, 1, 1\): a "
                                       r"launch with no tiles must not be made"),
    (dict(tiles=(4, 0)), LaunchConfigError, r"a Schedule takes at least one tile .*got tiles \(4, 0, 1\)"),
    (dict(tiles=-1), LaunchConfigError, r"tile count x = -1 is outside \[0, 2147483647\]"),
    (dict(tiles=2**31), LaunchConfigError, r"tile count x = 2147483648 is outside \[0, 2147483647\]"),
    (dict(tiles=(1, 1, 65536)), LaunchConfigError, r"tile count z = 65536 is outside \[0, 65535\]"),
    (dict(tiles=(1, 2, 3, 4)), LaunchConfigError, r"tiles has 1 to 3 components \(x, y, z\), got 4"),
    (dict(tiles=2.0), LaunchConfigError, r"tiles must be an int or a tuple of 1 to 3 ints \(x, y, z\), got 2\.0"),
    (dict(cluster=0), LaunchConfigError, r"cluster \(0, 1, 1\) must have 1 to 16 blocks"),
    (dict(cluster=(4, 4, 2)), LaunchConfigError, r"cluster \(4, 4, 2\) must have 1 to 16 blocks"),
    (dict(cluster="2"), LaunchConfigError, r"cluster must be an int or a tuple of 1 to 3 ints"),
    (dict(tiles=6, cluster=4), LaunchConfigError, r"cluster dimension x = 4 does not divide tile count x = 6"),
    (dict(quantum_ns=2**64), LaunchConfigError, r"Schedule quantum_ns = 18446744073709551616 is outside "
                                                r"\[0, 18446744073709551615\]"),
    (dict(quantum_ns=-1), LaunchConfigError, r"Schedule quantum_ns = -1 is outside"),
    (dict(quantum_ns=5e4), TypeError, r"Schedule quantum_ns must be an int, got 50000\.0 \(float\)"),
    (dict(prologue_factor=2**32), LaunchConfigError, r"Schedule prologue_factor = 4294967296 is outside "
                                                     r"\[0, 4294967295\]"),
    (dict(min_units=2**32), LaunchConfigError, r"Schedule min_units = 4294967296 is outside \[0, 4294967295\]"),
    (dict(state_ptr=-32), LaunchConfigError, r"Schedule state_ptr = -32 is outside \[0, 18446744073709551615\]"),
    (dict(report_ptr=2**64), LaunchConfigError, r"Schedule report_ptr = 18446744073709551616 is outside"),
    (dict(trace_ptr=None), TypeError, r"Schedule trace_ptr must be an int, got None"),
    (dict(phase=2), LaunchConfigError, r"Schedule phase = 2 is outside \[0, 1\]"),
    (dict(phase=True), TypeError, r"Schedule phase must be an int, got True \(bool\)"),
    (dict(count_exits=1), TypeError, r"Schedule count_exits must be True or False, got 1"),
])
def test_a_schedule_field_breaking_its_rule(kwargs, error, message):
    with pytest.raises(error, match=message):
        Schedule(**{"tiles": 8, "cluster": 1, **kwargs})
