// quant_test.cpp: exact tests of the reference quantizers (fp8sim, fp4sim) and the Hadamard
// rotation, on hand-computed values and on properties that must hold bit for bit.
#include "cpu/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/numeric.h"

namespace dsv4::cpu {
namespace {

TEST(Fp8Sim, HandComputedBlock) {
  // amax = 448 -> s = 2^ceil(log2(448/448)) = 1: values round to the e4m3 grid directly.
  std::vector<float> x = {448.0f, 1.0625f, -3.3f, 0.001953125f, 300.0f, -0.0f, 17.0f, 0.5f};
  std::vector<int8_t> e(1);
  fp8sim(x.data(), 8, 8, e.data());
  EXPECT_EQ(e[0], 0);
  EXPECT_EQ(x[0], 448.0f);
  EXPECT_EQ(x[1], 1.0f);          // tie between 1.0 and 1.125 -> even
  EXPECT_EQ(x[2], -3.25f);        // quantum 0.25 in [2, 4)
  EXPECT_EQ(x[3], 0.001953125f);  // 2^-9, the smallest subnormal
  EXPECT_EQ(x[4], 288.0f);        // quantum 32 in [256, 512): 300 -> 288
  EXPECT_EQ(x[6], 16.0f);         // quantum 2 in [16, 32): 17 is a tie -> 16 (even)
  EXPECT_EQ(x[7], 0.5f);
}

TEST(Fp8Sim, ScaleIsCeilLog2OfAmaxOver448) {
  // amax = 1.0: 1/448 = 2^-8.807 -> ceil -> 2^-8; values become e4m3(x * 256) / 256.
  std::vector<float> x = {1.0f, 0.3f, -0.7f, 0.0f};
  std::vector<int8_t> e(1);
  fp8sim(x.data(), 4, 4, e.data());
  EXPECT_EQ(e[0], -8);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], round_e4m3(0.3f * 256.0f) / 256.0f);
  EXPECT_EQ(x[2], round_e4m3(-0.7f * 256.0f) / 256.0f);
  // amax exactly 448 * 2^k keeps s = 2^k (ceil of an exact power is itself).
  std::vector<float> y = {896.0f, 1.0f};
  fp8sim(y.data(), 2, 2, e.data());
  EXPECT_EQ(e[0], 1);
  EXPECT_EQ(y[0], 896.0f);
  EXPECT_EQ(y[1], 1.0f);
  // All-zero blocks use amax = 1e-4: s = 2^ceil(log2(1e-4 / 448)) = 2^-22.
  std::vector<float> z = {0.0f, 0.0f};
  fp8sim(z.data(), 2, 2, e.data());
  EXPECT_EQ(e[0], -22);
  EXPECT_EQ(z[0], 0.0f);
}

TEST(Fp8Sim, IdempotentAndBlockwise) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(448);
  for (float& v : x) v = round_bf16(nd(rng));
  x[70] = 1000.0f;  // a large value in block 1 must not change block 0's scale
  std::vector<float> a = x;
  std::vector<int8_t> e(7);
  fp8sim(a.data(), 448, 64, e.data());
  for (int b = 0; b < 7; ++b) {
    float amax = 0;
    for (int i = 0; i < 64; ++i) amax = std::fmax(amax, std::fabs(x[size_t(b * 64 + i)]));
    EXPECT_EQ(e[size_t(b)], ceil_log2_bits(std::fmax(amax, 1e-4f) * (1.0f / 448.0f))) << b;
    const float s = std::ldexp(1.0f, e[size_t(b)]);
    for (int i = 0; i < 64; ++i) {
      const float v = a[size_t(b * 64 + i)];
      EXPECT_EQ(round_e4m3(v / s), v / s) << "not on the scaled e4m3 grid";
      EXPECT_EQ(round_bf16(v), v) << "not bf16-representable";
      // Nearest grid point: the error is at most half a quantum of the e4m3 value.
      EXPECT_LE(std::fabs(v - x[size_t(b * 64 + i)]), std::fabs(x[size_t(b * 64 + i)]) / 16.0f + s * std::ldexp(1.0f, -10));
    }
  }
  std::vector<float> again = a;
  fp8sim(again.data(), 448, 64);
  EXPECT_EQ(again, a);
}

TEST(Fp4Sim, HandComputedBlock) {
  // amax = 6 -> s = 2^ceil(log2(6/6)) = 1.
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;
  x[1] = 2.5f;    // tie 2 / 3 -> 2
  x[2] = -0.25f;  // tie 0 / 0.5 -> 0
  x[3] = 5.0f;    // tie 4 / 6 -> 4
  x[4] = 0.8f;    // -> 1
  x[5] = -1.75f;  // tie 1.5 / 2 -> 2
  std::vector<int8_t> e(1);
  fp4sim(x.data(), 32, 32, e.data());
  EXPECT_EQ(e[0], 0);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_EQ(x[3], 4.0f);
  EXPECT_EQ(x[4], 1.0f);
  EXPECT_EQ(x[5], -2.0f);
}

TEST(Fp4Sim, ScaleAndGrid) {
  // amax = 1 -> 1/6 -> 2^ceil(-2.58) = 2^-2: grid {0, 0.125, 0.25, 0.375, 0.5, 0.75, 1, 1.5}.
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  x[1] = 0.3f;    // 0.3 / 0.25 = 1.2 -> 1 -> 0.25
  x[2] = 0.33f;   // 1.32 -> 1.5 -> 0.375
  x[3] = -0.9f;   // 3.6 -> 4 -> -1.0
  std::vector<int8_t> e(1);
  fp4sim(x.data(), 32, 32, e.data());
  EXPECT_EQ(e[0], -2);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 0.25f);
  EXPECT_EQ(x[2], 0.375f);
  EXPECT_EQ(x[3], -1.0f);
  // Tiny blocks: amax floor 6 * 2^-126 -> s = 2^-126, values below half of that round to 0.
  std::vector<float> t(32, 0.0f);
  fp4sim(t.data(), 32, 32, e.data());
  EXPECT_EQ(e[0], -126);
}

TEST(Hadamard, MatchesTheSylvesterMatrixAndIsOrthonormal) {
  for (int n : {2, 4, 8, 64, 128}) {
    std::vector<float> x(static_cast<size_t>(n));
    std::mt19937 rng(static_cast<uint32_t>(n));
    // Multiples of 2^-8 in [-1, 1]: every partial sum is exact in fp32, so the only rounding is
    // the final scale and the bf16 cast, which the expected value reproduces.
    std::uniform_int_distribution<int> u(-256, 256);
    for (float& v : x) v = float(u(rng)) / 256.0f;
    std::vector<float> y = x;
    hadamard_bf16(y.data(), n);
    // H[i][j] = (-1)^popcount(i & j) / sqrt(n) in Sylvester order.
    double norm_x = 0, norm_y = 0;
    for (int i = 0; i < n; ++i) {
      double s = 0;
      for (int j = 0; j < n; ++j) s += ((__builtin_popcount(unsigned(i & j)) & 1) ? -1.0 : 1.0) * x[size_t(j)];
      EXPECT_EQ(y[size_t(i)], round_bf16(float(s) * (1.0f / std::sqrt(float(n))))) << "n=" << n << " i=" << i;
      norm_x += double(x[size_t(i)]) * x[size_t(i)];
      norm_y += double(y[size_t(i)]) * y[size_t(i)];
    }
    EXPECT_NEAR(norm_x, norm_y, 1e-2 * norm_x);
  }
  // Exact small case: H2 [1, 1] -> [sqrt(2), 0] rounded to bf16.
  std::vector<float> v = {1.0f, 1.0f};
  hadamard_bf16(v.data(), 2);
  EXPECT_EQ(v[0], round_bf16(std::sqrt(2.0f)));
  EXPECT_EQ(v[1], 0.0f);
}

}  // namespace
}  // namespace dsv4::cpu
