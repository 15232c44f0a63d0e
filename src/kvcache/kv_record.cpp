// kv_record.cpp: packing with exactness checks. A block's scale is re-derived from its values as
// the smallest power of two that puts them inside the code range (for fp8: 2^ceil(log2(amax/448)));
// that may be half the scale the quantizer used (when the block's largest code rounded down to
// exactly half the range), which still represents every value exactly.
#include "kvcache/kv_record.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/numeric.h"

namespace dsv4::kv {

namespace {
int64_t align8(int64_t n) { return (n + 7) / 8 * 8; }
int n_blocks(int n, int block) { return (n + block - 1) / block; }

// Exponent e of the smallest 2^e with amax / 2^e <= max_code (amax floored at `floor`).
int scale_exponent(const float* v, int n, float max_code, float floor) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(v[i]));
  return ceil_log2_bits(std::fmax(amax, floor) * (1.0f / max_code));
}
}  // namespace

int64_t entry_bytes(int nope, int rope) { return align8(int64_t(nope) + 2 * rope + n_blocks(nope, 64)); }
int64_t indexer_key_bytes(int dim) { return dim / 2 + n_blocks(dim, 32); }

Status pack_entry(const float* v, int nope, int rope, uint8_t* out) {
  std::memset(out, 0, size_t(entry_bytes(nope, rope)));
  uint8_t* scales = out + nope + 2 * rope;
  for (int b = 0; b < n_blocks(nope, 64); ++b) {
    const int len = std::min(64, nope - b * 64);
    const float* x = v + b * 64;
    const int e = scale_exponent(x, len, kE4M3Max, 1e-4f);
    if (e < -127 || e > 127) return invalid_argument("kv entry block {}: scale 2^{} is outside ue8m0", b, e);
    scales[b] = uint8_t(e + 127);
    for (int i = 0; i < len; ++i) {
      const float q = std::ldexp(x[i], -e);
      const uint8_t code = f32_to_e4m3(q);
      if (e4m3_to_f32(code) != q)
        return invalid_argument("kv entry dim {}: {} is not on the fp8 grid of block {} (scale 2^{})", b * 64 + i,
                                x[i], b, e);
      out[b * 64 + i] = code;
    }
  }
  for (int i = 0; i < rope; ++i) {
    const float r = v[nope + i];
    const uint16_t h = f32_to_bf16(r);
    if (bf16_to_f32(h) != r) return invalid_argument("kv entry rope dim {}: {} is not a bf16 value", i, r);
    std::memcpy(out + nope + 2 * i, &h, 2);
  }
  return Status::ok();
}

void unpack_entry(const uint8_t* in, int nope, int rope, float* v) {
  const uint8_t* scales = in + nope + 2 * rope;
  for (int i = 0; i < nope; ++i) v[i] = e4m3_to_f32(in[i]) * e8m0_to_f32(scales[i / 64]);
  for (int i = 0; i < rope; ++i) {
    uint16_t h;
    std::memcpy(&h, in + nope + 2 * i, 2);
    v[nope + i] = bf16_to_f32(h);
  }
}

Status pack_indexer_key(const float* v, int dim, uint8_t* out) {
  if (dim % 2 != 0) return invalid_argument("indexer key dim {} is odd", dim);
  std::memset(out, 0, size_t(indexer_key_bytes(dim)));
  uint8_t* scales = out + dim / 2;
  for (int b = 0; b < n_blocks(dim, 32); ++b) {
    const int len = std::min(32, dim - b * 32);
    const int e = scale_exponent(v + b * 32, len, kE2M1Max, 6.0f * std::ldexp(1.0f, -126));
    if (e < -127 || e > 127) return invalid_argument("indexer key block {}: scale 2^{} is outside ue8m0", b, e);
    scales[b] = uint8_t(e + 127);
    for (int i = 0; i < len; ++i) {
      const int k = b * 32 + i;
      const float q = std::ldexp(v[k], -e);
      const uint8_t code = f32_to_e2m1(q);
      if (e2m1_to_f32(code) != q)
        return invalid_argument("indexer key dim {}: {} is not on the fp4 grid of block {} (scale 2^{})", k, v[k], b, e);
      out[k / 2] |= uint8_t(code << (4 * (k % 2)));
    }
  }
  return Status::ok();
}

void unpack_indexer_key(const uint8_t* in, int dim, float* v) {
  const uint8_t* scales = in + dim / 2;
  for (int k = 0; k < dim; ++k) v[k] = e2m1_to_f32((in[k / 2] >> (4 * (k % 2))) & 0xf) * e8m0_to_f32(scales[k / 32]);
}

}  // namespace dsv4::kv
