// fp8_groups.cpp: encode_fp8_groups and fp8_groups_value (see fp8_groups.h).
#include "model/fp8_groups.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>

#include "base/numeric.h"

namespace dsv4 {
namespace {

// The smallest e with a / 2^e <= 448 for a finite a > 0: ilogb(a) - 8 or one more (448 = 1.75 x
// 2^8, so ilogb(a) - 9 always leaves a / 2^e >= 512).
int group_exponent(float amax) {
  const int e = std::ilogb(amax) - 8;
  return std::ldexp(amax, -e) <= kE4M3Max ? e : e + 1;
}

bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

}  // namespace

bool encode_fp8_groups(const float* w, int64_t rows, int64_t k, uint8_t* codes, int8_t* exps, Fp8GroupsMiss* miss) {
  auto fail = [&](int64_t r, int64_t c, std::string why) {
    if (miss != nullptr) *miss = {r, c, w[r * k + c], std::move(why)};
    return false;
  };
  if (rows < 0 || k <= 0 || k % kFp8GroupSize != 0) {
    if (miss != nullptr) *miss = {-1, -1, 0.0f, fmt::format("k = {} is not a positive multiple of {}", k, kFp8GroupSize)};
    return false;
  }
  const int64_t groups = k / kFp8GroupSize;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * kFp8GroupSize;
      const float* src = w + r * k + c0;
      float amax = 0.0f;
      for (int i = 0; i < kFp8GroupSize; ++i) {
        if (!std::isfinite(src[i])) return fail(r, c0 + i, "not finite");
        amax = std::fmax(amax, std::fabs(src[i]));
      }
      // An all-zero group keeps exponent 0 (any would do).
      const int e = amax > 0.0f ? group_exponent(amax) : 0;
      if (e < kFp8GroupMinExp || e > kFp8GroupMaxExp)
        return fail(r, c0, fmt::format("group exponent {} outside [{}, {}]", e, kFp8GroupMinExp, kFp8GroupMaxExp));
      exps[r * groups + g] = int8_t(e);
      uint8_t* dst = codes + r * k + c0;
      for (int i = 0; i < kFp8GroupSize; ++i) {
        const float scaled = std::ldexp(src[i], -e);  // exact: a power of two, no fp32 underflow here
        const uint8_t code = f32_to_e4m3(scaled);
        if (!same_bits(std::ldexp(e4m3_to_f32(code), e), src[i]))
          return fail(r, c0 + i, fmt::format("not an e4m3 value times 2^{}", e));
        dst[i] = code;
      }
    }
  }
  return true;
}

float fp8_groups_value(const uint8_t* codes, const int8_t* exps, int64_t k, int64_t row, int64_t col) {
  return std::ldexp(e4m3_to_f32(codes[row * k + col]), exps[row * (k / kFp8GroupSize) + col / kFp8GroupSize]);
}

}  // namespace dsv4
