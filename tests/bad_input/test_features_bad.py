"""A feature the GPU lacks: UnsupportedFeatureError naming the compute capability (or resource) needed, what the
GPU has, and the fallback, before anything reaches the GPU. CPU: the capabilities are stand-ins of an A100 (8.0),
an H200 (9.0) and a B200 (10.0); kernels compile for a named target without a GPU."""

from dataclasses import replace

import pytest

from cuadv.compiler import compile_source
from cuadv.errors import CompileError, UnsupportedFeatureError
from cuadv.launching import AccessPolicyWindow, LaunchConfig, prepare
from cuadv.work_stealing import TileKernel

from .runtime_fakes import AMPERE, BLACKWELL, HOPPER, DeviceArray, FakeKernel, fake_gpu  # noqa: F401 (fixture)

MIG_SLICE = replace(HOPPER, persisting_l2_max_bytes=0)  # a MIG instance: no persisting L2
ONE_PRIORITY = replace(HOPPER, stream_priority_low=0, stream_priority_high=0)
NO_COOPERATIVE = replace(AMPERE, cooperative_launch=False)


@pytest.mark.parametrize("caps, key, message", [
    (AMPERE, "tma", r"TMA bulk tensor copies and multicast needs compute capability >= 9\.0 \(got 8\.0\); fallback: "
                    r"cp\.async / cuda::memcpy_async loads"),
    (AMPERE, "cluster_launch", r"thread block clusters and distributed shared memory needs compute capability >= "
                               r"9\.0 \(got 8\.0\); fallback: single-block shared memory"),
    (AMPERE, "pdl", r"programmatic dependent launch needs compute capability >= 9\.0 \(got 8\.0\); fallback: plain "
                    r"stream order"),
    (HOPPER, "clc", r"Cluster Launch Control \(hardware work stealing\) needs compute capability >= 10\.0 \(got "
                    r"9\.0\); fallback: software CLC: policy 'steal'"),
    (AMPERE, "mem_sync_domains", r"memory synchronization domains needs a GPU with 2 or more domains \(got 1\); "
                                 r"fallback: the default domain"),
    (MIG_SLICE, "l2_persistence", r"L2 persistence \(access-policy window\) needs a GPU with persisting L2 \(not "
                                  r"MIG\) \(got 0 B persisting L2\); fallback: ordinary L2 caching"),
    (NO_COOPERATIVE, "cooperative_launch", r"cooperative launch \(grid-wide sync\) needs a GPU with cooperative launch "
                                           r"\(got none\); fallback: two kernel launches"),
    (ONE_PRIORITY, "stream_priorities", r"stream priorities needs a priority range wider than one level \(got "
                                        r"priorities 0 to 0\); fallback: none: urgent work waits"),
])
def test_the_registry_names_what_is_missing_and_the_fallback(caps, key, message):
    with pytest.raises(UnsupportedFeatureError, match=message):
        caps.require(key)


def test_an_unknown_feature():
    with pytest.raises(ValueError, match=r"unknown feature 'warp_specialization'; known: clc, stream_priorities, "):
        HOPPER.require("warp_specialization")


def test_the_newer_gpus_have_them():
    for key in ("tma", "cluster_launch", "pdl", "mem_sync_domains", "l2_persistence", "cooperative_launch"):
        HOPPER.require(key)
    BLACKWELL.require("clc")


