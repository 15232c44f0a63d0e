// random_gptq.h: reproducible random test data for the CUDA kernels. Every value is a pure
// function of (seed, index), computed identically on the host and the device, so a test or the
// benchmark can fill gigabytes on the GPU while the CPU reference regenerates just the elements
// it needs. Used only by tests and benchmarks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/splitmix.h"
#include "base/status.h"

#if defined(__CUDACC__)
#define DSV4_HD __host__ __device__
#else
#define DSV4_HD
#endif

namespace dsv4::cuda::testing {

using ::dsv4::splitmix64;
DSV4_HD inline uint64_t hash2(uint64_t seed, uint64_t idx) { return splitmix64(splitmix64(seed) ^ idx); }

// GPTQ qweight word [i, n] of an [K/8, N] tensor (idx = i * N + n): 8 uniform codes.
DSV4_HD inline uint32_t gptq_qword(uint64_t seed, int64_t idx) { return uint32_t(hash2(seed, uint64_t(idx)) >> 32); }

// Scales: fp16 bits with a random sign, exponent field in [exp_lo, exp_hi] and random mantissa.
// With specials, about 1/1024 of the scales are +-0 and 1/1024 subnormal (what a real checkpoint
// may contain for near-empty groups; zero scales exercise the repack's zero handling).
struct ScaleSpec {
  int exp_lo = 8;  // 2^(8-15) = 1/128
  int exp_hi = 9;
  bool specials = true;
};
DSV4_HD inline uint16_t gptq_scale_bits(uint64_t seed, int64_t idx, ScaleSpec sp) {
  const uint64_t h = hash2(seed ^ 0x5CA1E5CA1E5ull, uint64_t(idx));
  const uint16_t sign = (h & 1) ? 0x8000 : 0;
  if (sp.specials) {
    const uint32_t sel = uint32_t(h >> 1) & 1023u;
    if (sel == 0) return sign;                                       // +-0
    if (sel == 1) return uint16_t(sign | (1 + ((h >> 11) & 0x3FEu)));  // subnormal
  }
  const int span = sp.exp_hi - sp.exp_lo + 1;
  const int e = sp.exp_lo + int((h >> 21) % uint64_t(span));
  return uint16_t(sign | (e << 10) | ((h >> 32) & 0x3FF));
}

// bf16 value: uniform on [-2, 2) times `scale` (a power of two keeps every step exact), rounded
// to nearest even: identical on host and device.
DSV4_HD inline float random_uniform_pm2(uint64_t seed, int64_t idx) {
  const uint32_t u = uint32_t(hash2(seed ^ 0xB16B00B5ull, uint64_t(idx)) >> 40);  // 24 bits
  return float(u) * (1.0f / 16777216.0f) * 4.0f - 2.0f;
}

// A weight in the fp8 form of model/fp8_groups.h: code i (flat index into [rows][k]) is a random
// e4m3fn byte other than the NaN codes; exponent j of [rows][k / 128] is in [exp_lo, exp_hi].
DSV4_HD inline uint8_t fp8_code(uint64_t seed, int64_t idx) {
  const uint8_t c = uint8_t(hash2(seed ^ 0xF8C0DE5ull, uint64_t(idx)) >> 56);
  return (c & 0x7f) == 0x7f ? uint8_t(c & 0xfe) : c;  // 0x7f / 0xff (NaN) -> +-448
}
DSV4_HD inline int8_t fp8_group_exp(uint64_t seed, int64_t idx, int exp_lo, int exp_hi) {
  return int8_t(exp_lo + int((hash2(seed ^ 0xE8E8E8ull, uint64_t(idx)) >> 33) % uint64_t(exp_hi - exp_lo + 1)));
}

// Device fills (stream-ordered, no synchronization).
// codes u8 [rows][k], exps i8 [rows][k / 128] (k a multiple of 128; -128 <= exp_lo <= exp_hi <= 7).
Status fill_random_fp8_groups(uint8_t* codes, int8_t* exps, int64_t rows, int k, uint64_t seed, int exp_lo,
                              int exp_hi, cudaStream_t stream);
Status fill_random_gptq(int32_t* qweight, __half* scales, int n, int k, uint64_t seed, ScaleSpec spec,
                        cudaStream_t stream);
Status fill_random_bf16(__nv_bfloat16* out, int64_t count, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace dsv4::cuda::testing
