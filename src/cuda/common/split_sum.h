// split_sum.h: a split-K GEMM output handed to its consumer unsummed. The W4A16 decode GEMM
// (w4a16_gemm_deferred) can stop after writing each split's fp32 partial tile; the next kernel,
// which reads the output anyway, adds the splits itself. That removes the GEMM's serial tail (a
// fence, an arrival atomic and the last block's round trip to the partials, ~2 us for wo_b at
// M = 1) from the step, and the reader gets the same bits: the value of (row, col) is
// bf16_rn(((0 + p_0) + p_1) + ... + p_{splits-1}) in fp32, exactly the GEMM's own sum.
#pragma once

#include <cuda_runtime_api.h>  // __host__ __device__ for host compilers

#include <cstdint>

namespace dsv4::cuda {

// Partial tiles [row block][column tile][split][block_m][block_n], fp32.
struct SplitSumView {
  const float* data = nullptr;
  int splits = 0;   // > 1 when valid
  int block_m = 0;  // rows of a tile
  int block_n = 0;  // columns of a tile (a multiple of 4: a float4 never crosses tiles)
  int tiles_n = 0;  // column tiles per row block

  // Address of split `s`'s partial of element (row, col); split s + 1's is block_m * block_n
  // floats further. 32-bit division: the consumers compute it once per row and column chunk.
  __host__ __device__ const float* at(int s, int row, int col) const {
    const int64_t tile = int64_t(row / block_m) * tiles_n + col / block_n;
    return data + ((tile * splits + s) * block_m + row % block_m) * int64_t(block_n) + col % block_n;
  }
};

}  // namespace dsv4::cuda
