"""Every launch option on a real GPU, argument interop, and the device-side configuration errors."""

import threading

import numpy as np
import pytest

from cuadv import AccessPolicyWindow, LaunchConfig, compile_source, current_device, launch
from cuadv.launching import prepare
from cuadv.errors import LaunchConfigError
from cuadv.timing import synchronize

pytestmark = pytest.mark.gpu

SRC = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void block_ids(int* out) {
  // one record per block: linear block id, cluster rank, cluster size
  auto cluster = cg::this_cluster();
  const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x == 0) {
    out[3 * b] = b;
    out[3 * b + 1] = cluster.block_rank();
    out[3 * b + 2] = cluster.num_blocks();
  }
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) fixed_cluster(int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = cg::this_cluster().block_rank();
}

extern "C" __global__ void __launch_bounds__(128) bounded(int* out) { out[threadIdx.x] = 1; }

// Seed 002's two-phase kernel: every block writes, grid.sync(), every block reads its neighbour's value.
extern "C" __global__ void two_phase(int* data, int* out) {
  cg::grid_group grid = cg::this_grid();
  const unsigned i = grid.thread_rank();
  data[i] = i * 3 + 1;
  grid.sync();  // all of phase 1's writes are visible to every block
  const unsigned n = grid.size();
  out[i] = data[(i + blockDim.x) % n];
}

extern "C" __global__ void produce(int* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = i;
  asm volatile("griddepcontrol.launch_dependents;");  // lets the dependent grid start its setup
}

extern "C" __global__ void consume(const int* x, int* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the producer grid has completed and flushed
  if (i < n) y[i] = 2 * x[i];
}

