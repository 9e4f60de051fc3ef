"""cuadv.cooperative without a GPU: the public headers compile for sm_90a and sm_100a (and refuse
older targets by name), the example compiles, and bad input raises before anything is launched."""

import re

import numpy as np
import pytest

from cuadv import cooperative as co
from cuadv.compiler import compile_source
from cuadv.errors import CompileError, KernelArgumentError, LaunchConfigError, UnsupportedFeatureError
from cuadv.kernel import Kernel
from repo_files import load_example


GROUPS_USER = r"""
#include <cuadv/groups.cuh>
namespace cg = cooperative_groups;
extern "C" __global__ void user_groups(const int* in, int* block_out, int* tile_out, int* shfl_out, int* odd,
                                       unsigned n) {
  cg::thread_block block = cg::this_thread_block();
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  const int x = i < n ? in[i] : 0;
  const int s = cuadv::groups::block_sum(block, x);
  if (block.thread_rank() == 0) block_out[blockIdx.x] = s;
  auto tile = cg::tiled_partition<16>(block);
  const int t = cuadv::groups::tile_sum(tile, x);
  const int u = cuadv::groups::tile_sum_shfl_down(tile, x);
  if (tile.thread_rank() == 0) { tile_out[i / 16] = t; shfl_out[i / 16] = u; }
  if (x & 1) cuadv::groups::coalesced_atomic_add(cg::coalesced_threads(), odd, x);
}
"""

