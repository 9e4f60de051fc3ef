"""Wait for your own GPU work with a deadline: cuadv.wait and GpuTimeoutError.

``stream.synchronize()`` waits as long as the kernel runs, forever for one that never ends.
``cuadv.wait(stream, timeout_s=...)`` polls the stream instead and raises ``GpuTimeoutError``
naming the work once the deadline has passed; the kernel keeps running, and a later wait (or the
end of the process) picks it up. Every wait inside cuadv works this way, bounded by
``CUADV_TIMEOUT_S`` (seconds, default 60, ``inf``: no limit).

Here a kernel busy for about half a second is waited for twice: first with a deadline it cannot
meet (the error is printed), then with one it can (the result is checked). Then again under
``cuadv.waiting.scope`` (a default timeout and an activity for every wait inside it), with
``wait_device``, ``event_done``, ``timed_out`` and ``wait_until``. Needs a CUDA GPU and CuPy.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import cuadv
from cuadv import waiting

SOURCE = r"""
// One thread per element, each busy until the GPU's global timer has advanced by `busy_ns`,
// then writes its index: a stand-in for a long kernel whose result is easy to check.
extern "C" __global__ void busy_fill(unsigned int* out, unsigned int n, unsigned long long busy_ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < busy_ns);
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i;
}
"""
BLOCK = 256


def build(arch: str | None = None) -> cuadv.CompiledModule:
    return cuadv.compile_source(SOURCE, name="wait_example", arch=arch)


def main(busy_s: float = 0.5, n: int = 1 << 16) -> None:
    import cupy as cp

    kernel = build().kernel("busy_fill")
    config = cuadv.LaunchConfig(grid=(n + BLOCK - 1) // BLOCK, block=BLOCK)
    out = cp.zeros(n, dtype=cp.uint32)
    stream = cp.cuda.Stream(non_blocking=True)

    with stream:  # stream=None in cuadv means the caller's current stream: this one
        cuadv.launch(kernel, config, out, np.uint32(n), np.uint64(int(busy_s * 1e9)))
    start = time.perf_counter()
    try:
        cuadv.wait(stream, timeout_s=busy_s / 10, what="busy_fill")
        sys.exit("the short wait returned before the kernel could have finished")
    except cuadv.GpuTimeoutError as error:
        # the first sentence names the work and the deadline; the rest says what to do with a kernel that never ends
        print(f"after {time.perf_counter() - start:.2f} s: {str(error).split('. ')[0]}")

    cuadv.wait(stream, timeout_s=busy_s * 20 + 5, what="busy_fill")  # a deadline it can meet
    print(f"busy_fill finished {time.perf_counter() - start:.2f} s after the launch")
    if not np.array_equal(cp.asnumpy(out), np.arange(n, dtype=np.uint32)):
        sys.exit("wrong result")
    print(f"{n} elements match their index")

    # The same waits without a timeout of their own: a scope sets the default for every wait inside it (cuadv's
    # too) and names what the process is doing in a timeout's message; an event is polled, not waited for.
    done = cp.cuda.Event(disable_timing=True)
    with stream:
        cuadv.launch(kernel, config, out, np.uint32(n), np.uint64(int(busy_s * 1e9)))
        done.record()
    with waiting.scope(timeout_s=busy_s / 10, activity="the example's second launch") as current:
        assert waiting.resolve_timeout() == current.timeout_s
        print(f"just after the launch, event_done: {waiting.event_done(done)}")
        try:
            waiting.wait_device()  # every stream of this context, at most the scope's timeout
            sys.exit("wait_device returned before the kernel could have finished")
        except cuadv.GpuTimeoutError as error:
            print(f"wait_device in the scope: {str(error).split('. ')[0]}")
    print(f"a wait of this process has timed out: {waiting.timed_out()}")  # so skip frees that would block
    waiting.wait_until(lambda: waiting.event_done(done), "busy_fill's event", timeout_s=busy_s * 20 + 5)
    print("the event's work is done (wait_until polled event_done)")


if __name__ == "__main__":
    main(*(float(v) for v in sys.argv[1:2]))
