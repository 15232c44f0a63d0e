// mhc_mix.cuh: warp-level pieces of the mHC mixing weights (cpu::hc_pre / hc_head, MODEL_SPEC.md
// §4.1): the transposing warp reduction of the mix-logit partials and the Sinkhorn projection of
// the hc x hc comb matrix, one matrix element per lane. Sums run in the reference's order (each
// lane gathers the row or column by shuffles and adds it up from index 0), so only expf can make
// the result differ from cpu::sinkhorn.
#pragma once

#include "cuda/ops/ops_util.cuh"

namespace dsv4::cuda::mhc_detail {

using ops_detail::kFullMask;

// One halving step of warp_reduce_scatter: lanes exchange with lane ^ kHalf; the lane with that
// bit set keeps the upper half of its values and sends the lower half. A template recursion, so
// every register index is a constant (a runtime loop bound put the values in local memory).
template <int kHalf, int kWidth>
__device__ __forceinline__ void reduce_scatter_step(float (&v)[kWidth], int lane) {
  if constexpr (kHalf >= 1) {
    const bool upper = (lane & kHalf) != 0;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const float send = upper ? v[i] : v[i + kHalf];
      const float keep = upper ? v[i + kHalf] : v[i];
      v[i] = keep + __shfl_xor_sync(kFullMask, send, kHalf);
    }
    reduce_scatter_step<kHalf / 2, kWidth>(v, lane);
  }
}

// Each lane holds kWidth values; returns, in every lane, the sum over the 32 lanes of value
// (lane % kWidth). Halving exchange: kWidth - 1 shuffles for the first log2(kWidth) steps, then
// log2(32 / kWidth) more, instead of 5 per value.
template <int kWidth>
__device__ __forceinline__ float warp_reduce_scatter(float (&v)[kWidth], int lane) {
  static_assert(kWidth >= 1 && kWidth <= 32 && (kWidth & (kWidth - 1)) == 0, "kWidth: a power of two <= 32");
  reduce_scatter_step<kWidth / 2, kWidth>(v, lane);
  float s = v[0];
#pragma unroll
  for (int off = kWidth; off < 32; off <<= 1) s += __shfl_xor_sync(kFullMask, s, off);
  return s;
}

// cpu::sinkhorn on a hc x hc matrix held by lanes 0 .. hc*hc - 1 (lane = j * hc + k holds
// M[j][k]); the whole warp calls it (other lanes compute garbage nobody reads). hc <= 5.
__device__ __forceinline__ float sinkhorn_warp(float m, int hc, int iters, float eps, int lane) {
  const int j = lane / hc, k = lane % hc;
  const int row0 = (j * hc) & 31;  // lanes past hc*hc read some lane; their result is unused
  auto row_sum = [&](float v) {
    float s = 0.0f;
    for (int kk = 0; kk < hc; ++kk) s += __shfl_sync(kFullMask, v, (row0 + kk) & 31);
    return s;
  };
  auto col_sum = [&](float v) {
    float s = 0.0f;
    for (int jj = 0; jj < hc; ++jj) s += __shfl_sync(kFullMask, v, (jj * hc + k) & 31);
    return s;
  };
  // Row softmax, then + eps.
  float mx = __shfl_sync(kFullMask, m, row0);
  for (int kk = 1; kk < hc; ++kk) mx = fmaxf(mx, __shfl_sync(kFullMask, m, (row0 + kk) & 31));
  const float e = expf(m - mx);
  m = e / row_sum(e) + eps;
  m = m / (col_sum(m) + eps);
  for (int it = 1; it < iters; ++it) {
    m = m / (row_sum(m) + eps);
    m = m / (col_sum(m) + eps);
  }
  return m;
}

// sigmoid as cpu::sigmoid: 1 / (1 + exp(-x)).
__device__ __forceinline__ float sigmoid_dev(float x) { return 1.0f / (1.0f + expf(-x)); }

}  // namespace dsv4::cuda::mhc_detail
