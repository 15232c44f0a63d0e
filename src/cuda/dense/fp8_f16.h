// fp8_f16.h: fp8-form codes as fp16 for the tensor-core decode kernel (dense_tc.cu), by bit
// placement. Host and device, so that a CPU test checks every code (cuda_dense_test
// Fp8CodesAsFp16).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSV4_DENSE_HD __host__ __device__ __forceinline__
#else
#define DSV4_DENSE_HD inline
#endif

namespace dsv4::cuda::dense_detail {

// Codes 0|2 (lo) and 1|3 (hi) of `w` (low byte first) as f16x2 bit patterns, each the code's
// e4m3fn value times 2^-8: its 7 magnitude bits at fp16 bits 7..13 (e4m3's exponent bias 7
// against fp16's 15), its sign at bit 15; subnormal codes become fp16 subnormals. 5 integer
// instructions for four codes.
DSV4_DENSE_HD void fp8x4_to_f16x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = ((w << 7) & 0x3f803f80u) | ((w << 8) & 0x80008000u);
  hi = ((w >> 1) & 0x3f803f80u) | (w & 0x80008000u);
}

}  // namespace dsv4::cuda::dense_detail
