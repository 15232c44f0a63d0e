// config.cpp: parsing and validation of config.json in its three styles. Field lookups go through
// small helpers that try each known name in order and report a type mismatch with the field name,
// so a malformed config fails with a message instead of a crash or a silently wrong default.
#include "model/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/json_file.h"

namespace dsv4 {

using nlohmann::json;

const char* attn_type_name(AttnType t) {
  switch (t) {
    case AttnType::kSliding: return "sliding";
    case AttnType::kCsa: return "csa";
    case AttnType::kHca: return "hca";
  }
  return "?";
}

const char* moe_type_name(MoeType t) {
  switch (t) {
    case MoeType::kHash: return "hash";
    case MoeType::kScore: return "score";
  }
  return "?";
}

namespace {

// A compressed layer pools this many tokens an entry at most (DeepSeek-V4: 4 and 128); the
// compressor's state and positional table are sized by it.
constexpr int kMaxCompressRatio = 1024;
// Nesting config.json may use (quantization_config.extra_config.<layer>.bits is 3 deep).
constexpr size_t kMaxConfigDepth = 32;
constexpr uintmax_t kMaxConfigBytes = uintmax_t(64) << 20;  // a config.json has a few KB

// Converts a JSON number to the integer type T. Whole-valued floats (4096.0) are accepted; a value
// outside T's range is an error, never a silently wrapped one (2^32 + 128 must not read as 128).
template <typename T>
Status integer_value(const json& v, const std::string& what, T& out) {
  constexpr int64_t lo = int64_t(std::numeric_limits<T>::min());
  constexpr int64_t hi = int64_t(std::numeric_limits<T>::max());
  auto out_of_range = [&] {
    return invalid_argument("{} = {} is out of range (expected an integer in [{}, {}])", what, v.dump(), lo, hi);
  };
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(hi)) return out_of_range();
    out = T(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) return out_of_range();
    out = T(i);
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d))
      return invalid_argument("{} must be an integer, found {}", what, v.dump());
    if (d < double(lo) || d >= -double(lo)) return out_of_range();  // -lo = hi + 1, exact in a double
    out = T(d);
  } else {
    return invalid_argument("{} must be an integer, found {}", what, v.type_name());
  }
  return Status::ok();
}

// Reads the first present key of `names` as a number; error if present with another type.
class Fields {
 public:
  Fields(const json& j, const std::string& origin) : j_(j), origin_(origin) {}

  const json* find(std::initializer_list<const char*> names) const {
    for (const char* n : names) {
      auto it = j_.find(n);
      if (it != j_.end() && !it->is_null()) return &*it;
    }
    return nullptr;
  }

  template <typename T>
  Status number(std::initializer_list<const char*> names, T& out, bool required) const {
    const json* v = find(names);
    if (!v) {
      if (required) return invalid_argument("{}: missing field '{}'", origin_, *names.begin());
      return Status::ok();
    }
    if (!v->is_number()) {
      return invalid_argument("{}: field '{}' must be a number, found {}", origin_, *names.begin(),
                              v->type_name());
    }
    if constexpr (std::is_integral_v<T>) {
      return integer_value(*v, fmt::format("{}: field '{}'", origin_, *names.begin()), out);
    } else {
      out = T(v->get<double>());
    }
    return Status::ok();
  }

  Status boolean(std::initializer_list<const char*> names, bool& out) const {
    const json* v = find(names);
    if (!v) return Status::ok();
    if (!v->is_boolean())
      return invalid_argument("{}: field '{}' must be a boolean, found {}", origin_, *names.begin(),
                              v->type_name());
    out = v->get<bool>();
    return Status::ok();
  }

  Status string(std::initializer_list<const char*> names, std::string& out) const {
    const json* v = find(names);
    if (!v) return Status::ok();
    if (!v->is_string())
      return invalid_argument("{}: field '{}' must be a string, found {}", origin_, *names.begin(),
                              v->type_name());
    out = v->get<std::string>();
    return Status::ok();
  }

  const std::string& origin() const { return origin_; }

 private:
  const json& j_;
  std::string origin_;
};

