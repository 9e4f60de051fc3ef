// cub_segmented_reduce.cu - the benchmark peer of the segreduce lab: cub::DeviceSegmentedReduce::Sum over float32
// segments given by int32 offsets, called directly, built by nvcc into a small shared library that the lab loads
// with ctypes (labs/peers/cub_segmented_reduce.py). Benchmark-only: the library never links it.
//
// C interface (every function returns a cudaError_t as int; 0 = success):
//   cuadv_cub_version()                                  CUB_VERSION of the headers it was built with.
//   cuadv_cub_segmented_sum(temp, &temp_bytes, values, sums, segments, offsets, stream)
//       temp == nullptr: only sets temp_bytes (CUB's two-phase call, nothing launched).
//       sums[s] = the float32 sum of values[offsets[s] .. offsets[s + 1]) for s < segments (0 for an empty one):
//       offsets holds segments + 1 entries, the begin offsets and, one further on, the end offsets.

#include <cub/device/device_segmented_reduce.cuh>
#include <cub/version.cuh>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>

extern "C" int cuadv_cub_version() { return CUB_VERSION; }

extern "C" int cuadv_cub_segmented_sum(void* temp, std::size_t* temp_bytes, const float* values, float* sums,
                                       long long segments, const int* offsets, cudaStream_t stream) {
  if (segments < 0 || segments > INT_MAX) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(cub::DeviceSegmentedReduce::Sum(temp, *temp_bytes, values, sums,
                                                          static_cast<int>(segments), offsets, offsets + 1, stream));
}

extern "C" const char* cuadv_cub_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }
