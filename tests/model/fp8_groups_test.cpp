// fp8_groups_test.cpp: the lossless fp8 form of FP8-derived dense weights (model/fp8_groups.h).
// Weights are built the way the checkpoints got theirs: random e4m3 codes (subnormals, zeros of
// both signs and +-448 included) times a ue8m0 scale per 128 x 128 block, then BF16, as Intel's
// export stores wo_a; every value must come back bit for bit. Values of another origin must be
// refused with the element that fails.
#include "model/fp8_groups.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "base/numeric.h"

namespace dsv4 {
namespace {

// rows x k values e4m3(code) * 2^s, s per 128 x 128 block in [s_lo, s_hi], stored through bf16.
std::vector<float> fp8_block_weight(int64_t rows, int64_t k, int s_lo, int s_hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 255), scale(s_lo, s_hi);
  const int64_t rb = (rows + 127) / 128, cb = k / 128;
  std::vector<int> s(size_t(rb * cb));
  for (int& v : s) v = scale(rng);
  std::vector<float> w(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c) {
      int b = code(rng);
      if ((b & 0x7f) == 0x7f) b &= 0xfe;  // no NaN codes: 0x7f / 0xff -> 448
      const float v = std::ldexp(e4m3_to_f32(uint8_t(b)), s[size_t((r / 128) * cb + c / 128)]);
      w[size_t(r * k + c)] = round_bf16(v);
      EXPECT_EQ(std::bit_cast<uint32_t>(w[size_t(r * k + c)]), std::bit_cast<uint32_t>(v)) << "bf16 holds e4m3 x 2^s";
    }
  return w;
}

void expect_round_trip(const std::vector<float>& w, int64_t rows, int64_t k) {
  std::vector<uint8_t> codes(static_cast<size_t>(rows * k));
  std::vector<int8_t> exps(static_cast<size_t>(rows * k / kFp8GroupSize));
  Fp8GroupsMiss miss;
  ASSERT_TRUE(encode_fp8_groups(w.data(), rows, k, codes.data(), exps.data(), &miss))
      << "row " << miss.row << " col " << miss.col << ": " << miss.why;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const float back = fp8_groups_value(codes.data(), exps.data(), k, r, c);
      ASSERT_EQ(std::bit_cast<uint32_t>(back), std::bit_cast<uint32_t>(w[size_t(r * k + c)])) << r << ", " << c;
    }
  for (const int8_t e : exps) {
    EXPECT_GE(e, kFp8GroupMinExp);
    EXPECT_LE(e, kFp8GroupMaxExp);
  }
}

TEST(Fp8Groups, Fp8BlockWeightsRoundTripExactly) {
  // wo_a's scales sit far below 1 (weights ~1e-2); the edges of the exponent range as well.
  expect_round_trip(fp8_block_weight(256, 512, -20, -8, 1), 256, 512);
  expect_round_trip(fp8_block_weight(130, 384, -117, -100, 2), 130, 384);
  expect_round_trip(fp8_block_weight(64, 256, -4, 7, 3), 64, 256);
}

TEST(Fp8Groups, ZeroNegativeZeroAndSubnormalCodes) {
  const int64_t k = 128;
  std::vector<float> w(size_t(k), 0.0f);
  w[1] = -0.0f;
  w[2] = std::ldexp(e4m3_to_f32(0x01), -10);  // the smallest subnormal code
  w[3] = std::ldexp(e4m3_to_f32(0x87), -10);  // a negative subnormal
  w[4] = std::ldexp(448.0f, -10);             // the group's max: exponent -10 exactly
  expect_round_trip(w, 1, k);
  std::vector<float> zeros(size_t(2 * k), 0.0f);
  zeros[5] = -0.0f;
  expect_round_trip(zeros, 1, 2 * k);
}

TEST(Fp8Groups, GroupsWithSmallMaximaStayExact) {
  // Group 0: codes 128 .. 240 under 2^-9. Exponent -10 would make the max 480 > 448, so the encoder
  // keeps the source's -9. Group 1: a slice of a block whose large codes lie elsewhere: codes up
  // to 20 and subnormals under 2^-9; the encoder picks -13, and every code (subnormals too)
  // scales up by 16 to a representable one.
  const int64_t k = 256;
  std::vector<float> w(static_cast<size_t>(k));
  for (int64_t i = 0; i < 128; ++i)
    w[size_t(i)] = std::ldexp(e4m3_to_f32(uint8_t(0x70 + (i % 8))), -9) * (i % 2 ? -1.f : 1.f);
  for (int64_t i = 128; i < k; ++i) w[size_t(i)] = std::ldexp(e4m3_to_f32(uint8_t(i % 0x25)), -9);
  w[200] = std::ldexp(20.0f, -9);
  std::vector<uint8_t> codes(static_cast<size_t>(k));
  std::vector<int8_t> exps(2);
  ASSERT_TRUE(encode_fp8_groups(w.data(), 1, k, codes.data(), exps.data()));
  EXPECT_EQ(exps[0], -9);
  EXPECT_EQ(exps[1], -13);
  expect_round_trip(w, 1, k);
}

