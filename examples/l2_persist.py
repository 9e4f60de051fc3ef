"""Keep a hot lookup table in L2 while a large array streams past it (cuadv.l2.persist).

Every element of a 1 GiB array is read once and written once; for each float4 of it, two floats are
read from a 32 MiB table at pseudo-random positions (the access pattern of the `l2` lab). Inside
``cuadv.l2.persist(table)`` the table's lines are marked persisting in the set-aside (37.5 MiB on an
H200); the kernel is the same either way: the window is a stream attribute.

Whether the window pays depends on the kernel: on an H200 (2026-12-01, 22:15 UTC) this example ran
15.9% slower with the window (1.81 ms against 1.52 ms), while the `l2` lab's kernel with a table of
the same size ran 59% faster (docs/l2.md). Why this kernel loses has not been established; measure
your own kernel with and without the window, as this example does.

    PYTHONPATH=src python examples/l2_persist.py [table_mib] [stream_mib]

Then the same by hand, with the pieces persist() is made of (``cuadv.l2.SetAside``, ``hit_ratio_for``,
``set_stream_window``, ``get_stream_window``, ``reset_persisting_lines``, ``get_set_aside``), for code that
sets windows per launch or per stream itself. Checks the outputs with and without the window against each
other and a sample against NumPy, then prints the three times. Where the GPU has no persisting L2 (MIG, before
compute capability 8.0) ``cuadv.l2.unsupported_reason`` says why and the example prints the plain time alone;
persist() would raise UnsupportedFeatureError naming the fallback: the same code without it.
"""

from __future__ import annotations

import sys

import numpy as np

import cuadv
import cuadv.l2

TILE = 4096  # elements per tile
PREAMBLE = f"#define TILE_ELEMS {TILE}ull\n" + r"""
// A 32-bit mixer, so table positions look random and spread evenly (mirrored by slots() below).
__device__ __forceinline__ unsigned int mix32(unsigned int v) {
  v ^= v >> 16; v *= 0x7feb352du; v ^= v >> 15; v *= 0x846ca68bu; v ^= v >> 16; return v;
}
__device__ __forceinline__ unsigned int slot(unsigned long long i, unsigned int k, unsigned int m) {
  return (unsigned int)(((unsigned long long)mix32((unsigned int)i * 2u + k) * m) >> 32);
}
"""
PARAMS = "const float4* x, const float* table, float4* out, unsigned long long n4, unsigned int m"
BODY = r"""
      const unsigned long long first = tile.index * (TILE_ELEMS / 4);  // in float4
      for (unsigned long long j = first + threadIdx.x; j < first + TILE_ELEMS / 4 && j < n4; j += blockDim.x) {
        const float t = table[slot(j, 0u, m)] + table[slot(j, 1u, m)];
        const float4 v = x[j];
        out[j] = make_float4(v.x + t, v.y + t, v.z + t, v.w + t);
      }
"""


def lookup_kernel() -> cuadv.TileKernel:
    return cuadv.TileKernel(PARAMS, BODY, preamble=PREAMBLE, block=256, policy="fixed_blocks", name="l2_example")


def slots(i: np.ndarray, k: int, m: int) -> np.ndarray:
    """NumPy copy of the kernel's slot(): uint32 arithmetic wraps as in C."""
    v = (i.astype(np.uint32) * np.uint32(2) + np.uint32(k)).astype(np.uint32)
    v ^= v >> np.uint32(16)
    v *= np.uint32(0x7FEB352D)
    v ^= v >> np.uint32(15)
    v *= np.uint32(0x846CA68B)
    v ^= v >> np.uint32(16)
    return ((v.astype(np.uint64) * np.uint64(m)) >> np.uint64(32)).astype(np.int64)


def reference(x: np.ndarray, table: np.ndarray, i: np.ndarray) -> np.ndarray:
    """out[i] for the given float indices, in the kernel's float32 order (one table pair per float4)."""
    j = i // 4
    return x[i] + (table[slots(j, 0, table.size)] + table[slots(j, 1, table.size)])


def main(table_mib: int = 32, stream_mib: int = 1024) -> None:
    import cupy as cp

    n, m = stream_mib << 18, table_mib << 18  # floats
    x = cp.random.standard_normal(n, dtype=cp.float32)
    table = cp.random.standard_normal(m, dtype=cp.float32)
    out = {name: cp.empty_like(x) for name in ("plain", "persist")}
    kernel, tiles = lookup_kernel(), -(-n // TILE)

    def timed(dst) -> float:
        kernel(tiles, x, table, dst, n // 4, np.uint32(m))  # warm-up
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(10):
            kernel(tiles, x, table, dst, n // 4, np.uint32(m))
        stop.record()
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / 10

    plain_ms = timed(out["plain"])
    caps = cuadv.current_device().caps
    reason = cuadv.l2.unsupported_reason(caps)
    if reason is not None:  # MIG, or before compute capability 8.0: persist() would raise UnsupportedFeatureError
        print(f"no L2 persistence here ({reason}); plain caching: {plain_ms:.3f} ms")
        return
    with cuadv.l2.persist(table) as p:  # stream=None: CuPy's current stream, where the kernel runs
        persist_ms = timed(out["persist"])
        granted, ratio = p.set_aside, p.window.hit_ratio

    # The same by hand, with the pieces persist() is made of: a set-aside held for a while, a window on the
    # stream, the persisting lines reset after the phase; the set-aside and the stream are left as found.
    stream = cp.cuda.get_current_stream()
    before = cuadv.l2.get_set_aside()
    with cuadv.l2.SetAside(caps.persisting_l2_max_bytes) as granted_by_hand:
        window = cuadv.AccessPolicyWindow(table.data.ptr, table.nbytes,
                                          cuadv.l2.hit_ratio_for(granted_by_hand, table.nbytes))
        out["by hand"] = cp.empty_like(x)
        cuadv.l2.set_stream_window(stream, window)
        try:
            got = cuadv.l2.get_stream_window(stream)  # the driver keeps the hit ratio as a float32
            assert (got.base_ptr, got.num_bytes, got.hit) == (window.base_ptr, window.num_bytes, "persisting")
            by_hand_ms = timed(out["by hand"])
        finally:
            cuadv.l2.set_stream_window(stream, None)  # later launches on the stream: no window, even after an error
        stream.synchronize()
        cuadv.l2.reset_persisting_lines()  # between phases: the table's lines stop taking the set-aside
    assert cuadv.l2.get_stream_window(stream) is None and cuadv.l2.get_set_aside() == before

    for name in ("persist", "by hand"):
        if not bool(cp.array_equal(out["plain"], out[name])):
            raise SystemExit(f"the output with the window ({name}) differs from the output without it")
    sample = np.random.default_rng(0).integers(0, n, 1 << 20)
    want = reference(cp.asnumpy(x), cp.asnumpy(table), sample)
    if not np.array_equal(cp.asnumpy(out["persist"])[sample], want):
        raise SystemExit("the output differs from the NumPy reference")
    print(f"{table_mib} MiB table, {stream_mib} MiB streamed (read + write), set-aside {granted / 2**20:.1f} MiB, "
          f"hitRatio {ratio:.3f}")
    print(f"plain caching {plain_ms:.3f} ms, persist {persist_ms:.3f} ms: {100 * (plain_ms / persist_ms - 1):+.1f}%"
          f", by hand (SetAside + set_stream_window) {by_hand_ms:.3f} ms (outputs identical; 1 M elements checked "
          "against NumPy)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
