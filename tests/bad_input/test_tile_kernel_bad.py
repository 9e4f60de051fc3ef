"""Bad TileKernels and bad TileKernel calls: the constructor checks its options, a call checks its tile grid,
its arguments (counted without the schedule cuadv passes first) and the launch before anything reaches the GPU.
CPU: the GPU is the stand-in H200 of runtime_fakes, the compiled kernel a FakeKernel."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from cuadv.errors import CompileError, KernelArgumentError, LaunchConfigError
from cuadv.work_stealing import TileKernel, TileOrder

from . import runtime_fakes
from .runtime_fakes import HOPPER, DeviceArray, FakeKernel, RefusingKernel

fake_gpu = runtime_fakes.fake_gpu  # the fixture, bound here (not imported) so pyflakes sees no unused import

PARAMS = "float* data, unsigned long long n"


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(policy="greedy"), ValueError, r"policy must be one of fixed_work, fixed_blocks, atomic_counter, clc, "
                                        r"steal, auto; got 'greedy'"),
    (dict(policy=3), TypeError, r"policy must be a str, one of fixed_work, .*, auto; got 3 \(int\)"),
    (dict(block=0), LaunchConfigError, r"block dimension x = 0 is outside \[1, 1024\]"),
    (dict(block=(64, 32)), LaunchConfigError, r"block of 2048 threads exceeds the limit of 1024 threads per block"),
    (dict(block=64.0), LaunchConfigError, r"block must be an int or a tuple of 1 to 3 ints .*got 64\.0 \(float\)"),
    (dict(cluster=0), LaunchConfigError, r"cluster \(0, 1, 1\) must have 1 to 16 blocks"),
    (dict(cluster=(4, 4, 2)), LaunchConfigError, r"cluster \(4, 4, 2\) must have 1 to 16 blocks"),
    (dict(cluster=2.5), LaunchConfigError, r"cluster must be an int or a tuple of 1 to 3 ints .*got 2\.5 \(float\)"),
    (dict(policy="steal", quantum_us=0), LaunchConfigError, r"quantum_us must be a positive number of microseconds "
                                                            r"or math\.inf, got 0"),
    (dict(policy="steal", quantum_us=-5.0), LaunchConfigError, r"quantum_us must be a positive .*got -5\.0"),
    (dict(policy="steal", quantum_us=math.nan), LaunchConfigError, r"quantum_us must be a positive .*got nan"),
    (dict(policy="steal", quantum_us=True), LaunchConfigError, r"quantum_us must be a positive .*got True"),
    (dict(policy="steal", quantum_us="50"), LaunchConfigError, r"quantum_us must be a positive .*got '50'"),
    (dict(policy="fixed_work", quantum_us=10.0), LaunchConfigError, r"a quantum applies to policy 'steal' only, "
                                                                    r"not 'fixed_work'"),
    (dict(shared_mem=-1), LaunchConfigError, r"shared_mem must be an int >= 0 bytes, got -1"),
    (dict(shared_mem=1.5), LaunchConfigError, r"shared_mem must be an int >= 0 bytes, got 1\.5"),
    (dict(min_blocks_per_sm=0), LaunchConfigError, r"min_blocks_per_sm must be an int >= 1, got 0"),
    (dict(min_blocks_per_sm=1.5), LaunchConfigError, r"min_blocks_per_sm must be an int >= 1, got 1\.5"),
    (dict(prologue_factor=-1), LaunchConfigError, r"prologue_factor must be an int >= 0, got -1"),
    (dict(prologue_factor=True), LaunchConfigError, r"prologue_factor must be an int >= 0, got True"),
    # 32 and 64 bits in the schedule: refused here, not as NumPy's OverflowError at every call
    (dict(prologue_factor=2**32), LaunchConfigError, r"prologue_factor must be at most 2\*\*32 - 1 \(a 32-bit field "
                                                     r"of the schedule\), got 4294967296"),
    (dict(policy="steal", quantum_us=1e17), LaunchConfigError, r"quantum_us = 1e\+17 exceeds the 1\.845e\+16 us a "
                                                               r"64-bit count of nanoseconds holds; math\.inf: never "
                                                               r"yield"),
    (dict(policy="auto", quantum_us=2**64), LaunchConfigError, r"quantum_us = 18446744073709551616 exceeds"),
    (dict(policy="steal", quantum_us=10.0, min_tiles=0), LaunchConfigError,
     r"min_tiles must be None or an int from 1 to 2\*\*32 - 1, got 0"),
    (dict(policy="steal", quantum_us=10.0, min_tiles=True), LaunchConfigError,
     r"min_tiles must be None or an int from 1 to 2\*\*32 - 1, got True"),
    (dict(policy="fixed_blocks", min_tiles=4), LaunchConfigError,
     r"min_tiles applies to policy 'steal' with a finite quantum only \(policy 'fixed_blocks'"),
    (dict(policy="steal", quantum_us=math.inf, min_tiles=4), LaunchConfigError,
     r"min_tiles applies to policy 'steal' with a finite quantum only \(policy 'steal', quantum_us inf\)"),
    (dict(name="my kernel"), ValueError, r"name must be a C identifier \(it names the kernel\), got 'my kernel'"),
    (dict(prologue=["float a = 1;"]), TypeError, r"TileKernel prologue must be C\+\+ source text \(a str\), got list"),
    (dict(preamble=None), TypeError, r"TileKernel preamble must be C\+\+ source text \(a str\), got NoneType"),
])
def test_a_tile_kernel_option_breaking_its_rule(kwargs, error, message):
    with pytest.raises(error, match=message):
        TileKernel(PARAMS, "", **kwargs)


@pytest.mark.parametrize("params, body", [(None, ""), (PARAMS, b"data[0] = 1;")])
def test_params_or_body_that_is_no_source_text(params, body):
    with pytest.raises(TypeError, match=r"TileKernel (params|body) must be C\+\+ source text \(a str\), got "
                                        r"(NoneType|bytes)"):
        TileKernel(params, body)


def test_a_body_that_does_not_compile_names_the_kernel_and_policy():
    k = TileKernel(PARAMS, "data[tile.x] = undefined_value;", policy="fixed_work", name="bad_body")
    with pytest.raises(CompileError, match=r'(?s)NVRTC could not compile \'bad_body_fixed_work\'.*identifier '
                                           r'"undefined_value" is undefined'):
        k.compile("sm_90a")


# -- a call: the tile grid ----------------------------------------------------------------------------
@pytest.mark.parametrize("tiles, message", [
    (3.5, r"tiles must be an int or a tuple of 1 to 3 ints \(x, y, z\), got 3\.5 \(float\)"),
    (True, r"tiles must be an int or a tuple of 1 to 3 ints \(x, y, z\), got True \(bool\)"),
    ("100", r"tiles must be an int or a tuple of 1 to 3 ints \(x, y, z\), got '100' \(str\)"),
    (np.float64(3.0), r"tiles must be an int or a tuple of 1 to 3 ints \(x, y, z\), got np\.float64\(3\.0\)"),
    ((), r"tiles has 1 to 3 components \(x, y, z\), got 0: \(\)"),
    ((1, 2, 3, 4), r"tiles has 1 to 3 components \(x, y, z\), got 4: \(1, 2, 3, 4\)"),
    ((4, 2.0), r"tiles component y must be an int, got 2\.0 \(float\)"),
    (-1, r"tile count x = -1 is outside \[0, 2147483647\]"),
    (2**31, r"tile count x = 2147483648 is outside \[0, 2147483647\]"),
    ((4, 65536), r"tile count y = 65536 is outside \[0, 65535\]"),
    ((4, 1, 70000), r"tile count z = 70000 is outside \[0, 65535\]"),
])
def test_a_tile_grid_breaking_its_rule(tiles, message):
    with pytest.raises(LaunchConfigError, match=message):
        TileKernel(PARAMS, "")(tiles, DeviceArray(), 4)


def test_a_tile_grid_the_cluster_does_not_divide():
    with pytest.raises(LaunchConfigError, match=r"cluster dimension x = 2 does not divide tile count x = 7; each "
                                                r"cluster takes a cluster-shaped group of tiles"):
        TileKernel(PARAMS, "", cluster=2)(7, DeviceArray(), 4)


def test_trace_that_is_no_bool():
    with pytest.raises(TypeError, match=r"trace must be True or False, got 'yes'"):
        TileKernel(PARAMS, "")(8, DeviceArray(), 4, trace="yes")


def test_an_order_that_is_no_tile_order():
    with pytest.raises(TypeError, match=r"order must be a TileOrder \(TileOrder\(permutation\)\), got list"):
        TileKernel(PARAMS, "")(3, DeviceArray(), 4, order=[2, 0, 1])


def test_an_order_over_another_number_of_units():
    order = TileOrder.__new__(TileOrder)  # one over 5 units, without uploading it
    order.units = 5
    with pytest.raises(LaunchConfigError, match=r"the tile order has 5 units but the launch has 8 \(tiles / cluster "
                                                r"size\)"):
        TileKernel(PARAMS, "")(8, DeviceArray(), 4, order=order)


@pytest.mark.parametrize("permutation, message", [
    ([0, 0, 1], r"a tile order must be a permutation of 0 \.\. 2: every unit exactly once"),
    ([0, 1, 3], r"a tile order must be a permutation of 0 \.\. 2"),
    ([[0, 1], [2, 3]], r"a tile order is a 1-D integer array, got int64 of shape \(2, 2\)"),
    ([0.0, 1.0], r"a tile order is a 1-D integer array, got float64 of shape \(2,\)"),
])
def test_a_tile_order_that_is_no_permutation(permutation, message):
    with pytest.raises(LaunchConfigError, match=message):
        TileOrder(permutation)


# -- a call: the kernel's arguments and launch (the compiled kernel is a stand-in) ---------------------
def _with_fake_kernel(monkeypatch, k: TileKernel, policy: str, kernel_type=FakeKernel) -> FakeKernel:
    """``k`` as if compiled for the stand-in GPU: its kernel is a FakeKernel declared by ``k``'s own source."""
    fake = kernel_type(name=k.name, sizes=(80,) + (8,) * len(k.params.split(",")), source=k.source(policy))
    monkeypatch.setattr(k, "compile", lambda arch, policy=None: SimpleNamespace(kernel=lambda name: fake))
    return fake


