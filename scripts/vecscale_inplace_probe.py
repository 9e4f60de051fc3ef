"""What holds v := alpha * v at 1 GiB below the copy ceiling: the in-place pattern itself, the cache policy of
its accesses, or the tile shape. Times, in interleaved rounds on one GPU, each against the copy ceiling of
``cuadv bench vecscale`` (a 2 GiB cuMemcpyDtoD):

- peers: a 1 GiB device-to-device copy (the same bytes moved), torch's in-place ``mul_`` and out-of-place
  ``torch.mul(src, a, out=dst)``;
- the lab's body (its default shape) under fixed_work and steal, as the lab builds it;
- the same body with streaming cache hints (``__ldcs`` / ``__stcs``: evict-first in L1 and L2);
- the same body reading another buffer than it writes (out of place), which separates the in-place pattern;
- other block sizes and float4 per thread (torch's elementwise kernels run small blocks of a few vectors).

Every kernel's result is checked against NumPy once before timing.

    PYTHONPATH=src python3 scripts/vecscale_inplace_probe.py [MiB]

On the H200 (2026-12-02 18:07-18:13, docs/results/h200-2026-12-02-1800/probe-*.log, while the lab's default was
256 threads x 8 float4 at 5 blocks/SM): the hints changed nothing, out of place gained fixed_work 1.1 points and
cost steal 1.3; 768 threads x 2 float4 at 2 blocks/SM took steal from 94.1% to 97.7% of the copy ceiling, which
made it the lab's default; torch's mul_ 98.8%.
"""

from __future__ import annotations

import sys

import numpy as np

from cuadv.labs.base import interleaved_rounds
from cuadv.labs.vecscale import (BODY, DEFAULT_SHAPE, PARAMS, PROLOGUE, Shape, shape_preamble, tiles_for,
                                  vecscale_kernel)
from cuadv.timing import copy_ceiling, time_gpu
from cuadv.work_stealing import TileKernel

ROUNDS = 5
LOAD, STORE = "v[k] = p[k * kThreads];", "p[k * kThreads] = v[k];"
HINTED = BODY.replace(LOAD, "v[k] = __ldcs(p + k * kThreads);").replace(STORE, "__stcs(p + k * kThreads, v[k]);")
# Out of place: the loads read src at the offset the stores write in data (rows = 1, so p never advances), and
# the partial last row reads src too.
TAIL = "q[j] *= a;"
OUT_OF_PLACE = BODY.replace(
    "float4* p = reinterpret_cast<float4*>(data + first) + threadIdx.x;",
    "float4* p = reinterpret_cast<float4*>(data + first) + threadIdx.x;\n"
    "      const float4* s = reinterpret_cast<const float4*>(src + first) + threadIdx.x;").replace(
    LOAD, "v[k] = s[k * kThreads];").replace(TAIL, "q[j] = src[(q - data) + j] * a;")
OLD_DEFAULT = Shape(8, 1, 5, threads=256)  # the lab's default until 2026-12-02 18:13


def kernel(policy: str, body: str, tag: str, params: str = PARAMS, shape: Shape = DEFAULT_SHAPE) -> TileKernel:
    return TileKernel(params, body, PROLOGUE, policy=policy, block=shape.threads, preamble=shape_preamble(shape),
                      name=f"probe_{tag}_{policy}", min_blocks_per_sm=shape.min_blocks)


def describe_torch_kernel(fn) -> None:
    """The kernel torch launches for fn, with its grid, block and registers, from the profiler's trace."""
    import json
    import os
    import tempfile

    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    for ev in events:
        if ev.get("cat") == "kernel":
            args = ev.get("args", {})
            print(f"torch kernel: {ev['name'][:160]} grid {args.get('grid')} block {args.get('block')} "
                  f"registers {args.get('registers per thread')} occupancy {args.get('est. achieved occupancy %')}")


