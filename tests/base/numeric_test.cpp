// numeric_test.cpp: exact tests of the scalar format conversions in base/numeric.h.
#include "base/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace dsv4 {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(INFINITY)), INFINITY);
}

TEST(Fp16, EveryValueRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), uint16_t(h)) << "h=" << h << " f=" << f;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(f16_to_f32(f32_to_f16(65519.0f)), 65504.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(70000.0f)), INFINITY);
  EXPECT_EQ(f16_to_f32(f32_to_f16(std::ldexp(1.0f, -25))), 0.0f);  // tie to even (0)
  EXPECT_EQ(f16_to_f32(f32_to_f16(std::ldexp(3.0f, -25))), std::ldexp(1.0f, -23));
}

TEST(E4m3, EveryCodeRoundTrips) {
  std::set<float> values;
  for (int b = 0; b < 256; ++b) {
    const float f = e4m3_to_f32(uint8_t(b));
    if (std::isnan(f)) {
      EXPECT_TRUE((b & 0x7f) == 0x7f) << b;
      continue;
    }
    if (f == 0.0f) continue;  // +0 and -0 both exist
    EXPECT_EQ(f32_to_e4m3(f), uint8_t(b)) << "b=" << b << " f=" << f;
    EXPECT_EQ(round_e4m3(f), f);
    values.insert(f);
  }
  EXPECT_EQ(values.size(), 252u);  // 254 finite codes minus the two zeros
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(E4m3, RoundingAndSaturation) {
  EXPECT_EQ(round_e4m3(1000.0f), 448.0f);
  EXPECT_EQ(round_e4m3(-449.0f), -448.0f);
  // Between 1.0 and 1.125 (quantum 1/8): the midpoint 1.0625 goes to the even mantissa 1.0.
  EXPECT_EQ(round_e4m3(1.0625f), 1.0f);
  EXPECT_EQ(round_e4m3(1.1875f), 1.25f);  // midpoint of 1.125 (odd) and 1.25 (even)
  // Subnormals: quantum 2^-9.
  EXPECT_EQ(round_e4m3(std::ldexp(1.5f, -9)), std::ldexp(2.0f, -9));
  EXPECT_EQ(round_e4m3(std::ldexp(0.5f, -9)), 0.0f);
  // 248 lies between 240 (odd mantissa) and 256 (quantum 16): tie to the even one.
  EXPECT_EQ(round_e4m3(248.0f), 256.0f);
  EXPECT_EQ(round_e4m3(240.0f), 240.0f);
  EXPECT_EQ(round_e4m3(432.0f), 448.0f);  // 416 (odd) vs 448 (even)
}

TEST(E8m0, DecodeAndCeilLog2) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(130), 8.0f);
  EXPECT_EQ(e8m0_to_f32(120), std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  EXPECT_EQ(ceil_log2_bits(1.0f), 0);
  EXPECT_EQ(ceil_log2_bits(1.0001f), 1);
  EXPECT_EQ(ceil_log2_bits(0.5f), -1);
  EXPECT_EQ(ceil_log2_bits(0.75f), 0);
  EXPECT_EQ(ceil_log2_bits(3.0f), 2);
}

TEST(E2m1, CodesAndRounding) {
  for (uint8_t c = 0; c < 16; ++c) {
    const float v = e2m1_to_f32(c);
    if (c == 8) {
      EXPECT_EQ(v, 0.0f);
      continue;
    }
    EXPECT_EQ(f32_to_e2m1(v), c);
  }
  EXPECT_EQ(round_e2m1(0.25f), 0.0f);   // tie: 0 (even) vs 0.5
  EXPECT_EQ(round_e2m1(0.75f), 1.0f);   // tie: 0.5 (odd) vs 1.0 (even)
  EXPECT_EQ(round_e2m1(1.25f), 1.0f);   // tie: 1.0 (even) vs 1.5
  EXPECT_EQ(round_e2m1(1.75f), 2.0f);   // tie: 1.5 (odd) vs 2.0
  EXPECT_EQ(round_e2m1(2.5f), 2.0f);    // tie: 2 (even) vs 3
  EXPECT_EQ(round_e2m1(3.5f), 4.0f);    // tie: 3 (odd) vs 4
  EXPECT_EQ(round_e2m1(5.0f), 4.0f);    // tie: 4 (even) vs 6
  EXPECT_EQ(round_e2m1(5.1f), 6.0f);
  EXPECT_EQ(round_e2m1(100.0f), 6.0f);
  EXPECT_EQ(round_e2m1(-2.9f), -3.0f);
}

}  // namespace
}  // namespace dsv4
