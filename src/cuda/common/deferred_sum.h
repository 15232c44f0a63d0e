// deferred_sum.h: a GEMM output handed to its consumer as the terms of its last sum. The GEMM
// can stop before the sum that needs all its blocks (a fence, an arrival atomic and one block's
// round trips: ~2 us at decode sizes), and the next kernel, which reads the output anyway, adds
// the terms itself, in the same order, with the same rounding: the same bits.
//   SplitSumView: a split-K GEMM's fp32 partial tiles (w4a16_gemm_deferred; wo_b). Element
//     (row, col) is bf16_rn(((0 + p_0) + p_1) + ... + p_{splits-1}) in fp32.
//   PairSumView: the MoE's down rows of each (token, expert) pair (moe_forward with
//     MoeArgs::deferred). Row t is bf16_rn of the fp32 sum of its pairs' bf16 rows in the order
//     of token_pairs (routed experts by increasing id, then the shared one), from 0.
#pragma once

#include <cuda_bf16.h>
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

// Pair rows [pairs][ld] bf16 and, per token, the rows of its pairs in summation order.
struct PairSumView {
  const __nv_bfloat16* rows = nullptr;
  int64_t ld = 0;
  const int32_t* token_pairs = nullptr;  // i32 [tokens][pairs_per_token]
  int pairs_per_token = 0;               // > 0 when valid
};

}  // namespace dsv4::cuda
