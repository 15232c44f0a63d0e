// q_head.h: the attention query heads' per-head RMSNorm + RoPE (q_norm_rope, ops.h) as a job that
// another launch of the layer can take in extra blocks (the indexer's prep launch on CSA layers),
// one launch fewer per layer. The device code is q_head.cuh, shared with q_norm_rope, so every
// variant is bit-identical.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "base/status.h"

namespace dsv4::cuda {

inline constexpr int kQHeadMaxDim = 1024;  // one warp holds a head: 32 lanes x 8 x 4 values

// Exactly q_norm_rope(q, T, n_heads, head_dim, rope_dim, token_pos, inv_freq, eps) for the T
// rows of the launch that takes it (token_pos is that launch's).
struct QueryNormRope {
  __nv_bfloat16* q = nullptr;       // bf16 [T, n_heads, head_dim], in place
  int n_heads = 0, head_dim = 0, rope_dim = 0;
  const float* inv_freq = nullptr;  // f32 [rope_dim / 2]
  float eps = 0.0f;
};

// q_norm_rope's contract: head_dim a multiple of 8 up to kQHeadMaxDim, rope_dim a multiple of 8
// up to head_dim, q 16-byte aligned.
inline Status check_query_norm_rope(const QueryNormRope& qn, const char* who) {
  if (qn.q == nullptr || (qn.rope_dim > 0 && qn.inv_freq == nullptr))
    return invalid_argument("{}: null query heads or inv_freq", who);
  if (qn.n_heads < 1 || qn.head_dim < 8 || qn.head_dim % 8 != 0 || qn.head_dim > kQHeadMaxDim || qn.rope_dim < 0 ||
      qn.rope_dim % 8 != 0 || qn.rope_dim > qn.head_dim)
    return invalid_argument("{}: query heads {} of {} dims (a multiple of 8 up to {}), rope_dim {} (a multiple of 8 up "
                            "to the head dims)",
                            who, qn.n_heads, qn.head_dim, kQHeadMaxDim, qn.rope_dim);
  if ((reinterpret_cast<uintptr_t>(qn.q) & 15) != 0) return invalid_argument("{}: query heads must be 16-byte aligned", who);
  return Status::ok();
}

}  // namespace dsv4::cuda