@pytest.mark.parametrize("args, message", [
    ((DeviceArray(),), r"TileKernel 'cuadv_tiles' takes 2 arguments after tiles \(float\* data, unsigned long long "
                       r"n\), got 1"),
    ((DeviceArray(), 4, 5), r"TileKernel 'cuadv_tiles' takes 2 arguments after tiles .*, got 3"),
    ((), r"TileKernel 'cuadv_tiles' takes 2 arguments after tiles .*, got 0"),
])
def test_the_wrong_number_of_arguments_counts_only_the_callers(fake_gpu, monkeypatch, args, message):
    fake_gpu(HOPPER)
    k = TileKernel(PARAMS, "", policy="fixed_work")
    _with_fake_kernel(monkeypatch, k, "fixed_work")
    with pytest.raises(KernelArgumentError, match=message):
        k(8, *args)


def test_one_parameter_one_argument(fake_gpu, monkeypatch):
    fake_gpu(HOPPER)
    k = TileKernel("float* data", "", policy="fixed_work")
    _with_fake_kernel(monkeypatch, k, "fixed_work")
    with pytest.raises(KernelArgumentError, match=r"takes 1 argument after tiles \(float\* data\), got 2"):
        k(8, DeviceArray(), DeviceArray())


@pytest.mark.parametrize("args, message", [
    ((DeviceArray("float64"), 4), r"kernel 'cuadv_tiles', argument 0 \(float\* data\): got a float64 array, but "
                                  r"float\* reads float32 elements"),
    ((DeviceArray(), -4), r"kernel 'cuadv_tiles', argument 1 \(unsigned long long n\): -4 is outside the range of "
                          r"unsigned long long"),
    ((DeviceArray(shape=(8, 8), strides=(64, 4)), 4), r"kernel 'cuadv_tiles', argument 0 \(float\* data\): the "
                                                      r"float32 array of shape \(8, 8\) has strides \(64, 4\) B"),
])
def test_an_argument_is_named_by_its_position_after_the_schedule(fake_gpu, monkeypatch, args, message):
    fake_gpu(HOPPER)
    k = TileKernel(PARAMS, "", policy="fixed_work")
    _with_fake_kernel(monkeypatch, k, "fixed_work")
    with pytest.raises(KernelArgumentError, match=message):
        k(8, *args)


