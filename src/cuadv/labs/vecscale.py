"""Vector-scalar multiply v := alpha * v, the seed's example, under each scheduling policy.

Needs: compute capability 9.0 for 'steal' (any CUDA GPU for the other policies).
Key insight: a memory-bound body hides the scheduler: every policy should run at the copy ceiling,
so whatever a policy costs per tile shows here as lost bandwidth.
Run: ``cuadv bench vecscale``.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ValidationError
from ..results import LabResult, Table
from ..work_stealing import TileKernel
from .base import RunContext

THREADS = 256
VEC_PER_THREAD = 8  # float4 loads in flight per thread
TILE_ELEMS = THREADS * 4 * VEC_PER_THREAD
MIN_BLOCKS_PER_SM = 4

PARAMS = "float* data, unsigned long long n, float alpha, unsigned long long prologue_ns"
PROLOGUE = r"""
    // The seed's compute_scalar(): a prologue whose cost does not depend on the tile.
    float a = alpha;
    if (prologue_ns != 0) {
      const unsigned long long t0 = cuadv::ptx::globaltimer_ns();
      while (cuadv::ptx::globaltimer_ns() - t0 < prologue_ns) {}
    }
"""
BODY = r"""
      constexpr int kVec = %d;
      const unsigned long long base = tile.index * (unsigned long long)(blockDim.x * 4 * kVec);
      const long long left = (long long)n - (long long)base;  // elements from the tile's start to the end
      if (left >= (long long)blockDim.x * 4 * kVec) {  // a full tile: kVec 16-byte loads in flight per thread
        float4* p = reinterpret_cast<float4*>(data + base) + threadIdx.x;
        float4 v[kVec];
        #pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = p[k * blockDim.x];
        #pragma unroll
        for (int k = 0; k < kVec; ++k) {
          v[k].x *= a; v[k].y *= a; v[k].z *= a; v[k].w *= a;
          p[k * blockDim.x] = v[k];
        }
      } else {  // the last, partial tile: one element per thread per step
        for (long long j = threadIdx.x; j < left; j += blockDim.x) data[base + j] *= a;
      }
""" % VEC_PER_THREAD


def vecscale_kernel(policy: str, quantum_us: float | None = None) -> TileKernel:
    # 4 resident blocks per SM (registers capped at 64): a block that lives for many tiles needs other
    # blocks' loads in flight while it synchronises between tiles.
    return TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=THREADS, quantum_us=quantum_us,
                      name=f"vecscale_{policy}", min_blocks_per_sm=MIN_BLOCKS_PER_SM)


def tiles_for(n: int) -> int:
    return math.ceil(n / TILE_ELEMS)


# Policies shown in the lab: name, policy, quantum in microseconds (None: the default).
VARIANTS: list[tuple[str, str, float | None]] = [
    ("fixed_work", "fixed_work", None),
    ("fixed_blocks", "fixed_blocks", None),
    ("steal", "steal", None),
    ("steal Q=inf", "steal", math.inf),
]


def validate(kernels: dict[str, TileKernel], sizes) -> None:
    """Every element against NumPy's float32 product, on fresh random data, for every kernel."""
    import cupy as cp

    alpha = np.float32(1.0001)
    rng = np.random.default_rng()
    for n in sizes:
        host = rng.standard_normal(n, dtype=np.float32)
        for label, k in kernels.items():
            dev = cp.asarray(host)
            k(tiles_for(n), dev, n, alpha, 0)
            if not np.array_equal(cp.asnumpy(dev), host * alpha):
                raise ValidationError(f"vecscale {label}: wrong result at n={n}")


class VecScaleLab:
    name = "vecscale"
    title = "Vector-scalar multiply (seed 000) under each scheduling policy"

    def supported(self, caps) -> str | None:
        return None

    def build(self, arch: str):
        return [vecscale_kernel(p).compile(arch) for p in ("fixed_work", "fixed_blocks", "steal")]

    def smoke(self) -> None:
        validate({label: vecscale_kernel(policy, q) for label, policy, q in VARIANTS}, (TILE_ELEMS * 3 + 5,))

    def run(self, ctx: RunContext) -> LabResult:
        import cupy as cp

        from ..timing import time_gpu

        result = LabResult(self.name, self.title)
        kernels = {label: vecscale_kernel(policy, q) for label, policy, q in VARIANTS}
        alpha = np.float32(1.0001)
        validate(kernels, (0, 1, 3, 4099, TILE_ELEMS * 7 + 5, 1_000_003))
        result.checks.append("every element equals NumPy's float32 product at n = 0, 1, 3, 4099, 7 tiles + 5, "
                             "1,000,003 for every policy")
        sizes = [1 << 28] if ctx.quick else [1 << 28, 1 << 30]  # elements: 1 GiB, 4 GiB
        rows = []
        for n in sizes:
            data = cp.random.standard_normal(n, dtype=cp.float32)
            nbytes = 2 * 4 * n  # read + write
            peer = time_gpu(lambda: data.__imul__(alpha), repeats=10)
            base_ms = None
            for label, k in kernels.items():
                ctx.progress(f"vecscale {label} at {4 * n >> 30} GiB")
                t = time_gpu(lambda: k(tiles_for(n), data, n, alpha, 0), repeats=10)
                base_ms = base_ms or t.median_ms
                bw = t.rate(nbytes)
                rows.append([f"{4 * n / 2**30:.0f} GiB", label, t.median_ms, bw / 1e9, 100 * ctx.ceiling.fraction(bw),
                             base_ms / t.median_ms, peer.median_ms / t.median_ms])
                result.figures[f"vecscale_{label}_{4 * n >> 30}GiB_pct_ceiling"] = 100 * ctx.ceiling.fraction(bw)
            rows.append([f"{4 * n / 2**30:.0f} GiB", "CuPy data *= alpha", peer.median_ms, peer.rate(nbytes) / 1e9,
                         100 * ctx.ceiling.fraction(peer.rate(nbytes)), base_ms / peer.median_ms, 1.0])
            del data
        result.tables.append(Table(
            "v := alpha * v (float32, in place)",
            ["size", "policy", "median ms", "GB/s", "% of copy ceiling", "x fixed_work", "x CuPy"], rows,
            note=f"bytes = 8 per element (read + write); copy ceiling {ctx.ceiling.tb_per_s:.2f} TB/s measured in "
                 "this run; medians of 10 CUDA-event timings after warm-up"))
        return result
