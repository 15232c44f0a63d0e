// numeric.h: host-side conversions between fp32 and the narrow formats of the model: bf16, fp16,
// fp8 e4m3fn, e8m0 (power-of-two scales), fp4 e2m1. Rounding is round-to-nearest-even everywhere,
// matching torch's casts. These are the scalar definitions the CPU reference and every test use;
// CUDA kernels have their own device versions and are tested against these.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace dsv4 {

// ---- bf16 -------------------------------------------------------------------------------------

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return uint16_t(u >> 16);
}

// Rounds an fp32 value to the nearest bf16 value, returned as fp32.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// ---- fp16 -------------------------------------------------------------------------------------

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = std::ldexp(float(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to inf
  if (a < 6.103515625e-05f) {               // subnormal range: quantum 2^-24
    const float q = std::nearbyint(a * 16777216.0f);
    return sign | uint16_t(q);  // q == 1024 lands exactly on the smallest normal
  }
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const float quantum = std::ldexp(1.0f, e - 11);
  const float q = std::nearbyint(a / quantum);  // in [1024, 2048]
  const float r = q * quantum;
  int e2;
  const float m2 = std::frexp(r, &e2);
  const uint32_t exp_field = uint32_t(e2 - 1 + 15);
  const uint32_t man = uint32_t(std::ldexp(m2, 11)) - 1024;
  return sign | uint16_t(exp_field << 10) | uint16_t(man);
}

// ---- generic "round to a small float grid" ----------------------------------------------------

// Rounds |a| (finite, >= 0) to a float format with `man_bits` mantissa bits and minimum normal
// exponent `min_exp` (value = 1.m * 2^e, e >= min_exp; below that, subnormals with quantum
// 2^(min_exp - man_bits)). Ties go to even mantissas because the integer multiple of the quantum
// has the parity of the mantissa.
inline float round_to_small_float(float a, int man_bits, int min_exp) {
  if (a == 0.0f) return 0.0f;
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  int exp = e - 1;
  if (exp < min_exp) exp = min_exp;
  const float quantum = std::ldexp(1.0f, exp - man_bits);
  return std::nearbyint(a / quantum) * quantum;
}

// ---- fp8 e4m3fn (max 448, no inf) -------------------------------------------------------------

inline constexpr float kE4M3Max = 448.0f;

// Rounds x to the nearest e4m3fn value, saturating at +-448.
inline float round_e4m3(float x) {
  float a = std::fabs(x);
  if (a > kE4M3Max) a = kE4M3Max;
  float r = round_to_small_float(a, 3, -6);
  if (r > kE4M3Max) r = kE4M3Max;
  return std::signbit(x) ? -r : r;
}

inline float e4m3_to_f32(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
  float v;
  if (exp == 15 && man == 7) return NAN;
  if (exp == 0) v = std::ldexp(float(man), -9);
  else v = std::ldexp(float(8 + man), exp - 10);
  return sign ? -v : v;
}

// Encodes x (rounded, saturated) into e4m3fn bits.
inline uint8_t f32_to_e4m3(float x) {
  const float r = round_e4m3(x);
  const uint8_t sign = std::signbit(r) ? 0x80 : 0;
  const float a = std::fabs(r);
  if (a == 0.0f) return sign;
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e
  const int exp = e - 1;              // a = 1.f * 2^exp
  if (exp < -6) return sign | uint8_t(std::lround(a * 512.0f));  // subnormal: man * 2^-9
  const int man = int(std::lround(m * 16.0f)) - 8;
  return sign | uint8_t((exp + 7) << 3) | uint8_t(man);
}

// ---- e8m0 (unsigned power of two, bias 127) ---------------------------------------------------

inline float e8m0_to_f32(uint8_t b) {
  if (b == 255) return NAN;
  if (b == 0) return std::ldexp(1.0f, -127);
  return std::bit_cast<float>(uint32_t(b) << 23);
}

// ceil(log2(x)) for a positive normal fp32 x, by bit operations as in the reference:
// the exponent field minus 127, plus one if the mantissa is nonzero.
inline int ceil_log2_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const int exp = int((u >> 23) & 0xff) - 127;
  return exp + ((u & 0x7fffffu) != 0 ? 1 : 0);
}

// ---- fp4 e2m1 (values 0, 0.5, 1, 1.5, 2, 3, 4, 6) ---------------------------------------------

inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kE2M1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

inline float e2m1_to_f32(uint8_t code) {
  const float v = kE2M1Values[code & 7];
  return (code & 8) ? -v : v;
}

// Rounds x to the nearest e2m1 value (ties to even), saturating at +-6.
inline float round_e2m1(float x) {
  float a = std::fabs(x);
  if (a > kE2M1Max) a = kE2M1Max;
  const float r = round_to_small_float(a, 1, 0);
  return std::signbit(x) ? -r : r;
}

inline uint8_t f32_to_e2m1(float x) {
  const float r = round_e2m1(x);
  const float a = std::fabs(r);
  uint8_t code = 0;
  for (uint8_t c = 0; c < 8; ++c)
    if (kE2M1Values[c] == a) code = c;
  return code | ((std::signbit(r) && a != 0.0f) ? 8 : 0);
}

}  // namespace dsv4
