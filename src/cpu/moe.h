// moe.h: one layer's MoE sublayer on the CPU (MODEL_SPEC.md §7): sqrtsoftplus router, hash or
// score routing, clamped SwiGLU experts, shared expert, sum in increasing expert order.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/numerics.h"
#include "model/config.h"
#include "model/weights.h"

namespace dsv4::cpu {

struct Routing {
  std::vector<int32_t> experts;  // [T, top_k] selected expert ids
  std::vector<float> weights;    // [T, top_k] normalized weights times routed_scaling_factor
};

// Router of one layer: x fp32 [T, D] (after ffn_norm), tokens [T] (hash layers only).
Routing route(const ModelConfig& cfg, const MoeWeights& w, MoeType type, const float* x, const int32_t* tokens,
              int64_t T);

// y fp32 [T, D] = sum over selected experts (increasing index) + shared expert, rounded by mode.
void moe_forward(const ModelConfig& cfg, const MoeWeights& w, MoeType type, const float* x, const int32_t* tokens,
                 int64_t T, const Numerics& numerics, float* y, Routing* routing_out = nullptr);

}  // namespace dsv4::cpu