# -- launch options on a GPU without the feature --------------------------------------------------------
@pytest.mark.parametrize("caps, options, message", [
    (AMPERE, dict(grid=4, cluster=2), r"thread block clusters needs compute capability >= 9\.0 \(got 8\.0\); "
                                      r"fallback: launch without a cluster"),
    (AMPERE, dict(grid=4, pdl=True), r"programmatic dependent launch needs compute capability >= 9\.0 \(got 8\.0\); "
                                     r"fallback: launch without pdl \(plain stream order\)"),
    (NO_COOPERATIVE, dict(grid=4, cooperative=True), r"cooperative launch needs a GPU with cooperative launch \(got "
                                                     r"none\); fallback: split the kernel at the grid sync"),
    (AMPERE, dict(grid=4, mem_sync_domain="remote"), r"memory sync domains needs a GPU with 2 or more domains \(got "
                                                     r"1\); fallback: launch in the default domain"),
    (MIG_SLICE, dict(grid=4, access_policy=AccessPolicyWindow(0x7F00_0000_0000, 4096)),
     r"L2 access-policy window needs a GPU with persisting L2 \(not MIG\) \(got 0 B persisting L2\); fallback: "
     r"launch without the window"),
])
def test_a_launch_option_the_gpu_lacks(fake_gpu, caps, options, message):
    fake_gpu(caps)
    with pytest.raises(UnsupportedFeatureError, match=message):
        prepare(FakeKernel(), LaunchConfig(block=32, **options))


def test_a_compile_time_cluster_on_a_gpu_without_clusters(fake_gpu):
    fake_gpu(AMPERE)
    with pytest.raises(UnsupportedFeatureError, match=r"thread block clusters needs compute capability >= 9\.0"):
        prepare(FakeKernel(compile_time_cluster=(2, 1, 1)), LaunchConfig(grid=4, block=32))


# -- TileKernel policies and clusters ---------------------------------------------------------------------
def test_clc_on_hopper_names_10_0_and_steal(fake_gpu):
    fake_gpu(HOPPER)
    with pytest.raises(UnsupportedFeatureError, match=r"Cluster Launch Control \(policy 'clc'\) needs compute "
                                                      r"capability >= 10\.0 \(got 9\.0\); fallback: policy='steal' "
                                                      r"\(software CLC, same loop\) or policy='auto'"):
        TileKernel("float* x", "", policy="clc")(8, DeviceArray())


def test_clc_at_call_time_on_hopper(fake_gpu):
    fake_gpu(HOPPER)
    with pytest.raises(UnsupportedFeatureError, match=r"needs compute capability >= 10\.0 \(got 9\.0\); fallback: "
                                                      r"policy='steal'"):
        TileKernel("float* x", "", policy="auto")(8, DeviceArray(), policy="clc")


def test_clc_compiled_for_a_hopper_target():
    with pytest.raises(UnsupportedFeatureError, match=r"needs compute capability >= 10\.0 \(got 9\.0\); fallback: "
                                                      r"policy='steal'"):
        TileKernel("float* x", "", policy="clc").compile("sm_90a")


def test_steal_on_ampere(fake_gpu):
    fake_gpu(AMPERE)
    with pytest.raises(UnsupportedFeatureError, match=r"software CLC \(policy 'steal'\) needs compute capability >= "
                                                      r"9\.0 \(elect\.sync; with clusters, mbarrier transaction "
                                                      r"counts\) \(got 8\.0\); fallback: "
                                                      r"policy='fixed_work' or 'fixed_blocks'"):
        TileKernel("float* x", "", policy="steal")(8, DeviceArray())


def test_a_clustered_tile_kernel_on_ampere(fake_gpu):
    fake_gpu(AMPERE)
    with pytest.raises(UnsupportedFeatureError, match=r"TileKernel 'cuadv_tiles' with cluster \(2, 1, 1\) needs "
                                                      r"compute capability >= 9\.0 \(got 8\.0\); fallback: cluster=1"):
        TileKernel("float* x", "", policy="fixed_blocks", cluster=2)(8, DeviceArray())


# -- device code for a target without the instruction: the header's guard names the SM ---------------------
def test_tma_device_code_for_an_ampere_target():
    source = ('#include <cuadv/tma.cuh>\n'
              'extern "C" __global__ void k(const __grid_constant__ cuadv::tma::TensorMap m, float* out) {\n'
              '  __shared__ __align__(128) float box[64]; __shared__ __align__(8) unsigned long long bar;\n'
              '  cuadv::tma::load_2d(box, &m, 0, 0, &bar);\n'
              '}\n')
    with pytest.raises(CompileError, match=r"cp\.async\.bulk\.tensor needs sm_90"):
        compile_source(source, name="bad_tma_target", arch="sm_80")
