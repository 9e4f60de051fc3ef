"""A Gaussian blur written once and run under three scheduling policies (cuadv.TileKernel).

The CUDA Programming Guide's motivating case for a prologue: a convolution whose coefficients do not depend on the
tile. Here the prologue computes the Gaussian weights into shared memory once per running block;
each tile is a 32 x 32 patch of output, loaded with its halo into shared memory.

    PYTHONPATH=src python examples/blur_work_stealing.py [height width]

Runs fixed_work, fixed_blocks and auto (clc, steal or fixed_work, whichever this GPU has), validates each against
NumPy (float64) and prints its time.
"""

from __future__ import annotations

import sys

import numpy as np

import cuadv
from cuadv.work_stealing import resolve_policy

RADIUS = 4
TILE = 32  # output pixels per tile side
BLOCK = (32, 8)

PARAMS = "const float* in, float* out, int height, int width, float sigma"
PREAMBLE = f"#define R {RADIUS}\n#define T {TILE}\n"
PROLOGUE = r"""
    // Once per running block: the Gaussian weights, shared by every tile this block processes.
    __shared__ float weights[2 * R + 1];
    if (threadIdx.y == 0 && threadIdx.x <= 2 * R) {
      const float d = float(int(threadIdx.x) - R);
      weights[threadIdx.x] = expf(-d * d / (2.0f * sigma * sigma));
    }
    __syncthreads();  // the weights are written before any thread reads them
    float sum = 0.0f;
    for (int i = 0; i <= 2 * R; ++i) sum += weights[i];
    const float norm = 1.0f / (sum * sum);
"""
BODY = r"""
      __shared__ float patch[T + 2 * R][T + 2 * R + 1];  // +1: no bank conflicts down a column
      const int x0 = int(tile.x) * T - R, y0 = int(tile.y) * T - R;
      for (int y = threadIdx.y; y < T + 2 * R; y += blockDim.y)
        for (int x = threadIdx.x; x < T + 2 * R; x += blockDim.x) {
          const int gy = min(max(y0 + y, 0), height - 1), gx = min(max(x0 + x, 0), width - 1);  // clamp to edge
          patch[y][x] = in[(size_t)gy * width + gx];
        }
      __syncthreads();  // the patch is complete before any thread reads it
      for (int y = threadIdx.y; y < T; y += blockDim.y) {
        const int oy = int(tile.y) * T + y, ox = int(tile.x) * T + int(threadIdx.x);
        if (oy < height && ox < width) {
          float acc = 0.0f;
          for (int i = 0; i <= 2 * R; ++i)
            for (int j = 0; j <= 2 * R; ++j) acc += weights[i] * weights[j] * patch[y + i][threadIdx.x + j];
          out[(size_t)oy * width + ox] = acc * norm;
        }
      }
      __syncthreads();  // every thread is done with the patch before the next tile overwrites it
"""


def blur_kernel(policy: str) -> cuadv.TileKernel:
    return cuadv.TileKernel(PARAMS, BODY, PROLOGUE, policy=policy, block=BLOCK, preamble=PREAMBLE,
                            name=f"blur_{policy}")


def tiles_for(height: int, width: int) -> tuple[int, int]:
    return (-(-width // TILE), -(-height // TILE))


def reference(image: np.ndarray, sigma: float) -> np.ndarray:
    d = np.arange(-RADIUS, RADIUS + 1, dtype=np.float64)
    w = np.exp(-d * d / (2 * sigma * sigma))
    w /= w.sum()
    padded = np.pad(image.astype(np.float64), RADIUS, mode="edge")
    h, wd = image.shape
    out = np.zeros((h, wd))
    for i in range(2 * RADIUS + 1):
        for j in range(2 * RADIUS + 1):
            out += w[i] * w[j] * padded[i:i + h, j:j + wd]
    return out


def main(height: int = 4099, width: int = 3001) -> None:
    import cupy as cp

    sigma = np.float32(2.0)
    image = np.random.default_rng().standard_normal((height, width), dtype=np.float32)
    expected = reference(image, float(sigma))
    src = cp.asarray(image)
    caps = cuadv.current_device().caps
    for policy in ("fixed_work", "fixed_blocks", "auto"):
        k = blur_kernel(policy)
        out = cp.full_like(src, cp.nan)
        k(tiles_for(height, width), src, out, height, width, sigma)
        err = np.abs(cp.asnumpy(out) - expected).max()
        if not err < 1e-4:
            raise SystemExit(f"{policy}: max error {err}")
        t = cuadv.time_gpu(lambda: k(tiles_for(height, width), src, out, height, width, sigma), repeats=20)
        runs_as = resolve_policy(policy, caps.compute_capability)  # auto: clc from 10.0, steal on 9.x
        shown = policy if runs_as == policy else f"{policy} ({runs_as})"
        print(f"{shown:>14} on {caps.name}: {t.median_ms:.3f} ms, max error {err:.2e}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
