// linear_weight.cpp: format detection (CHECKPOINTS.md §7 order: .qweight, .weight_packed, FP8,
// MXFP4, dense) with shape/dtype validation, and exact dequantization of row blocks.
#include "model/linear_weight.h"

#include <cstring>

#include "base/check.h"
#include "base/numeric.h"
#include "model/tensor_names.h"

namespace dsv4 {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kDense: return "dense";
    case WeightFormat::kGptqInt4: return "gptq-int4";
    case WeightFormat::kCtInt4: return "ct-int4";
    case WeightFormat::kFp8Block: return "fp8-block";
    case WeightFormat::kMxfp4: return "mxfp4";
  }
  return "?";
}

namespace {

Status expect(const TensorInfo* t, const std::string& name, std::initializer_list<DType> dtypes,
              const std::vector<int64_t>& shape) {
  if (!t) return not_found("missing tensor '{}' (expected {})", name, shape_str(shape));
  bool ok = false;
  std::string want;
  for (DType d : dtypes) {
    ok |= t->dtype == d;
    if (!want.empty()) want += '/';
    want += dtype_name(d);
  }
  if (!ok)
    return invalid_argument("tensor '{}': expected dtype {}, found {} (stored as '{}')", name, want,
                            dtype_name(t->dtype), t->name);
  if (t->shape != shape)
    return invalid_argument("tensor '{}': expected shape {}, found {} (stored as '{}')", name, shape_str(shape),
                            shape_str(t->shape), t->name);
  return Status::ok();
}

// One 32-bit word holds 8 consecutive in-features and takes one scale when dequantized, so a
// quantization group must cover whole words.
Status check_int4_group(const std::string& scales_name, int group_size) {
  if (group_size % 8 != 0)
    return unimplemented("tensor '{}': INT4 group size {} is not a multiple of 8", scales_name, group_size);
  return Status::ok();
}

constexpr std::initializer_list<DType> kFloatTypes = {DType::kBF16, DType::kF16, DType::kF32};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

Result<LinearWeight> find_linear(TensorIndex& index, const std::string& prefix, int64_t n, int64_t k,
                                 const LinearLoadOptions& opts) {
  LinearWeight w;
  w.name = prefix;
  w.n = n;
  w.k = k;
  if (const TensorInfo* qw = index.take(prefix + ".qweight")) {
    w.format = WeightFormat::kGptqInt4;
    w.qweight = qw;
    w.gptq_v2 = opts.gptq_v2;
    if (k % 8 != 0) return invalid_argument("'{}': in-features {} is not a multiple of 8 for INT4", prefix, k);
    DSV4_RETURN_IF_ERROR(expect(qw, prefix + ".qweight", {DType::kI32}, {k / 8, n}));
    w.scales = index.take(prefix + ".scales");
    if (!w.scales) return not_found("missing tensor '{}.scales' next to '{}.qweight'", prefix, prefix);
    if (w.scales->shape.size() != 2 || w.scales->shape[0] <= 0 || k % w.scales->shape[0] != 0)
      return invalid_argument("tensor '{}.scales': expected [K/group, {}] with K = {}, found {}", prefix, n, k,
                              shape_str(w.scales->shape));
    w.group_size = int(k / w.scales->shape[0]);
    DSV4_RETURN_IF_ERROR(check_int4_group(prefix + ".scales", w.group_size));
    DSV4_RETURN_IF_ERROR(expect(w.scales, prefix + ".scales", kFloatTypes, {k / w.group_size, n}));
    w.qzeros = index.take(prefix + ".qzeros");
    DSV4_RETURN_IF_ERROR(expect(w.qzeros, prefix + ".qzeros", {DType::kI32}, {k / w.group_size, ceil_div(n, 8)}));
    // Symmetric checkpoints store one zero point everywhere: 7 for GPTQ v1 (reader adds 1), 8 for
    // v2. Anything else in a file that claims to be symmetric means the packing is not what the
    // config says; for asymmetric files the zeros are applied per (group, column).
    const uint32_t want_word = opts.gptq_v2 ? 0x88888888u : 0x77777777u;
    bool uniform = true;
    const int64_t n_words = w.qzeros->numel();
    for (int64_t i = 0; i < n_words && uniform; ++i) {
      uint32_t word = load_u32(w.qzeros->data + i * 4);
      if (n % 8 != 0 && (i % ceil_div(n, 8)) == ceil_div(n, 8) - 1) {
        const uint32_t mask = (1u << (4 * (n % 8))) - 1;  // padded columns are unconstrained
        uniform = (word & mask) == (want_word & mask);
      } else {
        uniform = word == want_word;
      }
      if (!uniform && opts.sym)
        return invalid_argument(
            "tensor '{}.qzeros': word {} is 0x{:08x}, expected 0x{:08x} for a symmetric GPTQ {} checkpoint", prefix,
            i, word, want_word, opts.gptq_v2 ? "v2" : "v1");
    }
    w.zeros_uniform = uniform;
    if ((w.g_idx = index.take(prefix + ".g_idx"))) {
      DSV4_RETURN_IF_ERROR(expect(w.g_idx, prefix + ".g_idx", {DType::kI32, DType::kI64}, {k}));
      for (int64_t i = 0; i < k; ++i)
        if (w.g_idx->get_i64(i) != i / w.group_size)
          return unimplemented("tensor '{}.g_idx': act-order (g_idx[{}] = {}, expected {}) is not supported", prefix,
                               i, w.g_idx->get_i64(i), i / w.group_size);
    }
    if (index.find(prefix + ".bias")) return unimplemented("'{}': linear bias is not part of DeepSeek-V4", prefix);
    return w;
  }
  if (const TensorInfo* wp = index.take(prefix + ".weight_packed")) {
    w.format = WeightFormat::kCtInt4;
    w.weight = wp;
    if (k % 8 != 0) return invalid_argument("'{}': in-features {} is not a multiple of 8 for INT4", prefix, k);
    DSV4_RETURN_IF_ERROR(expect(wp, prefix + ".weight_packed", {DType::kI32}, {n, k / 8}));
    w.scales = index.take(prefix + ".weight_scale");
    if (!w.scales) return not_found("missing tensor '{}.weight_scale' next to '{}.weight_packed'", prefix, prefix);
    if (w.scales->shape.size() != 2 || w.scales->shape[1] <= 0 || k % w.scales->shape[1] != 0)
      return invalid_argument("tensor '{}.weight_scale': expected [{}, K/group] with K = {}, found {}", prefix, n, k,
                              shape_str(w.scales->shape));
    w.group_size = int(k / w.scales->shape[1]);
    DSV4_RETURN_IF_ERROR(check_int4_group(prefix + ".weight_scale", w.group_size));
    DSV4_RETURN_IF_ERROR(expect(w.scales, prefix + ".weight_scale", kFloatTypes, {n, k / w.group_size}));
    if (const TensorInfo* ws = index.take(prefix + ".weight_shape")) {
      DSV4_RETURN_IF_ERROR(expect(ws, prefix + ".weight_shape", {DType::kI64, DType::kI32}, {2}));
      if (ws->get_i64(0) != n || ws->get_i64(1) != k)
        return invalid_argument("tensor '{}.weight_shape': expected [{}, {}], found [{}, {}]", prefix, n, k,
                                ws->get_i64(0), ws->get_i64(1));
    }
    if (index.find(prefix + ".weight_zero_point"))
      return unimplemented("'{}': asymmetric compressed-tensors INT4 is not supported", prefix);
    w.zeros_uniform = true;
    return w;
  }
  const TensorInfo* t = index.take(prefix + ".weight");
  if (!t) return not_found("missing weight for '{}' (looked for .qweight, .weight_packed and .weight)", prefix);
  w.weight = t;
  if (t->dtype == DType::kF8E4M3) {
    w.format = WeightFormat::kFp8Block;
    DSV4_RETURN_IF_ERROR(expect(t, prefix + ".weight", {DType::kF8E4M3}, {n, k}));
    w.scales = index.take(prefix + ".scale");
    if (!w.scales) w.scales = index.take(prefix + ".weight_scale");
    DSV4_RETURN_IF_ERROR(expect(w.scales, prefix + ".scale", {DType::kF8E8M0, DType::kF32, DType::kBF16},
                                {ceil_div(n, 128), ceil_div(k, 128)}));
    return w;
  }
  if (t->dtype == DType::kI8 || t->dtype == DType::kU8) {
    w.format = WeightFormat::kMxfp4;
    if (k % 32 != 0) return invalid_argument("'{}': in-features {} is not a multiple of 32 for MXFP4", prefix, k);
    DSV4_RETURN_IF_ERROR(expect(t, prefix + ".weight", {DType::kI8, DType::kU8}, {n, k / 2}));
    w.scales = index.take(prefix + ".scale");
    if (!w.scales) w.scales = index.take(prefix + ".weight_scale");
    DSV4_RETURN_IF_ERROR(expect(w.scales, prefix + ".scale", {DType::kF8E8M0}, {n, k / 32}));
    return w;
  }
  w.format = WeightFormat::kDense;
  DSV4_RETURN_IF_ERROR(expect(t, prefix + ".weight", kFloatTypes, {n, k}));
  return w;
}

size_t LinearWeight::n_bytes() const {
  size_t b = 0;
  for (const TensorInfo* t : {weight, qweight, qzeros, scales, g_idx})
    if (t) b += t->n_bytes;
  if (expert >= 0 && weight) {  // a slice of a fused [E, rows, K] tensor
    b = size_t(n * k) * dtype_size(weight->dtype);
  }
  return b;
}

void LinearWeight::dequant_rows(int64_t n0, int64_t n1, float* out) const {
  DSV4_CHECK(n0 >= 0 && n0 <= n1 && n1 <= n, "{}: rows [{}, {}) of {}", name, n0, n1, n);
  const int64_t rows = n1 - n0;
  switch (format) {
    case WeightFormat::kDense: {
      const int64_t base = expert >= 0 ? (expert * weight->shape[1] + row_offset) * k : 0;
      const size_t es = dtype_size(weight->dtype);
      const uint8_t* p = weight->data + size_t(base + n0 * k) * es;
      const int64_t cnt = rows * k;
      if (weight->dtype == DType::kBF16) {
        for (int64_t i = 0; i < cnt; ++i) {
          uint16_t h;
          std::memcpy(&h, p + i * 2, 2);
          out[i] = bf16_to_f32(h);
        }
      } else if (weight->dtype == DType::kF32) {
        std::memcpy(out, p, size_t(cnt) * 4);
      } else {
        for (int64_t i = 0; i < cnt; ++i) {
          uint16_t h;
          std::memcpy(&h, p + i * 2, 2);
          out[i] = f16_to_f32(h);
        }
      }
      return;
    }
    case WeightFormat::kGptqInt4: {
      // qweight [K/8, N]: walk it row-major so each cache line serves 16 output columns.
      const int64_t nz = (n + 7) / 8;
      for (int64_t i = 0; i < k / 8; ++i) {
        const int64_t g = (i * 8) / group_size;
        for (int64_t c = n0; c < n1; ++c) {
          const uint32_t word = load_u32(qweight->data + size_t(i * n + c) * 4);
          const float s = scales->get_f32(g * n + c);
          int zero = 8;
          if (!zeros_uniform) {
            const uint32_t zw = load_u32(qzeros->data + size_t(g * nz + c / 8) * 4);
            zero = int((zw >> (4 * (c % 8))) & 0xf) + (gptq_v2 ? 0 : 1);
          }
          float* o = out + (c - n0) * k + i * 8;
          for (int j = 0; j < 8; ++j) o[j] = s * float(int((word >> (4 * j)) & 0xf) - zero);
        }
      }
      return;
    }
    case WeightFormat::kCtInt4: {
      for (int64_t r = n0; r < n1; ++r) {
        for (int64_t i = 0; i < k / 8; ++i) {
          const uint32_t word = load_u32(weight->data + size_t(r * (k / 8) + i) * 4);
          const float s = scales->get_f32(r * (k / group_size) + (i * 8) / group_size);
          float* o = out + (r - n0) * k + i * 8;
          for (int j = 0; j < 8; ++j) o[j] = s * float(int((word >> (4 * j)) & 0xf) - 8);
        }
      }
      return;
    }
    case WeightFormat::kFp8Block: {
      const int64_t kb = (k + 127) / 128;
      for (int64_t r = n0; r < n1; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const float s = scales->get_f32((r / 128) * kb + c / 128);
          out[(r - n0) * k + c] = e4m3_to_f32(weight->data[r * k + c]) * s;
        }
      }
      return;
    }
    case WeightFormat::kMxfp4: {
      for (int64_t r = n0; r < n1; ++r) {
        for (int64_t c = 0; c < k; c += 2) {
          const uint8_t b = weight->data[r * (k / 2) + c / 2];
          const float s = e8m0_to_f32(scales->data[r * (k / 32) + c / 32]);
          out[(r - n0) * k + c] = e2m1_to_f32(b & 0xf) * s;
          out[(r - n0) * k + c + 1] = e2m1_to_f32(b >> 4) * s;
        }
      }
      return;
    }
  }
}

}  // namespace dsv4
