// mhc.h: manifold-constrained hyper-connections (MODEL_SPEC.md §4): the 4 residual streams are
// collapsed to one sublayer input (pre weights), and the sublayer output is written back mixed
// with a Sinkhorn-normalized stream-mixing matrix (post, comb). All math in fp32.
#pragma once

#include <vector>

#include "cpu/numerics.h"
#include "model/config.h"
#include "model/weights.h"

namespace dsv4::cpu {

// Mixing weights of one token at one site.
struct HcMix {
  std::vector<float> pre;   // [hc]
  std::vector<float> post;  // [hc]
  std::vector<float> comb;  // [hc, hc] row-major; out_k = sum_j comb[j][k] * resid_j
};

// X: the token's streams [hc, D]. Computes the mixing weights and the collapsed input x [D]
// (rounded by `rnd`).
void hc_pre(const ModelConfig& cfg, const HcParams& p, const float* X, HcMix& mix, float* x, const Rounder& rnd);

// X (in/out) [hc, D]: X'_k = post_k * y + sum_j comb[j][k] * X_j, rounded by `rnd`.
void hc_post(const ModelConfig& cfg, const HcMix& mix, const float* y, float* X, const Rounder& rnd);

// Final head collapse: x = sum_i pre_i X_i with pre_i = sigmoid(mu_i * s + b_i) + eps.
void hc_head(const ModelConfig& cfg, const HcParams& p, const float* X, float* x, const Rounder& rnd);

// The Sinkhorn projection of §4.1 step 7 applied to logits M [hc, hc] in place.
void sinkhorn(float* M, int hc, int iters, float eps);

}  // namespace dsv4::cpu
