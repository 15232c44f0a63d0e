// kv_codec.cuh: device versions of the KV record codecs (src/kvcache/kv_record.h) and of the
// block quantizers the reference applies before storing (src/cpu/quant.h): e4m3 with ue8m0
// scales per 64 dims, e2m1 with ue8m0 scales per 32. Scalar and bit-exact with base/numeric.h;
// kernels vectorize around them.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace dsv4::cuda {

inline constexpr float kFp8Max = 448.0f;
inline constexpr float kFp4Max = 6.0f;
inline constexpr float kFp8AmaxFloor = 1e-4f;
inline constexpr float kFp4AmaxFloor = 6.0f * 1.1754943508222875e-38f;  // 6 * 2^-126

// ceil(log2(x)) of a positive normal float, by its bits (as the reference computes it).
__device__ __forceinline__ int ceil_log2_bits_dev(float x) {
  const uint32_t u = __float_as_uint(x);
  return int((u >> 23) & 0xff) - 127 + ((u & 0x7fffffu) != 0 ? 1 : 0);
}

// Scale exponent of a block with absolute maximum `amax`: s = 2^e.
__device__ __forceinline__ int fp8_block_exponent(float amax) {
  return ceil_log2_bits_dev(fmaxf(amax, kFp8AmaxFloor) * (1.0f / kFp8Max));
}
__device__ __forceinline__ int fp4_block_exponent(float amax) {
  return ceil_log2_bits_dev(fmaxf(amax, kFp4AmaxFloor) * (1.0f / kFp4Max));
}

// e4m3fn code of x / 2^e (round to nearest even, saturating at +-448).
__device__ __forceinline__ uint8_t encode_e4m3(float x, int e) {
  return uint8_t(__nv_cvt_float_to_fp8(ldexpf(x, -e), __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float decode_e4m3(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), __NV_E4M3);
  return __half2float(__half(h));
}

// e2m1 code (sign in bit 3) of x / 2^e, round to nearest even on the grid 0 .5 1 1.5 2 3 4 6.
__device__ __forceinline__ uint8_t encode_e2m1(float x, int e) {
  const float v = ldexpf(x, -e);
  const float a = fminf(fabsf(v), kFp4Max);
  // Quantum 0.5 below 2, 1 in [2, 4), 2 in [4, 6]: round a / quantum to even.
  const float q = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
  const float r = rintf(a / q) * q;
  // r in {0, .5, 1, 1.5, 2, 3, 4, 6}: code = index in that list.
  const uint8_t code = r < 2.0f ? uint8_t(r * 2.0f) : (r < 4.0f ? uint8_t(r + 2.0f) : uint8_t(r == 4.0f ? 6 : 7));
  return uint8_t(code | ((v < 0.0f && code != 0) ? 8 : 0));
}
__device__ __forceinline__ float decode_e2m1(uint8_t code) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = mag[code & 7];
  return (code & 8) ? -v : v;
}

// ue8m0 byte of exponent e (-127 <= e <= 127) and back.
__device__ __forceinline__ uint8_t encode_ue8m0(int e) { return uint8_t(e + 127); }
__device__ __forceinline__ float decode_ue8m0(uint8_t b) {
  return b == 0 ? 5.877471754111438e-39f : __uint_as_float(uint32_t(b) << 23);
}

}  // namespace dsv4::cuda
