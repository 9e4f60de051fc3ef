"""Bad launch configurations: each raises before anything reaches the GPU, naming the argument, the value
and the limit. The device checks run against stand-in capabilities (runtime_fakes), so all of this is CPU."""

import math

import numpy as np
import pytest

from cuadv.errors import KernelArgumentError, LaunchConfigError
from cuadv.launching import AccessPolicyWindow, LaunchConfig, launch, prepare

from .runtime_fakes import HOPPER, DeviceArray, FakeKernel, fake_gpu  # noqa: F401 (fake_gpu is a fixture)


# -- the shape of grid, block and cluster: int, NumPy int or 1 to 3 of them ---------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(grid=2.5, block=32), r"grid must be an int or a tuple of 1 to 3 ints \(x, y, z\), got 2\.5 \(float\)"),
    (dict(grid=True, block=32), r"grid must be an int .*got True \(bool\)"),
    (dict(grid="8", block=32), r"grid must be an int .*got '8' \(str\)"),
    (dict(grid=None, block=32), r"grid must be an int .*got None \(NoneType\)"),
    (dict(grid=(), block=32), r"grid has 1 to 3 components \(x, y, z\), got 0: \(\)"),
    (dict(grid=(1, 2, 3, 4), block=32), r"grid has 1 to 3 components \(x, y, z\), got 4: \(1, 2, 3, 4\)"),
    (dict(grid=(2, 1.5), block=32), r"grid component y must be an int, got 1\.5 \(float\)"),
    (dict(grid=1, block=2.0), r"block must be an int .*got 2\.0 \(float\)"),
    (dict(grid=1, block=[32, "4"]), r"block component y must be an int, got '4' \(str\)"),
    (dict(grid=1, block=np.float32(32)), r"block must be an int .*got np\.float32\(32\.0\) \(float32\)"),
    (dict(grid=2, block=32, cluster=1.5), r"cluster must be an int .*got 1\.5 \(float\)"),
    (dict(grid=2, block=32, cluster=(2, False)), r"cluster component y must be an int, got False \(bool\)"),
])
def test_a_dimension_of_the_wrong_form(kwargs, message):
    with pytest.raises(LaunchConfigError, match=message):
        LaunchConfig(**kwargs)


def test_numpy_integers_are_dimensions():
    config = LaunchConfig(grid=np.int64(8), block=(np.int32(32), np.uint8(2)), cluster=np.int16(2))
    assert config.grid == (8, 1, 1) and config.block == (32, 2, 1) and config.cluster == (2, 1, 1)
    assert all(type(v) is int for v in config.grid + config.block + config.cluster)


# -- every dimension's limit (CUDA Programming Guide, Technical Specifications per Compute Capability) ---
@pytest.mark.parametrize("kwargs, message", [
    (dict(grid=0, block=32), r"grid dimension x = 0 is outside \[1, 2147483647\]"),
    (dict(grid=-1, block=32), r"grid dimension x = -1 is outside \[1, 2147483647\]"),
    (dict(grid=(1, 0), block=32), r"grid dimension y = 0 is outside \[1, 65535\]"),
    (dict(grid=(1, 1, 0), block=32), r"grid dimension z = 0 is outside \[1, 65535\]"),
    (dict(grid=2**31, block=32), r"grid dimension x = 2147483648 is outside \[1, 2147483647\]"),
    (dict(grid=(1, 65536), block=32), r"grid dimension y = 65536 is outside \[1, 65535\]"),
    (dict(grid=(1, 1, 65536), block=32), r"grid dimension z = 65536 is outside \[1, 65535\]"),
    (dict(grid=1, block=0), r"block dimension x = 0 is outside \[1, 1024\]"),
    (dict(grid=1, block=-32), r"block dimension x = -32 is outside \[1, 1024\]"),
    (dict(grid=1, block=(32, 0)), r"block dimension y = 0 is outside \[1, 1024\]"),
    (dict(grid=1, block=(1, 1, 65)), r"block dimension z = 65 is outside \[1, 64\]"),
    (dict(grid=1, block=1025), r"block of 1025 threads exceeds the limit of 1024 threads per block"),
    (dict(grid=1, block=(32, 33)), r"block of 1056 threads exceeds the limit of 1024 threads per block"),
    (dict(grid=1, block=(16, 16, 8)), r"block of 2048 threads exceeds the limit of 1024 threads per block"),
    (dict(grid=2, block=32, cluster=0), r"cluster dimensions must be >= 1, got \(0, 1, 1\)"),
    (dict(grid=2, block=32, cluster=(2, -1)), r"cluster dimensions must be >= 1, got \(2, -1, 1\)"),
    (dict(grid=34, block=32, cluster=17), r"cluster of 17 blocks exceeds the largest cluster size 16"),
    (dict(grid=(4, 4, 2), block=32, cluster=(4, 4, 2)), r"cluster of 32 blocks exceeds the largest cluster size 16"),
    (dict(grid=10, block=32, cluster=4), r"cluster dimension x = 4 does not divide grid dimension x = 10"),
    (dict(grid=(4, 3), block=32, cluster=(1, 2)), r"cluster dimension y = 2 does not divide grid dimension y = 3"),
    (dict(grid=(1, 1, 3), block=32, cluster=(1, 1, 2)),
     r"cluster dimension z = 2 does not divide grid dimension z = 3"),
])
def test_a_dimension_over_its_limit(kwargs, message):
    with pytest.raises(LaunchConfigError, match=message):
        LaunchConfig(**kwargs)


