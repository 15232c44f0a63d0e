// model.cpp: the block loop. A block is HCPre -> norm -> attention -> HCPost, then HCPre -> norm
// -> MoE -> HCPost (MODEL_SPEC.md §3); the residual lives entirely in the hc streams.
#include "cpu/model.h"

#include <algorithm>

#include "base/check.h"
#include "cpu/linalg.h"
#include "cpu/mhc.h"
#include "cpu/moe.h"

namespace dsv4::cpu {

std::string Numerics::name() const {
  if (*this == fp32()) return "fp32";
  if (*this == bf16_gpu()) return "bf16";
  return std::string(bf16 ? "bf16-rounding" : "fp32") + (fp8_kv ? "+fp8-kv" : "") + (fp4_indexer ? "+fp4-indexer" : "");
}

CpuModel::CpuModel(const ModelConfig& cfg, const ModelWeights& w, Numerics numerics)
    : cfg_(cfg), w_(w), numerics_(numerics), rope_main_(cfg.rope_main, cfg.rope_dim),
      rope_compress_(cfg.rope_compress, cfg.rope_dim) {}

std::unique_ptr<SequenceState> CpuModel::new_sequence() const {
  auto s = std::make_unique<SequenceState>();
  s->layers.resize(size_t(cfg_.n_layers));
  for (int i = 0; i < cfg_.n_layers; ++i) init_layer_state(cfg_, cfg_.layers[size_t(i)], s->layers[size_t(i)]);
  s->has_mtp = w_.has_mtp;
  if (w_.has_mtp) init_layer_state(cfg_, cfg_.mtp_layer, s->mtp);
  return s;
}

void CpuModel::block(const LayerWeights& lw, const Rope& rope, LayerState& st, int64_t p0,
                     std::span<const int32_t> tokens, float* X, LayerTrace* trace) const {
  const Rounder rnd(numerics_);
  const int64_t T = int64_t(tokens.size());
  const int D = cfg_.hidden;
  const int64_t stride = int64_t(cfg_.hc_mult) * D;
  const float eps = float(cfg_.norm_eps);
  std::vector<HcMix> mix(static_cast<size_t>(T));
  std::vector<float> x(size_t(T * D)), y(size_t(T * D));

  auto pre = [&](const HcParams& hc, const Vec& norm) {
#pragma omp parallel for
    for (int64_t t = 0; t < T; ++t) {
      float* xt = &x[size_t(t * D)];
      hc_pre(cfg_, hc, X + t * stride, mix[size_t(t)], xt, rnd);
      rmsnorm(xt, norm.data(), D, eps, xt);
      rnd.apply(xt, D);
    }
  };
  auto post = [&] {
#pragma omp parallel for
    for (int64_t t = 0; t < T; ++t) hc_post(cfg_, mix[size_t(t)], &y[size_t(t * D)], X + t * stride, rnd);
  };

  pre(lw.hc_attn, lw.attn_norm);
  AttentionInputs in{&cfg_, &lw, &rope, numerics_};
  attention_forward(in, st, p0, x.data(), T, y.data(), trace ? &trace->attention : nullptr);
  post();

  pre(lw.hc_ffn, lw.ffn_norm);
  Routing routing;
  moe_forward(cfg_, lw.moe, lw.spec.moe, x.data(), tokens.data(), T, numerics_, y.data(), trace ? &routing : nullptr);
  if (trace) trace->experts = std::move(routing.experts);
  post();
}

void CpuModel::head_logits(const HcParams& hc, const Vec& norm, const float* X, int64_t n_rows, float* logits) const {
  const Rounder rnd(numerics_);
  const int D = cfg_.hidden;
  const int64_t stride = int64_t(cfg_.hc_mult) * D;
  std::vector<float> x(size_t(n_rows * D));
  for (int64_t t = 0; t < n_rows; ++t) {
    float* xt = &x[size_t(t * D)];
    hc_head(cfg_, hc, X + t * stride, xt, rnd);
    rmsnorm(xt, norm.data(), D, float(cfg_.norm_eps), xt);
    rnd.apply(xt, D);
  }
  linear(w_.head, x.data(), n_rows, logits);
}

Status CpuModel::forward(SequenceState& s, std::span<const int32_t> tokens, LogitsRows rows, float* logits,
                         float* hidden, ForwardTrace* trace) const {
  const int64_t T = int64_t(tokens.size());
  if (T == 0) return Status::ok();
  for (int64_t t = 0; t < T; ++t)
    if (tokens[size_t(t)] < 0 || tokens[size_t(t)] >= cfg_.vocab_size)
      return invalid_argument("token id {} at index {} is outside the vocabulary [0, {})", tokens[size_t(t)], t,
                              cfg_.vocab_size);
  const int D = cfg_.hidden, hc = cfg_.hc_mult;
  const int64_t stride = int64_t(hc) * D;
  std::vector<float> X(size_t(T * stride));
  for (int64_t t = 0; t < T; ++t) {
    float* xt = &X[size_t(t * stride)];
    w_.embed_row(tokens[size_t(t)], xt);  // bf16 in the checkpoint: exact in both modes
    for (int i = 1; i < hc; ++i) std::copy_n(xt, D, xt + int64_t(i) * D);
  }
  if (trace) trace->layers.assign(size_t(cfg_.n_layers), {});
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const LayerWeights& lw = w_.layers[size_t(l)];
    const Rope& rope = lw.spec.attn == AttnType::kSliding ? rope_main_ : rope_compress_;
    block(lw, rope, s.layers[size_t(l)], s.pos, tokens, X.data(), trace ? &trace->layers[size_t(l)] : nullptr);
  }
  s.pos += T;
  if (hidden) std::copy(X.begin(), X.end(), hidden);
  switch (rows) {
    case LogitsRows::kAll: head_logits(w_.hc_head, w_.norm, X.data(), T, logits); break;
    case LogitsRows::kLast: head_logits(w_.hc_head, w_.norm, X.data() + (T - 1) * stride, 1, logits); break;
    case LogitsRows::kNone: break;
  }
  return Status::ok();
}