Status parse_rope_dict(const json& d, const std::string& where, RopeConfig& rope) {
  if (!d.is_object()) return invalid_argument("{}: must be an object, found {}", where, d.type_name());
  Fields f(d, where);
  std::string type = "default";
  DSV4_RETURN_IF_ERROR(f.string({"rope_type", "type"}, type));
  DSV4_RETURN_IF_ERROR(f.number({"rope_theta"}, rope.theta, false));
  if (type == "yarn") {
    rope.yarn = true;
    DSV4_RETURN_IF_ERROR(f.number({"factor"}, rope.factor, true));
    DSV4_RETURN_IF_ERROR(f.number({"original_max_position_embeddings"}, rope.original_max_position, true));
    DSV4_RETURN_IF_ERROR(f.number({"beta_fast"}, rope.beta_fast, false));
    DSV4_RETURN_IF_ERROR(f.number({"beta_slow"}, rope.beta_slow, false));
    if (const json* mscale = f.find({"mscale", "mscale_all_dim"}); mscale && mscale->is_number() &&
                                                                       mscale->get<double>() != 0.0 &&
                                                                       mscale->get<double>() != 1.0) {
      return unimplemented("{}: YaRN mscale {} is not part of DeepSeek-V4 (the reference applies none)",
                           where, mscale->dump());
    }
    if (const json* af = f.find({"attention_factor"}); af && af->is_number() && af->get<double>() != 1.0)
      return unimplemented("{}: attention_factor {} != 1 is not part of DeepSeek-V4", where, af->dump());
  } else if (type != "default") {
    return unimplemented("{}: rope type '{}' is not supported (expected 'default' or 'yarn')", where, type);
  }
  return Status::ok();
}

Result<LayerSpec> layer_from_ratio(int ratio, const std::string& where) {
  LayerSpec l;
  l.compress_ratio = ratio;
  if (ratio == 0) l.attn = AttnType::kSliding;
  else if (ratio == 4) l.attn = AttnType::kCsa;  // overlap + indexer exactly when the ratio is 4 ([OFF])
  else if (ratio > 0 && ratio <= kMaxCompressRatio) l.attn = AttnType::kHca;
  else return invalid_argument("{}: compress ratio must be in [0, {}], found {}", where, kMaxCompressRatio, ratio);
  return l;
}

}  // namespace