DSM_USER = r"""
#include <cuadv/dsm.cuh>
extern "C" __global__ void user_dsm(int* out, unsigned* sums) {
  __shared__ int mine;
  __shared__ unsigned counter;
  if (threadIdx.x == 0) { mine = blockIdx.x; counter = 0; }
  cuadv::dsm::sync();                                   // rule 2
  const unsigned rank = cuadv::dsm::block_rank(), size = cuadv::dsm::num_blocks();
  const unsigned next = (rank + 1) % size;
  if (threadIdx.x == 0) out[blockIdx.x] = *cuadv::dsm::map_shared_rank(&mine, next);
  cuadv::dsm::red_shared_cluster_add_u32(cuadv::dsm::remote_address(&counter, next), 1u);
  if (threadIdx.x == 1) cuadv::dsm::st_shared_cluster_u32(cuadv::dsm::remote_address(&mine, next), 7u);
  cuadv::dsm::arrive_release();
  cuadv::dsm::wait_acquire();
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = cuadv::dsm::ld_shared_cluster_u32(cuadv::dsm::remote_address(&counter, rank))
                       + cuadv::dsm::atom_shared_cluster_add_u32(cuadv::dsm::remote_address(&counter, rank), 0u);
  }
  cuadv::dsm::arrive_relaxed();                         // rules 1 and 3: lifetime only
  cuadv::dsm::wait_acquire();
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_groups_header_compiles_in_a_user_kernel(arch):
    module = compile_source(GROUPS_USER, name="user_groups", arch=arch)
    res = module.resources_for("user_groups")
    assert res.spill_store_bytes == 0 and res.stack_bytes == 0
    assert "shfl.sync.down" in module.ptx  # the hand-written tree
    assert re.search(r"\b(atom|red)(\.relaxed\.gpu)?\.global\.add", module.ptx)  # one atomic per coalesced group


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_dsm_header_compiles_in_a_user_kernel(arch):
    module = compile_source(DSM_USER, name="user_dsm", arch=arch)
    res = module.resources_for("user_dsm")
    assert res.spill_store_bytes == 0 and res.stack_bytes == 0
    ptx = module.ptx
    for needle in ("mapa", "barrier.cluster.arrive.release", "barrier.cluster.arrive.relaxed",
                   "barrier.cluster.wait.acquire", "ld.shared::cluster.u32", "st.shared::cluster.u32",
                   "red.shared::cluster.add.u32", "atom.shared::cluster.add.u32", "%cluster_ctarank",
                   "%cluster_nctarank"):
        assert needle in ptx, needle


def test_dsm_header_refuses_an_older_target_by_name():
    with pytest.raises(CompileError, match="sm_90"):
        compile_source(DSM_USER, name="user_dsm_old", arch="sm_80")


def test_cooperative_cu_uses_the_groups_header():
    from cuadv.compiler import kernel_source

    src = kernel_source("cooperative.cu")
    assert '#include "cuadv/groups.cuh"' in src and "using cuadv::groups::block_sum;" in src


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_example_compiles(arch):
    example = load_example("cooperative_grid_sync")
    module = example.build(arch)
    for name in ("fused", "first", "second"):
        assert module.resources_for(name).spill_store_bytes == 0
    x = np.array([2**31 - 1, 1, -5], dtype=np.int32)
    total = (2**31 - 1 + 1 - 5)
    assert example.reference(x).tolist() == [((total - int(v) + 2**31) % 2**32) - 2**31 for v in x]


# ---- bad input, before any launch (no GPU needed) --------------------------------------------


class FakeDeviceArray:
    """A device array as the CUDA Array Interface describes it (never dereferenced here)."""

    def __init__(self, shape=(10,), typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0x7F0000000000, False),
                                         "strides": strides, "version": 3}


def test_block_sum_refuses_host_arrays():
    with pytest.raises(KernelArgumentError, match="host memory"):
        co.block_sum(np.zeros(4, np.float32))
    with pytest.raises(KernelArgumentError, match="host memory"):
        co.prepare_block_sum(np.zeros(4, np.int32))


def test_block_sum_refuses_wrong_dtype_shape_and_block():
    with pytest.raises(TypeError, match="int32 or float32, got float64"):
        co.block_sum(FakeDeviceArray(typestr="<f8"))
    with pytest.raises(ValueError, match="1-D"):
        co.block_sum(FakeDeviceArray(shape=(2, 5)))
    with pytest.raises(LaunchConfigError, match="block of 2048 threads is outside"):
        co.block_sum(FakeDeviceArray(), block=2048)
    with pytest.raises(LaunchConfigError, match="block of 0 threads"):
        co.block_sum(FakeDeviceArray(typestr="<i4"), block=0)


def test_two_phase_refuses_before_the_gpu():
    with pytest.raises(ValueError, match="uint32"):
        co.prepare_two_phase(FakeDeviceArray(typestr="<i4"))
    with pytest.raises(ValueError, match="rounds must be >= 0"):
        co.prepare_two_phase(FakeDeviceArray(typestr="<u4"), -1)
    with pytest.raises(ValueError, match="mode must be"):
        co.prepare_two_phase(FakeDeviceArray(typestr="<u4"), mode="spin")
    with pytest.raises(KernelArgumentError, match="host memory"):
        co.prepare_two_phase(np.zeros(8, np.uint32))


class FakeCaps:
    sm_count = 132
    shared_mem_per_block_optin = 232448

    def __init__(self, **features):
        self.features = {"compute_capability": (8, 0), "cluster_launch": False, "cooperative_launch": False}
        self.features.update(features)

    def as_dict(self):
        return dict(self.features)

    def cc_string(self):
        return "{}.{}".format(*self.features["compute_capability"])


class FakeKernel(Kernel):
    """A Kernel with nothing loaded (occupancy queries and launches would fail)."""

    name = "fake"
    static_shared_bytes = 0
    max_threads_per_block = 1024
    compile_time_cluster = None

    def __init__(self):
        pass


def _no_launch(*args, **kwargs):
    raise AssertionError("launched")


def test_grid_sync_without_cooperative_launch_names_the_fallback(monkeypatch):
    monkeypatch.setattr(co, "_caps", lambda: FakeCaps())
    monkeypatch.setattr(co, "launch", _no_launch)
    with pytest.raises(UnsupportedFeatureError, match="fallback: split the kernel at grid.sync.. into two launches"):
        co.grid_sync_launch(FakeKernel(), 256)


def test_grid_sync_grid_over_the_co_resident_maximum(monkeypatch):
    monkeypatch.setattr(co, "_caps", lambda: FakeCaps(cooperative_launch=True))
    monkeypatch.setattr(co, "max_active_blocks_per_sm", lambda k, block, smem: 8)
    monkeypatch.setattr(co, "launch", _no_launch)
    assert co.max_cooperative_grid(FakeKernel(), 256) == 1056
    with pytest.raises(LaunchConfigError, match=r"cooperative grid of 1057 blocks exceeds the co-resident maximum "
                                                r"1056 \(132 SMs, 256 threads and 1024 B .*fallback: .*two_kernels"):
        co.grid_sync_launch(FakeKernel(), 256, grid=1057, shared_mem=1024)


def test_occupancy_queries_check_the_block_against_the_kernel_before_the_driver(monkeypatch):
    """Shared memory over the opt-in limit and a block over the kernel's own thread limit raise LaunchConfigError
    naming the limit; the occupancy API (which would first raise the kernel's shared-memory attribute, a driver
    error naming nothing) is never asked."""
    def no_query(*args, **kwargs):
        raise AssertionError("the occupancy API was asked")

    monkeypatch.setattr(co, "_caps", lambda: FakeCaps(cooperative_launch=True, cluster_launch=True))
    for name in ("max_active_blocks_per_sm", "max_cluster_size", "max_active_clusters"):
        monkeypatch.setattr(co, name, no_query)
    monkeypatch.setattr(co, "launch", _no_launch)
    small = FakeKernel()
    small.max_threads_per_block = 256  # as __launch_bounds__(256) or its registers would set it
    for query in (lambda k, **kw: co.max_cooperative_grid(k, 512, **kw),
                  lambda k, **kw: co.grid_sync_launch(k, 512, **kw),
                  lambda k, **kw: co.largest_cluster(k, 512, **kw),
                  lambda k, **kw: co.active_clusters(k, 512, 2, **kw)):
        with pytest.raises(LaunchConfigError, match="exceeds the per-block limit of 232448 B"):
            query(FakeKernel(), shared_mem=300_000)
        with pytest.raises(LaunchConfigError, match="block of 512 threads exceeds this kernel's limit of 256"):
            query(small)


def test_grid_sync_where_no_block_fits_says_so(monkeypatch):
    monkeypatch.setattr(co, "_caps", lambda: FakeCaps(cooperative_launch=True))
    monkeypatch.setattr(co, "max_active_blocks_per_sm", lambda k, block, smem: 0)
    monkeypatch.setattr(co, "launch", _no_launch)
    with pytest.raises(LaunchConfigError, match=r"no block of fake with 256 threads and 1024 B shared memory fits on "
                                                r"an SM \(occupancy 0\)"):
        co.grid_sync_launch(FakeKernel(), 256, shared_mem=1024)


@pytest.mark.parametrize("mode", ["grid_sync", "two_kernels"])
def test_two_phase_refuses_an_empty_grid_in_either_mode(monkeypatch, mode):
    monkeypatch.setattr(co, "_caps", lambda: pytest.fail("checked on the GPU"))
    with pytest.raises(LaunchConfigError, match=r"grid dimension x = 0 is outside \[1, 2147483647\]"):
        co.prepare_two_phase(FakeDeviceArray(typestr="<u4"), mode=mode, grid=0)


def test_cluster_helpers_without_clusters_name_the_fallback(monkeypatch):
    monkeypatch.setattr(co, "_caps", lambda: FakeCaps(cooperative_launch=True))
    with pytest.raises(UnsupportedFeatureError, match=r"needs compute capability >= 9.0 \(got 8.0\); fallback"):
        co.largest_cluster(FakeKernel(), 128)
    with pytest.raises(UnsupportedFeatureError, match="fallback: launch without a cluster"):
        co.active_clusters(FakeKernel(), 128, 2)


def test_cluster_shapes_refused_before_the_gpu():
    with pytest.raises(LaunchConfigError, match="cluster dimension x = 4 does not divide grid dimension x = 6"):
        co.cluster_config(FakeKernel(), 6, 128, cluster=4)
    with pytest.raises(LaunchConfigError, match="cluster of 17 blocks exceeds the largest cluster size 16"):
        co.cluster_config(FakeKernel(), 34, 128, cluster=17)
    with pytest.raises(LaunchConfigError, match="declares no __cluster_dims__; give a run-time cluster"):
        co.cluster_config(FakeKernel(), 8, 128)
    with pytest.raises(LaunchConfigError, match="cluster dimensions must be >= 1"):
        co.active_clusters(FakeKernel(), 128, 0)


def test_public_names():
    for name in co.__all__:
        assert callable(getattr(co, name)), name


def test_block_sum_refuses_a_size_whose_thread_indices_wrap(monkeypatch):
    """block_sums<T> indexes threads in 32 bits: with 2**32 - 1 elements and block=1000 the last block's top
    indices (up to 4294967999) would wrap to 0..703 and add those elements again, silently. Refused before
    the kernel is loaded; a power-of-two block never wraps."""
    loaded = []
    monkeypatch.setattr(co, "kernel", lambda name: loaded.append(name) or pytest.fail("reached the GPU"))
    with pytest.raises(ValueError, match=r"indices reach 4294967999, past the 32-bit index limit 4294967295; .*"
                                         r"at most 4294967000 elements"):
        co.BlockSum(2**32 - 1, np.int32, 1000)
    with pytest.raises(ValueError, match="32-bit index limit"):
        co.BlockSum(4_294_967_001, np.float32, 1000, total=True)
    assert loaded == []
    for size, block in ((2**32 - 1, 256), (4_294_967_000, 1000)):  # padded to at most 2**32: no wrap, accepted
        with pytest.raises(pytest.fail.Exception, match="reached the GPU"):
            co.BlockSum(size, np.int32, block)


def test_a_prepared_two_phase_refuses_another_dtype_with_valueerror():
    """docs/cooperative.md: an input that is not uint32 raises ValueError (prepare_two_phase and tp(x) alike)."""
    tp = object.__new__(co.TwoPhase)  # a TwoPhase for 10 elements, made without the GPU
    tp.size, tp.rounds, tp.mode, tp.grid, tp.block, tp._partials = 10, 1, "two_kernels", 4, 256, None
    with pytest.raises(ValueError, match="x must be uint32, got int32"):
        tp(FakeDeviceArray(typestr="<i4"), stream=0)
