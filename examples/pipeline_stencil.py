"""The 5-point stencil through cuadv's shared-memory pipeline, and a user kernel on <cuadv/pipeline.cuh>.

Run: python examples/pipeline_stencil.py   (needs a CUDA GPU, compute capability >= 8.0, and CuPy)
"""

import cupy as cp
import numpy as np

import cuadv.pipeline as pipeline
from cuadv.compiler import compile_source
from cuadv.launching import LaunchConfig, launch

# 1. The op: 'auto' takes the TMA-fed ticket pipeline where the GPU and the arrays allow it, else cp.async.
x = cp.random.default_rng(0).standard_normal((4096, 4096), dtype=cp.float32)
y = pipeline.stencil(x, c_center=0.5, c_neighbour=0.125)
assert np.array_equal(cp.asnumpy(y), pipeline.reference(cp.asnumpy(x), 0.5, 0.125))
prepared = pipeline.prepare_stencil(x, c_center=0.5, c_neighbour=0.125)  # checks and kernels kept
print("variant chosen:", prepared.variant.label)
prepared(x, y)

# 2. A user kernel on the header: out[i] = 2 * in[i], staged through a 3-stage cp.async ring on mbarriers.
SOURCE = r'''
#include <cuadv/pipeline.cuh>
namespace pl = cuadv::pipeline;
constexpr int kThreads = 128, kS = 3;
extern "C" __global__ void __launch_bounds__(kThreads) twice(const float* in, float* out, long long n) {
  __shared__ __align__(16) float ring[kS][kThreads];
  __shared__ __align__(8) unsigned long long full[kS], empty[kS];
  auto st = pl::make_mbar_stager<kS, kThreads>(full, empty);
  const long long per_block = (n + gridDim.x - 1) / gridDim.x, first = blockIdx.x * per_block;
  const long long stages = (max(0LL, min(n, first + per_block) - first) + kThreads - 1) / kThreads;
  pl::run_stages<kS, 1>(st, stages, pl::NoTrace{},
      [&](long long m, auto& s) {  // fill / steady state: this thread's piece of stage m
        const long long i = first + m * kThreads + threadIdx.x;
        if (i < n && i < first + per_block) s.copy4(&ring[m % kS][threadIdx.x], in + i);
      },
      [&](long long k) {  // compute stage k (its slot is released after this returns)
        const long long i = first + k * kThreads + threadIdx.x;
        if (i < n && i < first + per_block) out[i] = 2.0f * ring[k % kS][threadIdx.x];
      });
}
'''
kernel = compile_source(SOURCE, name="twice").kernel("twice")
a = cp.arange(100_003, dtype=cp.float32)
b = cp.empty_like(a)
launch(kernel, LaunchConfig(grid=64, block=128), a, b, np.int64(a.size))
cp.cuda.Device().synchronize()
assert bool((b == 2 * a).all())
print("user kernel on <cuadv/pipeline.cuh>: ok")
