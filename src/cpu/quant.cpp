// quant.cpp: scalar implementations of the reference quantization steps.
#include "cpu/quant.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/numeric.h"

namespace dsv4::cpu {

void fp8sim(float* x, int n, int block, int8_t* scale_exp) {
  const float inv_max = 1.0f / kE4M3Max;  // the reference multiplies by an fp32 constant
  for (int b = 0; b * block < n; ++b) {
    float* v = x + b * block;
    const int len = std::min(block, n - b * block);
    float amax = 0.0f;
    for (int i = 0; i < len; ++i) amax = std::fmax(amax, std::fabs(v[i]));
    amax = std::fmax(amax, 1e-4f);
    const int e = ceil_log2_bits(amax * inv_max);
    const float s = std::ldexp(1.0f, e);
    for (int i = 0; i < len; ++i) {
      float q = v[i] / s;
      q = std::fmin(std::fmax(q, -kE4M3Max), kE4M3Max);
      v[i] = round_e4m3(q) * s;
    }
    if (scale_exp) scale_exp[b] = int8_t(e);
  }
}

void fp4sim(float* x, int n, int block, int8_t* scale_exp) {
  const float inv_max = 1.0f / kE2M1Max;
  const float amax_min = 6.0f * std::ldexp(1.0f, -126);
  for (int b = 0; b * block < n; ++b) {
    float* v = x + b * block;
    const int len = std::min(block, n - b * block);
    float amax = 0.0f;
    for (int i = 0; i < len; ++i) amax = std::fmax(amax, std::fabs(v[i]));
    amax = std::fmax(amax, amax_min);
    const int e = ceil_log2_bits(amax * inv_max);
    const float s = std::ldexp(1.0f, e);
    for (int i = 0; i < len; ++i) {
      float q = v[i] / s;
      q = std::fmin(std::fmax(q, -kE2M1Max), kE2M1Max);
      v[i] = round_e2m1(q) * s;
    }
    if (scale_exp) scale_exp[b] = int8_t(e);
  }
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
