// fp8_weight.cuh: the exact weights of the fp8 form (dense.h Fp8WeightView, model/fp8_groups.h)
// in registers, for the dense decode kernels and the bf16 copy of fp8_groups_to_bf16.
//
// A code's 7 magnitude bits placed at bf16 bits 4..10 (its sign at bit 15) read as the code's
// value times 2^-120 (e4m3 bias 7, bf16 bias 127), subnormal codes included (as bf16/fp32
// subnormals); widened to fp32 and multiplied once by 2^(exp + 120), a power of two, the product
// is exactly e4m3(code) * 2^exp, the weight (the build keeps fp32 subnormals: no -ftz). Two codes
// per shift-and-lop: four codes of a word cost 9 integer instructions and 4 multiplies.
#pragma once

#include <cstdint>

namespace dsv4::cuda::dense_detail {

// 2^(exp + 120) for a group exponent in [-128, 7] (model/fp8_groups.h), a normal fp32.
__device__ __forceinline__ float fp8_group_factor(int exp) { return __uint_as_float(uint32_t(exp + 247) << 23); }

// The exact weights of the four codes of `w` (low byte first) under factor f.
__device__ __forceinline__ void fp8x4_to_f32(uint32_t w, float f, float (&out)[4]) {
  const uint32_t p13 = (w & 0x80008000u) | ((w >> 4) & 0x07f007f0u);          // bf16 bits of codes 1 | 3
  const uint32_t p02 = ((w << 8) & 0x80008000u) | ((w << 4) & 0x07f007f0u);   // codes 0 | 2
  out[0] = __uint_as_float(p02 << 16) * f;
  out[1] = __uint_as_float(p13 << 16) * f;
  out[2] = __uint_as_float(p02 & 0xffff0000u) * f;
  out[3] = __uint_as_float(p13 & 0xffff0000u) * f;
}

}  // namespace dsv4::cuda::dense_detail
