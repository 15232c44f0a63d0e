// compressor.h: the KV compressors of CSA and HCA layers (MODEL_SPEC.md §6.5) and the Lightning
// Indexer's scoring and top-k (§6.6). The compressor consumes one token's projections at a time
// and emits an entry on the token that completes a window, exactly as a decode step does; a
// prefill is the same loop over the chunk, so chunked and one-shot prefill agree.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/numerics.h"
#include "cpu/rope.h"
#include "cpu/state.h"
#include "model/weights.h"

namespace dsv4::cpu {

enum class EntryQuant { kNone, kFp8Nope, kHadamardFp4 };

struct CompressorParams {
  const CompressorWeights* w = nullptr;
  const Rope* rope = nullptr;  // the layer's compress rope
  int rope_dim = 0;
  float norm_eps = 1e-6f;
  EntryQuant quant = EntryQuant::kNone;
};

// Feeds the projections of the token at `pos`: a, z are fp32 [coff * Dc] (z without ape).
// Emits (appends to state.entries) when pos completes a window. Returns true if it emitted.
bool compressor_push(const CompressorParams& p, CompressorState& s, int64_t pos, const float* a, const float* z,
                     const Rounder& rnd);

// Post-processing of a pooled entry C [Dc] for window w: bf16, RMSNorm, RoPE at w * m, quantization.
void compressor_finish_entry(const CompressorParams& p, int64_t window_idx, int ratio, float* C, const Rounder& rnd);

// Indexer scores of one query against keys [n_keys, dI]:
//   I[s] = sum_h relu(q_h . k_s) * w_h, with w_h already including dI^-0.5 * nI^-0.5.
// q: [nI, dI]. In bf16 mode every stage is rounded as the official code does.
void indexer_scores(const float* q, const float* w, int n_heads, int head_dim, const float* keys, int64_t n_keys,
                    const Rounder& rnd, float* scores);

// Indices of the top min(k, n) scores, highest first; ties go to the lowest index.
std::vector<int32_t> topk_indices(const float* scores, int64_t n, int64_t k);

}  // namespace dsv4::cpu