def test_a_priority_that_is_no_int(fake_gpu, monkeypatch):
    fake_gpu(HOPPER)
    k = TileKernel(PARAMS, "", policy="fixed_work")
    _with_fake_kernel(monkeypatch, k, "fixed_work")
    with pytest.raises(LaunchConfigError, match=r"priority must be an int \(or None\), got 'high'"):
        k(8, DeviceArray(), 4, priority="high")


def test_a_policy_at_call_time_that_does_not_exist(fake_gpu):
    fake_gpu(HOPPER)
    with pytest.raises(ValueError, match=r"policy must be one of .*; got 'greedy'"):
        TileKernel(PARAMS, "")(8, DeviceArray(), 4, policy="greedy")


def test_more_steal_units_than_the_ticket_counter_holds(fake_gpu, monkeypatch):
    fake_gpu(HOPPER)
    k = TileKernel(PARAMS, "", policy="steal")
    _with_fake_kernel(monkeypatch, k, "steal")
    with pytest.raises(LaunchConfigError, match=r"policy 'steal' takes at most 2147483647 units of work \(tiles / "
                                                r"cluster size\); got 4294967294"):
        k((2**31 - 1, 2), DeviceArray(), 4)


def test_fixed_blocks_with_more_shared_memory_than_the_gpu_allows(fake_gpu, monkeypatch):
    """The grid of fixed_blocks comes from an occupancy query, which raises the kernel's dynamic shared-memory
    limit first: the check must come before it, as LaunchConfigError naming the limit, not a driver error."""
    fake_gpu(HOPPER)
    k = TileKernel(PARAMS, "", policy="fixed_blocks", shared_mem=300_000)
    _with_fake_kernel(monkeypatch, k, "fixed_blocks", RefusingKernel)
    with pytest.raises(LaunchConfigError, match=r"shared_mem = 300000 B dynamic \+ 0 B static shared memory exceeds "
                                                r"the per-block limit of 232448 B \(the opt-in maximum of compute "
                                                r"capability 9\.0"):
        k(1000, DeviceArray(), 4)