# -- the other options: their types and values ---------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(shared_mem=-1), r"dynamic shared memory must be >= 0 bytes, got -1"),
    (dict(shared_mem=1.5), r"shared_mem must be an int number of bytes, got 1\.5"),
    (dict(shared_mem="48K"), r"shared_mem must be an int number of bytes, got '48K'"),
    (dict(shared_mem=None), r"shared_mem must be an int number of bytes, got None"),
    (dict(cooperative="yes"), r"cooperative must be True or False, got 'yes'"),
    (dict(pdl=1), r"pdl must be True or False, got 1"),
    (dict(priority=1.5), r"priority must be an int \(or None\), got 1\.5"),
    (dict(priority="high"), r"priority must be an int \(or None\), got 'high'"),
    (dict(mem_sync_domain="far"), r"memory sync domain must be 'default' or 'remote', got 'far'"),
    (dict(mem_sync_domain=1), r"memory sync domain must be 'default' or 'remote', got 1"),
    (dict(access_policy=(0x1000, 4096)), r"access_policy must be an AccessPolicyWindow \(or None\), got tuple"),
])
def test_an_option_of_the_wrong_type_or_value(kwargs, message):
    with pytest.raises(LaunchConfigError, match=message):
        LaunchConfig(grid=2, block=32, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(hit_ratio=1.5), r"hit_ratio must be in \[0, 1\] .*got 1\.5"),
    (dict(hit_ratio=math.nan), r"hit_ratio must be in \[0, 1\] .*got nan"),
    (dict(hit_ratio="0.5"), r"hit_ratio must be in \[0, 1\] \(a float: .*got '0\.5'"),
    (dict(num_bytes=-1), r"access-policy window num_bytes must be an int >= 0, got -1"),
    (dict(num_bytes=1.5e6), r"access-policy window num_bytes must be an int >= 0, got 1500000\.0"),
    (dict(base_ptr=-4096), r"access-policy window base_ptr must be an int >= 0, got -4096"),
    (dict(base_ptr=DeviceArray()), r"access-policy window base_ptr must be an int >= 0, got <"),
    (dict(hit="sticky"), r"access property hit must be normal, streaming or persisting, got 'sticky'"),
    (dict(miss="persisting"), r"access property miss must be normal or streaming \(CUDA Driver API, "
                              r"CUaccessPolicyWindow\.missProp\), got 'persisting'"),
])
def test_an_access_policy_window_breaking_a_rule(kwargs, message):
    window = dict(base_ptr=0x7F00_0000_0000, num_bytes=1 << 20, hit_ratio=0.5) | kwargs
    with pytest.raises(LaunchConfigError, match=message):
        AccessPolicyWindow(**window)


# -- device checks: the GPU's and the kernel's limits (stand-in H200, occupancy answered by the fakes) ---
def test_a_block_over_the_kernels_launch_bounds(fake_gpu):
    fake_gpu(HOPPER)
    kernel = FakeKernel(max_threads=128)
    with pytest.raises(LaunchConfigError, match=r"block of 256 threads exceeds this kernel's limit of 128 \(set by "
                                                r"its registers or __launch_bounds__\)"):
        prepare(kernel, LaunchConfig(grid=1, block=256))


@pytest.mark.parametrize("dynamic, static", [(232_449, 0), (220 * 1024, 16 * 1024)])
def test_shared_memory_over_the_opt_in_limit(fake_gpu, dynamic, static):
    fake_gpu(HOPPER)
    kernel = FakeKernel(static_shared=static)
    with pytest.raises(LaunchConfigError, match=rf"shared_mem = {dynamic} B dynamic \+ {static} B static shared "
                                                r"memory exceeds the per-block limit of 232448 B \(the opt-in "
                                                r"maximum of compute capability 9\.0"):
        prepare(kernel, LaunchConfig(grid=1, block=32, shared_mem=dynamic))
    assert kernel.dynamic_shared_requests == []  # refused before the kernel's limit was raised


def test_a_run_time_cluster_for_a_kernel_with_compile_time_cluster_dims(fake_gpu):
    fake_gpu(HOPPER)
    kernel = FakeKernel(name="fixed", compile_time_cluster=(2, 1, 1))
    with pytest.raises(LaunchConfigError, match=r"kernel fixed declares __cluster_dims__\(2, 1, 1\); give no "
                                                r"run-time cluster \(got \(2, 1, 1\)\)"):
        prepare(kernel, LaunchConfig(grid=8, block=32, cluster=2))


def test_a_grid_the_compile_time_cluster_does_not_divide(fake_gpu):
    fake_gpu(HOPPER)
    with pytest.raises(LaunchConfigError, match="cluster dimension x = 2 does not divide grid dimension x = 7"):
        prepare(FakeKernel(compile_time_cluster=(2, 1, 1)), LaunchConfig(grid=7, block=32))


