// linear_weight.h: one linear layer's weight W [N out, K in] in whatever format the checkpoint
// stores it (CHECKPOINTS.md §7): dense BF16/F16/F32, auto_gptq INT4 (GPTQ v1/v2), compressed-
// tensors pack-quantized INT4, FP8 block (E4M3 + 128x128 scales) or MXFP4 (E2M1 + E8M0 per 32).
// The format is decided per tensor from the safetensors headers, never from config.json, and the
// exact fp32 dequantization of any row block is available to the CPU reference and the tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/safetensors.h"

namespace dsv4 {

enum class WeightFormat { kDense, kGptqInt4, kCtInt4, kFp8Block, kMxfp4 };
const char* weight_format_name(WeightFormat f);

struct LinearWeight {
  std::string name;  // canonical prefix, e.g. "layers.3.attn.wq_a"
  WeightFormat format = WeightFormat::kDense;
  int64_t n = 0;     // out features
  int64_t k = 0;     // in features
  int group_size = 0;  // int4 formats: K elements per scale (128 for Intel W4A16)

  // Dense: `weight` [N, K] (any float dtype), or a slice of a fused 3-D HF expert tensor:
  //   weight [E, rows, K], expert `expert`, rows [row_offset, row_offset + N).
  // GPTQ:  qweight I32 [K/8, N] (packed along K), qzeros I32 [K/g, N/8], scales F16 [K/g, N].
  // CT:    weight = weight_packed I32 [N, K/8] (packed along K inside a row), scales [N, K/g].
  // FP8:   weight F8_E4M3 [N, K], scales [ceil(N/128), ceil(K/128)] (E8M0 or float; a multiplier).
  // MXFP4: weight I8/U8 [N, K/2] (low nibble = even k), scales E8M0 [N, K/32].
  const TensorInfo* weight = nullptr;
  const TensorInfo* qweight = nullptr;
  const TensorInfo* qzeros = nullptr;
  const TensorInfo* scales = nullptr;
  const TensorInfo* g_idx = nullptr;
  int64_t expert = -1;
  int64_t row_offset = 0;
  bool gptq_v2 = false;     // zero point = stored value (v2) instead of stored + 1 (v1)
  bool zeros_uniform = false;  // every zero point is 8, checked at load (symmetric checkpoints)

  bool valid() const { return n > 0; }
  // Bytes of the tensors that make up this weight (for a fused expert slice: its share).
  size_t n_bytes() const;
  // Exact fp32 values of rows [n0, n1): out[(n - n0) * K + k] = W[n, k].
  void dequant_rows(int64_t n0, int64_t n1, float* out) const;
};

// Options that come from config.json for the int4 formats.
struct LinearLoadOptions {
  bool gptq_v2 = false;
  bool sym = true;
};

class TensorIndex;

// Finds the weight with canonical prefix `prefix` (e.g. "layers.3.attn.wq_a") in whichever format
// is stored, checks every tensor of it against the logical shape [n, k], and marks them used.
// Errors name the tensor and the expected and found shape/dtype.
Result<LinearWeight> find_linear(TensorIndex& index, const std::string& prefix, int64_t n, int64_t k,
                                 const LinearLoadOptions& opts);

}  // namespace dsv4
