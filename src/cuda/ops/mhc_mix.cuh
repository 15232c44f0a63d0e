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
// kHc > 0 fixes hc at compile time: the gathers of a row or column are then unrolled (hc
// independent shuffles in flight, then the adds in the reference's order) and the lane's row
// and column are shifts; the arithmetic and its order are the same as with a runtime hc
// (kHc = 0), so both give the same bits. The loop is a serial chain of 2 * iters normalizations,
// the critical path of the finish kernel.
template <int kHc>
__device__ __forceinline__ float sinkhorn_warp_t(float m, int hc_rt, int iters, float eps, int lane) {
  const int hc = kHc > 0 ? kHc : hc_rt;
  const int j = lane / hc, k = lane % hc;
  const int row0 = (j * hc) & 31;  // lanes past hc*hc read some lane; their result is unused
  auto gather_sum = [&](float v, int first, int step) {
    float g[kHc > 0 ? kHc : 1];
    float s = 0.0f;
    if constexpr (kHc > 0) {
#pragma unroll
      for (int i = 0; i < kHc; ++i) g[i] = __shfl_sync(kFullMask, v, (first + i * step) & 31);
#pragma unroll
      for (int i = 0; i < kHc; ++i) s += g[i];
    } else {
      (void)g;
      for (int i = 0; i < hc; ++i) s += __shfl_sync(kFullMask, v, (first + i * step) & 31);
    }
    return s;
  };
  auto row_sum = [&](float v) { return gather_sum(v, row0, 1); };
  auto col_sum = [&](float v) { return gather_sum(v, k, hc); };
  // Row softmax, then + eps.
  float mx = __shfl_sync(kFullMask, m, row0);
#pragma unroll
  for (int kk = 1; kk < (kHc > 0 ? kHc : 5); ++kk) {
    if (kHc == 0 && kk >= hc) break;
    mx = fmaxf(mx, __shfl_sync(kFullMask, m, (row0 + kk) & 31));
  }
  const float e = expf(m - mx);
  m = e / row_sum(e) + eps;
  m = m / (col_sum(m) + eps);
  for (int it = 1; it < iters; ++it) {
    m = m / (row_sum(m) + eps);
    m = m / (col_sum(m) + eps);
  }
  return m;
}

__device__ __forceinline__ float sinkhorn_warp(float m, int hc, int iters, float eps, int lane) {
  // Warp-uniform branch: hc = 4 (DeepSeek-V4) gets the unrolled chain.
  return hc == 4 ? sinkhorn_warp_t<4>(m, hc, iters, eps, lane) : sinkhorn_warp_t<0>(m, hc, iters, eps, lane);
}

// sigmoid as cpu::sigmoid: 1 / (1 + exp(-x)).
__device__ __forceinline__ float sigmoid_dev(float x) { return 1.0f / (1.0f + expf(-x)); }

}  // namespace dsv4::cuda::mhc_detail
