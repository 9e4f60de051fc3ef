"""What the shared-memory atomics alone cost a histogram of 1 GiB on this GPU: the counting of the shared-memory
kernels without reading any input, each bin drawn from a xorshift generator in registers.

    PYTHONPATH=src python3 scripts/atoms_rate.py

Cases:
- uint8, 256 bins: 2^30 increments of 32-bit counters, one replica per lane (the uint8 kernel's layout: the word
  of bin s for lane l at byte offset (s << 7) | (l << 2), no bank conflicts), two 1024-thread blocks per SM;
- int32, 64K bins: 2^28 increments of 16-bit counters packed two per word (128 KB, one 1024-thread block per
  SM), each atomic returning its old word as the packed kernels' wrap checks need, banks as random data falls.
Prints ms per 1 GiB of input and that time against the read-only ceiling's over 1 GiB.
"""

from __future__ import annotations

SOURCE = r"""
// xorshift32: a new pseudo-random word per step, in registers (no memory traffic besides the atomics).
__device__ __forceinline__ unsigned next_word(unsigned x) {
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return x;
}

// 256 bins, 32 lane replicas (32 KB): four bytes of each word, one red.shared per byte.
extern "C" __global__ void __launch_bounds__(1024) lanes256(unsigned iters, unsigned* out) {
  extern __shared__ unsigned c[];
  for (unsigned i = threadIdx.x; i < 256u * 32u; i += blockDim.x) c[i] = 0;
  __syncthreads();  // zeroed counters before the first increment
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(c)) + ((threadIdx.x & 31u) << 2);
  unsigned x = (blockIdx.x * blockDim.x + threadIdx.x) * 2654435761u + 1u;
  for (unsigned i = 0; i < iters; ++i) {
    x = next_word(x);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const unsigned addr = base + (((x >> (8 * b)) & 255u) << 7);
      asm volatile("red.shared::cta.add.u32 [%0], 1;" ::"r"(addr) : "memory");
    }
  }
  __syncthreads();  // every increment done before the read below
  out[blockIdx.x * blockDim.x + threadIdx.x] = c[threadIdx.x];
}

// 64K bins, 16-bit counters two per word (128 KB, one replica): two atomics per word of randomness, each
// returning the old word, folded into a register as the wrap checks would read it.
extern "C" __global__ void __launch_bounds__(1024) packed64k(unsigned iters, unsigned* out) {
  extern __shared__ unsigned c[];
  for (unsigned i = threadIdx.x; i < 32768u; i += blockDim.x) c[i] = 0;
  __syncthreads();  // zeroed counters before the first increment
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(c));
  unsigned x = (blockIdx.x * blockDim.x + threadIdx.x) * 2654435761u + 1u, sink = 0;
  for (unsigned i = 0; i < iters; ++i) {
    x = next_word(x);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned s = (x >> (16 * h)) & 0xFFFFu;
      const unsigned addr = base + ((s >> 1) << 2), delta = 1u << ((s & 1u) << 4);
      unsigned old;
      asm volatile("atom.shared::cta.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(addr), "r"(delta) : "memory");
      sink |= old;
    }
  }
  __syncthreads();  // every increment done before the read below
  out[blockIdx.x * blockDim.x + threadIdx.x] = c[threadIdx.x] + sink;
}
"""

CASES = (  # name, kernel, blocks per SM, shared bytes, atomics per step, increments in 1 GiB of input
    ("uint8, 256 bins, 32 lane replicas", "lanes256", 2, 256 * 32 * 4, 4, 1 << 30),
    ("int32, 64K bins, 16-bit packed, returning", "packed64k", 1, 32768 * 4, 2, 1 << 28),
)


def main() -> None:
    import cupy as cp

    from cuadv.compiler import compile_source
    from cuadv.device import current_device
    from cuadv.launching import LaunchConfig, launch
    from cuadv.timing import read_ceiling, time_gpu

    caps = current_device().caps
    ceiling_ms = (1 << 30) / read_ceiling(1 << 30).bytes_per_s * 1e3
    print(f"{caps.name}, {caps.sm_count} SMs; read-only ceiling over 1 GiB: {ceiling_ms:.4f} ms")
    module = compile_source(SOURCE, name="atoms_rate")
    for label, name, per_sm, smem, per_step, increments in CASES:
        grid = per_sm * caps.sm_count
        iters = -(-increments // (grid * 1024 * per_step))
        done = grid * 1024 * per_step * iters
        out = cp.zeros(grid * 1024, dtype=cp.uint32)
        kernel = module.kernel(name)
        config = LaunchConfig(grid=grid, block=1024, shared_mem=smem)
        t = time_gpu(lambda: launch(kernel, config, iters, out.data.ptr), repeats=20)
        ms = t.median_ms * increments / done
        print(f"{label:<44} {ms:.4f} ms per 1 GiB ({100 * ceiling_ms / ms:5.1f}% of the read-only ceiling at that "
              "pace)", flush=True)


if __name__ == "__main__":
    main()