def test_a_non_portable_cluster_over_what_the_kernel_can_use(fake_gpu):
    fake_gpu(HOPPER).non_portable = 12  # this kernel's registers and shared memory allow 12 blocks
    with pytest.raises(LaunchConfigError, match=r"cluster of 16 blocks exceeds the largest cluster this kernel can "
                                                r"use here \(12 blocks, non-portable limit"):
        prepare(FakeKernel(), LaunchConfig(grid=32, block=1024, cluster=16))


def test_a_portable_cluster_over_what_the_kernel_can_use(fake_gpu):
    fake_gpu(HOPPER).portable = 4
    with pytest.raises(LaunchConfigError, match=r"cluster of 8 blocks exceeds the largest cluster this kernel can "
                                                r"use here \(4 blocks, portable limit, 1024 threads and 0 B"):
        prepare(FakeKernel(), LaunchConfig(grid=16, block=1024, cluster=8))


def test_a_cooperative_grid_over_the_co_resident_maximum(fake_gpu):
    fake_gpu(HOPPER)  # 2 blocks per SM x 132 SMs
    with pytest.raises(LaunchConfigError, match=r"cooperative grid of 1000 blocks exceeds the co-resident maximum "
                                                r"264 \(132 SMs, 256 threads"):
        prepare(FakeKernel(), LaunchConfig(grid=1000, block=256, cooperative=True))


def test_a_cooperative_clustered_grid_over_the_co_resident_clusters(fake_gpu):
    fake_gpu(HOPPER)  # 4 clusters at once
    with pytest.raises(LaunchConfigError, match=r"cooperative grid of 16 blocks exceeds the co-resident maximum 8 "):
        prepare(FakeKernel(), LaunchConfig(grid=16, block=256, cluster=2, cooperative=True))


@pytest.mark.parametrize("priority", [-6, 1])
def test_a_priority_outside_the_devices_range(fake_gpu, priority):
    fake_gpu(HOPPER)
    with pytest.raises(LaunchConfigError, match=rf"priority {priority} is outside the device's range "
                                                r"\[-5 \(high\), 0 \(low\)\]"):
        prepare(FakeKernel(), LaunchConfig(grid=1, block=32, priority=priority))


def test_an_access_policy_window_over_the_maximum_window(fake_gpu):
    fake_gpu(HOPPER)
    window = AccessPolicyWindow(0x7F00_0000_0000, 134_213_633)
    with pytest.raises(LaunchConfigError, match=r"access-policy window of 134213633 B exceeds the maximum window "
                                                r"134213632 B"):
        prepare(FakeKernel(), LaunchConfig(grid=1, block=32, access_policy=window))


# -- the call itself: what is launched, through which backend, on which stream --------------------------
def test_an_unknown_backend(fake_gpu):
    fake_gpu(HOPPER)
    with pytest.raises(LaunchConfigError, match=r"backend must be one of auto, driver, core, got 'cuda'"):
        launch(FakeKernel(), LaunchConfig(grid=1, block=32), DeviceArray(), 4, backend="cuda")


def test_the_core_backend_with_an_option_it_cannot_express(fake_gpu):
    fake_gpu(HOPPER)
    with pytest.raises(LaunchConfigError, match=r"backend='core' cannot express priority.*use backend='driver'"):
        launch(FakeKernel(), LaunchConfig(grid=1, block=32, priority=-1), DeviceArray(), 4, backend="core")


def test_a_module_in_place_of_its_kernel(fake_gpu):
    from cuadv.compiler import compile_source

    module = compile_source('extern "C" __global__ void k(int* x) {}', name="bad_launch_module", arch="sm_90a")
    with pytest.raises(TypeError, match=r"kernel must be a cuadv Kernel \(module\.kernel\(name\) gives one\), got "
                                        r"CompiledModule"):
        launch(module, LaunchConfig(grid=1, block=32), DeviceArray())


def test_a_tile_kernel_passed_to_launch():
    from cuadv.work_stealing import TileKernel

    with pytest.raises(TypeError, match=r"kernel must be a cuadv Kernel \(call a TileKernel or PersistentKernel "
                                        r"itself\), got TileKernel"):
        launch(TileKernel("float* x", ""), LaunchConfig(grid=1, block=32), DeviceArray())


def test_a_configuration_that_is_no_launch_config(fake_gpu):
    fake_gpu(HOPPER)
    with pytest.raises(TypeError, match=r"config must be a cuadv LaunchConfig \(LaunchConfig\(grid=\.\.\., "
                                        r"block=\.\.\.\)\), got dict"):
        launch(FakeKernel(), {"grid": 1, "block": 32}, DeviceArray(), 4)


def test_a_stream_that_is_no_stream(fake_gpu):
    fake_gpu(HOPPER)
    with pytest.raises(KernelArgumentError, match="cannot use str as a stream"):
        launch(FakeKernel(), LaunchConfig(grid=1, block=32), DeviceArray(), 4, stream="fast")
