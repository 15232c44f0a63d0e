// bf16_bits.cuh: bf16 pairs widened to fp32 by bit operations, for kernels whose loops unpack
// many values per useful instruction (weight streams, mHC mixes, the router's dots).
#pragma once

#include <cstdint>

namespace dsv4::cuda {

// The two bf16 of a word (low element first) as fp32, exactly: the low one shifted up, the high
// one masked, one instruction each. cuda_bf16's __bfloat1622float2 gives the same bits but
// compiles to three instructions for the pair (a PRMT and two shifts; nvcc 13, sm_86/sm_90):
// the dense streaming kernel's K loop went from 38 to 30 instructions per 8 weights.
__device__ __forceinline__ float2 bf16x2_to_f32x2(uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// The 8 bf16 of a 16-byte vector as fp32, in element order.
__device__ __forceinline__ void bf16x8_to_f32(const uint4 v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = bf16x2_to_f32x2(w[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

// acc + the 8 products of two 16-byte vectors of bf16, fp32 fmas in element order (the weight
// streams' dot: dense_stream.cu, dense_gemv.cu).
__device__ __forceinline__ float dot8_bf16(const uint4 a, const uint4 b, float acc) {
  const uint32_t wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = bf16x2_to_f32x2(wa[i]);
    const float2 fb = bf16x2_to_f32x2(wb[i]);
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
  return acc;
}

}  // namespace dsv4::cuda