# -- on the GPU ------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_fixed_blocks_over_the_opt_in_shared_memory(cp):
    from cuadv.device import current_device

    limit = current_device().caps.shared_mem_per_block_optin
    k = TileKernel("float* data", "data[tile.x] = 1.0f;", policy="fixed_blocks", shared_mem=limit + 1024,
                   name="bad_input_big_smem")
    data = cp.zeros(64, cp.float32)
    with pytest.raises(LaunchConfigError, match=rf"shared_mem = {limit + 1024} B dynamic \+ \d+ B static shared "
                                                rf"memory exceeds the per-block limit of {limit} B"):
        k(64, data)
    assert not data.get().any()


@pytest.mark.gpu
def test_gpu_argument_count_after_the_schedule(cp):
    k = TileKernel("float* data", "data[tile.x] = 1.0f;", policy="fixed_work", name="bad_input_count")
    data = cp.zeros(64, cp.float32)
    with pytest.raises(KernelArgumentError, match=r"TileKernel 'bad_input_count' takes 1 argument after tiles "
                                                  r"\(float\* data\), got 2"):
        k(64, data, 64)
    with pytest.raises(KernelArgumentError, match=r"kernel 'bad_input_count', argument 0 \(float\* data\): got a "
                                                  r"float64 array"):
        k(64, data.astype(cp.float64))
    k(64, data)
    cp.cuda.Device().synchronize()
    assert (data.get() == 1).all()


