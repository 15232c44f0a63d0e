// quant.h: the quantization steps that are part of the official forward (MODEL_SPEC.md §10.1):
// fp8sim (e4m3 with power-of-two ue8m0 scales per block), fp4sim (e2m1 with ue8m0 scales per
// 32), and the 128-point Hadamard rotation. In-place on fp32 buffers holding bf16 values; results
// are exactly representable in bf16, so no further rounding is needed.
#pragma once

#include <cstdint>

namespace dsv4::cpu {

// x[n] (bf16 values in fp32). Quantize-dequantize each block in place (a shorter last block when
// n % block != 0, which only the small test models have; Flash's 448 = 7 x 64):
// s = 2^ceil(log2(max(amax, 1e-4) * fp32(1/448))), x = e4m3(clamp(x / s, +-448)) * s.
// If `scale_exp` is non-null it receives the exponent of each block's scale (s = 2^scale_exp).
void fp8sim(float* x, int n, int block, int8_t* scale_exp = nullptr);

// x[n], blocks of 32 (a shorter last block if n % 32 != 0): s = 2^ceil(log2(max(amax, 6 * 2^-126) * fp32(1/6))),
// x = e2m1(clamp(x / s, +-6)) * s.
void fp4sim(float* x, int n, int block = 32, int8_t* scale_exp = nullptr);

// In-place orthonormal Walsh-Hadamard transform of x[n] (n a power of two) in Sylvester order,
// computed in fp32 and rounded to bf16 (matching the reference's bf16-in, bf16-out call).
void hadamard_bf16(float* x, int n);

}  // namespace dsv4::cpu
