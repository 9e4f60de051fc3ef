"""Cooperative groups, grid sync and clusters without a GPU: compilation for sm_90a and sm_100a,
the compile-time cluster shape in the PTX, the references, argument checks and launch-config errors."""

import numpy as np
import pytest

from cuadv.errors import LaunchConfigError
from cuadv.launching import LaunchConfig
from cuadv.labs import cooperative as co


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_every_kernel_compiles_without_spills(arch):
    module = co.build_module(arch)
    names = co.kernel_expressions() + ["odd_sums", "two_phase", "phase1", "phase2", "sync_loop", "empty",
                                       "cluster_ring", "cluster_ring_fixed"]
    for name in names:
        res = module.resources_for(name)
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_bytes == 0, (name, res)
    ptx = module.ptx
    # __cluster_dims__(2, 1, 1) becomes a required cluster shape on that entry only.
    fixed = ptx[ptx.index(".entry cluster_ring_fixed"):]
    assert ".reqnctapercluster 2, 1, 1" in fixed.split("{", 1)[0]
    runtime = ptx[ptx.index(".entry cluster_ring("):]
    assert ".reqnctapercluster" not in runtime.split("{", 1)[0]
    assert "mapa" in ptx and "barrier.cluster.arrive" in ptx  # map_shared_rank and cluster.sync


def test_lab_protocol():
    lab = co.CooperativeLab()
    assert lab.name == "cooperative" and lab.title

    class Caps:
        compute_capability = (8, 0)
        cluster_launch = False
        cooperative_launch = True

        def cc_string(self):
            return "8.0"

    reason = lab.supported(Caps())
    assert "9.0" in reason and "fallback" in reason
    Caps.cooperative_launch = False
    assert "two kernel launches" in lab.supported(Caps())


def test_two_phase_reference_wraps_modulo_2_32():
    x = np.array([2**32 - 1, 5, 7], dtype=np.uint32)
    total = (2**32 - 1 + 5 + 7) % 2**32
    once = co.two_phase_reference(x, 1)
    assert once.tolist() == [(int(v) + total) % 2**32 for v in x]
    twice = co.two_phase_reference(x, 2)
    total2 = int(once.astype(np.uint64).sum()) % 2**32
    assert twice.tolist() == [(int(v) + total2) % 2**32 for v in once]
    assert co.two_phase_reference(x, 0).tolist() == x.tolist()


def test_ring_expected():
    rec = co.ring_expected(8, 4)
    assert rec[:, 0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert (rec[:, 1] == 4).all()
    assert rec[:, 2].tolist() == [1, 2, 3, 0, 5, 6, 7, 4]
    assert co.ring_expected(3, 1)[:, 2].tolist() == [0, 1, 2]


class Fake:
    def __init__(self, dtype, size=10):
        self.dtype = np.dtype(dtype)
        self.size = size


def test_argument_checks_before_the_gpu():
    with pytest.raises(ValueError, match="int32 or float32"):
        co.block_sums(Fake(np.float64))
    with pytest.raises(LaunchConfigError, match="outside"):
        co.block_sums(Fake(np.int32), block=2048)
    with pytest.raises(ValueError, match="tile must be one of"):
        co.tile_sums(Fake(np.int32), 5)
    with pytest.raises(ValueError, match="multiple of the tile"):
        co.tile_sums(Fake(np.int32), 32, block=48)
    with pytest.raises(ValueError, match="multiple of the warp size"):
        co.odd_sums(Fake(np.int32), block=48)
    with pytest.raises(ValueError, match="uint32"):
        co.two_phase(Fake(np.int32))
    with pytest.raises(ValueError, match="rounds must be >= 0"):
        co.two_phase(Fake(np.uint32), -1)
    with pytest.raises(ValueError, match="mode must be"):
        co.two_phase(Fake(np.uint32), 1, mode="spin")


def test_cluster_shape_errors_need_no_gpu():
    with pytest.raises(LaunchConfigError, match="cluster dimension x = 4 does not divide grid dimension x = 6"):
        LaunchConfig(grid=6, block=co.RING_BLOCK, cluster=4)
    with pytest.raises(LaunchConfigError, match="cluster of 17 blocks exceeds the largest cluster size 16"):
        LaunchConfig(grid=34, block=co.RING_BLOCK, cluster=17)
    for c in range(1, 17):  # every size up to 16 is a valid shape (above 8 only where the GPU allows)
        assert LaunchConfig(grid=8 * c, block=co.RING_BLOCK, cluster=c).cluster_size == c


def test_older_targets_compile_without_the_cluster_kernels():
    from cuadv.compiler import compile_source, kernel_source

    module = compile_source(kernel_source("cooperative.cu"), name="cooperative_old", arch="sm_80",
                            name_expressions=co.kernel_expressions())
    assert "two_phase" in module.resources and "cluster_ring" not in module.resources


def test_caps_has_an_occupancy_option():
    from cuadv.app.cli import build_parser

    assert build_parser().parse_args(["caps", "--occupancy"]).occupancy is True
    assert build_parser().parse_args(["caps"]).occupancy is False
