"""The documented examples compile for both targets (running them needs a GPU)."""

import numpy as np
import pytest
from repo_files import load_example as load


@pytest.mark.parametrize("arch, policies", [("sm_90a", ["fixed_work", "fixed_blocks", "steal"]),
                                            ("sm_100a", ["fixed_work", "fixed_blocks", "steal", "clc"])])
def test_blur_example_compiles(arch, policies):
    blur = load("blur_work_stealing")
    for policy in policies:
        res = blur.blur_kernel(policy).compile(arch, policy).resources_for(f"blur_{policy}")
        assert res.spill_store_bytes == 0


def test_blur_reference_is_a_normalised_filter():
    blur = load("blur_work_stealing")
    flat = np.full((20, 30), 3.0, dtype=np.float32)
    assert np.allclose(blur.reference(flat, 2.0), 3.0)
    assert blur.tiles_for(4099, 3001) == (94, 129)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_pdl_example_compiles_with_the_trigger_after_the_wait(arch):
    ptx = load("pdl_layers").build(arch).ptx
    setup_load = ptx.index("ld.global")
    wait = ptx.index("griddepcontrol.wait")
    assert setup_load < wait < ptx.index("griddepcontrol.launch_dependents")
    assert ptx.count("griddepcontrol.launch_dependents") == 1


def test_pdl_example_reference_applies_each_layer_in_order():
    pdl = load("pdl_layers")
    x = np.arange(5, dtype=np.float32)
    first = np.concatenate([np.full(pdl.TABLE, 2, np.float32), np.full(pdl.TABLE, 1, np.float32)])
    second = np.concatenate([np.full(pdl.TABLE, 3, np.float32), np.zeros(pdl.TABLE, np.float32)])
    assert np.array_equal(pdl.reference(x, np.stack([first, second])), (2 * x + 1) * 3)


def test_l2_example_compiles_and_its_reference_pairs_each_float4():
    l2 = load("l2_persist")
    res = l2.lookup_kernel().compile("sm_90a", "fixed_blocks").resources_for("l2_example")
    assert res.spill_store_bytes == 0
    x, table = np.arange(8, dtype=np.float32), np.arange(16, dtype=np.float32)
    out = l2.reference(x, table, np.arange(8))
    assert np.array_equal(out[:4] - x[:4], np.full(4, out[0] - x[0]))  # one table pair per float4


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_nvtx_example_compiles_both_kernels(arch):
    module = load("nvtx_ranges").build(arch)
    for name in ("smooth", "scale"):
        assert module.resources_for(name).spill_store_bytes == 0


def test_nvtx_example_reference_smooths_then_scales():
    example = load("nvtx_ranges")
    x = np.array([3, 0, 6, 3], dtype=np.float32)
    assert np.array_equal(example.reference(x, 2.0, 1), np.array([6, 6, 6, 6], dtype=np.float32))
    assert "nsys profile -t cuda,nvtx" in example.__doc__


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_wait_example_compiles_its_busy_kernel_on_the_global_timer(arch):
    module = load("wait_timeout").build(arch)
    assert module.resources_for("busy_fill").spill_store_bytes == 0
    assert "%globaltimer" in module.ptx


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_domains_example_compiles_its_writer_and_its_fenced_sum(arch):
    module = load("domains_sync").build(arch)  # sm_80: the fallback's GPUs, one domain
    for name in ("fill", "block_total"):
        assert module.resources_for(name).spill_store_bytes == 0
    assert "membar.gl" in module.ptx or "fence.sc.gpu" in module.ptx  # __threadfence() survives into the PTX


@pytest.mark.parametrize("arch, policies", [("sm_90a", ["fixed_blocks", "steal"]),
                                            ("sm_100a", ["fixed_blocks", "steal", "clc"])])
def test_work_stealing_trace_example_compiles(arch, policies):
    example = load("work_stealing_trace")
    k = example.tile_kernel()
    for policy in policies:
        assert k.compile(arch, policy).resources_for("uneven_tiles").spill_store_bytes == 0


def test_work_stealing_trace_example_tiles_cost_like_a_causal_block():
    units = load("work_stealing_trace").tile_units(130)
    assert units[0] == 1 and units[63] == 64 and units[64] == 1 and units[129] == 2 and units.dtype == np.uint32


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_cluster_halo_example_reads_its_neighbours_through_dsm_between_cluster_barriers(arch):
    module = load("cluster_halo_stencil").build(arch)
    assert module.resources_for("blur3").spill_store_bytes == 0
    ptx = module.ptx
    first_barrier = ptx.index("barrier.cluster.arrive.release")
    assert first_barrier < ptx.index("mapa") < ptx.rindex("barrier.cluster.wait")  # remote reads inside the barriers


def test_cluster_halo_example_reference_pads_with_zeros():
    example = load("cluster_halo_stencil")
    out = example.reference(np.array([3, 6, 9], dtype=np.float32))
    assert np.array_equal(out, np.array([9, 18, 15], dtype=np.float32) * np.float32(1 / 3))


@pytest.mark.parametrize("arch, scheduler", [("sm_90a", "Steal"), ("sm_100a", "ClusterLaunchControl")])
def test_schedule_example_compiles_the_scheduler_auto_takes(arch, scheduler):
    from cuadv.work_stealing import policy_for_arch

    module = load("schedule_own_kernel").build(arch)
    assert module.resources_for("row_sums").spill_store_bytes == 0
    assert policy_for_arch("auto", arch) == {"Steal": "steal", "ClusterLaunchControl": "clc"}[scheduler]
    if scheduler == "ClusterLaunchControl":
        assert "clusterlaunchcontrol.try_cancel" in module.ptx


def test_schedule_example_rows_sum_exactly_in_float32():
    x, offsets = load("schedule_own_kernel").ragged(50)
    assert offsets[0] == 0 and offsets[-1] == x.size and np.all(np.diff(offsets.astype(np.int64)) >= 1)
    assert np.all(x == np.round(x)) and x.max() * 4000 < 2**24  # every partial sum an exact float32
