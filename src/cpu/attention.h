// attention.h: one layer's attention sublayer on the CPU (MODEL_SPEC.md §6): query and KV paths,
// the sliding window, the compressors, the Lightning Indexer, the sparse softmax with sinks, the
// inverse RoPE and the grouped output projection. Reads and updates the layer's decode state.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/numerics.h"
#include "cpu/rope.h"
#include "cpu/state.h"
#include "model/config.h"
#include "model/weights.h"

namespace dsv4::cpu {

struct AttentionInputs {
  const ModelConfig* cfg = nullptr;
  const LayerWeights* w = nullptr;
  const Rope* rope = nullptr;  // the layer's rope: main for sliding layers, compress otherwise
  Numerics numerics;
};

// Optional per-token observations for tests and GPU comparisons.
struct AttentionTrace {
  std::vector<std::vector<int32_t>> selected;  // CSA: indexer top-k entries per token of the chunk
};

void init_layer_state(const ModelConfig& cfg, const LayerSpec& spec, LayerState& st);

// x: fp32 [T, D] (after attn_norm) for positions p0 .. p0+T-1; y: fp32 [T, D].
void attention_forward(const AttentionInputs& in, LayerState& st, int64_t p0, const float* x, int64_t T, float* y,
                       AttentionTrace* trace = nullptr);

}  // namespace dsv4::cpu
