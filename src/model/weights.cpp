// weights.cpp: the per-layer tensor inventory of DeepSeek-V4 (CHECKPOINTS.md §2.3) as code.
#include "model/weights.h"

#include "base/check.h"
#include "base/numeric.h"
#include "model/tensor_names.h"

namespace dsv4 {

namespace {

class Loader {
 public:
  Loader(TensorIndex& index, const ModelConfig& cfg) : idx_(index), cfg_(cfg) {
    opts_.gptq_v2 = cfg.quant.gptq_v2;
    opts_.sym = cfg.quant.sym;
  }

  Status vec(const std::string& name, std::vector<int64_t> shape, Vec& out) {
    const TensorInfo* t = idx_.take(name);
    if (!t) return not_found("missing tensor '{}' (expected float {})", name, shape_str(shape));
    if (!dtype_is_float(t->dtype))
      return invalid_argument("tensor '{}': expected a float dtype, found {}", name, dtype_name(t->dtype));
    if (t->shape != shape)
      return invalid_argument("tensor '{}': expected shape {}, found {} (stored as '{}')", name, shape_str(shape),
                              shape_str(t->shape), t->name);
    out.resize(size_t(t->numel()));
    for (int64_t i = 0; i < t->numel(); ++i) out[size_t(i)] = t->get_f32(i);
    return Status::ok();
  }

  Status linear(const std::string& prefix, int64_t n, int64_t k, LinearWeight& out) {
    DSV4_ASSIGN_OR_RETURN(out, find_linear(idx_, prefix, n, k, opts_));
    return Status::ok();
  }

  Status hc(const std::string& fn, const std::string& base, const std::string& scale, int mix, int n_scale,
            HcParams& out) {
    DSV4_RETURN_IF_ERROR(vec(fn, {mix, cfg_.hc_dim()}, out.fn));
    DSV4_RETURN_IF_ERROR(vec(base, {mix}, out.base));
    DSV4_RETURN_IF_ERROR(vec(scale, {n_scale}, out.scale));
    return Status::ok();
  }

  Status compressor(const std::string& p, int dc, int c, int m, CompressorWeights& out) {
    DSV4_RETURN_IF_ERROR(linear(p + ".wkv", int64_t(c) * dc, cfg_.hidden, out.wkv));
    DSV4_RETURN_IF_ERROR(linear(p + ".wgate", int64_t(c) * dc, cfg_.hidden, out.wgate));
    DSV4_RETURN_IF_ERROR(vec(p + ".ape", {m, int64_t(c) * dc}, out.ape));
    DSV4_RETURN_IF_ERROR(vec(p + ".norm.weight", {dc}, out.norm));
    return Status::ok();
  }

  Status experts(const std::string& p, MoeWeights& moe) {
    const int E = cfg_.n_routed_experts, I = cfg_.moe_inter, D = cfg_.hidden;
    moe.experts.resize(static_cast<size_t>(E));
    // HF transformers stores the routed experts fused: gate_up_proj [E, 2I, D], down_proj [E, D, I].
    if (const TensorInfo* gu = idx_.take(p + ".experts.gate_up_proj")) {
      const TensorInfo* dn = idx_.take(p + ".experts.down_proj");
      // The slices are dense linears, read as BF16, F32 or F16 (an F64 tensor was read as F16).
      auto dense_dtype = [](DType t) { return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32; };
      if (!dense_dtype(gu->dtype) || gu->shape != std::vector<int64_t>{E, 2 * I, D})
        return invalid_argument("tensor '{}': expected BF16/F16/F32 [{}, {}, {}], found {} {}", gu->name, E, 2 * I,
                                D, dtype_name(gu->dtype), shape_str(gu->shape));
      if (!dn) return not_found("missing tensor '{}.experts.down_proj' next to gate_up_proj", p);
      if (!dense_dtype(dn->dtype) || dn->shape != std::vector<int64_t>{E, D, I})
        return invalid_argument("tensor '{}': expected BF16/F16/F32 [{}, {}, {}], found {} {}", dn->name, E, D, I,
                                dtype_name(dn->dtype), shape_str(dn->shape));
      for (int e = 0; e < E; ++e) {
        auto slice = [&](const TensorInfo* t, const char* what, int64_t n, int64_t k, int64_t row0) {
          LinearWeight w;
          w.name = fmt::format("{}.experts.{}.{}", p, e, what);
          w.format = WeightFormat::kDense;
          w.n = n;
          w.k = k;
          w.weight = t;
          w.expert = e;
          w.row_offset = row0;
          return w;
        };
        moe.experts[size_t(e)].w1 = slice(gu, "w1", I, D, 0);
        moe.experts[size_t(e)].w3 = slice(gu, "w3", I, D, I);
        moe.experts[size_t(e)].w2 = slice(dn, "w2", D, I, 0);
      }
      return Status::ok();
    }
    for (int e = 0; e < E; ++e) {
      const std::string q = fmt::format("{}.experts.{}", p, e);
      DSV4_RETURN_IF_ERROR(linear(q + ".w1", I, D, moe.experts[size_t(e)].w1));
      DSV4_RETURN_IF_ERROR(linear(q + ".w3", I, D, moe.experts[size_t(e)].w3));
      DSV4_RETURN_IF_ERROR(linear(q + ".w2", D, I, moe.experts[size_t(e)].w2));
    }
    return Status::ok();
  }

