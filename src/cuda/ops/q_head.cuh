// q_head.cuh: one attention query head's per-head RMSNorm (unweighted), bf16, RoPE on its last
// rope_dim dims and bf16 again, in place, by one warp (cpu::attention_forward's query path after
// wq_b). Shared by q_norm_rope (norm_rope.cu) and by the launches that take the heads in extra
// blocks (q_head.h: the indexer's prep on CSA layers), so every variant is bit-identical.
#pragma once

#include <cuda_bf16.h>

#include "cuda/ops/ops_util.cuh"
#include "cuda/ops/q_head.h"

namespace dsv4::cuda::ops_detail {

inline constexpr int kQHeadChunks = kQHeadMaxDim / (32 * 8);

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

// Heads block * warps .. + warps - 1 of row t (warps: the block's warps), one per warp: what extra
// block `block` of a launch takes for row t. Every thread of the block calls it after its PDL wait.
__device__ __forceinline__ void q_heads_of_block(const QueryNormRope& qn, int t, float pos, int block) {
  const int warps = int(blockDim.x >> 5);
  const int h = block * warps + int(threadIdx.x >> 5);
  if (h >= qn.n_heads) return;
  q_head_norm_rope(qn.q + (int64_t(t) * qn.n_heads + h) * qn.head_dim, qn.head_dim, qn.rope_dim, pos, qn.inv_freq,
                   qn.eps, int(threadIdx.x & 31));
}

}  // namespace dsv4::cuda::ops_detail