Result<ModelConfig> ModelConfig::from_json(const json& j, const std::string& origin) {
  if (!j.is_object()) return invalid_argument("{}: expected a JSON object, found {}", origin, j.type_name());
  Fields f(j, origin);
  ModelConfig c;
  const bool inference_style = j.contains("dim") && j.contains("n_layers");
  const bool hf_style = j.contains("layer_types") || j.contains("compress_rates") ||
                        j.contains("mlp_layer_types") || j.contains("partial_rotary_factor") ||
                        (j.contains("rope_parameters") && !j.contains("compress_ratios"));
  c.config_style = inference_style ? "deepseek-inference" : (hf_style ? "hf" : "deepseek-hf");
  DSV4_RETURN_IF_ERROR(f.string({"model_type"}, c.model_type));
  if (!c.model_type.empty() && c.model_type != "deepseek_v4")
    return unimplemented("{}: model_type '{}' is not supported (expected 'deepseek_v4')", origin, c.model_type);

  DSV4_RETURN_IF_ERROR(f.number({"vocab_size"}, c.vocab_size, true));
  DSV4_RETURN_IF_ERROR(f.number({"hidden_size", "dim"}, c.hidden, true));
  DSV4_RETURN_IF_ERROR(f.number({"num_hidden_layers", "n_layers"}, c.n_layers, true));
  // It sizes the layer list below, before validate() runs.
  if (c.n_layers <= 0) return invalid_argument("{}: num_hidden_layers must be positive, found {}", origin, c.n_layers);
  DSV4_RETURN_IF_ERROR(f.number({"num_attention_heads", "n_heads"}, c.n_heads, true));
  DSV4_RETURN_IF_ERROR(f.number({"num_key_value_heads"}, c.n_kv_heads, false));
  DSV4_RETURN_IF_ERROR(f.number({"head_dim"}, c.head_dim, true));
  DSV4_RETURN_IF_ERROR(f.number({"q_lora_rank"}, c.q_lora_rank, true));
  DSV4_RETURN_IF_ERROR(f.number({"o_groups"}, c.o_groups, true));
  DSV4_RETURN_IF_ERROR(f.number({"o_lora_rank"}, c.o_lora_rank, true));
  DSV4_RETURN_IF_ERROR(f.number({"n_routed_experts"}, c.n_routed_experts, true));
  DSV4_RETURN_IF_ERROR(f.number({"n_shared_experts"}, c.n_shared_experts, true));
  DSV4_RETURN_IF_ERROR(f.number({"num_experts_per_tok", "n_activated_experts"}, c.n_experts_per_tok, true));
  DSV4_RETURN_IF_ERROR(f.number({"moe_intermediate_size", "moe_inter_dim"}, c.moe_inter, true));
  DSV4_RETURN_IF_ERROR(f.number({"routed_scaling_factor", "route_scale"}, c.routed_scaling_factor, false));
  DSV4_RETURN_IF_ERROR(f.number({"swiglu_limit"}, c.swiglu_limit, false));
  DSV4_RETURN_IF_ERROR(f.boolean({"norm_topk_prob"}, c.norm_topk_prob));
  c.scoring_func = "sqrtsoftplus";
  DSV4_RETURN_IF_ERROR(f.string({"scoring_func", "score_func"}, c.scoring_func));
  DSV4_RETURN_IF_ERROR(f.number({"sliding_window", "window_size"}, c.sliding_window, true));
  DSV4_RETURN_IF_ERROR(f.number({"index_n_heads"}, c.index_n_heads, true));
  DSV4_RETURN_IF_ERROR(f.number({"index_head_dim"}, c.index_head_dim, true));
  DSV4_RETURN_IF_ERROR(f.number({"index_topk"}, c.index_topk, true));
  DSV4_RETURN_IF_ERROR(f.number({"hc_mult"}, c.hc_mult, true));
  c.hc_sinkhorn_iters = 20;
  DSV4_RETURN_IF_ERROR(f.number({"hc_sinkhorn_iters"}, c.hc_sinkhorn_iters, false));
  DSV4_RETURN_IF_ERROR(f.number({"hc_eps"}, c.hc_eps, false));
  DSV4_RETURN_IF_ERROR(f.number({"rms_norm_eps", "norm_eps"}, c.norm_eps, false));
  DSV4_RETURN_IF_ERROR(f.number({"bos_token_id"}, c.bos_token_id, false));
  if (const json* eos = f.find({"eos_token_id"}); eos && eos->is_array()) {
    if (eos->empty() || !(*eos)[0].is_number_integer())
      return invalid_argument("{}: eos_token_id must be an integer or a list of integers", origin);
    DSV4_RETURN_IF_ERROR(integer_value((*eos)[0], origin + ": eos_token_id[0]", c.eos_token_id));
  } else {
    DSV4_RETURN_IF_ERROR(f.number({"eos_token_id"}, c.eos_token_id, false));
  }
  DSV4_RETURN_IF_ERROR(f.number({"max_position_embeddings"}, c.max_position_embeddings, false));
  DSV4_RETURN_IF_ERROR(f.number({"num_nextn_predict_layers", "n_mtp_layers"}, c.n_mtp_layers, false));
  if (inference_style && !j.contains("n_mtp_layers")) c.n_mtp_layers = 1;  // ModelArgs default

  // ---- rope dim ----
  double partial = 0.0;
  DSV4_RETURN_IF_ERROR(f.number({"partial_rotary_factor"}, partial, false));
  DSV4_RETURN_IF_ERROR(f.number({"qk_rope_head_dim", "rope_head_dim"}, c.rope_dim, false));
  if (f.find({"partial_rotary_factor"}) != nullptr && !(partial > 0.0 && partial <= 1.0))
    return invalid_argument("{}: partial_rotary_factor must be in (0, 1], found {}", origin, partial);
  if (c.rope_dim == 0 && partial > 0.0) c.rope_dim = int(double(c.head_dim) * partial);
  if (c.rope_dim == 0) c.rope_dim = c.head_dim / 8;  // the HF default factor 64/512

  // ---- rope frequencies ----
  c.rope_main.theta = 10000.0;
  DSV4_RETURN_IF_ERROR(f.number({"rope_theta"}, c.rope_main.theta, false));
  c.rope_compress.theta = 160000.0;
  DSV4_RETURN_IF_ERROR(f.number({"compress_rope_theta"}, c.rope_compress.theta, false));
  if (const json* rp = f.find({"rope_parameters"})) {
    if (!rp->is_object()) return invalid_argument("{}: rope_parameters must be an object", origin);
    if (rp->contains("main") || rp->contains("compress")) {
      if (rp->contains("main"))
        DSV4_RETURN_IF_ERROR(parse_rope_dict((*rp)["main"], origin + ": rope_parameters.main", c.rope_main));
      if (rp->contains("compress"))
        DSV4_RETURN_IF_ERROR(
            parse_rope_dict((*rp)["compress"], origin + ": rope_parameters.compress", c.rope_compress));
    } else {
      // Flat form: the scaling applies to the compressed layers, at compress_rope_theta.
      const double theta = c.rope_compress.theta;
      DSV4_RETURN_IF_ERROR(parse_rope_dict(*rp, origin + ": rope_parameters", c.rope_compress));
      c.rope_compress.theta = theta;
    }
    if (c.rope_main.yarn) return unimplemented("{}: YaRN on the sliding-window rope is not part of DeepSeek-V4", origin);
  } else if (const json* rs = f.find({"rope_scaling"})) {
    const double theta = c.rope_compress.theta;
    DSV4_RETURN_IF_ERROR(parse_rope_dict(*rs, origin + ": rope_scaling", c.rope_compress));
    c.rope_compress.theta = theta;
  } else if (inference_style) {
    c.rope_compress.yarn = true;
    DSV4_RETURN_IF_ERROR(f.number({"rope_factor"}, c.rope_compress.factor, true));
    DSV4_RETURN_IF_ERROR(f.number({"original_seq_len"}, c.rope_compress.original_max_position, true));
    DSV4_RETURN_IF_ERROR(f.number({"beta_fast"}, c.rope_compress.beta_fast, false));
    DSV4_RETURN_IF_ERROR(f.number({"beta_slow"}, c.rope_compress.beta_slow, false));
    if (c.rope_compress.factor == 1.0) c.rope_compress.yarn = false;
  }

  // ---- per-layer attention types ----
  std::vector<int> ratios;
  if (const json* lt = f.find({"layer_types"})) {
    if (!lt->is_array()) return invalid_argument("{}: layer_types must be a list", origin);
    int csa_rate = 4, hca_rate = 128;
    if (const json* cr = f.find({"compress_rates"})) {
      if (!cr->is_object()) return invalid_argument("{}: compress_rates must be an object", origin);
      Fields fr(*cr, origin + ": compress_rates");
      DSV4_RETURN_IF_ERROR(fr.number({"compressed_sparse_attention"}, csa_rate, false));
      DSV4_RETURN_IF_ERROR(fr.number({"heavily_compressed_attention"}, hca_rate, false));
    }
    if (csa_rate != 4)
      return unimplemented("{}: CSA compress rate {} is not supported (the overlapping compressor is defined for 4)",
                           origin, csa_rate);
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& t = (*lt)[i];
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      LayerSpec l;
      if (s == "sliding_attention") {
        l.attn = AttnType::kSliding;
      } else if (s == "compressed_sparse_attention") {
        l.attn = AttnType::kCsa;
        l.compress_ratio = csa_rate;
      } else if (s == "heavily_compressed_attention") {
        l.attn = AttnType::kHca;
        l.compress_ratio = hca_rate;
      } else {
        return invalid_argument("{}: layer_types[{}] = {} is not one of sliding_attention, "
                                "compressed_sparse_attention, heavily_compressed_attention",
                                origin, i, short_json(t));
      }
      c.layers.push_back(l);
    }
  } else if (const json* cr = f.find({"compress_ratios"})) {
    if (!cr->is_array()) return invalid_argument("{}: compress_ratios must be a list", origin);
    for (size_t i = 0; i < cr->size(); ++i) {
      if (!(*cr)[i].is_number_integer())
        return invalid_argument("{}: compress_ratios[{}] must be an integer, found {}", origin, i, short_json((*cr)[i]));
      int ratio = 0;
      DSV4_RETURN_IF_ERROR(integer_value((*cr)[i], fmt::format("{}: compress_ratios[{}]", origin, i), ratio));
      ratios.push_back(ratio);
    }
    if (int(ratios.size()) < c.n_layers)
      return invalid_argument("{}: compress_ratios has {} entries, expected at least num_hidden_layers = {}",
                              origin, ratios.size(), c.n_layers);
    for (int i = 0; i < c.n_layers; ++i) {
      DSV4_ASSIGN_OR_RETURN(LayerSpec l, layer_from_ratio(ratios[i], fmt::format("{}: compress_ratios[{}]", origin, i)));
      c.layers.push_back(l);
    }
  } else {
    return invalid_argument("{}: missing per-layer attention types (expected 'layer_types' or 'compress_ratios')",
                            origin);
  }
  if (int(c.layers.size()) < c.n_layers)
    return invalid_argument("{}: {} layer types for num_hidden_layers = {}", origin, c.layers.size(), c.n_layers);
  c.layers.resize(size_t(c.n_layers));

  // ---- per-layer MoE types ----
  if (const json* mt = f.find({"mlp_layer_types"})) {
    if (!mt->is_array() || int(mt->size()) < c.n_layers)
      return invalid_argument("{}: mlp_layer_types must be a list of num_hidden_layers = {} entries", origin,
                              c.n_layers);
    for (int i = 0; i < c.n_layers; ++i) {
      const json& t = (*mt)[size_t(i)];
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s == "hash_moe") c.layers[size_t(i)].moe = MoeType::kHash;
      else if (s == "moe") c.layers[size_t(i)].moe = MoeType::kScore;
      else return invalid_argument("{}: mlp_layer_types[{}] = {} is not 'hash_moe' or 'moe'", origin, i, short_json(t));
    }
  } else {
    int n_hash = 3;
    DSV4_RETURN_IF_ERROR(f.number({"num_hash_layers", "n_hash_layers"}, n_hash, false));
    for (int i = 0; i < c.n_layers; ++i) c.layers[size_t(i)].moe = i < n_hash ? MoeType::kHash : MoeType::kScore;
  }

  // The MTP layer: its compress ratio is the entry after the main layers (0 for Flash).
  c.mtp_layer = LayerSpec{};
  if (int(ratios.size()) > c.n_layers) {
    DSV4_ASSIGN_OR_RETURN(c.mtp_layer, layer_from_ratio(ratios[size_t(c.n_layers)], origin + ": compress_ratios[mtp]"));
  }
  c.mtp_layer.moe = MoeType::kScore;

  // ---- quantization ----
  if (const json* q = f.find({"quantization_config"})) {
    if (!q->is_object()) return invalid_argument("{}: quantization_config must be an object", origin);
    Fields fq(*q, origin + ": quantization_config");
    DSV4_RETURN_IF_ERROR(fq.string({"quant_method"}, c.quant.method));
    DSV4_RETURN_IF_ERROR(fq.string({"packing_format"}, c.quant.packing));
    DSV4_RETURN_IF_ERROR(fq.number({"bits"}, c.quant.bits, false));
    DSV4_RETURN_IF_ERROR(fq.number({"group_size"}, c.quant.group_size, false));
    DSV4_RETURN_IF_ERROR(fq.boolean({"sym"}, c.quant.sym));
    std::string ckpt_format;
    DSV4_RETURN_IF_ERROR(fq.string({"checkpoint_format"}, ckpt_format));
    c.quant.gptq_v2 = ckpt_format == "gptq_v2";
  } else if (const json* dt = f.find({"dtype"}); inference_style && dt && dt->is_string()) {
    c.quant.method = dt->get<std::string>();
  }
  return c;
}

