// cub_histogram.cu - the benchmark peer of cuadv.histogram: cub::DeviceHistogram::HistogramEven called
// directly (int32 counters), built by nvcc into a small shared library that the histogram lab loads
// with ctypes (labs/peers/cub_histogram.py). Benchmark-only: the library never links it.
//
// C interface (every function returns a cudaError_t as int; 0 = success):
//   cuadv_cub_version()                          CUB_VERSION of the headers it was built with.
//   cuadv_cub_histogram_even(temp, &temp_bytes, samples, dtype, hist, bins, lower, upper, n, stream)
//       temp == nullptr: only sets temp_bytes (CUB's two-phase call, nothing launched).
//       dtype 0: int32 samples, int levels; 1: uint8 samples, int levels; 2: float32 samples, float levels.
//       hist: `bins` int32 counters; num_levels = bins + 1, levels [lower, upper) evenly split.
//       n: samples (at most INT_MAX: the int offset type CUB dispatches fastest).

#include <cub/device/device_histogram.cuh>
#include <cub/version.cuh>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>

namespace {
template <typename SampleT, typename LevelT>
cudaError_t even(void* temp, std::size_t* temp_bytes, const void* samples, int* hist, int bins, LevelT lower,
                 LevelT upper, int n, cudaStream_t stream) {
  return cub::DeviceHistogram::HistogramEven(temp, *temp_bytes, static_cast<const SampleT*>(samples), hist, bins + 1,
                                             lower, upper, n, stream);
}
}  // namespace

extern "C" int cuadv_cub_version() { return CUB_VERSION; }

extern "C" int cuadv_cub_histogram_even(void* temp, std::size_t* temp_bytes, const void* samples, int dtype,
                                        int* hist, int bins, double lower, double upper, long long n,
                                        cudaStream_t stream) {
  if (n < 0 || n > INT_MAX || bins < 1 || bins >= INT_MAX) return static_cast<int>(cudaErrorInvalidValue);
  const int count = static_cast<int>(n);
  switch (dtype) {
    case 0:
      return static_cast<int>(even<std::int32_t, int>(temp, temp_bytes, samples, hist, bins, static_cast<int>(lower),
                                                      static_cast<int>(upper), count, stream));
    case 1:
      return static_cast<int>(even<std::uint8_t, int>(temp, temp_bytes, samples, hist, bins, static_cast<int>(lower),
                                                      static_cast<int>(upper), count, stream));
    case 2:
      return static_cast<int>(even<float, float>(temp, temp_bytes, samples, hist, bins, static_cast<float>(lower),
                                                 static_cast<float>(upper), count, stream));
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

extern "C" const char* cuadv_cub_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }
