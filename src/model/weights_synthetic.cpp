// weights_synthetic.cpp: ModelWeights::synthetic (see weights.h). The small parameters follow
// make-model's distributions (norm weights ~ N(1, 0.1), mHC fn ~ N(0, 1/sqrt(hc*D)), scales
// ~ N(1, 0.25), ape ~ N(0, 0.5), sinks ~ N(0, 1), router bias ~ N(0, 0.1)) so a synthetic model's
// activations look like a random checkpoint's, which is all a benchmark needs.
#include <fmt/format.h>

#include <cmath>

#include "base/splitmix.h"
#include "model/weights.h"

namespace dsv4 {

namespace {

class Draw {
 public:
  explicit Draw(uint64_t seed) : s_(splitmix64(seed)) {}
  // Approximately normal (sum of four uniforms, rescaled to unit variance).
  float normal() {
    float acc = 0.0f;
    for (int i = 0; i < 4; ++i) acc += float(next() >> 40) * (1.0f / 16777216.0f);
    return (acc - 2.0f) * std::sqrt(3.0f);
  }
  Vec vec(int64_t n, float stddev, float mean = 0.0f) {
    Vec v(static_cast<size_t>(n));
    for (float& x : v) x = mean + stddev * normal();
    return v;
  }
  uint64_t next() { return s_ = splitmix64(s_); }

 private:
  uint64_t s_;
};

LinearWeight shape_only(const std::string& name, WeightFormat f, int64_t n, int64_t k) {
  LinearWeight w;
  w.name = name;
  w.format = f;
  w.n = n;
  w.k = k;
  w.group_size = f == WeightFormat::kGptqInt4 ? 128 : 0;
  w.zeros_uniform = f == WeightFormat::kGptqInt4;
  return w;
}

}  // namespace

std::unique_ptr<ModelWeights> ModelWeights::synthetic(const ModelConfig& c, uint64_t seed) {
  auto w = std::make_unique<ModelWeights>();
  w->is_synthetic = true;
  Draw r(seed);
  const int D = c.hidden;
  const auto int4 = WeightFormat::kGptqInt4;
  const auto dense = WeightFormat::kDense;
  auto hc = [&](int mix, int n_scale) {
    HcParams p;
    p.fn = r.vec(int64_t(mix) * c.hc_dim(), 1.0f / std::sqrt(float(c.hc_dim())));
    p.base = r.vec(mix, 0.1f);
    p.scale = r.vec(n_scale, 0.25f, 1.0f);
    return p;
  };
  auto compressor = [&](const std::string& p, int dc, int coff, int m) {
    CompressorWeights cw;
    cw.wkv = shape_only(p + ".wkv", dense, int64_t(coff) * dc, D);
    cw.wgate = shape_only(p + ".wgate", dense, int64_t(coff) * dc, D);
    cw.ape = r.vec(int64_t(m) * coff * dc, 0.5f);
    cw.norm = r.vec(dc, 0.1f, 1.0f);
    return cw;
  };
  w->head = shape_only("head", dense, c.vocab_size, D);
  w->norm = r.vec(D, 0.1f, 1.0f);
  w->hc_head = hc(c.hc_mult, 1);
  w->layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w->layers[size_t(l)];
    const LayerSpec& spec = c.layers[size_t(l)];
    const std::string p = fmt::format("layers.{}", l);
    L.spec = spec;
    L.attn_norm = r.vec(D, 0.1f, 1.0f);
    L.ffn_norm = r.vec(D, 0.1f, 1.0f);
    L.hc_attn = hc(c.hc_mix(), 3);
    L.hc_ffn = hc(c.hc_mix(), 3);
    AttentionWeights& A = L.attn;
    A.wq_a = shape_only(p + ".attn.wq_a", int4, c.q_lora_rank, D);
    A.q_norm = r.vec(c.q_lora_rank, 0.1f, 1.0f);
    A.wq_b = shape_only(p + ".attn.wq_b", int4, c.q_dim(), c.q_lora_rank);
    A.wkv = shape_only(p + ".attn.wkv", int4, c.head_dim, D);
    A.kv_norm = r.vec(c.head_dim, 0.1f, 1.0f);
    A.wo_a = shape_only(p + ".attn.wo_a", dense, int64_t(c.o_groups) * c.o_lora_rank, c.group_in_dim());
    A.wo_b = shape_only(p + ".attn.wo_b", int4, D, int64_t(c.o_groups) * c.o_lora_rank);
    A.sink = r.vec(c.n_heads, 1.0f);
    if (spec.attn != AttnType::kSliding) {
      A.has_compressor = true;
      const int coff = spec.attn == AttnType::kCsa ? 2 : 1;
      A.compressor = compressor(p + ".attn.compressor", c.head_dim, coff, spec.compress_ratio);
    }
    if (spec.attn == AttnType::kCsa) {
      A.has_indexer = true;
      A.indexer.wq_b = shape_only(p + ".attn.indexer.wq_b", int4, int64_t(c.index_n_heads) * c.index_head_dim,
                                  c.q_lora_rank);
      A.indexer.weights_proj = shape_only(p + ".attn.indexer.weights_proj", dense, c.index_n_heads, D);
      A.indexer.compressor = compressor(p + ".attn.indexer.compressor", c.index_head_dim, 2, spec.compress_ratio);
    }
    MoeWeights& M = L.moe;
    M.gate = shape_only(p + ".ffn.gate", dense, c.n_routed_experts, D);
    if (spec.moe == MoeType::kHash) {
      M.tid2eid.resize(size_t(c.vocab_size) * size_t(c.n_experts_per_tok));
      for (int64_t t = 0; t < c.vocab_size; ++t) {
        // top_k distinct experts per token, as a real hash table has.
        int32_t* row = &M.tid2eid[size_t(t) * size_t(c.n_experts_per_tok)];
        for (int k = 0; k < c.n_experts_per_tok; ++k) {
          int32_t e;
          bool dup;
          do {
            e = int32_t(r.next() % uint64_t(c.n_routed_experts));
            dup = false;
            for (int j = 0; j < k; ++j) dup |= row[j] == e;
          } while (dup);
          row[k] = e;
        }
      }
    } else {
      M.bias = r.vec(c.n_routed_experts, 0.1f);
    }
    M.experts.resize(size_t(c.n_routed_experts));
    for (int e = 0; e < c.n_routed_experts; ++e) {
      const std::string q = fmt::format("{}.ffn.experts.{}", p, e);
      M.experts[size_t(e)] = {shape_only(q + ".w1", int4, c.moe_inter, D), shape_only(q + ".w3", int4, c.moe_inter, D),
                              shape_only(q + ".w2", int4, D, c.moe_inter)};
    }
    M.has_shared = c.n_shared_experts > 0;
    if (M.has_shared) {
      const std::string q = p + ".ffn.shared_experts";
      M.shared = {shape_only(q + ".w1", int4, c.moe_inter, D), shape_only(q + ".w3", int4, c.moe_inter, D),
                  shape_only(q + ".w2", int4, D, c.moe_inter)};
    }
  }
  return w;
}

}  // namespace dsv4
