// moe.cpp: routing and expert evaluation. Tokens are grouped per expert so each expert's weights
// are dequantized once per call.
#include "cpu/moe.h"

#include <algorithm>
#include <cmath>

#include "cpu/compressor.h"
#include "cpu/linalg.h"

namespace dsv4::cpu {

Routing route(const ModelConfig& cfg, const MoeWeights& w, MoeType type, const float* x, const int32_t* tokens,
              int64_t T) {
  const int E = cfg.n_routed_experts, K = cfg.n_experts_per_tok;
  std::vector<float> logits(size_t(T * E));
  linear(w.gate, x, T, logits.data());
  Routing r;
  r.experts.resize(size_t(T * K));
  r.weights.resize(size_t(T * K));
  std::vector<float> biased(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    float* s = &logits[size_t(t * E)];
    for (int e = 0; e < E; ++e) s[e] = std::sqrt(softplus(s[e]));
    int32_t* sel = &r.experts[size_t(t * K)];
    switch (type) {
      case MoeType::kHash:
        for (int k = 0; k < K; ++k) sel[k] = w.tid2eid[size_t(int64_t(tokens[t]) * K + k)];
        break;
      case MoeType::kScore: {
        for (int e = 0; e < E; ++e) biased[size_t(e)] = s[e] + w.bias[size_t(e)];
        const std::vector<int32_t> top = topk_indices(biased.data(), E, K);
        std::copy(top.begin(), top.end(), sel);
        break;
      }
    }
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += s[sel[k]];
    for (int k = 0; k < K; ++k) r.weights[size_t(t * K + k)] = s[sel[k]] / sum * float(cfg.routed_scaling_factor);
  }
  return r;
}

namespace {

// out [n, D] = W2 . act, act = silu(min(W1 x, L)) * clamp(W3 x, -L, L) * weight (weight applied
// before W2 in bf16 mode as the official code does, after it in fp32 mode as HF does).
void expert_forward(const ModelConfig& cfg, const ExpertWeights& ew, const float* x, int64_t n,
                    const float* row_weight, const Numerics& numerics, float* out) {
  const Rounder rnd(numerics);
  const int I = cfg.moe_inter, D = cfg.hidden;
  const float limit = float(cfg.swiglu_limit);
  std::vector<float> g(size_t(n * I)), u(size_t(n * I));
  linear(ew.w1, x, n, g.data());
  linear(ew.w3, x, n, u.data());
  for (int64_t t = 0; t < n; ++t) {
    const float wt = row_weight ? row_weight[t] : 1.0f;
    for (int i = 0; i < I; ++i) {
      float gv = rnd(g[size_t(t * I + i)]), uv = rnd(u[size_t(t * I + i)]);
      if (limit > 0.0f) {
        gv = std::fmin(gv, limit);
        uv = std::fmin(std::fmax(uv, -limit), limit);
      }
      float a = gv * sigmoid(gv) * uv;
      if (numerics.bf16) a *= wt;
      g[size_t(t * I + i)] = rnd(a);
    }
  }
  linear(ew.w2, g.data(), n, out);
  for (int64_t t = 0; t < n; ++t) {
    const float wt = (row_weight && !numerics.bf16) ? row_weight[t] : 1.0f;
    for (int i = 0; i < D; ++i) out[size_t(t * D + i)] = rnd(out[size_t(t * D + i)]) * wt;
  }
}

}  // namespace

void moe_forward(const ModelConfig& cfg, const MoeWeights& w, MoeType type, const float* x, const int32_t* tokens,
                 int64_t T, const Numerics& numerics, float* y, Routing* routing_out) {
  const int E = cfg.n_routed_experts, K = cfg.n_experts_per_tok, D = cfg.hidden;
  const Rounder rnd(numerics);
  Routing r = route(cfg, w, type, x, tokens, T);

  std::vector<float> acc(size_t(T * D), 0.0f);
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) by_expert[size_t(r.experts[size_t(t * K + k)])].emplace_back(t, r.weights[size_t(t * K + k)]);
  std::vector<float> xe, we, oe;
  for (int e = 0; e < E; ++e) {  // increasing expert index: the official summation order
    const auto& rows = by_expert[size_t(e)];
    if (rows.empty()) continue;
    const int64_t n = int64_t(rows.size());
    xe.resize(size_t(n * D));
    we.resize(static_cast<size_t>(n));
    oe.resize(size_t(n * D));
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(x + rows[size_t(i)].first * D, D, &xe[size_t(i * D)]);
      we[size_t(i)] = rows[size_t(i)].second;
    }
    expert_forward(cfg, w.experts[size_t(e)], xe.data(), n, we.data(), numerics, oe.data());
    for (int64_t i = 0; i < n; ++i) {
      float* a = &acc[size_t(rows[size_t(i)].first * D)];
      for (int j = 0; j < D; ++j) a[j] += oe[size_t(i * D + j)];
    }
  }
  if (w.has_shared) {
    std::vector<float> sh(size_t(T * D));
    expert_forward(cfg, w.shared, x, T, nullptr, numerics, sh.data());
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += sh[i];
  }
  for (size_t i = 0; i < acc.size(); ++i) y[i] = rnd(acc[i]);
  if (routing_out) *routing_out = std::move(r);
}

}  // namespace dsv4::cpu