  Status layer(const std::string& p, const LayerSpec& spec, LayerWeights& L) {
    const ModelConfig& c = cfg_;
    const int D = c.hidden;
    L.spec = spec;
    DSV4_RETURN_IF_ERROR(vec(p + ".attn_norm.weight", {D}, L.attn_norm));
    DSV4_RETURN_IF_ERROR(vec(p + ".ffn_norm.weight", {D}, L.ffn_norm));
    DSV4_RETURN_IF_ERROR(hc(p + ".hc_attn_fn", p + ".hc_attn_base", p + ".hc_attn_scale", c.hc_mix(), 3, L.hc_attn));
    DSV4_RETURN_IF_ERROR(hc(p + ".hc_ffn_fn", p + ".hc_ffn_base", p + ".hc_ffn_scale", c.hc_mix(), 3, L.hc_ffn));

    AttentionWeights& A = L.attn;
    const std::string a = p + ".attn";
    DSV4_RETURN_IF_ERROR(linear(a + ".wq_a", c.q_lora_rank, D, A.wq_a));
    DSV4_RETURN_IF_ERROR(vec(a + ".q_norm.weight", {c.q_lora_rank}, A.q_norm));
    DSV4_RETURN_IF_ERROR(linear(a + ".wq_b", c.q_dim(), c.q_lora_rank, A.wq_b));
    DSV4_RETURN_IF_ERROR(linear(a + ".wkv", c.head_dim, D, A.wkv));
    DSV4_RETURN_IF_ERROR(vec(a + ".kv_norm.weight", {c.head_dim}, A.kv_norm));
    DSV4_RETURN_IF_ERROR(linear(a + ".wo_a", int64_t(c.o_groups) * c.o_lora_rank, c.group_in_dim(), A.wo_a));
    DSV4_RETURN_IF_ERROR(linear(a + ".wo_b", D, int64_t(c.o_groups) * c.o_lora_rank, A.wo_b));
    DSV4_RETURN_IF_ERROR(vec(a + ".attn_sink", {c.n_heads}, A.sink));
    switch (spec.attn) {
      case AttnType::kSliding:
        break;
      case AttnType::kCsa:
        A.has_compressor = A.has_indexer = true;
        DSV4_RETURN_IF_ERROR(compressor(a + ".compressor", c.head_dim, 2, spec.compress_ratio, A.compressor));
        DSV4_RETURN_IF_ERROR(
            linear(a + ".indexer.wq_b", int64_t(c.index_n_heads) * c.index_head_dim, c.q_lora_rank, A.indexer.wq_b));
        DSV4_RETURN_IF_ERROR(linear(a + ".indexer.weights_proj", c.index_n_heads, D, A.indexer.weights_proj));
        DSV4_RETURN_IF_ERROR(
            compressor(a + ".indexer.compressor", c.index_head_dim, 2, spec.compress_ratio, A.indexer.compressor));
        break;
      case AttnType::kHca:
        A.has_compressor = true;
        DSV4_RETURN_IF_ERROR(compressor(a + ".compressor", c.head_dim, 1, spec.compress_ratio, A.compressor));
        break;
    }

    MoeWeights& M = L.moe;
    const std::string f = p + ".ffn";
    DSV4_RETURN_IF_ERROR(linear(f + ".gate", c.n_routed_experts, D, M.gate));
    switch (spec.moe) {
      case MoeType::kHash: {
        const TensorInfo* t = idx_.take(f + ".gate.tid2eid");
        const std::vector<int64_t> want = {c.vocab_size, c.n_experts_per_tok};
        if (!t) return not_found("missing tensor '{}.gate.tid2eid' (hash-routed layer, expected I64 {})", f,
                                 shape_str(want));
        if ((t->dtype != DType::kI64 && t->dtype != DType::kI32) || t->shape != want)
          return invalid_argument("tensor '{}.gate.tid2eid': expected I64/I32 {}, found {} {}", f, shape_str(want),
                                  dtype_name(t->dtype), shape_str(t->shape));
        M.tid2eid.resize(size_t(t->numel()));
        for (int64_t i = 0; i < t->numel(); ++i) {
          const int64_t e = t->get_i64(i);
          if (e < 0 || e >= c.n_routed_experts)
            return invalid_argument("tensor '{}.gate.tid2eid': entry {} (token {}) is expert {}, outside [0, {})", f,
                                    i, i / c.n_experts_per_tok, e, c.n_routed_experts);
          M.tid2eid[size_t(i)] = int32_t(e);
        }
        if (idx_.find(f + ".gate.bias"))
          return invalid_argument("tensor '{}.gate.bias' present in a hash-routed layer (config says hash)", f);
        break;
      }
      case MoeType::kScore:
        DSV4_RETURN_IF_ERROR(vec(f + ".gate.bias", {c.n_routed_experts}, M.bias));
        if (idx_.find(f + ".gate.tid2eid"))
          return invalid_argument("tensor '{}.gate.tid2eid' present in a score-routed layer (config says score)", f);
        break;
    }
    DSV4_RETURN_IF_ERROR(experts(f, M));
    M.has_shared = c.n_shared_experts > 0;
    if (M.has_shared) {
      const std::string s = f + ".shared_experts";
      DSV4_RETURN_IF_ERROR(linear(s + ".w1", c.moe_inter, D, M.shared.w1));
      DSV4_RETURN_IF_ERROR(linear(s + ".w3", c.moe_inter, D, M.shared.w3));
      DSV4_RETURN_IF_ERROR(linear(s + ".w2", D, c.moe_inter, M.shared.w2));
    }
    return Status::ok();
  }

