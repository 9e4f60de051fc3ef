"""2-D copies and transposes through the Tensor Memory Accelerator (TMA), and a user kernel that loads
boxes with ``#include <cuadv/tma.cuh>``, from Python. Needs compute capability 9.0 and CuPy.

    PYTHONPATH=src python examples/tma_copy_transpose.py [rows] [cols]

1. ``cuadv.tma.copy`` / ``transpose`` of a float32 array whose rows are pitched (1000 x 999 by default: tail
   boxes in both directions), of float16, and of bfloat16 bits held in uint16 (``dtype="bfloat16"``);
   each result is checked against CuPy element for element.
2. ``prepare_copy``: the checks, tensor maps and kernel once, then many launches; timed against
   ``cupy.copyto`` on a larger array, and against a ring set by hand (``TmaCopyConfig``).
   ``prepare_transpose``: the same for a transpose, called twice.
3. A kernel of your own: ``TensorMap.tiled`` builds the map in Python, the kernel takes it as a
   ``const __grid_constant__`` parameter and loads one box per block with ``cuadv::tma::load_2d``; then
   the same map from a raw device address (``TensorMap.from_pointer``).
"""

from __future__ import annotations

import sys

import numpy as np

import cuadv
from cuadv.tma import TensorMap

BOX_ROWS, BOX_COLS = 32, 64  # the user kernel's box: 32 rows x 256 B of float32

SOURCE = r"""
#include <cuadv/ptx.cuh>
#include <cuadv/tma.cuh>

namespace ptx = cuadv::ptx;
namespace tma = cuadv::tma;

constexpr int kRows = 32, kCols = 64;  // the box of the tensor map (TensorMap.tiled(..., box=(32, 64)))

// out = factor * src, one box per block: TMA loads the box (zeros past the array's edges), threads scale it.
extern "C" __global__ void __launch_bounds__(256) scale_boxes(const __grid_constant__ tma::TensorMap src,
                                                              float* out, int rows, int cols, long long out_pitch,
                                                              float factor) {
  __shared__ __align__(128) float box[kRows * kCols];
  __shared__ __align__(8) unsigned long long full;
  const int x = blockIdx.x * kCols, y = blockIdx.y * kRows;  // TMA coordinates: {column, row}
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&full, 1);
    ptx::fence_mbarrier_init_release_cluster();  // the init is visible before TMA completes bytes on it ...
    tma::fence_proxy_async_shared_cta();         // ... including to the async proxy that completes them
    ptx::mbarrier_arrive_expect_tx_relaxed<false>(&full, sizeof(box));  // the full box, even at the edges
    tma::load_2d(box, &src, x, y, &full);
  }
  __syncthreads();                  // the barrier is initialised before any thread waits on it
  tma::wait_parity<false>(&full, 0);  // the box is in shared memory and visible to this thread
  for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
    const int r = y + i / kCols, c = x + i % kCols;
    if (r < rows && c < cols) out[r * out_pitch + c] = box[i] * factor;
  }
}
"""


def build(arch: str | None = None) -> cuadv.CompiledModule:
    return cuadv.compile_source(SOURCE, name="tma_example", arch=arch)


def pitched_random(cp, rows: int, cols: int, dtype) -> object:
    """Random values in a (rows, cols) array whose rows start 16 bytes apart."""
    out = cuadv.tma.empty_pitched((rows, cols), dtype)
    values = cp.random.standard_normal((rows, cols), dtype=cp.float32)
    out[...] = values.astype(dtype) if np.dtype(dtype).kind == "f" else values.view(cp.uint32).astype(dtype)
    return out


def check(name: str, got, expected) -> None:
    import cupy as cp

    if got.shape != expected.shape or not bool(cp.array_equal(got, expected)):
        raise SystemExit(f"{name}: wrong result")
    print(f"{name}: {got.shape[0]} x {got.shape[1]} {got.dtype}, equal to CuPy's")


