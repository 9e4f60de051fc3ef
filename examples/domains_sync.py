"""Memory synchronization domains: a write-heavy kernel in the "remote" domain beside a fence-heavy kernel
in the default one (LaunchConfig(mem_sync_domain=...) and cuadv.domains), checked against NumPy.

- ``fill`` streams writes over a large buffer on its own stream: the stand-in for a communication kernel
  whose writes the other kernel's fences need not wait for. It goes to the "remote" domain, once through
  its launch configuration and once through the stream's attribute (``cuadv.domains.in_domain``).
- ``block_total`` sums a vector with the last-block pattern: every block writes its partial sum, fences
  (``__threadfence()``) and takes a ticket; the block that takes the last ticket adds the partials. Its
  fences wait only for the traffic of the default domain.

A domain only narrows what a fence waits for; it orders nothing. The host waits for both streams before
it reads the results. Where the GPU has one domain only (before compute capability 9.0),
``cuadv.domains.why_not`` says so and the example runs the same kernels in the default domain, the
fallback: no ``mem_sync_domain``, no stream attribute. The results are the same either way.

    PYTHONPATH=src python examples/domains_sync.py [n]
"""

from __future__ import annotations

import sys

import numpy as np

import cuadv
import cuadv.domains as domains

BLOCK = 256  # block_total's shared-memory tree needs a power of two

SOURCE = r"""
// out[i] = 3 i + 1 (mod 2^32): plain streaming writes.
extern "C" __global__ void fill(unsigned* out, unsigned long long n) {
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = (unsigned)(3ull * i + 1ull);
}

// The sum of every thread's v (mod 2^32), valid in every thread; s holds blockDim.x values, a power of two.
// The caller makes sure no thread still reads s[] from before.
__device__ unsigned block_reduce(unsigned v, unsigned* s) {
  s[threadIdx.x] = v;
  __syncthreads();  // every thread's value is in s[] before the tree reads it
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();  // this level's sums are written before the next level reads them
  }
  return s[0];
}

// *total = sum(x) (mod 2^32) in one launch. *ticket is 0 before the launch and again after it.
extern "C" __global__ void __launch_bounds__(256) block_total(const unsigned* x, unsigned n, unsigned* partial,
                                                              unsigned* ticket, unsigned* total) {
  __shared__ unsigned s[256];
  __shared__ bool last;
  unsigned v = 0;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += x[i];
  const unsigned sum = block_reduce(v, s);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = sum;
    __threadfence();  // the partial is visible to the whole GPU before the ticket is taken
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    if (last) __threadfence();  // every other block's partial is visible to this block from here
  }
  // thread 0 has set `last` before any thread reads it, and every thread has read s[0] before s[] is written again
  __syncthreads();
  if (!last) return;
  v = 0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) v += __ldcg(&partial[b]);
  const unsigned total_sum = block_reduce(v, s);
  if (threadIdx.x == 0) {
    *total = total_sum;
    *ticket = 0;  // ready for the next launch
  }
}
"""


def build(arch: str | None = None) -> cuadv.CompiledModule:
    return cuadv.compile_source(SOURCE, name="domains_sync", arch=arch)


def main(n: int = 4_000_037) -> None:
    import cupy as cp

    reason = domains.why_not(cuadv.current_device().caps)  # None: this GPU has separate domains
    remote = None if reason else "remote"  # the fallback: the default domain (no mem_sync_domain)
    print(f"domains {domains.DOMAINS}: " + (f"not here ({reason})" if reason else "available"))

    module = build()
    fill, block_total = module.kernel("fill"), module.kernel("block_total")
    host = np.random.default_rng(0).integers(0, 1000, size=n, dtype=np.uint32)
    x = cp.asarray(host)
    grid = 4 * cuadv.current_device().caps.sm_count
    partial = cp.zeros(grid, dtype=cp.uint32)
    ticket = cp.zeros(1, dtype=cp.uint32)
    totals = cp.zeros(8, dtype=cp.uint32)
    big = cp.zeros(32 << 20, dtype=cp.uint32)  # 128 MiB for the writer
    cp.cuda.Device().synchronize()  # the buffers are ready before the two streams start

    comm = cp.cuda.Stream(non_blocking=True)
    work = cp.cuda.Stream(non_blocking=True)
    writer = cuadv.LaunchConfig(grid=grid, block=256, mem_sync_domain=remote)
    summer = cuadv.LaunchConfig(grid=grid, block=BLOCK)  # default domain
    cuadv.launch(fill, writer, big, big.size, stream=comm)
    for k in range(4):  # the fencing kernel, while the writer streams
        cuadv.launch(block_total, summer, x, np.uint32(n), partial, ticket, totals[k:k + 1], stream=work)

    if reason is None:  # the same through the stream's attribute: launches without their own domain
        assert domains.stream_domain(comm) == "default"
        with domains.in_domain(comm, "remote"):
            assert domains.stream_domain(comm) == "remote"
            cuadv.launch(fill, cuadv.LaunchConfig(grid=grid, block=256), big, big.size, stream=comm)
        assert domains.stream_domain(comm) == "default"  # put back on exit
    else:
        cuadv.launch(fill, cuadv.LaunchConfig(grid=grid, block=256), big, big.size, stream=comm)
    for k in range(4, 8):
        cuadv.launch(block_total, summer, x, np.uint32(n), partial, ticket, totals[k:k + 1], stream=work)

    cuadv.wait(comm)
    cuadv.wait(work)
    want_total = np.uint32(host.sum(dtype=np.uint64) & 0xFFFFFFFF)
    assert np.array_equal(cp.asnumpy(totals), np.full(8, want_total)), "block_total differs from NumPy"
    want_fill = np.arange(big.size, dtype=np.uint32) * np.uint32(3) + np.uint32(1)
    assert np.array_equal(cp.asnumpy(big), want_fill), "fill differs from NumPy"
    assert int(ticket.get()[0]) == 0
    where = "the remote domain" if remote else "the default domain (fallback)"
    print(f"8 sums of {n} elements ({int(want_total)}) and {big.nbytes >> 20} MiB written from {where} match NumPy")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_037)
