"""cuadv.pipeline without a GPU: the stencil op refuses bad input before anything is launched, the variant choice
('auto' and named, TMA rules with the fallback named), and the public header compiling in a tiny user kernel for
sm_90a and sm_100a."""

import numpy as np
import pytest

import cuadv.pipeline as pipeline
from cuadv.compiler import compile_source
from cuadv.errors import KernelArgumentError, LaunchConfigError, UnsupportedFeatureError
from cuadv.pipeline import STENCIL_VARIANTS
from cuadv.pipeline.stencil import Grid2D


class FakeArray:
    def __init__(self, shape, typestr="<f4", strides=None, address=0x10000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (address, False), "version": 3}


COEF = dict(c_center=0.5, c_neighbour=0.125)


@pytest.mark.parametrize("x, error, match", [
    (np.zeros((4, 4), np.float32), KernelArgumentError, "host memory"),
    (FakeArray((4, 4), "<f8"), LaunchConfigError, "2-D float32"),
    (FakeArray((4, 4), "<i4"), LaunchConfigError, "2-D float32"),
    (FakeArray((16,)), LaunchConfigError, "2-D float32"),
    (FakeArray((2, 4, 4)), LaunchConfigError, "2-D float32"),
    (FakeArray((0, 4)), LaunchConfigError, "at least one row"),
    (FakeArray((4, 0)), LaunchConfigError, "at least one row"),
    (FakeArray((10, 8), strides=(64, 8)), LaunchConfigError, "contiguous rows"),
    (object(), KernelArgumentError, "neither __cuda_array_interface__"),
])
def test_bad_x_raises_before_launch(x, error, match):
    for call in (pipeline.stencil, pipeline.prepare_stencil):
        with pytest.raises(error, match=match):
            call(x, **COEF)


@pytest.mark.parametrize("out, error, match", [
    (np.zeros((4, 8), np.float32), KernelArgumentError, "host memory"),
    (FakeArray((4, 9), address=0x20000), LaunchConfigError, "x's shape \\(4, 8\\)"),
    (FakeArray((4, 8), "<f8", address=0x20000), LaunchConfigError, "float32 array of x's shape"),
])
def test_bad_out_raises_before_launch(out, error, match):
    with pytest.raises(error, match=match):
        pipeline.stencil(FakeArray((4, 8)), out, **COEF)


def test_a_prepared_stencil_runs_on_the_stream_it_was_prepared_for_unless_a_call_names_one():
    launched = []

    def kernels(variant, x, out, c_center, c_neighbour, *, stream):
        launched.append(stream)

    prepared = pipeline.PreparedStencil((64, 64), STENCIL_VARIANTS["thread"], 0.5, 0.125, kernels, stream=7)
    x, out = FakeArray((64, 64)), FakeArray((64, 64), address=0x20000)
    prepared(x, out)
    prepared(x, out, stream=9)
    assert launched == [7, 9]


def test_coefficients_are_required():
    with pytest.raises(TypeError):
        pipeline.stencil(FakeArray((4, 8)))  # noqa


def grid(shape, strides=None, address=0x10000):
    return Grid2D.of(FakeArray(shape, strides=strides, address=address), "x")


def test_auto_takes_the_measured_best():
    aligned = grid((100, 128))
    assert pipeline._choose("auto", aligned, aligned, True, "9.0") is STENCIL_VARIANTS["tma_store"]
    odd_out = grid((100, 127), address=0x20000)
    assert pipeline._choose("auto", grid((100, 127), strides=(512, 4)), odd_out, True, "9.0") is \
        STENCIL_VARIANTS["tma"]  # x pitched for TMA, out not: TMA loads, thread stores
    assert pipeline._choose("auto", grid((100, 127)), odd_out, True, "9.0") is STENCIL_VARIANTS["thread"]
    assert pipeline._choose("auto", aligned, aligned, False, "8.0") is STENCIL_VARIANTS["thread"]  # no TMA
    assert STENCIL_VARIANTS["tma_store"].tickets and STENCIL_VARIANTS["tma"].tickets


def test_named_tma_variant_without_tma_names_the_fallback():
    g = grid((100, 128))
    with pytest.raises(UnsupportedFeatureError, match="compute capability >= 9.0 \\(got 8.0\\); fallback: "
                                                      "variant='thread' or 'mbar'"):
        pipeline._choose("tma", g, g, False, "8.0")
    assert pipeline._choose("mbar", g, g, False, "8.0") is STENCIL_VARIANTS["mbar"]


