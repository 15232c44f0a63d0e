// device.cuh: device helpers of the sampling kernels (internal to sampling/): the sortable keys
// of raw logits and of sampling weights, the warp-distributed top-K list, and deterministic
// block scans. Every ordering here is total and every reduction has a fixed order, so a row's
// result depends only on its logits and parameters, never on timing or on its batch.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "cuda/sampling/sampling_internal.h"

namespace dsv4::cuda::sampling_detail {

using u64 = unsigned long long;
inline constexpr unsigned kFullMask = 0xffffffffu;

// ---- Raw-logit keys: (logit desc, id asc) as one u64, larger = more likely ----
// The high word orders floats as integers (-0 is folded into +0 so that equal logits tie and the
// lower id wins, as with float comparisons); the low word is ~id. 0 never occurs (id < 2^31), so
// it marks an empty slot.
__device__ __forceinline__ u64 logit_key(float l, int32_t id) {
  uint32_t u = __float_as_uint(l == 0.0f ? 0.0f : l);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (u64(u) << 32) | u64(0xFFFFFFFFu - uint32_t(id));
}
__device__ __forceinline__ float key_logit(u64 k) {
  const uint32_t o = uint32_t(k >> 32);
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o);
}
__device__ __forceinline__ int32_t key_id(u64 k) { return int32_t(0xFFFFFFFFu - uint32_t(k)); }

// Logprob candidates kept per row: max(1, logprobs), at most 20 (1 = just the max/argmax).
__device__ __forceinline__ int top_count(int32_t logprobs) {
  return logprobs < 1 ? 1 : (logprobs > kTopSlots ? kTopSlots : logprobs);
}

// ---- Weight keys: the bits of float w in [0, 1] (monotone in w), or kNotCandidate ----
// Exponent field e (0..127) buckets the candidates; within a bucket every w is mant * 2^(e' - 150)
// with a 24-bit integer mant (e' = max(e, 1)), so bucket sums are exact in u64 arithmetic.
__device__ __forceinline__ int wkey_exp(uint32_t k) { return int(k >> 23); }
__device__ __forceinline__ uint32_t wkey_mant(uint32_t k) {
  return (k >> 23) != 0 ? ((k & 0x7FFFFFu) | 0x800000u) : (k & 0x7FFFFFu);
}
// 2^(max(e, 1) - 150), the value of one mantissa unit in exponent bucket e (exact double).
__device__ __forceinline__ double wkey_unit(int e) {
  const int p = (e > 1 ? e : 1) - 150;
  return __longlong_as_double((long long)(p + 1023) << 52);
}

// ---- Warp-distributed top-K list ----
// Lane i < K holds the i-th largest key inserted so far (0 while empty), K in 1..20. Inserting
// 32 candidates (one per lane, `valid` marks real ones) costs one ballot when none qualifies,
// which is the common case once the list has filled.
__device__ __forceinline__ void warp_topk_insert(u64& list, u64 cand, bool valid, int K, int lane) {
  u64 thr = __shfl_sync(kFullMask, list, K - 1);
  unsigned pending = __ballot_sync(kFullMask, valid && cand > thr);
  while (pending != 0u) {
    const int src = __ffs(int(pending)) - 1;
    const u64 c = __shfl_sync(kFullMask, cand, src);
    // The list is sorted descending, so the entries above c are lanes [0, pos); pos < K since c > thr.
    const int pos = __popc(__ballot_sync(kFullMask, lane < K && list > c));
    const u64 up = __shfl_up_sync(kFullMask, list, 1);
    if (lane < K) {
      if (lane == pos) list = c;
      else if (lane > pos) list = up;
    }
    thr = __shfl_sync(kFullMask, list, K - 1);
    pending &= ~(1u << src);
    pending &= __ballot_sync(kFullMask, valid && cand > thr);
  }
}

// Largest u64 over the warp (all lanes get it).
__device__ __forceinline__ u64 warp_max_u64(u64 v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const u64 o = __shfl_xor_sync(kFullMask, v, off);
    v = o > v ? o : v;
  }
  return v;
}

// ---- Deterministic block scan (NT threads, all must call; contains two __syncthreads) ----
// Returns the exclusive prefix of v in thread order and sets *total. For doubles the additions
// happen in a fixed pattern (warp shuffles, then warp totals in order), so equal inputs give
// bit-equal outputs on every run.
template <int NT, typename T>
__device__ __forceinline__ T block_exclusive_scan(T v, T* s_warp /* [NT / 32] */, T* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T incl = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const T o = __shfl_up_sync(kFullMask, incl, off);
    if (lane >= off) incl += o;
  }
  T excl = __shfl_up_sync(kFullMask, incl, 1);
  if (lane == 0) excl = T(0);
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  T before = T(0), all = T(0);
#pragma unroll
  for (int w = 0; w < NT / 32; ++w) {
    if (w < warp) before += s_warp[w];
    all += s_warp[w];
  }
  __syncthreads();  // s_warp may be reused right away
  *total = all;
  return before + excl;
}

}  // namespace dsv4::cuda::sampling_detail
