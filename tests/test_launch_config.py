"""Pure launch-configuration checks: each names the limit it breaks and the value."""

import pytest

from cuadv.errors import LaunchConfigError
from cuadv.launch import AccessPolicyWindow, LaunchConfig


def test_grid_counts_blocks_and_normalises():
    c = LaunchConfig(grid=(8, 2), block=128, cluster=2)
    assert c.grid == (8, 2, 1) and c.block == (128, 1, 1) and c.cluster == (2, 1, 1)
    assert c.cluster_size == 2 and c.grid_blocks == 16
    assert hash(c) == hash(LaunchConfig(grid=(8, 2, 1), block=(128, 1, 1), cluster=(2, 1, 1)))


@pytest.mark.parametrize("kwargs, message", [
    (dict(grid=1, block=1025), "1025 threads exceeds the limit of 1024"),
    (dict(grid=1, block=(32, 32, 2)), "2048 threads exceeds the limit of 1024"),
    (dict(grid=1, block=(1, 1, 65)), "block dimension z = 65 is outside"),
    (dict(grid=0, block=32), "grid dimension x = 0 is outside"),
    (dict(grid=(1, 65536), block=32), "grid dimension y = 65536 is outside"),
    (dict(grid=10, block=32, cluster=4), "cluster dimension x = 4 does not divide grid dimension x = 10"),
    (dict(grid=(34, 1, 1), block=32, cluster=17), "17 blocks exceeds the largest cluster size 16"),
    (dict(grid=2, block=32, shared_mem=-1), "dynamic shared memory must be >= 0"),
    (dict(grid=2, block=32, mem_sync_domain="far"), "'default' or 'remote'"),
])
def test_invalid_configurations_raise(kwargs, message):
    with pytest.raises(LaunchConfigError, match=message):
        LaunchConfig(**kwargs)


def test_access_policy_window_checks():
    w = AccessPolicyWindow(base_ptr=0x1000, num_bytes=1 << 20, hit_ratio=0.5)
    assert w.hit == "persisting" and w.miss == "streaming"
    with pytest.raises(LaunchConfigError, match=r"hit_ratio must be in \[0, 1\]"):
        AccessPolicyWindow(base_ptr=0, num_bytes=1, hit_ratio=1.5)
    with pytest.raises(LaunchConfigError, match="access property"):
        AccessPolicyWindow(base_ptr=0, num_bytes=1, hit="sticky")


def test_driver_attributes_needed_only_for_extras():
    assert not LaunchConfig(grid=1, block=1, cooperative=True, pdl=True, cluster=1).needs_driver_attributes()
    assert LaunchConfig(grid=1, block=1, priority=-1).needs_driver_attributes()
    assert LaunchConfig(grid=1, block=1, mem_sync_domain="remote").needs_driver_attributes()