# -- a call with no tiles: nothing is launched, but a bad call raises as it would with tiles ---------------
@pytest.mark.parametrize("tiles", [0, (0, 3), (4, 1, 0)])
@pytest.mark.parametrize("call, error, message", [
    (dict(args=(DeviceArray("float64"), 4)), KernelArgumentError,
     r"kernel 'cuadv_tiles', argument 0 \(float\* data\): got a float64 array, but float\* reads float32 elements"),
    (dict(args=(DeviceArray(), -4)), KernelArgumentError,
     r"kernel 'cuadv_tiles', argument 1 \(unsigned long long n\): -4 is outside the range of unsigned long long"),
    (dict(priority="high"), LaunchConfigError, r"priority must be an int \(or None\), got 'high'"),
    (dict(priority=7), LaunchConfigError, r"priority 7 is outside the device's range \[-5 \(high\), 0 \(low\)\]"),
    (dict(stream="nope"), KernelArgumentError, r"cannot use str as a stream"),
    (dict(stream=-1), KernelArgumentError, r"stream handle -1 is not a CUstream"),
])
def test_a_call_with_no_tiles_is_checked_as_one_with_tiles(fake_gpu, monkeypatch, tiles, call, error, message):
    fake_gpu(HOPPER)
    k = TileKernel(PARAMS, "", policy="fixed_work")
    _with_fake_kernel(monkeypatch, k, "fixed_work")
    call = {"stream": 0, **call}
    args = call.pop("args", (DeviceArray(), 4))
    with pytest.raises(error, match=message):
        k(tiles, *args, **call)


def test_a_good_call_with_no_tiles_launches_nothing(fake_gpu, monkeypatch):
    fake_gpu(HOPPER)  # its driver fails the test if a launch reaches it
    k = TileKernel(PARAMS, "", policy="fixed_work")
    _with_fake_kernel(monkeypatch, k, "fixed_work")
    assert k((0, 3), DeviceArray(), 4, stream=0, priority=-1) is None
    trace = k(0, DeviceArray(), 4, stream=0, trace=True)
    assert trace.policy == "fixed_work" and trace.records.shape == (0,) and k.last_launch is None


# -- a cluster larger than the kernel can use: the same error under every policy --------------------------
@pytest.mark.parametrize("policy, quantum_us", [("fixed_work", None), ("fixed_blocks", None), ("atomic_counter", None),
                                                ("steal", math.inf), ("steal", None)])
def test_a_cluster_larger_than_the_kernel_takes_names_the_limit_under_every_policy(fake_gpu, monkeypatch, policy,
                                                                                   quantum_us):
    """fixed_blocks, atomic_counter and steal without slices size their grid from an occupancy query, which for a
    cluster the kernel cannot use gives 0 (or fails in the driver): the cluster size is checked before it, as
    fixed_work's launch checks it."""
    from cuadv.work_stealing import tile_kernel

    occupancy = fake_gpu(HOPPER)
    occupancy.non_portable = 8  # this kernel's largest cluster: 8 blocks
    monkeypatch.setattr(tile_kernel, "max_active_clusters",
                        lambda *args, **kwargs: pytest.fail("the occupancy of a cluster was queried before its size "
                                                            "was checked"))
    k = TileKernel(PARAMS, "", policy=policy, cluster=16, quantum_us=quantum_us)
    _with_fake_kernel(monkeypatch, k, policy)
    with pytest.raises(LaunchConfigError, match=r"cluster of 16 blocks exceeds the largest cluster this kernel can use "
                                                r"here \(8 blocks, non-portable limit, 256 threads and 0 B shared "
                                                r"memory per block\)"):
        k(64, DeviceArray(), 4, stream=0)
    with pytest.raises(LaunchConfigError, match=r"cluster of 16 blocks exceeds the largest cluster"):
        k(0, DeviceArray(), 4, stream=0)  # no tiles: the same check


