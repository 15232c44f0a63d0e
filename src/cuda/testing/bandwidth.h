// bandwidth.h: plain streaming kernels that measure the memory ceilings a benchmark compares
// against (same run, same clocks): a 16-byte-per-thread copy, a read-only sum, and a read of
// W4A16 expert tiles in the decode GEMM's access pattern without its arithmetic; and a kernel
// that only holds its stream for a while.
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

// The decode GEMM's reads of one MoE GEMM at M = 1 (w4a16/decode_kernel.cuh, d16n128: a block of
// 8 warps = 2 column tiles of 64 x 4 warps along K, each warp streaming its 128-k groups wk,
// wk + 4, ... through a cp.async ring of `stages` slots of 4 KB of codes + 128 B of scales), with
// no arithmetic: grid (n / 128, 1, n_experts). What it reaches is the bandwidth that access
// pattern allows, the ceiling of the fused MoE's GEMMs. W4A16 packed layout (w4a16.h).
struct TileReadArgs {
  const void* qweight = nullptr;  // expert 0's packed codes, 16-byte aligned; expert e at + e * expert_bytes
  const void* scales = nullptr;   // expert 0's packed scales; expert e at + e * expert_scale_bytes
  size_t expert_bytes = 0, expert_scale_bytes = 0;
  int n = 0, k = 0;               // per expert: n % 128 == 0, k % 512 == 0
  int experts[8] = {};            // the experts read, one grid slice each
  int n_experts = 0;              // 1..8
  int stages = 2;                 // ring slots per warp: 2, 3 or 4
};
Status tile_stream_read(const TileReadArgs& a, float* sink, cudaStream_t stream);

// Holds `stream` for about `us` microseconds (one thread polls the global timer) without touching
// memory: a window in which work forked onto another stream runs, as a decode step's
// latency-bound kernels leave one (the weight prefetch's test). 0 < us <= 1e6.
Status hold_stream(double us, cudaStream_t stream);

}  // namespace dsv4::cuda::testing
