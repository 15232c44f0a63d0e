// attention_combine.cu: the combine kernel of sparse_attention: merges a row's split partials
// (O_s, m_s, l_s) of one head into out = bf16(sum_s O_s e^(m_s - M) / (sum_s l_s e^(m_s - M) +
// e^(sink - M))), M = max_s m_s over the splits that saw keys, then inverse-rotates the rope dims.
// One block of 128 threads per (head, row), 4 dims per thread. Every warp reads the splits' m and l
// one split per lane (n_splits <= 32) and reduces them by shuffles; the O loads are issued 8
// splits at a time, so a row costs a few memory round trips, not two per split. Padding rows get
// zeros.
#include <cmath>

#include "cuda/attention/attention_device.cuh"
#include "cuda/attention/attention_internal.h"
#include "cuda/attention/attention_plan.h"
#include "cuda/common/pdl.cuh"

namespace dsv4::cuda::attention_detail {
namespace {

constexpr int kCombineThreads = kHeadDim / 4;
constexpr int kCombineBatch = 8;  // O loads in flight per thread
static_assert(kMaxSplits <= 32, "one split per lane");

__global__ void __launch_bounds__(kCombineThreads) attention_combine_kernel(const CombineKernelArgs a) {
  const int h = blockIdx.x, t = blockIdx.y, n_heads = a.n_heads;
  const int d = threadIdx.x * 4, lane = threadIdx.x & 31;
  // The row's sequence and position (the step's host copies, pdl.cuh) and the head's sink and
  // inverse frequencies (constant) before the wait.
  const bool padding = __ldcg(a.token_seq + t) < 0;
  const int pos = __ldcg(a.token_pos + t);
  const float sink = a.sink[h];
  const int k = (d - kNopeDim) / 2;
  const float freq0 = d >= kNopeDim ? a.inv_freq[k] : 0.0f, freq1 = d >= kNopeDim ? a.inv_freq[k + 1] : 0.0f;
  pdl_wait();  // the partials come from the split kernel just before

  __nv_bfloat16* out = a.o + (int64_t(t) * n_heads + h) * kHeadDim + d;
  if (padding) {
    *reinterpret_cast<uint2*>(out) = make_uint2(0, 0);
    return;
  }
  const int64_t stride = partial_floats(n_heads);
  const float* base = a.partials + int64_t(t) * a.n_splits * stride;
  const int m_off = n_heads * kHeadDim + h, l_off = n_heads * (kHeadDim + 1) + h;

  // Lane s: split s's m and l (m = -inf: a split with no keys, which wrote no O).
  float ms = -INFINITY, ls = 0.0f;
  if (lane < a.n_splits) {
    ms = __ldcg(base + lane * stride + m_off);
    ls = __ldcg(base + lane * stride + l_off);
  }
  float mx = ms;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  // The butterfly gives every lane (and every warp) the same bits.
  const float w = ms == -INFINITY ? 0.0f : expf(ms - mx);
  float den = ls * w;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s0 = 0; s0 < a.n_splits; s0 += kCombineBatch) {
    float4 v[kCombineBatch];
    float wj[kCombineBatch];
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      const int s = s0 + j;
      wj[j] = __shfl_sync(0xffffffffu, w, s & 31);
      const bool has_o = s < a.n_splits && __shfl_sync(0xffffffffu, ms, s & 31) != -INFINITY;
      v[j] = has_o ? __ldcg(reinterpret_cast<const float4*>(base + s * stride + int64_t(h) * kHeadDim + d))
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (!has_o) wj[j] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      acc[0] += v[j].x * wj[j];
      acc[1] += v[j].y * wj[j];
      acc[2] += v[j].z * wj[j];
      acc[3] += v[j].w * wj[j];
    }
  }
  den += expf(sink - mx);
  float x[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) x[i] = round_bf16(acc[i] / den);
  if (d >= kNopeDim) {
    inverse_rope_pair(x[0], x[1], pos, freq0);
    inverse_rope_pair(x[2], x[3], pos, freq1);
  }
  *reinterpret_cast<uint2*>(out) = make_uint2(pack_bf16x2(x[0], x[1]), pack_bf16x2(x[2], x[3]));
}

}  // namespace

Status launch_combine_kernel(const CombineKernelArgs& a, cudaStream_t stream, bool pdl) {
  return launch_kernel(&attention_combine_kernel, dim3(a.n_heads, a.n_tokens), dim3(kCombineThreads), 0, stream, pdl,
                       a, "attention_combine_kernel");
}

}  // namespace dsv4::cuda::attention_detail