Result<ModelConfig> ModelConfig::load(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  DSV4_ASSIGN_OR_RETURN(const std::string text, read_json_text(path, kMaxConfigBytes, kMaxConfigDepth));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("'{}' is not valid JSON", path);
  DSV4_ASSIGN_OR_RETURN(ModelConfig c, from_json(j, path));
  DSV4_RETURN_IF_ERROR(c.validate().with_context(path));
  return c;
}

namespace {
constexpr int kMaxSlidingWindow = 1 << 16;
constexpr int kMaxSinkhornIters = 1000;
}  // namespace

Status ModelConfig::validate() const {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v <= 0) return invalid_argument("{} must be positive, found {}", name, v);
    return Status::ok();
  };
  DSV4_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  DSV4_RETURN_IF_ERROR(positive("hidden_size", hidden));
  DSV4_RETURN_IF_ERROR(positive("num_hidden_layers", n_layers));
  DSV4_RETURN_IF_ERROR(positive("num_attention_heads", n_heads));
  DSV4_RETURN_IF_ERROR(positive("head_dim", head_dim));
  DSV4_RETURN_IF_ERROR(positive("q_lora_rank", q_lora_rank));
  DSV4_RETURN_IF_ERROR(positive("o_groups", o_groups));
  DSV4_RETURN_IF_ERROR(positive("o_lora_rank", o_lora_rank));
  DSV4_RETURN_IF_ERROR(positive("n_routed_experts", n_routed_experts));
  DSV4_RETURN_IF_ERROR(positive("num_experts_per_tok", n_experts_per_tok));
  DSV4_RETURN_IF_ERROR(positive("moe_intermediate_size", moe_inter));
  DSV4_RETURN_IF_ERROR(positive("sliding_window", sliding_window));
  DSV4_RETURN_IF_ERROR(positive("hc_mult", hc_mult));
  DSV4_RETURN_IF_ERROR(positive("hc_sinkhorn_iters", hc_sinkhorn_iters));
  // The derived sizes (hc_dim(), q_dim(), ...) are ints; products that overflow would reach the
  // loader's shape checks as garbage (and are undefined behaviour).
  for (const auto& [name, v] : {std::pair{"hc_mult x hidden_size", int64_t(hc_mult) * hidden},
                                {"(2 + hc_mult) x hc_mult", int64_t(2 + int64_t(hc_mult)) * hc_mult},
                                {"num_attention_heads x head_dim", int64_t(n_heads) * head_dim},
                                {"o_groups x o_lora_rank", int64_t(o_groups) * o_lora_rank},
                                {"2 x moe_intermediate_size", 2 * int64_t(moe_inter)}})
    if (v > std::numeric_limits<int>::max())
      return invalid_argument("{} = {} is too large (at most {})", name, v, std::numeric_limits<int>::max());
  if (max_position_embeddings < 0)
    return invalid_argument("max_position_embeddings must be >= 0, found {}", max_position_embeddings);
  if (bos_token_id < 0 || bos_token_id >= vocab_size)
    return invalid_argument("bos_token_id must be in [0, vocab_size = {}), found {}", vocab_size, bos_token_id);
  if (eos_token_id < 0 || eos_token_id >= vocab_size)
    return invalid_argument("eos_token_id must be in [0, vocab_size = {}), found {}", vocab_size, eos_token_id);
  // The CPU reference keeps a [sliding_window, head_dim] fp32 window per layer and runs the Sinkhorn
  // loop hc_sinkhorn_iters times per sublayer and token; DeepSeek-V4 uses 128 and 20. Values far
  // beyond those are corrupt configs: refusing them here beats a std::bad_alloc or an endless run.
  if (sliding_window > kMaxSlidingWindow)
    return invalid_argument("sliding_window must be at most {}, found {}", kMaxSlidingWindow, sliding_window);
  if (hc_sinkhorn_iters > kMaxSinkhornIters)
    return invalid_argument("hc_sinkhorn_iters must be at most {}, found {}", kMaxSinkhornIters, hc_sinkhorn_iters);
  // Non-positive rope bases and negative epsilons give NaN activations, not an error.
  for (const auto& [name, theta] :
       {std::pair{"rope_theta", rope_main.theta}, {"compress_rope_theta", rope_compress.theta}})
    if (!(theta > 0.0) || !std::isfinite(theta))
      return invalid_argument("{} must be positive and finite, found {}", name, theta);
  if (rope_compress.yarn && !(rope_compress.factor > 0.0 && std::isfinite(rope_compress.factor)))
    return invalid_argument("YaRN factor must be positive and finite, found {}", rope_compress.factor);
  for (const RopeConfig* rp : {&rope_main, &rope_compress})
    if (rp->yarn && !(rp->beta_fast > 0.0 && std::isfinite(rp->beta_fast) && rp->beta_slow > 0.0 &&
                      std::isfinite(rp->beta_slow)))
      return invalid_argument("YaRN beta_fast and beta_slow must be positive and finite, found {} and {}",
                              rp->beta_fast, rp->beta_slow);
  // Both scale every routed output; a negative limit would clamp every activation to an empty range.
  if (!(routed_scaling_factor > 0.0) || !std::isfinite(routed_scaling_factor))
    return invalid_argument("routed_scaling_factor must be positive and finite, found {}", routed_scaling_factor);
  if (!(swiglu_limit >= 0.0) || !std::isfinite(swiglu_limit))
    return invalid_argument("swiglu_limit must be >= 0 and finite (0: no clamp), found {}", swiglu_limit);
  for (const auto& [name, eps] : {std::pair{"rms_norm_eps", norm_eps}, {"hc_eps", hc_eps}})
    if (!(eps >= 0.0) || !std::isfinite(eps)) return invalid_argument("{} must be >= 0, found {}", name, eps);
  if (n_kv_heads != 1) return unimplemented("num_key_value_heads must be 1 (shared-KV MQA), found {}", n_kv_heads);
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return invalid_argument("rope dim must be even and in (0, head_dim = {}], found {}", head_dim, rope_dim);
  if (n_heads % o_groups != 0)
    return invalid_argument("num_attention_heads ({}) must be a multiple of o_groups ({})", n_heads, o_groups);
  if (n_experts_per_tok > n_routed_experts)
    return invalid_argument("num_experts_per_tok ({}) exceeds n_routed_experts ({})", n_experts_per_tok,
                            n_routed_experts);
  if (n_shared_experts > 1) return unimplemented("n_shared_experts must be 0 or 1, found {}", n_shared_experts);
  if (scoring_func != "sqrtsoftplus")
    return unimplemented("scoring_func '{}' is not supported (DeepSeek-V4 uses 'sqrtsoftplus')", scoring_func);
  if (!norm_topk_prob) return unimplemented("norm_topk_prob = false is not supported");
  bool any_csa = false;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].attn == AttnType::kCsa) any_csa = true;
    if (layers[i].attn == AttnType::kHca && layers[i].compress_ratio <= 0)
      return invalid_argument("layer {}: HCA compress ratio must be positive", i);
  }
  if (any_csa) {
    DSV4_RETURN_IF_ERROR(positive("index_n_heads", index_n_heads));
    DSV4_RETURN_IF_ERROR(positive("index_topk", index_topk));
    if (index_head_dim <= rope_dim || (index_head_dim & (index_head_dim - 1)) != 0)
      return invalid_argument("index_head_dim must be a power of two larger than the rope dim {}, found {}", rope_dim,
                              index_head_dim);
  }
  if (rope_compress.yarn && rope_compress.original_max_position <= 0)
    return invalid_argument("YaRN needs original_max_position_embeddings > 0");
  if (n_mtp_layers < 0 || n_mtp_layers > 1) return unimplemented("{} MTP layers (supported: 0 or 1)", n_mtp_layers);
  return Status::ok();
}

