// attention.cpp: the attention sublayer. Projections run batched over the chunk; the window and
// compressor state advance token by token (entries are emitted before the token that completes a
// window attends); the per-token softmax then runs in parallel, reading the window from a
// contiguous [previous W-1 tokens + chunk] buffer and the compressed entries by visibility prefix.
#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "cpu/compressor.h"
#include "cpu/linalg.h"
#include "cpu/quant.h"

namespace dsv4::cpu {

void init_layer_state(const ModelConfig& cfg, const LayerSpec& spec, LayerState& st) {
  st.window.assign(size_t(cfg.sliding_window) * size_t(cfg.head_dim), 0.0f);
  st.has_compressor = spec.attn != AttnType::kSliding;
  st.has_indexer = spec.attn == AttnType::kCsa;
  if (st.has_compressor) st.compressor.init(spec.compress_ratio, spec.attn == AttnType::kCsa ? 2 : 1, cfg.head_dim);
  if (st.has_indexer) st.indexer.init(spec.compress_ratio, 2, cfg.index_head_dim);
}

namespace {

// Softmax attention of one head over `n` keys (pointers into key rows of width d) plus the sink.
void attend_head(const float* q, const float* const* keys, int64_t n, int d, float scale, float sink,
                 const Rounder& rnd, float* logits, float* out) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    logits[j] = dot(q, keys[j], d) * scale;
    mx = std::fmax(mx, logits[j]);
  }
  // The sink enters the denominator only; the maximum is over real keys (it cancels exactly).
  float den = 0.0f;
  std::fill(out, out + d, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float e = std::exp(logits[j] - mx);
    den += e;
    // NOTE: the official kernel feeds bf16 probabilities to P.V but sums the fp32 ones.
    const float pv = rnd(e);
    const float* k = keys[j];
    for (int i = 0; i < d; ++i) out[i] += pv * k[i];
  }
  den += std::exp(sink - mx);
  for (int i = 0; i < d; ++i) out[i] = rnd(out[i] / den);
}

}  // namespace

void attention_forward(const AttentionInputs& in, LayerState& st, int64_t p0, const float* x, int64_t T, float* y,
                       AttentionTrace* trace) {
  const ModelConfig& c = *in.cfg;
  const AttentionWeights& A = in.w->attn;
  const LayerSpec& spec = in.w->spec;
  const Rounder rnd(in.numerics);
  const int D = c.hidden, H = c.n_heads, d = c.head_dim, r = c.rope_dim, W = c.sliding_window;
  const int ql = c.q_lora_rank;
  const float eps = float(c.norm_eps);

  // ---- query path ----
  std::vector<float> qa(size_t(T * ql)), q(size_t(T * H) * size_t(d));
  linear(A.wq_a, x, T, qa.data());
  rnd.apply(qa.data(), long(qa.size()));
  for (int64_t t = 0; t < T; ++t) rmsnorm(&qa[size_t(t * ql)], A.q_norm.data(), ql, eps, &qa[size_t(t * ql)]);
  rnd.apply(qa.data(), long(qa.size()));
  linear(A.wq_b, qa.data(), T, q.data());
  rnd.apply(q.data(), long(q.size()));
#pragma omp parallel for
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      float* qh = &q[size_t((t * H + h) * d)];
      rmsnorm_unweighted(qh, d, eps, qh);
      rnd.apply(qh, d);
      in.rope->rotate(qh + d - r, long(p0 + t));
      rnd.apply(qh + d - r, r);
    }
  }

  // ---- KV path (one shared head, K = V) ----
  std::vector<float> kv(size_t(T * d));
  linear(A.wkv, x, T, kv.data());
  rnd.apply(kv.data(), long(kv.size()));
  for (int64_t t = 0; t < T; ++t) {
    float* k = &kv[size_t(t * d)];
    rmsnorm(k, A.kv_norm.data(), d, eps, k);
    rnd.apply(k, d);
    in.rope->rotate(k + d - r, long(p0 + t));
    rnd.apply(k + d - r, r);
    if (in.numerics.fp8_kv) fp8sim(k, d - r, 64);
  }

  // Window buffer: the previous min(p0, W-1) tokens from the ring, then the chunk.
  const int64_t n_prev = std::min<int64_t>(p0, W - 1);
  const int64_t win0 = p0 - n_prev;  // position of row 0
  std::vector<float> win(size_t((n_prev + T) * d));
  for (int64_t i = 0; i < n_prev; ++i) {
    const int64_t pos = win0 + i;
    std::copy_n(&st.window[size_t((pos % W) * d)], d, &win[size_t(i * d)]);
  }
  std::copy(kv.begin(), kv.end(), win.begin() + n_prev * d);

  // ---- compressors ----
  const float idx_weight_scale = float(1.0 / std::sqrt(double(c.index_head_dim)) / std::sqrt(double(c.index_n_heads)));
  std::vector<float> qi, wi;
  if (st.has_compressor) {
    const int width = st.compressor.coff * d;
    std::vector<float> a(size_t(T * width)), z(size_t(T * width));
    linear(A.compressor.wkv, x, T, a.data());
    linear(A.compressor.wgate, x, T, z.data());
    CompressorParams cp{&A.compressor, in.rope, r, eps, in.numerics.fp8_kv ? EntryQuant::kFp8Nope : EntryQuant::kNone};
    for (int64_t t = 0; t < T; ++t)
      compressor_push(cp, st.compressor, p0 + t, &a[size_t(t * width)], &z[size_t(t * width)], rnd);
  }
  if (st.has_indexer) {
    const int dI = c.index_head_dim, nI = c.index_n_heads;
    const int width = 2 * dI;
    std::vector<float> a(size_t(T * width)), z(size_t(T * width));
    linear(A.indexer.compressor.wkv, x, T, a.data());
    linear(A.indexer.compressor.wgate, x, T, z.data());
    CompressorParams cp{&A.indexer.compressor, in.rope, r, eps,
                        in.numerics.fp4_indexer ? EntryQuant::kHadamardFp4 : EntryQuant::kNone};
    for (int64_t t = 0; t < T; ++t)
      compressor_push(cp, st.indexer, p0 + t, &a[size_t(t * width)], &z[size_t(t * width)], rnd);
    qi.resize(size_t(T * nI) * size_t(dI));
    linear(A.indexer.wq_b, qa.data(), T, qi.data());
    rnd.apply(qi.data(), long(qi.size()));
    for (int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < nI; ++h) {
        float* qh = &qi[size_t((t * nI + h) * dI)];
        in.rope->rotate(qh + dI - r, long(p0 + t));
        rnd.apply(qh + dI - r, r);
        if (in.numerics.fp4_indexer) {
          hadamard_bf16(qh, dI);
          fp4sim(qh, dI, 32);
        }
      }
    }
    wi.resize(size_t(T * nI));
    linear(A.indexer.weights_proj, x, T, wi.data());
    rnd.apply(wi.data(), long(wi.size()));
    for (float& v : wi) v = rnd(v * idx_weight_scale);
  }
  if (trace && st.has_indexer) trace->selected.assign(size_t(T), {});

  // ---- core attention, per token ----
  std::vector<float> o(size_t(T * H) * size_t(d));
  const float scale = float(1.0 / std::sqrt(double(d)));
  const int64_t n_entries = st.has_compressor ? st.compressor.n_entries : 0;
