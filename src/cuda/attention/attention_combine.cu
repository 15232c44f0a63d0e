// attention_combine.cu: the combine kernel of sparse_attention: merges a row's split partials
// (O_s, m_s, l_s) of one head into out = bf16(sum_s O_s e^(m_s - M) / (sum_s l_s e^(m_s - M) +
// e^(sink - M))), M = max_s m_s over the splits that saw keys, then inverse-rotates the rope dims.
// One block of 128 threads per (head, row), 4 dims per thread. Padding rows get zeros.
#include <cmath>

#include "cuda/attention/attention_device.cuh"
#include "cuda/attention/attention_internal.h"
#include "cuda/attention/attention_plan.h"
#include "cuda/common/pdl.cuh"

namespace dsv4::cuda::attention_detail {
namespace {

constexpr int kCombineThreads = kHeadDim / 4;

__global__ void __launch_bounds__(kCombineThreads) attention_combine_kernel(const CombineKernelArgs a) {
  pdl_launch_dependents();
  const int h = blockIdx.x, t = blockIdx.y, n_heads = a.n_heads;
  const int d = threadIdx.x * 4;
  pdl_wait();  // the partials come from the split kernel just before

  __nv_bfloat16* out = a.o + (int64_t(t) * n_heads + h) * kHeadDim + d;
  if (__ldcg(a.token_seq + t) < 0) {
    *reinterpret_cast<uint2*>(out) = make_uint2(0, 0);
    return;
  }
  const int64_t stride = partial_floats(n_heads);
  const float* base = a.partials + int64_t(t) * a.n_splits * stride;
  const int m_off = n_heads * kHeadDim + h, l_off = n_heads * (kHeadDim + 1) + h;

  float mx = -INFINITY;
  for (int s = 0; s < a.n_splits; ++s) mx = fmaxf(mx, __ldcg(base + s * stride + m_off));
  float den = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s = 0; s < a.n_splits; ++s) {
    const float* ps = base + s * stride;
    const float ms = __ldcg(ps + m_off);
    if (ms == -INFINITY) continue;  // a split with no keys wrote no O
    const float w = expf(ms - mx);
    den += __ldcg(ps + l_off) * w;
    const float4 v = __ldcg(reinterpret_cast<const float4*>(ps + int64_t(h) * kHeadDim + d));
    acc[0] += v.x * w;
    acc[1] += v.y * w;
    acc[2] += v.z * w;
    acc[3] += v.w * w;
  }
  den += expf(a.sink[h] - mx);
  float x[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) x[i] = round_bf16(acc[i] / den);
  if (d >= kNopeDim) {
    const int pos = __ldcg(a.token_pos + t);
    const int k = (d - kNopeDim) / 2;
    inverse_rope_pair(x[0], x[1], pos, a.inv_freq[k]);
    inverse_rope_pair(x[2], x[3], pos, a.inv_freq[k + 1]);
  }
  *reinterpret_cast<uint2*>(out) = make_uint2(pack_bf16x2(x[0], x[1]), pack_bf16x2(x[2], x[3]));
}

}  // namespace

Status launch_combine_kernel(const CombineKernelArgs& a, cudaStream_t stream, bool pdl) {
  return launch_kernel(&attention_combine_kernel, dim3(a.n_heads, a.n_tokens), dim3(kCombineThreads), 0, stream, pdl,
                       a, "attention_combine_kernel");
}

}  // namespace dsv4::cuda::attention_detail
