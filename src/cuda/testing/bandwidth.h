// bandwidth.h: plain streaming kernels that measure the memory ceilings a benchmark compares
// against (same run, same clocks): a 16-byte-per-thread copy and a read-only sum.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "base/status.h"

namespace dsv4::cuda::testing {

// dst[0, bytes) = src[0, bytes); bytes % 16 == 0, both 16-byte aligned.
Status stream_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);
// Reads src[0, bytes) once (16 bytes per load) and writes one float per block to sink
// (sink holds at least 4096 floats) so the loads cannot be removed.
Status stream_read(const void* src, size_t bytes, float* sink, cudaStream_t stream);

}  // namespace dsv4::cuda::testing