std::string ModelConfig::summary() const {
  int n_swa = 0, n_csa = 0, n_hca = 0, n_hash = 0;
  std::vector<int> hca_rates;
  for (const LayerSpec& l : layers) {
    n_swa += l.attn == AttnType::kSliding;
    n_csa += l.attn == AttnType::kCsa;
    if (l.attn == AttnType::kHca) {
      ++n_hca;
      if (hca_rates.empty() || hca_rates.back() != l.compress_ratio) hca_rates.push_back(l.compress_ratio);
    }
    n_hash += l.moe == MoeType::kHash;
  }
  std::string s;
  s += fmt::format("config style      {}\n", config_style);
  s += fmt::format("layers            {} ({} sliding, {} CSA, {} HCA rate {}), {} hash-routed, {} MTP\n", n_layers,
                   n_swa, n_csa, n_hca, fmt::join(hca_rates, "/"), n_hash, n_mtp_layers);
  s += fmt::format("hidden            {} (mHC {} streams, Sinkhorn {} iters)\n", hidden, hc_mult, hc_sinkhorn_iters);
  s += fmt::format("attention         {} heads x {} (rope {}), q_lora {}, o_groups {} x {}, window {}\n", n_heads,
                   head_dim, rope_dim, q_lora_rank, o_groups, o_lora_rank, sliding_window);
  s += fmt::format("indexer           {} heads x {}, top-k {}\n", index_n_heads, index_head_dim, index_topk);
  s += fmt::format("moe               {} experts, top-{}, {} shared, inter {}, scale {}, swiglu limit {}\n",
                   n_routed_experts, n_experts_per_tok, n_shared_experts, moe_inter, routed_scaling_factor,
                   swiglu_limit);
  s += fmt::format("rope              main theta {}; compress theta {}{}\n", rope_main.theta, rope_compress.theta,
                   rope_compress.yarn ? fmt::format(" + YaRN x{} (orig {}, beta {}/{})", rope_compress.factor,
                                                    rope_compress.original_max_position, rope_compress.beta_fast,
                                                    rope_compress.beta_slow)
                                      : std::string());
  s += fmt::format("vocab             {} (bos {}, eos {})\n", vocab_size, bos_token_id, eos_token_id);
  s += fmt::format("quantization      {}\n",
                   quant.method.empty() ? std::string("none")
                                        : fmt::format("{} {} bits={} group={} sym={}", quant.method, quant.packing,
                                                      quant.bits, quant.group_size, quant.sym));
  return s;
}