TEST(Fp8Groups, RefusesOtherBf16Values) {
  const int64_t k = 256;
  std::vector<float> w = fp8_block_weight(4, k, -12, -9, 7);
  // A value with four mantissa bits in a group whose max keeps the exponent: not e4m3 x 2^e.
  w[size_t(2 * k + 130)] = std::ldexp(1.0f + 1.0f / 16.0f, -14);
  std::vector<uint8_t> codes(static_cast<size_t>(4 * k));
  std::vector<int8_t> exps(static_cast<size_t>(4 * k / kFp8GroupSize));
  Fp8GroupsMiss miss;
  EXPECT_FALSE(encode_fp8_groups(w.data(), 4, k, codes.data(), exps.data(), &miss));
  EXPECT_EQ(miss.row, 2);
  EXPECT_EQ(miss.col, 130);
  EXPECT_NE(miss.why.find("e4m3"), std::string::npos) << miss.why;

  // Random bf16 weights (the tiny test checkpoints' kind) have no exact form.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> g(static_cast<size_t>(k));
  for (float& v : g) v = round_bf16(nd(rng));
  EXPECT_FALSE(encode_fp8_groups(g.data(), 1, k, codes.data(), exps.data(), &miss));

  std::vector<float> inf(size_t(k), 0.0f);
  inf[9] = INFINITY;
  EXPECT_FALSE(encode_fp8_groups(inf.data(), 1, k, codes.data(), exps.data(), &miss));
  EXPECT_EQ(miss.col, 9);
  EXPECT_EQ(miss.why, "not finite");

  // Exponent limits: a group max of 2^20 needs exponent 12 > kFp8GroupMaxExp.
  std::vector<float> big(size_t(k), 0.0f);
  big[0] = std::ldexp(1.0f, 20);
  EXPECT_FALSE(encode_fp8_groups(big.data(), 1, k, codes.data(), exps.data(), &miss));
  EXPECT_NE(miss.why.find("outside"), std::string::npos) << miss.why;

  EXPECT_FALSE(encode_fp8_groups(big.data(), 1, 100, codes.data(), exps.data(), &miss));
  EXPECT_NE(miss.why.find("multiple of 128"), std::string::npos) << miss.why;
}

TEST(Fp8Groups, EveryBf16ValueAgreesWithTheScalarDefinitions) {
  // The encoder reads codes off the fp32 fields; the scalar definitions (round to e4m3, convert
  // back, compare bits) are the oracle. Every finite bf16 value v, in a group whose maximum
  // 448 x 2^e pins its exponent to e (from the range's ends and the checkpoint's middle), must be
  // accepted with the oracle's code exactly when the oracle accepts it.
  const int64_t k = kFp8GroupSize;
  std::vector<float> w(static_cast<size_t>(k), 0.0f);
  std::vector<uint8_t> codes(static_cast<size_t>(k));
  int8_t exp = 0;
  for (const int e : {kFp8GroupMinExp, -30, -14, -9, 0, kFp8GroupMaxExp}) {
    w[0] = std::ldexp(kE4M3Max, e);
    int accepted = 0;
    for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
      const float v = std::bit_cast<float>(bits << 16);
      if (!std::isfinite(v) || std::fabs(v) > w[0]) continue;
      w[1] = v;
      const uint8_t want = f32_to_e4m3(std::ldexp(v, -e));
      const bool exact = std::bit_cast<uint32_t>(std::ldexp(e4m3_to_f32(want), e)) == std::bit_cast<uint32_t>(v);
      Fp8GroupsMiss miss;
      const bool ok = encode_fp8_groups(w.data(), 1, k, codes.data(), &exp, &miss);
      ASSERT_EQ(ok, exact) << "e " << e << " bf16 bits " << std::hex << bits << ": " << miss.why;
      if (!ok) continue;
      ASSERT_EQ(exp, e);
      ASSERT_EQ(codes[1], want) << "e " << e << " bf16 bits " << std::hex << bits;
      ++accepted;
    }
    // Each of the 254 non-NaN codes is one value (zeros of both signs included). Under 2^-128,
    // 64 of them fall below bf16's subnormal step of 2^-133 (the 14 subnormal codes, and 50
    // normal ones under 2^-130) and so never occur in a bf16 weight.
    EXPECT_EQ(accepted, e == kFp8GroupMinExp ? 254 - 64 : 254) << "e " << e;
  }
}

}  // namespace
}  // namespace dsv4
