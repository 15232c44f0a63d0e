// mhc.cpp: HCPre / HCPost / HC head and the Sinkhorn normalization.
#include "cpu/mhc.h"

#include <cmath>

#include "cpu/linalg.h"

namespace dsv4::cpu {

namespace {
// mu = (Phi . v) * rho with rho = 1 / sqrt(mean(v^2) + eps) over all hc*D values.
void mix_logits(const ModelConfig& cfg, const std::vector<float>& fn, int n_mix, const float* X, float* mu) {
  const int64_t n = cfg.hc_dim();
  const float rho = 1.0f / std::sqrt(dot(X, X, n) / float(n) + float(cfg.norm_eps));
  for (int i = 0; i < n_mix; ++i) mu[i] = dot(fn.data() + int64_t(i) * n, X, n) * rho;
}
}  // namespace

void sinkhorn(float* M, int hc, int iters, float eps) {
  for (int j = 0; j < hc; ++j) {  // row softmax, then + eps
    float* row = M + j * hc;
    float mx = row[0];
    for (int k = 1; k < hc; ++k) mx = std::fmax(mx, row[k]);
    float sum = 0.0f;
    for (int k = 0; k < hc; ++k) sum += (row[k] = std::exp(row[k] - mx));
    for (int k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
  }
  auto col_norm = [&] {
    for (int k = 0; k < hc; ++k) {
      float s = 0.0f;
      for (int j = 0; j < hc; ++j) s += M[j * hc + k];
      for (int j = 0; j < hc; ++j) M[j * hc + k] /= (s + eps);
    }
  };
  col_norm();
  for (int it = 1; it < iters; ++it) {
    for (int j = 0; j < hc; ++j) {
      float s = 0.0f;
      for (int k = 0; k < hc; ++k) s += M[j * hc + k];
      for (int k = 0; k < hc; ++k) M[j * hc + k] /= (s + eps);
    }
    col_norm();
  }
}

void hc_pre(const ModelConfig& cfg, const HcParams& p, const float* X, HcMix& mix, float* x, const Rounder& rnd) {
  const int hc = cfg.hc_mult, D = cfg.hidden, n_mix = cfg.hc_mix();
  std::vector<float> mu(static_cast<size_t>(n_mix));
  mix_logits(cfg, p.fn, n_mix, X, mu.data());
  const float eps = float(cfg.hc_eps);
  mix.pre.resize(static_cast<size_t>(hc));
  mix.post.resize(static_cast<size_t>(hc));
  mix.comb.resize(size_t(hc * hc));
  for (int i = 0; i < hc; ++i) {
    mix.pre[size_t(i)] = sigmoid(mu[size_t(i)] * p.scale[0] + p.base[size_t(i)]) + eps;
    mix.post[size_t(i)] = 2.0f * sigmoid(mu[size_t(hc + i)] * p.scale[1] + p.base[size_t(hc + i)]);
  }
  for (int i = 0; i < hc * hc; ++i)
    mix.comb[size_t(i)] = mu[size_t(2 * hc + i)] * p.scale[2] + p.base[size_t(2 * hc + i)];
  sinkhorn(mix.comb.data(), hc, cfg.hc_sinkhorn_iters, eps);
  for (int d = 0; d < D; ++d) {
    float s = 0.0f;
    for (int i = 0; i < hc; ++i) s += mix.pre[size_t(i)] * X[int64_t(i) * D + d];
    x[d] = rnd(s);
  }
}

void hc_post(const ModelConfig& cfg, const HcMix& mix, const float* y, float* X, const Rounder& rnd) {
  const int hc = cfg.hc_mult, D = cfg.hidden;
  std::vector<float> out(size_t(hc) * size_t(D));
  for (int k = 0; k < hc; ++k) {
    for (int d = 0; d < D; ++d) {
      float s = mix.post[size_t(k)] * y[d];
      for (int j = 0; j < hc; ++j) s += mix.comb[size_t(j * hc + k)] * X[int64_t(j) * D + d];
      out[size_t(k) * size_t(D) + size_t(d)] = rnd(s);
    }
  }
  std::copy(out.begin(), out.end(), X);
}

void hc_head(const ModelConfig& cfg, const HcParams& p, const float* X, float* x, const Rounder& rnd) {
  const int hc = cfg.hc_mult, D = cfg.hidden;
  std::vector<float> mu(static_cast<size_t>(hc));
  mix_logits(cfg, p.fn, hc, X, mu.data());
  std::vector<float> pre(static_cast<size_t>(hc));
  for (int i = 0; i < hc; ++i) pre[size_t(i)] = sigmoid(mu[size_t(i)] * p.scale[0] + p.base[size_t(i)]) + float(cfg.hc_eps);
  for (int d = 0; d < D; ++d) {
    float s = 0.0f;
    for (int i = 0; i < hc; ++i) s += pre[size_t(i)] * X[int64_t(i) * D + d];
    x[d] = rnd(s);
  }
}

}  // namespace dsv4::cpu
