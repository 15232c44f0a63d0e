// fp8_decode.h: the decode of a 584-byte KV record's nope dims, e4m3fn code x ue8m0 block scale,
// by bit placement instead of a conversion instruction (sm_86 has none for fp8). Host and device,
// so the CPU tests check it against kv::unpack_entry for every code and scale.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DSV4_ATTN_HD __host__ __device__ __forceinline__
#else
#define DSV4_ATTN_HD inline
#endif

namespace dsv4::cuda::attention_detail {

DSV4_ATTN_HD float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Exact value of the e4m3fn code in the low byte of `code` (the NaN code 0x7f is never stored:
// the encoder saturates at 448). The 7 magnitude bits placed at fp32 bits 20..26 read as the
// value times 2^-120 (e4m3 bias 7 vs fp32 bias 127), subnormals included; one exact multiply by
// 2^120 restores it.
DSV4_ATTN_HD float e4m3_value(uint32_t code) {
  const uint32_t u = ((code & 0x7fu) << 20) | ((code & 0x80u) << 24);
  return bits_to_float(u) * 0x1p120f;
}

// 2^(s - 127) for a ue8m0 byte s (s = 0: 2^-127, as e8m0_to_f32; 255 is never stored).
DSV4_ATTN_HD float ue8m0_value(uint32_t s) { return s == 0 ? 0x1p-127f : bits_to_float(s << 23); }

// A nope value as the reference decodes it: e4m3 value times the block scale, in fp32.
DSV4_ATTN_HD float decode_nope(uint32_t code, float scale) { return e4m3_value(code) * scale; }

}  // namespace dsv4::cuda::attention_detail
