// ops_util.cuh: device helpers shared by the ops kernels (ops.h): 8 x bf16 vector loads and
// stores, warp and block sums, and the reference's rounding points (bf16 round trip, the RoPE
// pair rotation). Arithmetic that must match the CPU reference bit for bit uses the _rn
// intrinsics: the reference is compiled without FMA contraction, nvcc contracts a * b + c by
// default, and an fma rounds once where the reference rounds twice.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/bf16_bits.cuh"

namespace dsv4::cuda::ops_detail {

inline constexpr unsigned kFullMask = 0xffffffffu;

// 8 consecutive bf16 (16 bytes, 16-byte aligned) as fp32.
__device__ __forceinline__ void load_bf16x8(const __nv_bfloat16* p, float (&v)[8]) {
  bf16x8_to_f32(*reinterpret_cast<const uint4*>(p), v);
}

// Rounds 8 fp32 to bf16 (nearest even) and stores them (16 bytes, 16-byte aligned).
__device__ __forceinline__ void store_bf16x8(__nv_bfloat16* p, const float (&v)[8]) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = u;
}

// The Rounder of the bf16 numerics: fp32 -> bf16 (nearest even) -> fp32.
__device__ __forceinline__ float round_bf16_dev(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats; the call ends with a barrier, so it can be reused right away.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float s = lane < n_warps ? scratch[lane] : 0.0f;
  s = warp_sum(s);
  __syncthreads();
  return s;
}

// The norm weights one thread of rmsnorm_row_block needs: chunks c = tid + blockDim.x i of w
// f32 [n] (zeros past n). Constant data: the kernels load them before pdl_wait() (pdl.cuh), so
// the loads overlap the previous kernel's tail instead of following the block sum.
template <int kChunks>
struct RowNormWeights {
  float v[kChunks][8];
};

template <int kChunks>
__device__ __forceinline__ void load_row_norm_weights(const float* __restrict__ w, int n,
                                                      RowNormWeights<kChunks>& out) {
  const int n_chunks = n / 8, nt = int(blockDim.x);
#pragma unroll
  for (int ci = 0; ci < kChunks; ++ci) {
    const int c = int(threadIdx.x) + ci * nt;
    float4 w0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), w1 = w0;
    if (c < n_chunks) {
      w0 = __ldg(reinterpret_cast<const float4*>(w + 8 * c));
      w1 = __ldg(reinterpret_cast<const float4*>(w + 8 * c + 4));
    }
    out.v[ci][0] = w0.x, out.v[ci][1] = w0.y, out.v[ci][2] = w0.z, out.v[ci][3] = w0.w;
    out.v[ci][4] = w1.x, out.v[ci][5] = w1.y, out.v[ci][6] = w1.z, out.v[ci][7] = w1.w;
  }
}

// In-place weighted RMSNorm of one row of n values (n a multiple of 8, n <= 8 * blockDim.x *
// kChunks) by the whole block, then bf16: thread = chunks of 8 values c = tid + blockDim.x i,
// weights from load_row_norm_weights. The sum of squares is an explicit fma chain per thread
// (the same bits wherever it is inlined: rmsnorm_rows and qkv_norm_finish), then block_sum; the
// products follow the reference. `scratch`: 32 floats of shared memory. Every thread of the
// block must call it.
template <int kChunks>
__device__ __forceinline__ void rmsnorm_row_block(__nv_bfloat16* __restrict__ row, int n,
                                                  const RowNormWeights<kChunks>& w, float eps, float* scratch) {
  const int n_chunks = n / 8, nt = int(blockDim.x);
  float v[kChunks][8];
  float ss = 0.0f;
#pragma unroll
  for (int ci = 0; ci < kChunks; ++ci) {
    const int c = int(threadIdx.x) + ci * nt;
    if (c < n_chunks) {
      load_bf16x8(row + 8 * c, v[ci]);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss = __fmaf_rn(v[ci][e], v[ci][e], ss);
    }
  }
  ss = block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / float(n) + eps);
#pragma unroll
  for (int ci = 0; ci < kChunks; ++ci) {
    const int c = int(threadIdx.x) + ci * nt;
    if (c >= n_chunks) continue;
    float out[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = __fmul_rn(w.v[ci][e], __fmul_rn(v[ci][e], r));
    store_bf16x8(row + 8 * c, out);
  }
}

// cpu::Rope::rotate for one pair at `angle` (fp32 pos * inv_freq): precise sincosf (full-range
// argument reduction, positions reach 2^18 radians), products and sums rounded as the reference.
__device__ __forceinline__ void rope_pair(float& a, float& b, float angle) {
  float s, c;
  sincosf(angle, &s, &c);
  const float a0 = a, b0 = b;
  a = __fsub_rn(__fmul_rn(a0, c), __fmul_rn(b0, s));
  b = __fadd_rn(__fmul_rn(b0, c), __fmul_rn(a0, s));
}

}  // namespace dsv4::cuda::ops_detail
