// q_head.cuh: one attention query head's per-head RMSNorm (unweighted), bf16, RoPE on its last
// rope_dim dims and bf16 again, in place, by one warp (cpu::attention_forward's query path after
// wq_b). Shared by q_norm_rope (norm_rope.cu) and by the indexer's prep launch, which takes the
// heads of CSA layers in extra blocks (indexer/indexer_q.cu), so the two are bit-identical.
#pragma once

#include <cuda_bf16.h>

#include "cuda/ops/ops_util.cuh"

namespace dsv4::cuda::ops_detail {

inline constexpr int kQHeadChunks = 4;  // d <= 32 lanes x 8 x 4 = 1024

// row: bf16 [d], d a multiple of 8 up to 1024, rope_dim a multiple of 8; pos: the token's
// position as a float; inv_freq: f32 [rope_dim / 2]. Every lane of the warp calls it.
__device__ __forceinline__ void q_head_norm_rope(__nv_bfloat16* row, int d, int rope_dim, float pos,
                                                 const float* inv_freq, float eps, int lane) {
  const int n_chunks = d / 8, nope = d - rope_dim;
  float v[kQHeadChunks][8];
  float ss = 0.0f;
#pragma unroll
  for (int ci = 0; ci < kQHeadChunks; ++ci) {
    const int c = lane + 32 * ci;
    if (c < n_chunks) {
      load_bf16x8(row + 8 * c, v[ci]);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += v[ci][e] * v[ci][e];
    }
  }
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / float(d) + eps);
#pragma unroll
  for (int ci = 0; ci < kQHeadChunks; ++ci) {
    const int c = lane + 32 * ci;
    if (c >= n_chunks) continue;
    float out[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = round_bf16_dev(__fmul_rn(v[ci][e], r));
    if (8 * c >= nope) {  // a chunk of the rope part: 4 whole pairs (rope_dim, nope multiples of 8)
      const int k0 = (8 * c - nope) / 2;
#pragma unroll
      for (int p = 0; p < 4; ++p) rope_pair(out[2 * p], out[2 * p + 1], __fmul_rn(pos, __ldg(inv_freq + k0 + p)));
    }
    store_bf16x8(row + 8 * c, out);  // the final bf16 (the rope part's second rounding)
  }
}

}  // namespace dsv4::cuda::ops_detail