def main() -> None:
    import cupy as cp
    import torch

    assert LOAD in BODY and STORE in BODY and TAIL in BODY, "the lab's body changed: update the probe's replacements"
    n = int(sys.argv[1] if len(sys.argv) > 1 else 1024) * (1 << 20) // 4
    alpha = np.float32(1.0001)
    ceiling = copy_ceiling()
    data = cp.random.standard_normal(n, dtype=cp.float32)
    src = cp.random.standard_normal(n, dtype=cp.float32)
    tdata, tsrc = torch.as_tensor(data, device="cuda"), torch.as_tensor(src, device="cuda")
    tout = torch.empty_like(tsrc)
    fns = {
        f"memcpy {4 * n / 2**30:.2f} GiB (cuMemcpyDtoD via CuPy)":
            lambda: data.data.copy_from_device_async(src.data, 4 * n),
        f"torch {torch.__version__} mul_ (in place)": lambda: tdata.mul_(float(alpha)),
        f"torch {torch.__version__} mul out= (out of place)": lambda: torch.mul(tsrc, float(alpha), out=tout),
    }
    # torch's vectorized elementwise kernel runs 128-thread blocks of 2 float4 per thread
    shapes = [Shape(2, 1, 16, threads=128), Shape(2, 1, 4, threads=384), Shape(2, 1, 3, threads=512),
              Shape(2, 1, 2, threads=640), Shape(2, 2, 2, threads=768), Shape(3, 1, 2, threads=768),
              Shape(2, 1, 2, threads=896), Shape(2, 1, 2, threads=1024)]
    kernels: dict[str, tuple[TileKernel, Shape, bool]] = {}
    for policy in ("fixed_work", "steal"):
        for name, shape in (("lab default", DEFAULT_SHAPE), ("old default", OLD_DEFAULT)):
            tag = f"t{shape.threads}v{shape.vec}"
            kernels[f"{policy}, {name}"] = (vecscale_kernel(policy, shape=shape), shape, False)
            kernels[f"{policy}, {name}, __ldcs/__stcs"] = (kernel(policy, HINTED, f"cs_{tag}", shape=shape), shape,
                                                         False)
            kernels[f"{policy}, {name}, out of place"] = (
                kernel(policy, OUT_OF_PLACE, f"oop_{tag}", "const float* src, " + PARAMS, shape), shape, True)
        for shape in shapes:
            tag = f"t{shape.threads}v{shape.vec}r{shape.rows}b{shape.min_blocks}"
            kernels[f"{policy}, {shape.label}"] = (kernel(policy, BODY, tag, shape=shape), shape, False)
    describe_torch_kernel(lambda: tdata.mul_(float(alpha)))
    host = cp.asnumpy(data)
    for label, (k, shape, oop) in kernels.items():
        check = cp.asarray(host)
        if oop:
            out = cp.empty_like(check)
            k(tiles_for(n, shape), check, out, n, alpha, 0)
            check = out
        else:
            k(tiles_for(n, shape), check, n, alpha, 0)
        ok = np.array_equal(cp.asnumpy(check), host * alpha)
        print(f"check {label}: {'ok' if ok else 'WRONG'}", flush=True)
        args = (src, data) if oop else (data,)
        fns[label] = (lambda k=k, t=tiles_for(n, shape), a=args: k(t, *a, n, alpha, 0))
    times = interleaved_rounds({label: (lambda f=f: [time_gpu(f, repeats=10).median_ms]) for label, f in fns.items()},
                               ROUNDS, lambda r: print(f"round {r + 1} of {ROUNDS}", flush=True))
    nbytes = 8 * n
    print(f"copy ceiling {ceiling.tb_per_s:.3f} TB/s (2 GiB cuMemcpyDtoD); {4 * n / 2**30:.2f} GiB per case, "
          f"medians of {ROUNDS} rounds of 10")
    for label, ms in times.items():
        rate = nbytes / (ms * 1e-3)
        print(f"{label:60s} {ms:8.4f} ms ({ms.p10:.4f}-{ms.p90:.4f})  {rate / 1e12:6.3f} TB/s  "
              f"{100 * ceiling.fraction(rate):5.1f}% of the copy ceiling")


if __name__ == "__main__":
    main()