#pragma omp parallel
  {
    std::vector<const float*> keys;
    std::vector<float> logits, scores;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = p0 + t;
      keys.clear();
      for (int64_t pos = std::max<int64_t>(0, p - W + 1); pos <= p; ++pos) keys.push_back(&win[size_t((pos - win0) * d)]);
      if (st.has_compressor) {
        const int64_t n_vis = std::min<int64_t>((p + 1) / spec.compress_ratio, n_entries);
        if (st.has_indexer) {
          scores.resize(static_cast<size_t>(n_vis));
          indexer_scores(&qi[size_t(t * c.index_n_heads) * size_t(c.index_head_dim)], &wi[size_t(t * c.index_n_heads)],
                         c.index_n_heads, c.index_head_dim, st.indexer.entries.data(), n_vis, rnd, scores.data());
          std::vector<int32_t> sel = topk_indices(scores.data(), n_vis, c.index_topk);
          for (int32_t e : sel) keys.push_back(&st.compressor.entries[size_t(e) * size_t(d)]);
          if (trace) trace->selected[size_t(t)] = std::move(sel);
        } else {
          for (int64_t e = 0; e < n_vis; ++e) keys.push_back(&st.compressor.entries[size_t(e * d)]);
        }
      }
      logits.resize(keys.size());
      for (int h = 0; h < H; ++h) {
        float* oh = &o[size_t((t * H + h) * d)];
        attend_head(&q[size_t((t * H + h) * d)], keys.data(), int64_t(keys.size()), d, scale, A.sink[size_t(h)], rnd,
                    logits.data(), oh);
        in.rope->rotate(oh + d - r, long(p), /*inverse=*/true);
        rnd.apply(oh + d - r, r);
      }
    }
  }

  // ---- output: grouped wo_a, then wo_b ----
  const int G = c.o_groups, ol = c.o_lora_rank, gin = c.group_in_dim();
  std::vector<float> u(size_t(T) * size_t(G) * size_t(ol));
  for (int g = 0; g < G; ++g)
    linear(A.wo_a, o.data() + int64_t(g) * gin, T, int64_t(H) * d, u.data() + int64_t(g) * ol, int64_t(G) * ol,
           int64_t(g) * ol, int64_t(g + 1) * ol);
  rnd.apply(u.data(), long(u.size()));
  linear(A.wo_b, u.data(), T, y);
  rnd.apply(y, long(T * D));

  // ---- advance the window ring ----
  for (int64_t t = std::max<int64_t>(0, T - W); t < T; ++t)
    std::copy_n(&kv[size_t(t * d)], d, &st.window[size_t(((p0 + t) % W) * d)]);
}

}  // namespace dsv4::cpu