Status CpuModel::mtp_forward(SequenceState& s, const float* hidden, std::span<const int32_t> next_tokens,
                             float* logits) const {
  if (!w_.has_mtp) return unimplemented("this checkpoint has no MTP block");
  const int64_t T = int64_t(next_tokens.size());
  const int D = cfg_.hidden, hc = cfg_.hc_mult;
  const int64_t stride = int64_t(hc) * D;
  const float eps = float(cfg_.norm_eps);
  const Rounder rnd(numerics_);
  const MtpWeights& m = w_.mtp;
  for (int64_t t = 0; t < T; ++t)
    if (next_tokens[size_t(t)] < 0 || next_tokens[size_t(t)] >= cfg_.vocab_size)
      return invalid_argument("token id {} at index {} is outside the vocabulary [0, {})", next_tokens[size_t(t)], t,
                              cfg_.vocab_size);
  std::vector<float> e(size_t(T * D)), ep(size_t(T * D)), h(size_t(T * stride)), hp(size_t(T * stride));
  for (int64_t t = 0; t < T; ++t) {
    float* et = &e[size_t(t * D)];
    w_.embed_row(next_tokens[size_t(t)], et);
    rmsnorm(et, m.enorm.data(), D, eps, et);
    rnd.apply(et, D);
    for (int i = 0; i < hc; ++i) {
      float* ht = &h[size_t(t * stride + int64_t(i) * D)];
      rmsnorm(hidden + t * stride + int64_t(i) * D, m.hnorm.data(), D, eps, ht);
      rnd.apply(ht, D);
    }
  }
  linear(m.e_proj, e.data(), T, ep.data());
  rnd.apply(ep.data(), long(ep.size()));
  linear(m.h_proj, h.data(), T * hc, hp.data());
  rnd.apply(hp.data(), long(hp.size()));
  std::vector<float> X(size_t(T * stride));
  for (int64_t t = 0; t < T; ++t)
    for (int i = 0; i < hc; ++i)
      for (int d = 0; d < D; ++d)
        X[size_t(t * stride + int64_t(i) * D + d)] =
            rnd(ep[size_t(t * D + d)] + hp[size_t(t * stride + int64_t(i) * D + d)]);
  const Rope& rope = cfg_.mtp_layer.attn == AttnType::kSliding ? rope_main_ : rope_compress_;
  block(m.layer, rope, s.mtp, s.mtp_pos, next_tokens, X.data(), nullptr);
  s.mtp_pos += T;
  head_logits(m.hc_head, m.norm, X.data(), T, logits);
  return Status::ok();
}

}  // namespace dsv4::cpu