 private:
  TensorIndex& idx_;
  const ModelConfig& cfg_;
  LinearLoadOptions opts_;
};

}  // namespace

Result<std::unique_ptr<ModelWeights>> ModelWeights::load(const std::string& model_dir, const ModelConfig& cfg) {
  auto w = std::make_unique<ModelWeights>();
  DSV4_ASSIGN_OR_RETURN(w->store, TensorStore::open(model_dir));
  DSV4_ASSIGN_OR_RETURN(TensorIndex index, TensorIndex::build(*w->store));
  Loader ld(index, cfg);
  const int D = cfg.hidden;

  w->embed = index.take("embed.weight");
  if (!w->embed) return not_found("missing tensor 'embed.weight' (expected [{}, {}])", cfg.vocab_size, D);
  if (!dtype_is_float(w->embed->dtype) || w->embed->shape != std::vector<int64_t>{cfg.vocab_size, D})
    return invalid_argument("tensor 'embed.weight': expected float [{}, {}], found {} {}", cfg.vocab_size, D,
                            dtype_name(w->embed->dtype), shape_str(w->embed->shape));
  DSV4_RETURN_IF_ERROR(ld.linear("head", cfg.vocab_size, D, w->head));
  DSV4_RETURN_IF_ERROR(ld.vec("norm.weight", {D}, w->norm));
  DSV4_RETURN_IF_ERROR(ld.hc("hc_head_fn", "hc_head_base", "hc_head_scale", cfg.hc_mult, 1, w->hc_head));
  w->layers.resize(size_t(cfg.n_layers));
  for (int i = 0; i < cfg.n_layers; ++i)
    DSV4_RETURN_IF_ERROR(ld.layer(fmt::format("layers.{}", i), cfg.layers[size_t(i)], w->layers[size_t(i)]));

  // MTP is optional: HF exports drop it, Intel's later revision has it.
  if (cfg.n_mtp_layers > 0 && index.find("mtp.0.e_proj.weight") == nullptr &&
      index.find("mtp.0.e_proj.qweight") == nullptr && index.find("mtp.0.e_proj.weight_packed") == nullptr) {
    w->has_mtp = false;
  } else if (cfg.n_mtp_layers > 0) {
    w->has_mtp = true;
    MtpWeights& m = w->mtp;
    DSV4_RETURN_IF_ERROR(ld.linear("mtp.0.e_proj", D, D, m.e_proj));
    DSV4_RETURN_IF_ERROR(ld.linear("mtp.0.h_proj", D, D, m.h_proj));
    DSV4_RETURN_IF_ERROR(ld.vec("mtp.0.enorm.weight", {D}, m.enorm));
    DSV4_RETURN_IF_ERROR(ld.vec("mtp.0.hnorm.weight", {D}, m.hnorm));
    DSV4_RETURN_IF_ERROR(ld.vec("mtp.0.norm.weight", {D}, m.norm));
    DSV4_RETURN_IF_ERROR(ld.hc("mtp.0.hc_head_fn", "mtp.0.hc_head_base", "mtp.0.hc_head_scale", cfg.hc_mult, 1, m.hc_head));
    DSV4_RETURN_IF_ERROR(ld.layer("mtp.0", cfg.mtp_layer, m.layer));
  }

  for (const std::string& name : index.unused()) {
    // The MTP block shares the main embedding and head; some exports still carry copies.
    const bool mtp_copy = name.rfind("mtp.", 0) == 0 &&
                          (name.find("emb") != std::string::npos || name.find("head.weight") != std::string::npos);
    if (mtp_copy) continue;
    const TensorInfo* t = index.find(name);
    return invalid_argument("unexpected tensor '{}' ({} {}): not part of a model with this config (stored as '{}')",
                            name, dtype_name(t->dtype), shape_str(t->shape), t->name);
  }
  return w;
}

void ModelWeights::embed_row(int32_t token, float* out) const {
  const int64_t D = embed->shape[1];
  DSV4_CHECK(token >= 0 && token < embed->shape[0], "token {} outside the vocabulary of {}", token, embed->shape[0]);
  for (int64_t i = 0; i < D; ++i) out[i] = embed->get_f32(int64_t(token) * D + i);
}

}  // namespace dsv4
