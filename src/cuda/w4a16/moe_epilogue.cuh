// moe_epilogue.cuh: the MoE epilogues shared by the W4A16 GEMM kernels (gemm_kernel.cuh and the
// SM90 wgmma_kernel.cu): the clamped SwiGLU of one gate/up pair, and the combine that sums a
// token's pair rows of the down GEMM into its output row once the last of them is written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/common/arrival.cuh"
#include "cuda/common/bf16_bits.cuh"
#include "cuda/w4a16/gemm_internal.h"
#include "cuda/w4a16/ptx.cuh"

namespace dsv4::cuda::w4a16_detail {

// act = silu(min(g, L)) * clamp(u, -L, L) * w from the bf16-rounded gate and up sums (the
// reference rounds the projections to bf16 before the activation).
__device__ __forceinline__ float swiglu_act(float gate_bf16, float up_bf16, float lim, float w) {
  const float gv = fminf(gate_bf16, lim);
  const float uv = fminf(fmaxf(up_bf16, -lim), lim);
  const float silu = gv / (1.0f + expf(-gv));
  return silu * uv * w;
}

inline constexpr int kMaxPairsPerToken = 9;  // top_k <= 8 routed experts + the shared one

// Down GEMM, after this block wrote pair rows row_begin .. row_begin + rows - 1 of its column
// block (blockIdx.x, kCols columns) to p.c and every thread reached this call: a token whose
// last pair row of the column block this was sums its rows in the fixed order of token_pairs
// (routed experts by increasing id, then shared) into y. s_row_token: shared int[>= rows]. The
// router's lists are read with ld.global.cg: in a PDL chain a co-resident block of another grid
// may hold an older copy in L1.
// kBatched: all of a token's pair positions are requested at once, then all its rows, so the
// combine costs two L2 round trips instead of two per pair (decode: the combine is the MoE
// layer's tail, 14 dependent loads at top_k 6); it holds ~45 more registers, which the wgmma
// kernel's producer threads (40 registers, they join its epilogue) do not have.
template <int kCols, int kThreads, bool kBatched = true>
__device__ __forceinline__ void moe_combine(const GemmKernelArgs& p, int row_begin, int rows, int* s_row_token) {
  const int tid = threadIdx.x;
  // One acq_rel arrival per row after the block barrier (common/arrival.cuh): the barrier orders
  // every thread's rows before the adding thread's release.
  __syncthreads();
  if (tid < rows) {
    const int token = __ldcg(p.sorted_token + row_begin + tid);
    int* cnt = p.combine_counters + int64_t(token) * gridDim.x + blockIdx.x;
    const bool last = atomic_add_acq_rel_gpu(cnt, 1) == p.pairs_per_token - 1;
    if (last) atomicExch(cnt, 0);
    s_row_token[tid] = last ? token : -1;
  }
  __syncthreads();
  constexpr int kChunks = kCols / 8;
  for (int idx = tid; idx < rows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, ch = idx % kChunks;
    const int token = s_row_token[r];
    const int col = blockIdx.x * kCols + ch * 8;
    if (token < 0 || col >= p.n) continue;
    float sum[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) sum[i] = 0.0f;
    auto add = [&](const uint4 v) {
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f2 = bf16x2_to_f32x2(w[i]);
        sum[2 * i] += f2.x;
        sum[2 * i + 1] += f2.y;
      }
    };
    const int* pairs = p.token_pairs + int64_t(token) * p.pairs_per_token;
    if constexpr (kBatched) {
      int pos[kMaxPairsPerToken];
#pragma unroll
      for (int kp = 0; kp < kMaxPairsPerToken; ++kp)
        if (kp < p.pairs_per_token) pos[kp] = __ldcg(pairs + kp);
      uint4 v[kMaxPairsPerToken];
#pragma unroll
      for (int kp = 0; kp < kMaxPairsPerToken; ++kp)
        if (kp < p.pairs_per_token) v[kp] = __ldcg(reinterpret_cast<const uint4*>(p.c + int64_t(pos[kp]) * p.ldc + col));
#pragma unroll
      for (int kp = 0; kp < kMaxPairsPerToken; ++kp)  // the same order as the loop below: same bits
        if (kp < p.pairs_per_token) add(v[kp]);
    } else {
      for (int kp = 0; kp < p.pairs_per_token; ++kp)
        add(__ldcg(reinterpret_cast<const uint4*>(p.c + int64_t(__ldcg(pairs + kp)) * p.ldc + col)));
    }
    uint4 o;
    o.x = pack_bf16x2(sum[0], sum[1]);
    o.y = pack_bf16x2(sum[2], sum[3]);
    o.z = pack_bf16x2(sum[4], sum[5]);
    o.w = pack_bf16x2(sum[6], sum[7]);
    *reinterpret_cast<uint4*>(p.y + int64_t(token) * p.ldy + col) = o;
  }
}

}  // namespace dsv4::cuda::w4a16_detail
