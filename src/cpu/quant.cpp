// quant.cpp: scalar implementations of the reference quantization steps.
#include "cpu/quant.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/numeric.h"

namespace dsv4::cpu {

namespace {

// Quantize-dequantize blocks with a power-of-two scale: s = 2^ceil(log2(max(amax, amax_floor) *
// fp32(1 / max_code))) (the reference multiplies by an fp32 constant), x = round(clamp(x/s)) * s.
void block_sim(float* x, int n, int block, int8_t* scale_exp, float max_code, float amax_floor,
               float (*round_code)(float)) {
  const float inv_max = 1.0f / max_code;
  for (int b = 0; b * block < n; ++b) {
    float* v = x + b * block;
    const int len = std::min(block, n - b * block);
    float amax = 0.0f;
    for (int i = 0; i < len; ++i) amax = std::fmax(amax, std::fabs(v[i]));
    amax = std::fmax(amax, amax_floor);
    const int e = ceil_log2_bits(amax * inv_max);
    const float s = std::ldexp(1.0f, e);
    for (int i = 0; i < len; ++i) v[i] = round_code(std::fmin(std::fmax(v[i] / s, -max_code), max_code)) * s;
    if (scale_exp) scale_exp[b] = int8_t(e);
  }
}

}  // namespace

void fp8sim(float* x, int n, int block, int8_t* scale_exp) {
  block_sim(x, n, block, scale_exp, kE4M3Max, 1e-4f, round_e4m3);
}

void fp4sim(float* x, int n, int block, int8_t* scale_exp) {
  block_sim(x, n, block, scale_exp, kE2M1Max, 6.0f * std::ldexp(1.0f, -126), round_e2m1);
}

void hadamard_bf16(float* x, int n) {
  DSV4_CHECK(n > 0 && (n & (n - 1)) == 0, "hadamard: n={} is not a power of two", n);
  for (int h = 1; h < n; h *= 2) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float scale = 1.0f / std::sqrt(float(n));
  for (int i = 0; i < n; ++i) x[i] = round_bf16(x[i] * scale);
}

}  // namespace dsv4::cpu