@pytest.mark.parametrize("name", ["tma", "tma_store"])
def test_named_tma_variant_refuses_misaligned_x(name):
    for bad in (grid((10, 8), address=0x10004), grid((10, 7))):
        with pytest.raises(LaunchConfigError, match="TMA rule is violated.*fallback: variant='thread'"):
            pipeline._choose(name, bad, grid((10, 8)), True, "9.0")


def test_tma_store_refuses_misaligned_out():
    with pytest.raises(LaunchConfigError, match="stores out by TMA.*fallback: variant='tma'"):
        pipeline._choose("tma_store", grid((10, 7), strides=(32, 4)), grid((10, 7)), True, "9.0")


def test_unknown_variant():
    with pytest.raises(ValueError, match="variant must be 'auto'"):
        pipeline._choose("fast", grid((4, 4)), None, True, "9.0")


USER_KERNEL = r'''
#include <cuadv/pipeline.cuh>
namespace pl = cuadv::pipeline;
constexpr int kThreads = 128, kS = 3, kW = kThreads * 4;

// out[i] = 2 * in[i], staged through a 3-stage ring of kW-float stages with cp.async on full/empty mbarriers.
extern "C" __global__ void __launch_bounds__(kThreads) twice(const float* in, float* out, long long n) {
  __shared__ __align__(16) float ring[kS][kW];
  __shared__ __align__(8) unsigned long long full[kS], empty[kS];
  auto st = pl::make_mbar_stager<kS, kThreads>(full, empty);
  const long long stages = (n + kW - 1) / kW;
  pl::run_stages<kS, 1>(st, stages, pl::NoTrace{},
      [&](long long m, auto& s) {
        for (int e = 0; e < 4; ++e) {
          const long long i = m * kW + e * kThreads + threadIdx.x;
          if (i < n) s.copy4(&ring[m % kS][e * kThreads + threadIdx.x], in + i);
        }
      },
      [&](long long k) {
        for (int e = 0; e < 4; ++e) {
          const long long i = k * kW + e * kThreads + threadIdx.x;
          if (i < n) out[i] = 2.0f * ring[k % kS][e * kThreads + threadIdx.x];
        }
      });
}

// The same with the thread-scope memcpy_async stager.
extern "C" __global__ void __launch_bounds__(kThreads) twice_thread(const float* in, float* out, long long n) {
  __shared__ __align__(16) float ring[kS][kW];
  pl::ThreadStager st;
  pl::run_stages<kS, 1>(st, (n + kW - 1) / kW, pl::NoTrace{},
      [&](long long m, auto& s) {
        const long long i = m * kW + threadIdx.x;
        if (i < n) s.copy4(&ring[m % kS][threadIdx.x], in + i);
      },
      [&](long long k) {
        const long long i = k * kW + threadIdx.x;
        if (i < n) out[i] = 2.0f * ring[k % kS][threadIdx.x];
      });
}

struct Extent { long long rows, cols; };

// The TMA ring and the ticket source compile for a user's tiles (producer thread kThreads, consumers 0..kThreads-1).
extern "C" __global__ void ring_user(unsigned long long* tickets, long long rows, long long cols, long long* seen) {
  __shared__ __align__(8) unsigned long long full[kS], empty[kS];
  const pl::TmaRing<kS, kThreads> ring{full, empty};
  if (threadIdx.x == kThreads) ring.init();
  __syncthreads();
  const pl::Tiling2D<16, 128> tiling(Extent{rows, cols});
  if (threadIdx.x == kThreads) {
    pl::TicketSource<pl::Tiling2D<16, 128>> source(tickets, tiling);
    for (long long m = 0;; ++m) {
      ring.producer_acquire(m);
      const long long t = source.next();
      seen[m % kS] = t;
      ring.producer_commit_empty(m);
      if (t < 0) return;
    }
  }
  if (threadIdx.x > kThreads) return;
  for (long long k = 0;; ++k) {
    ring.consumer_wait(k);
    const long long t = seen[k % kS];
    ring.consumer_release(k);
    if (t < 0) break;
  }
}
'''


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_header_compiles_in_a_user_kernel(arch):
    module = compile_source(USER_KERNEL, name="pipeline_user", arch=arch)
    names = set(module.kernel_names())
    assert {"twice", "twice_thread", "ring_user"} <= names, names
    for name in ("twice", "twice_thread", "ring_user"):
        res = module.resources_for(name)
        assert res.spill_store_bytes == 0 and res.stack_bytes == 0, (arch, name, res)
    assert "cp.async.mbarrier.arrive.noinc" in module.ptx and "mbarrier.try_wait.parity" in module.ptx


def test_header_is_included_by_pipeline_cu():
    import pathlib

    from cuadv.compiler import kernel_source

    assert '#include "cuadv/pipeline.cuh"' in kernel_source("pipeline.cu")
    path = pathlib.Path(pipeline.header_path()) / "cuadv" / "pipeline.cuh"
    assert path.is_file() and "run_stages" in path.read_text()


