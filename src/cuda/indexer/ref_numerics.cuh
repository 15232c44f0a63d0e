// ref_numerics.cuh: device versions of the CPU reference steps (src/cpu/rope.cpp, quant.cpp)
// that the compressor and the indexer must round exactly as the reference does: bf16 rounding,
// RoPE of one pair, the e2m1 grid of fp4sim. The reference is plain C++ built without FMA
// contraction, so every product and sum here is rounded on its own (__fmul_rn, __fadd_rn: nvcc
// would otherwise fuse a * c - b * s into one fma and round once).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/kv_codec.cuh"

namespace dsv4::cuda::ref {

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// cos and sin of the RoPE angle fp32(pos) * inv_freq (one fp32 multiply, as the reference). They
// are evaluated in double and rounded once: the correctly rounded value, which glibc's cosf/sinf
// (the reference) return in all but rare cases, where CUDA's cosf/sinf may be 1-2 ulp off.
__device__ __forceinline__ void rope_cos_sin(int64_t pos, float inv_freq, float* c, float* s) {
  const float angle = __fmul_rn(float(pos), inv_freq);
  double sd, cd;
  sincos(double(angle), &sd, &cd);
  *c = float(cd);
  *s = float(sd);
}

// Rotation of the pair (a, b) by (c, s): (a c - b s, b c + a s), the reference's expression.
__device__ __forceinline__ float2 rope_rotate(float a, float b, float c, float s) {
  return make_float2(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)), __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
}

// Signed value of an e2m1 code: 0 .5 1 1.5 2 3 4 6 (arithmetic, so no local-memory table).
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const uint32_t m = code & 7u;
  const float mag = m < 4u ? 0.5f * float(m) : (m < 6u ? float(m) - 2.0f : (m == 6u ? 4.0f : 6.0f));
  return (code & 8u) ? -mag : mag;
}

// fp4sim of one value of a block whose scale is 2^e: the dequantized value, exact in bf16.
// (The reference keeps the sign of a negative value that rounds to zero, -0; this gives +0.
// Both are the same in every later sum and product.)
__device__ __forceinline__ float fp4_dequant(float x, int e) { return ldexpf(e2m1_value(encode_e2m1(x, e)), e); }

// total + the eight bf16 values of u (low half of each word first), one rounded fp32 add at a
// time: the reference's head sum (cpu::indexer_scores), eight heads in head order.
__device__ __forceinline__ float add_bf16x8_in_order(float total, uint4 u) {
  const uint32_t pr[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    total = __fadd_rn(total, __uint_as_float(pr[j] << 16));
    total = __fadd_rn(total, __uint_as_float(pr[j] & 0xffff0000u));
  }
  return total;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace dsv4::cuda::ref
