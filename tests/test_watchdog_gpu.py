"""No hang: a kernel that does not end makes every public wait raise GpuTimeoutError naming it, within a
short timeout; released afterwards (a host-mapped flag the kernel spins on), it ends and the context works
on. A kernel that truly never ends lets its process exit, with status 1, in bounded time."""

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuadv import GpuTimeoutError, LaunchConfig, compile_source, launch, prepare, time_gpu, wait
from cuadv.memory import HostWords
from cuadv.timing import synchronize, synchronize_device

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]

SRC = r"""
// Spins until the host sets *flag (page-locked host memory mapped into the device: a volatile load
// reads it over the bus each time, so the host's store is seen).
extern "C" __global__ void spin_until_released(const volatile unsigned long long* flag) {
  while (*flag == 0ull) __nanosleep(1000);
}
extern "C" __global__ void add_one(int* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}
"""

CONFIG = LaunchConfig(grid=1, block=32)


@pytest.fixture(scope="module")
def module():
    return compile_source(SRC, name="watchdog")


@pytest.fixture
def held(module, cp):
    """A non-blocking stream and a spin kernel launched on it, released (and waited for) at the end."""
    flag, address = HostWords().take()
    stream = cp.cuda.Stream(non_blocking=True)
    run = prepare(module.kernel("spin_until_released"), CONFIG)
    yield run, address, stream
    flag[0] = 1  # release: the kernel ends
    synchronize(stream, what="the released spin kernel", timeout_s=60)


def context_still_works(module, cp):
    x = cp.arange(1000, dtype=cp.int32)
    synchronize_device(timeout_s=60)
    launch(module.kernel("add_one"), LaunchConfig(grid=4, block=256), x, np.int32(1000), stream=0)
    synchronize(0, timeout_s=60)
    assert np.array_equal(cp.asnumpy(x), np.arange(1, 1001, dtype=np.int32))


@pytest.mark.parametrize("warmup", [1, 0])  # 1: the stream wait after the warm-up; 0: the stop event's wait
def test_time_gpu_times_out_naming_the_kernel(module, cp, held, warmup):
    run, address, stream = held
    timed = functools.partial(run, address, stream=stream.ptr)  # repr names the launcher's kernel
    with pytest.raises(GpuTimeoutError) as info:
        time_gpu(timed, stream=stream.ptr, warmup=warmup, repeats=1, queue_ahead_us=0, timeout_s=1.5)
    msg = str(info.value)
    assert "Launcher('spin_until_released'" in msg
    assert "did not finish within the timeout of 1.5 s" in msg and "CUADV_TIMEOUT_S" in msg
    assert info.value.timeout_s == 1.5


def test_wait_on_a_stream_and_on_the_device_time_out(module, cp, held):
    run, address, stream = held
    run(address, stream=stream.ptr)
    with pytest.raises(GpuTimeoutError, match=r"^kernel spin_until_released did not finish within the timeout of 1 s"):
        wait(stream, timeout_s=1, what="kernel spin_until_released")
    with pytest.raises(GpuTimeoutError,
                       match=r"^all GPU work of this process did not finish within the timeout of 1 s"):
        synchronize_device(timeout_s=1)


def test_the_environment_sets_the_default_timeout(module, cp, held, monkeypatch):
    run, address, stream = held
    run(address, stream=stream.ptr)
    monkeypatch.setenv("CUADV_TIMEOUT_S", "0.5")
    with pytest.raises(GpuTimeoutError, match=r"the GPU work on stream 0x[0-9a-f]+ did not finish within the timeout "
                                              r"of 0.5 s"):
        synchronize(stream)


def test_the_context_works_after_a_released_timeout(module, cp):
    flag, address = HostWords().take()
    stream = cp.cuda.Stream(non_blocking=True)
    launch(module.kernel("spin_until_released"), CONFIG, address, stream=stream)
    with pytest.raises(GpuTimeoutError):
        wait(stream, timeout_s=1, what="kernel spin_until_released")
    flag[0] = 1
    wait(stream, timeout_s=60, what="the released spin kernel")
    context_still_works(module, cp)


NEVER_ENDS = r'''
from cuadv import LaunchConfig, compile_source, launch
from cuadv.memory import DeviceBuffer
from cuadv.timing import synchronize

SRC = """
extern "C" __global__ void never_ends(const volatile unsigned long long* flag) {
  while (*flag == 0ull) __nanosleep(1000);  // nobody ever sets the flag
}
"""
kernel = compile_source(SRC, name="never_ends").kernel("never_ends")
flag = DeviceBuffer(8, fill=0)
launch(kernel, LaunchConfig(grid=1, block=32), flag.ptr, stream=0)
print("launched", flush=True)
synchronize(0, what="kernel never_ends", timeout_s=2)
print("not reached", flush=True)
'''


def test_a_kernel_that_never_ends_lets_the_process_exit():
    """The uncaught GpuTimeoutError is printed, and the process ends with status 1 instead of hanging in
    the CUDA teardown (freeing the flag's memory, destroying the context) behind the kernel."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-c", NEVER_ENDS], capture_output=True, text=True, env=env, timeout=120)
    assert "launched" in proc.stdout and "not reached" not in proc.stdout, proc.stdout + proc.stderr
    assert "GpuTimeoutError: kernel never_ends did not finish within the timeout of 2 s" in proc.stderr, proc.stderr
    assert "ending the process with status 1 without the CUDA teardown" in proc.stderr, proc.stderr
    assert proc.returncode == 1