extern "C" __global__ void add_one(float* x, unsigned long long n) {
  const unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

extern "C" __global__ void takes_scalars(double* out, float f, double d, int i, unsigned char c) {
  out[0] = f; out[1] = d; out[2] = i; out[3] = c;
}

// 16 KB of static shared memory beside a dynamic array: past 48 KB in all, the dynamic part needs the opt-in.
extern "C" __global__ void static_and_dynamic(int* out, int n_dyn) {
  __shared__ int fixed[4096];
  extern __shared__ int dyn[];
  for (int i = threadIdx.x; i < 4096; i += blockDim.x) fixed[i] = i;
  for (int i = threadIdx.x; i < n_dyn; i += blockDim.x) dyn[i] = 2 * i;
  __syncthreads();  // both arrays are written before thread 0 reads their last words
  if (threadIdx.x == 0) out[blockIdx.x] = fixed[4095] + dyn[n_dyn - 1];
}
"""


@pytest.fixture(scope="module")
def module():
    return compile_source(SRC, name="launch_tests")


def test_caps_are_consistent():
    caps = current_device().caps
    assert caps.sm_count > 0 and caps.l2_cache_bytes > 0
    if caps.compute_capability >= (9, 0):
        assert caps.cluster_launch and caps.tma and caps.pdl
        assert 8 <= caps.max_cluster_size_portable <= caps.max_cluster_size_nonportable <= 16
    assert caps.clc == (caps.compute_capability >= (10, 0))
    assert caps.stream_priority_high <= caps.stream_priority_low


@pytest.mark.parametrize("cluster", [1, 2, 4, 8, 16])
def test_runtime_clusters(module, cp, cluster):
    if cluster > current_device().caps.max_cluster_size_nonportable:
        pytest.skip("cluster larger than this GPU allows")
    k = module.kernel("block_ids")
    grid = 64
    out = cp.full(3 * grid, -1, dtype=cp.int32)
    launch(k, LaunchConfig(grid=grid, block=32, cluster=cluster if cluster > 1 else None), out)
    rec = cp.asnumpy(out).reshape(grid, 3)
    assert (rec[:, 0] == np.arange(grid)).all()
    assert (rec[:, 1] == np.arange(grid) % cluster).all()
    assert (rec[:, 2] == cluster).all()


def test_compile_time_cluster_and_runtime_cluster_are_exclusive(module, cp):
    k = module.kernel("fixed_cluster")
    out = cp.full(8, -1, dtype=cp.int32)
    launch(k, LaunchConfig(grid=8, block=32), out)
    assert (cp.asnumpy(out) == np.arange(8) % 2).all()
    with pytest.raises(LaunchConfigError, match=r"declares __cluster_dims__\(2, 1, 1\)"):
        launch(k, LaunchConfig(grid=8, block=32, cluster=2), out)
    with pytest.raises(LaunchConfigError, match="cluster dimension x = 2 does not divide grid dimension x = 7"):
        launch(k, LaunchConfig(grid=7, block=32), out)


def test_kernel_thread_limit(module, cp):
    out = cp.zeros(256, dtype=cp.int32)
    with pytest.raises(LaunchConfigError, match="256 threads exceeds this kernel's limit of 128"):
        launch(module.kernel("bounded"), LaunchConfig(grid=1, block=256), out)


def test_shared_memory_limit(module, cp):
    caps = current_device().caps
    out = cp.zeros(256, dtype=cp.int32)
    with pytest.raises(LaunchConfigError, match=f"per-block limit of {caps.shared_mem_per_block_optin} B"):
        launch(module.kernel("block_ids"),
               LaunchConfig(grid=1, block=32, shared_mem=caps.shared_mem_per_block_optin + 1), out)
    # Above 48 KB the kernel's limit is raised, not refused.
    launch(module.kernel("block_ids"), LaunchConfig(grid=2, block=32, shared_mem=100 * 1024), out)
    synchronize()


def test_dynamic_shared_memory_beside_static_opts_in_past_48_kb_in_all(module, cp):
    """16 KB static and 40 KB dynamic: 56 KB in all, so the dynamic limit (48 KB less the static by default) is
    raised although the dynamic part alone is under 48 KB."""
    k = module.kernel("static_and_dynamic")
    assert k.static_shared_bytes == 16 * 1024
    out = cp.full(2, -1, dtype=cp.int32)
    launch(k, LaunchConfig(grid=2, block=256, shared_mem=40 * 1024), out, np.int32(10 * 1024))
    synchronize()
    assert out.tolist() == [4095 + 2 * (10 * 1024 - 1)] * 2


def test_occupancy_queries_and_largest_cluster(module, cp):
    from cuadv.kernel import max_active_blocks_per_sm, max_active_clusters, max_cluster_size

    caps = current_device().caps
    k = module.kernel("block_ids")
    big = caps.shared_mem_per_block_optin - 1024
    assert max_active_blocks_per_sm(k, 1024, big) == 1
    largest = max_cluster_size(k, block=1024, shared_mem=big, non_portable=True)
    assert 1 <= largest <= caps.max_cluster_size_nonportable
    assert max_active_clusters(k, 1024, largest, big) >= 1
    out = cp.full(3 * 4 * largest, -1, dtype=cp.int32)
    launch(k, LaunchConfig(grid=4 * largest, block=1024, cluster=largest, shared_mem=big), out)
    assert (cp.asnumpy(out).reshape(-1, 3)[:, 2] == largest).all()


def test_cooperative_grid_sync(module, cp):
    caps = current_device().caps
    k = module.kernel("two_phase")
    grid, block = 2 * caps.sm_count, 256
    n = grid * block
    data, out = cp.zeros(n, dtype=cp.int32), cp.full(n, -1, dtype=cp.int32)
    launch(k, LaunchConfig(grid=grid, block=block, cooperative=True), data, out)
    i = (np.arange(n) + block) % n
    assert (cp.asnumpy(out) == i * 3 + 1).all()


def test_cooperative_grid_over_co_residency_names_the_maximum(module, cp):
    caps = current_device().caps
    with pytest.raises(LaunchConfigError, match=r"exceeds the co-resident maximum \d+"):
        launch(module.kernel("two_phase"), LaunchConfig(grid=caps.sm_count * 64, block=1024, cooperative=True),
               cp.zeros(1, dtype=cp.int32), cp.zeros(1, dtype=cp.int32))


@pytest.mark.parametrize("backend", ["core", "driver"])
def test_pdl_chain(module, cp, backend):
    n = 1 << 20
    x, y = cp.full(n, -1, dtype=cp.int32), cp.full(n, -1, dtype=cp.int32)
    grid = (n + 255) // 256
    launch(module.kernel("produce"), LaunchConfig(grid=grid, block=256), x, n, backend=backend)
    launch(module.kernel("consume"), LaunchConfig(grid=grid, block=256, pdl=True), x, y, n, backend=backend)
    assert (cp.asnumpy(y) == 2 * np.arange(n)).all()


def _add_one(module, cp, **options):
    n = (1 << 22) + 3
    x = cp.arange(n, dtype=cp.float32)
    launch(module.kernel("add_one"), LaunchConfig(grid=(n + 255) // 256, block=256, **options), x, n)
    assert (cp.asnumpy(x) == np.arange(n, dtype=np.float32) + 1).all()
    return x


def test_priority(module, cp):
    caps = current_device().caps
    _add_one(module, cp, priority=caps.stream_priority_high)
    with pytest.raises(LaunchConfigError, match="outside the device's range"):
        _add_one(module, cp, priority=caps.stream_priority_high - 10)


def test_memory_sync_domain(module, cp):
    _add_one(module, cp, mem_sync_domain="remote")
    _add_one(module, cp, mem_sync_domain="default")


def test_access_policy_window(module, cp):
    caps = current_device().caps
    if caps.persisting_l2_max_bytes == 0:
        pytest.skip("no persisting L2 on this GPU")
    buf = cp.zeros(1 << 20, dtype=cp.float32)
    _add_one(module, cp, access_policy=AccessPolicyWindow(buf.data.ptr, buf.nbytes, hit_ratio=0.6))
    with pytest.raises(LaunchConfigError, match="exceeds the maximum window"):
        _add_one(module, cp, access_policy=AccessPolicyWindow(buf.data.ptr, caps.access_policy_max_window_bytes + 1))


@pytest.mark.parametrize("backend", ["core", "driver"])
def test_scalars_take_the_declared_types(module, cp, backend):
    out = cp.zeros(4, dtype=cp.float64)
    launch(module.kernel("takes_scalars"), LaunchConfig(grid=1, block=1), out, 1.25, 2.5, -7, np.uint8(200),
           backend=backend)
    assert cp.asnumpy(out).tolist() == [1.25, 2.5, -7.0, 200.0]


def test_dlpack_and_cuda_core_buffers(module, cp):
    from cuda.core import Device

    n = 1024
    k = module.kernel("add_one")
    dev = Device()
    buf = dev.allocate(n * 4, stream=dev.default_stream)
    dev.sync()
    view = cp.ndarray(n, dtype=cp.float32, memptr=cp.cuda.MemoryPointer(
        cp.cuda.UnownedMemory(int(buf.handle), n * 4, buf), 0))
    view[:] = 0
    launch(k, LaunchConfig(grid=4, block=256), buf, n)
    synchronize()
    assert (cp.asnumpy(view) == 1).all()
    try:
        import torch
    except Exception as exc:  # absent, or (seen under pytest-xdist) failing to initialise beside CuPy
        pytest.skip(f"torch unavailable for the DLPack check: {type(exc).__name__}: {exc}")
    t = torch.zeros(n, device="cuda", dtype=torch.float32)
    launch(k, LaunchConfig(grid=4, block=256), t, n, stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert bool((t == 1).all())


def test_streams_from_cupy_and_cuda_core(module, cp):
    n = 4096
    x = cp.zeros(n, dtype=cp.float32)
    cp.cuda.Device().synchronize()  # the zeros (CuPy's stream) land before the non-blocking stream's kernel
    s = cp.cuda.Stream(non_blocking=True)
    launch(module.kernel("add_one"), LaunchConfig(grid=16, block=256), x, n, stream=s)
    s.synchronize()
    stream = current_device().core.create_stream()
    launch(module.kernel("add_one"), LaunchConfig(grid=16, block=256), x, n, stream=stream)
    stream.sync()
    assert (cp.asnumpy(x) == 2).all()


def test_prepared_launcher_across_argument_types_views_and_streams(module, cp):
    n = 1000
    x = cp.zeros(n, dtype=cp.float32)
    synchronize()  # zeroed on CuPy's stream
    run = prepare(module.kernel("add_one"), LaunchConfig(grid=4, block=256))
    before = set(run.packer._plans)  # the kernel object is shared with other tests
    for _ in range(3):
        run(x, n)  # a Python int into the unsigned long long parameter
    run(x, np.uint64(n))  # another argument type: another plan, the same result
    synchronize()
    s = cp.cuda.Stream(non_blocking=True)
    run(x, n, stream=s)
    run(x, n, stream=s)
    s.synchronize()
    run(x[1:], n - 1)  # a view: its own pointer, back on the default stream
    synchronize()
    want = np.full(n, 6, dtype=np.float32)
    want[1:] += 1
    assert (cp.asnumpy(x) == want).all()
    signatures = {(type(x), int), (type(x), np.uint64)}
    assert signatures <= set(run.packer._plans)  # one plan per argument-type signature ...
    assert set(run.packer._plans) - before <= signatures  # ... and none for views or streams


def test_launch_from_several_threads(module, cp):
    """Threads share the configuration's launcher; a call that finds it busy packs its own arguments."""
    n, calls = 4096, 300
    k = module.kernel("add_one")
    cfg = LaunchConfig(grid=16, block=256)
    xs = [cp.zeros(n, dtype=cp.float32) for _ in range(4)]
    synchronize()
    errors = []

    def work(x):
        try:
            current_device().activate()  # the context is current per thread
            for _ in range(calls):
                launch(k, cfg, x, n)
        except Exception as exc:  # reported below: a thread's exception would otherwise vanish
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    synchronize()
    assert not errors
    for x in xs:
        assert (cp.asnumpy(x) == calls).all()


def test_stream_gate_holds_work_until_released(module, cp):
    """Work queued behind a StreamGate does not run before release() and runs after it."""
    import time

    from cuadv.timing import StreamGate

    x = cp.zeros(256, dtype=cp.float32)
    cp.cuda.Device().synchronize()  # the zeros (CuPy's stream) land before the non-blocking stream's kernel
    stream = cp.cuda.Stream(non_blocking=True)
    k = module.kernel("add_one")
    launch(k, LaunchConfig(grid=1, block=256), x, x.size, stream=stream)  # loaded before any gated launch
    stream.synchronize()
    gate = StreamGate()
    gate.hold(stream.ptr)
    launch(k, LaunchConfig(grid=1, block=256), x, x.size, stream=stream)
    time.sleep(0.05)
    assert not stream.done and float(x[0].get()) == 1.0  # still held (read on CuPy's own stream)
    gate.release()
    stream.synchronize()
    assert (cp.asnumpy(x) == 2.0).all()


def test_one_kernel_object_per_name(module):
    # Launchers and the kernel's shared-memory and cluster attributes are cached on the Kernel object,
    # so two objects for one CUDA kernel would disagree about what the kernel is set to.
    assert module.kernel("add_one") is module.kernel("add_one")


ORDER_SRC = r"""
#include <cuadv/timer.cuh>
extern "C" __global__ void spin_then_set(int* x, int n, unsigned long long ns) {
  if (threadIdx.x == 0) cuadv::timer::spin_ns(ns);
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = 1;
}
extern "C" __global__ void add_one(int* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] += 1;
}
"""
ORDER_N = 1 << 16


def _order_kernels():
    module = compile_source(ORDER_SRC, name="order")
    return module.kernel("spin_then_set"), module.kernel("add_one"), LaunchConfig(grid=64, block=256)


def test_stream_none_goes_on_cupys_current_non_blocking_stream(cp):
    spin, add, cfg = _order_kernels()
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.zeros(ORDER_N, cp.int32)
        launch(spin, cfg, x, np.int32(ORDER_N), np.uint64(50_000_000), stream=s)  # 50 ms, then x = 1
        launch(add, cfg, x, np.int32(ORDER_N))  # stream=None: CuPy's current stream, so after the spin
        s.synchronize()
    assert int(x.min()) == 2 and int(x.max()) == 2


def test_stream_none_goes_on_torchs_current_side_stream():
    torch = pytest.importorskip("torch")
    spin, add, cfg = _order_kernels()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.zeros(ORDER_N, dtype=torch.int32, device="cuda")
        launch(spin, cfg, x, np.int32(ORDER_N), np.uint64(50_000_000), stream=side.cuda_stream)
        launch(add, cfg, x, np.int32(ORDER_N))  # stream=None with a tensor argument: torch's current stream
    side.synchronize()
    assert int(x.min()) == 2 and int(x.max()) == 2


def test_stream_none_without_arrays_and_a_torch_event_follow_torchs_side_stream(cp):
    """No array among the arguments and CuPy on its null stream: None is torch's current stream (a pool stream,
    not ordered with the legacy one), so time_gpu's stop event follows the work enqueued there and its wait for
    that event leaves the side stream idle; wait() takes a torch Event, at once where it was never recorded."""
    torch = pytest.importorskip("torch")
    from cuadv import time_gpu, wait
    from cuadv.interop import stream_handle

    spin, _add, cfg = _order_kernels()
    side = torch.cuda.Stream()
    x = torch.zeros(ORDER_N, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    ev = torch.cuda.Event()
    wait(ev)  # never recorded: nothing to wait for
    with torch.cuda.stream(side):
        assert stream_handle(None) == side.cuda_stream
        time_gpu(lambda: launch(spin, cfg, x, np.int32(ORDER_N), np.uint64(20_000_000), stream=side.cuda_stream),
                 warmup=0, repeats=1)
        assert side.query()  # the 20 ms spin came before the stop event time_gpu waited for
        launch(spin, cfg, x, np.int32(ORDER_N), np.uint64(20_000_000), stream=side.cuda_stream)
        ev.record(side)
    wait(ev)
    assert ev.query() and side.query()