json ModelConfig::to_legacy_json() const {
  json j;
  j["architectures"] = {"DeepseekV4ForCausalLM"};
  j["model_type"] = "deepseek_v4";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden;
  j["num_hidden_layers"] = n_layers;
  j["num_attention_heads"] = n_heads;
  j["num_key_value_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  j["qk_rope_head_dim"] = rope_dim;
  j["q_lora_rank"] = q_lora_rank;
  j["o_groups"] = o_groups;
  j["o_lora_rank"] = o_lora_rank;
  j["moe_intermediate_size"] = moe_inter;
  j["n_routed_experts"] = n_routed_experts;
  j["n_shared_experts"] = n_shared_experts;
  j["num_experts_per_tok"] = n_experts_per_tok;
  j["scoring_func"] = scoring_func;
  j["topk_method"] = "noaux_tc";
  j["norm_topk_prob"] = norm_topk_prob;
  j["routed_scaling_factor"] = routed_scaling_factor;
  int n_hash = 0;
  while (n_hash < n_layers && layers[size_t(n_hash)].moe == MoeType::kHash) ++n_hash;
  j["num_hash_layers"] = n_hash;
  j["swiglu_limit"] = swiglu_limit;
  j["hidden_act"] = "silu";
  j["sliding_window"] = sliding_window;
  j["index_n_heads"] = index_n_heads;
  j["index_head_dim"] = index_head_dim;
  j["index_topk"] = index_topk;
  j["hc_mult"] = hc_mult;
  j["hc_sinkhorn_iters"] = hc_sinkhorn_iters;
  j["hc_eps"] = hc_eps;
  j["rms_norm_eps"] = norm_eps;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rope_theta"] = rope_main.theta;
  j["compress_rope_theta"] = rope_compress.theta;
  if (rope_compress.yarn) {
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", rope_compress.factor},
                         {"original_max_position_embeddings", rope_compress.original_max_position},
                         {"beta_fast", rope_compress.beta_fast},
                         {"beta_slow", rope_compress.beta_slow}};
  }
  json ratios = json::array();
  for (const LayerSpec& l : layers) ratios.push_back(l.compress_ratio);
  for (int i = 0; i < n_mtp_layers; ++i) ratios.push_back(mtp_layer.compress_ratio);
  j["compress_ratios"] = ratios;
  j["num_nextn_predict_layers"] = n_mtp_layers;
  j["bos_token_id"] = bos_token_id;
  j["eos_token_id"] = eos_token_id;
  j["tie_word_embeddings"] = false;
  j["attention_bias"] = false;
  j["torch_dtype"] = "bfloat16";
  return j;
}

}  // namespace dsv4