def test_parameter_structs_pack_the_bytes_pipeline_cu_asserts():
    """StencilParams (72 B) and StencilTmaParams (384 B: the chunk at 72, the ticket address at 80, the maps
    at 128 and 256) through cuadv.params, byte for byte what the kernels read."""
    import struct

    from cuadv.pipeline.stencil import StencilParams, StencilTmaParams

    class Map:
        def __init__(self, byte):
            self.byte = byte

        def kernel_param_bytes(self):
            return bytes([self.byte]) * 128

    p = StencilParams(0x1111, 0x2222, 1000, 999, 1024, 1008, 0.5, 0.125, 0x3333, 77, 5)
    params = struct.pack("<QQqqqqffQII", 0x1111, 0x2222, 1000, 999, 1024, 1008, 0.5, 0.125, 0x3333, 77, 5)
    assert p.kernel_param_bytes() == params
    for out_map, tail in ((None, bytes(128)), (Map(9), bytes([9]) * 128)):
        head = params + struct.pack("<I4xQ", 3, 0xABCDEF)
        want = head + bytes(128 - len(head)) + bytes([7]) * 128 + tail
        assert StencilTmaParams(p, Map(7), out_map, chunk=3, tickets=0xABCDEF).kernel_param_bytes() == want


def test_auto_leaves_tma_for_extents_past_its_32_bit_coordinates():
    """A 16-byte aligned array with a dimension over 2^31 elements keeps the TMA alignment rules, but tma_layout
    refuses it (32-bit signed box coordinates): 'auto' takes the cp.async pipeline instead of a variant that raises."""
    from cuadv.pipeline.stencil import tma_layout

    wide = grid((1, 2**31 + 4))
    assert wide.tma_loadable and not wide.tma_addressable
    with pytest.raises(LaunchConfigError, match="32-bit signed"):
        tma_layout(STENCIL_VARIANTS["tma"], wide)
    assert pipeline._choose("auto", wide, None, True, "9.0") is STENCIL_VARIANTS["thread"]
    assert pipeline._choose("auto", grid((1, 2**31)), None, True, "9.0") is STENCIL_VARIANTS["tma_store"]


def test_a_single_row_may_report_any_row_stride():
    # One row: its stride is never used; a new axis reports 0 and a transposed (n, 1) column 4.
    for stride in (0, 4):
        g = grid((1, 8), strides=(stride, 4))
        assert (g.rows, g.cols, g.pitch) == (1, 8, 8) and g.tma_loadable


def test_the_built_variants_are_a_public_name():
    """The function cuadv.pipeline.stencil hides the submodule of that name, so the list of built configurations the
    docs and messages name is cuadv.pipeline.BUILT_VARIANTS: every named variant is among them."""
    assert pipeline.BUILT_VARIANTS and all(v in pipeline.BUILT_VARIANTS for v in pipeline.STENCIL_VARIANTS.values())
    assert "BUILT_VARIANTS" in pipeline.__all__


def test_a_stencil_trace_prepared_in_a_capture_is_allocated_relaxed_and_kept(monkeypatch):
    """A global-mode capture is invalidated by cuMemAlloc and by cuMemFree: a Trace prepared on a stream being
    captured allocates its buffer in relaxed capture mode and keeps it (and the one it replaces) for the process,
    as every replay writes it; outside a capture it allocates as before and keeps nothing."""
    from contextlib import contextmanager

    import importlib

    from cuadv import memory

    stencil = importlib.import_module("cuadv.pipeline.stencil")  # the module (the package exports the op by its name)

    relaxed, made = [], []

    @contextmanager
    def relaxed_mode():
        relaxed.append(True)
        yield
        relaxed.pop()

    class Buffer:
        def __init__(self, nbytes, fill=None):
            self.ptr = 0x1000 * (len(made) + 1)
            made.append((self, bool(relaxed)))

        def fill(self, byte, stream=None):
            pass

    monkeypatch.setattr(memory, "DeviceBuffer", Buffer)
    monkeypatch.setattr(stencil, "relaxed_capture_mode", relaxed_mode)
    monkeypatch.setattr(stencil, "capturing", lambda stream: stream == 9)
    monkeypatch.setattr(memory, "_KEPT_FOR_GRAPHS", kept := [])
    trace = stencil.Trace()
    trace.prepare(4, 2, 7)
    first = trace.buffer
    assert made == [(first, False)] and kept == []
    trace.prepare(4, 2, 9)
    assert made[1] == (trace.buffer, True) and kept == [first, trace.buffer]