def test_a_cluster_the_kernel_takes_sizes_the_resident_grid(fake_gpu, monkeypatch):
    from cuadv.work_stealing import tile_kernel

    fake_gpu(HOPPER)
    monkeypatch.setattr(tile_kernel, "max_active_clusters", lambda kernel, block, cluster, shared_mem=0: 5)
    k = TileKernel(PARAMS, "", policy="fixed_blocks", cluster=(2, 2))
    fake = _with_fake_kernel(monkeypatch, k, "fixed_blocks")
    assert k.launch_config(fake, "fixed_blocks", (64, 2)).grid == (10, 2, 1)  # 5 clusters of 2 x 2 blocks


# -- launch_config: the public way to size a grid, checked and resolved as a call is ----------------------
@pytest.mark.parametrize("policy, tiles, kwargs, error, message", [
    ("steal", 3.5, {}, LaunchConfigError, r"tiles must be an int or a tuple of 1 to 3 ints \(x, y, z\), got 3\.5"),
    ("steal", (4, 65536), {}, LaunchConfigError, r"tile count y = 65536 is outside \[0, 65535\]"),
    ("steal", (0, 4), {}, LaunchConfigError, r"tiles \(0, 4, 1\) hold no tile: a launch over none has no "
                                             r"configuration"),
    ("greedy", 1000, {}, ValueError, r"policy must be one of fixed_work, .*, auto; got 'greedy'"),
    (None, 1000, {}, TypeError, r"policy must be a str, one of .*; got None \(NoneType\)"),
    ("steal", 1000, dict(min_units=0), LaunchConfigError, r"min_units must be None or an int from 1 to 2\*\*32 - 1, "
                                                          r"got 0"),
    ("steal", 1000, dict(min_units=2.0), LaunchConfigError, r"min_units must be None or an int .*got 2\.0"),
    ("steal", (2**31 - 1, 2), {}, LaunchConfigError, r"policy 'steal' takes at most 2147483647 units of work"),
    ("steal", 1000, dict(priority="high"), LaunchConfigError, r"priority must be an int \(or None\), got 'high'"),
])
def test_a_launch_config_request_breaking_its_rule(fake_gpu, monkeypatch, policy, tiles, kwargs, error, message):
    fake_gpu(HOPPER)
    k = TileKernel(PARAMS, "", policy="steal", quantum_us=math.inf)
    fake = _with_fake_kernel(monkeypatch, k, "steal")
    with pytest.raises(error, match=message):
        k.launch_config(fake, policy, tiles, **kwargs)


def test_launch_config_takes_tiles_as_a_call_does_and_resolves_auto(fake_gpu, monkeypatch):
    from cuadv.work_stealing import tile_kernel

    fake_gpu(HOPPER)
    monkeypatch.setattr(tile_kernel, "max_active_blocks_per_sm", lambda kernel, block, shared_mem=0: 2)
    k = TileKernel(PARAMS, "", policy="steal", quantum_us=math.inf)
    fake = _with_fake_kernel(monkeypatch, k, "steal")
    resident = (2 * HOPPER.sm_count, 1, 1)  # steal without slices: the blocks that fit at once
    assert k.launch_config(fake, "steal", 100_000).grid == resident
    assert k.launch_config(fake, "auto", (100_000,)).grid == resident  # auto is steal on 9.0
    assert k.launch_config(fake, "fixed_work", 100_000).grid == (100_000, 1, 1)
