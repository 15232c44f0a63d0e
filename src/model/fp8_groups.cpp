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

// The e4m3fn code of s when s is exactly an e4m3fn value (|s| <= 448, the sign of a zero kept),
// else -1. Read off s's fp32 fields: a 4-bit mantissa with an exponent in [-6, 8] is a normal
// code, k x 2^-9 (k = 1..7) a subnormal one. The encoder's inner loop; rounding and converting
// back with the scalar definitions of base/numeric.h cost ~37 ns a value (1.4G values in wo_a
// over 43 layers), this ~6.
int exact_e4m3_code(float s) {
  const uint32_t u = std::bit_cast<uint32_t>(s);
  const uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a == 0) return int(sign);
  const int e = int(a >> 23) - 127;  // |s| = 1.m x 2^e (an fp32 subnormal gives e = -127: refused)
  const uint32_t m = a & 0x7fffffu;
  if (e >= -6) {
    if (e > 8 || (m & 0xfffffu) != 0) return -1;
    const uint32_t code = (uint32_t(e + 7) << 3) | (m >> 20);
    return code == 0x7fu ? -1 : int(sign | code);  // 0x7f is NaN (480 > 448)
  }
  if (e < -9) return -1;
  const int drop = 23 - (e + 9);  // |s| = k x 2^-9 with k = 1.m x 2^(e + 9)
  if ((m & ((1u << drop) - 1u)) != 0) return -1;
  return int(sign | ((0x800000u | m) >> drop));
}

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
      const double down = std::ldexp(1.0, -e);
      for (int i = 0; i < kFp8GroupSize; ++i) {
        // Exact in double; a value the fp32 of which differs (one too small for fp32) is no
        // e4m3 value either.
        const double scaled = double(src[i]) * down;
        const float f = float(scaled);
        const int code = double(f) == scaled ? exact_e4m3_code(f) : -1;
        if (code < 0) return fail(r, c0 + i, fmt::format("not an e4m3 value times 2^{}", e));
        dst[i] = uint8_t(code);
      }
    }
  }
  return true;
}

float fp8_groups_value(const uint8_t* codes, const int8_t* exps, int64_t k, int64_t row, int64_t col) {
  return std::ldexp(e4m3_to_f32(codes[row * k + col]), exps[row * (k / kFp8GroupSize) + col / kFp8GroupSize]);
}

}  // namespace dsv4