def main(rows: int = 1000, cols: int = 999) -> None:
    import cupy as cp

    # 1. The ops: output allocated in the input's library, pitched.
    for dtype, tma_dtype in ((cp.float32, None), (cp.float16, None), (cp.uint16, "bfloat16")):
        x = pitched_random(cp, rows, cols, dtype)
        label = tma_dtype or np.dtype(dtype).name
        check(f"copy {label}", cuadv.tma.copy(x, dtype=tma_dtype), x)
        check(f"transpose {label}", cuadv.tma.transpose(x, dtype=tma_dtype), x.T)

    # 2. Prepared once, launched many times; inside a non-blocking CuPy stream (stream=None follows it). With no
    # dst, the op allocates a pitched output of its own, whose row padding the TMA stores may write: rows of
    # 8237 float32 (not a multiple of 16 bytes) in a dst of the caller's would get thread stores instead.
    big = pitched_random(cp, 8192 + 77, 8192 + 45, cp.float32)
    # What a tensor map is encoded from: rows of 8237 float32 padded to a legal pitch (a multiple of 16 bytes).
    address, dtype_name, shape, strides = cuadv.tma.describe_array(big)
    pitch = cuadv.tma.pitch_elements(shape[1], dtype_name)
    assert address % 16 == 0 and strides == (4 * pitch, 4), (address, strides)
    print(f"{dtype_name} {shape[0]} x {shape[1]}: rows {strides[0]} B apart (pitch {pitch} elements), default copy "
          f"box {cuadv.tma.default_copy_box(4)}, transpose boxes tried {cuadv.tma.default_transpose_boxes(4)}")
    op = cuadv.tma.prepare_copy(big)
    out = op.dst
    # a ring set by hand: 2 slots, one box at a time, a persistent grid (TmaCopyConfig's other defaults), against
    # the default ring (4 slots, boxes in chunks of 4, one block per unit)
    shallow = cuadv.tma.prepare_copy(big, config=cuadv.tma.TmaCopyConfig(stages=2))
    cp.cuda.Device().synchronize()  # big was written on CuPy's default stream, which ours does not wait for
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for name, prepared in (("prepared copy", op), ("copy with TmaCopyConfig(stages=2)", shallow)):
            prepared.dst.fill(cp.nan)
            prepared()
            check(f"{name} ({prepared.method} stores)", prepared.dst, big)
        tma_ms = cuadv.time_gpu(op, repeats=20, stream=stream).median_ms
        shallow_ms = cuadv.time_gpu(shallow, repeats=20, stream=stream).median_ms
        cupy_ms = cuadv.time_gpu(lambda: cp.copyto(out, big), repeats=20, stream=stream).median_ms
    gbs = 2 * big.nbytes / (tma_ms * 1e-3) / 1e9
    print(f"copy of {big.shape[0]} x {big.shape[1]} float32: TMA {tma_ms:.3f} ms ({gbs:.0f} GB/s), "
          f"cupy.copyto {cupy_ms:.3f} ms ({cupy_ms / tma_ms:.2f}x), 2 slots {shallow_ms:.3f} ms "
          f"({shallow_ms / tma_ms:.2f}x the default's time)")

    # prepare_transpose: dst = src.T, checked once; each call launches and returns dst (bound to these arrays).
    src = pitched_random(cp, rows, cols, cp.float32)
    tp = cuadv.tma.prepare_transpose(src, cuadv.tma.empty_pitched((cols, rows), cp.float32))
    assert np.array_equal(cp.asnumpy(tp()), cp.asnumpy(src).T), "prepared transpose differs from NumPy"
    src *= 2  # new values in the same array: the same op again
    assert np.array_equal(cp.asnumpy(tp()), cp.asnumpy(src).T), "prepared transpose differs from NumPy"
    print(f"prepared transpose: {rows} x {cols} float32, called twice, equal to NumPy's")

    # 3. A kernel of your own with the device header.
    x = pitched_random(cp, rows, cols, cp.float32)
    y = cuadv.tma.empty_pitched(x.shape, x.dtype)
    tmap = TensorMap.tiled(x, box=(BOX_ROWS, BOX_COLS))
    kernel = build().kernel("scale_boxes")
    grid = (-(-cols // BOX_COLS), -(-rows // BOX_ROWS))
    cuadv.launch(kernel, cuadv.LaunchConfig(grid=grid, block=256), tmap, y, rows, cols, y.strides[0] // 4,
                 np.float32(2.0))
    check("user kernel (2 * x through load_2d)", y, 2 * x)

    # The same map from a raw device address (memory cuadv did not see allocated): shape, byte strides and
    # dtype given by hand, in NumPy order; the caller keeps the memory alive while the map is used.
    raw = TensorMap.from_pointer(x.data.ptr, "float32", x.shape, x.strides, box=(BOX_ROWS, BOX_COLS))
    y.fill(cp.nan)
    cuadv.launch(kernel, cuadv.LaunchConfig(grid=grid, block=256), raw, y, rows, cols, y.strides[0] // 4,
                 np.float32(2.0))
    check("user kernel, map from a pointer", y, 2 * x)


if __name__ == "__main__":
    main(*(int(v) for v in sys.argv[1:3]))
