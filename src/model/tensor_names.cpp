// tensor_names.cpp: the HF -> DeepSeek rename table. Replacements are applied to the part after
// the layer prefix, longest (most specific) match first, so `compressor.indexer.kv_proj` is never
// mistaken for the attention's own `kv_proj`.
#include "model/tensor_names.h"

#include <cctype>
#include <utility>
#include <vector>

namespace dsv4 {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// Rules for the part after "layers.N." (HF spelling -> DeepSeek spelling), most specific first.
const std::vector<std::pair<std::string, std::string>>& layer_rules() {
  static const std::vector<std::pair<std::string, std::string>> rules = {
      {"self_attn.compressor.indexer.scorer.weights_proj.", "attn.indexer.weights_proj."},
      {"self_attn.compressor.indexer.q_b_proj.", "attn.indexer.wq_b."},
      {"self_attn.compressor.indexer.kv_proj.", "attn.indexer.compressor.wkv."},
      {"self_attn.compressor.indexer.gate_proj.", "attn.indexer.compressor.wgate."},
      {"self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape"},
      {"self_attn.compressor.indexer.kv_norm.", "attn.indexer.compressor.norm."},
      {"self_attn.compressor.kv_proj.", "attn.compressor.wkv."},
      {"self_attn.compressor.gate_proj.", "attn.compressor.wgate."},
      {"self_attn.compressor.position_bias", "attn.compressor.ape"},
      {"self_attn.compressor.kv_norm.", "attn.compressor.norm."},
      {"self_attn.q_a_proj.", "attn.wq_a."},
      {"self_attn.q_b_proj.", "attn.wq_b."},
      {"self_attn.kv_proj.", "attn.wkv."},
      {"self_attn.o_a_proj.", "attn.wo_a."},
      {"self_attn.o_b_proj.", "attn.wo_b."},
      {"self_attn.q_a_norm.", "attn.q_norm."},
      {"self_attn.kv_norm.", "attn.kv_norm."},
      {"self_attn.sinks", "attn.attn_sink"},
      {"input_layernorm.", "attn_norm."},
      {"post_attention_layernorm.", "ffn_norm."},
      {"attn_hc.fn", "hc_attn_fn"},
      {"attn_hc.base", "hc_attn_base"},
      {"attn_hc.scale", "hc_attn_scale"},
      {"ffn_hc.fn", "hc_ffn_fn"},
      {"ffn_hc.base", "hc_ffn_base"},
      {"ffn_hc.scale", "hc_ffn_scale"},
      {"mlp.gate.e_score_correction_bias", "ffn.gate.bias"},
      {"mlp.gate.", "ffn.gate."},
      {"mlp.shared_experts.gate_proj.", "ffn.shared_experts.w1."},
      {"mlp.shared_experts.up_proj.", "ffn.shared_experts.w3."},
      {"mlp.shared_experts.down_proj.", "ffn.shared_experts.w2."},
      {"mlp.experts.gate_up_proj", "ffn.experts.gate_up_proj"},
      {"mlp.experts.down_proj", "ffn.experts.down_proj"},
      {"ffn.shared_experts.gate_proj.", "ffn.shared_experts.w1."},
      {"ffn.shared_experts.up_proj.", "ffn.shared_experts.w3."},
      {"ffn.shared_experts.down_proj.", "ffn.shared_experts.w2."},
      {"mlp.experts.", "ffn.experts."},
  };
  return rules;
}

// `ffn.experts.E.gate_proj.` -> `ffn.experts.E.w1.` (and up/down), for either family.
std::string rename_expert_projection(const std::string& rest) {
  const std::string pre = "ffn.experts.";
  if (!starts_with(rest, pre)) return rest;
  size_t i = pre.size();
  while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i;
  if (i == pre.size() || i >= rest.size() || rest[i] != '.') return rest;
  const std::string tail = rest.substr(i + 1);
  static const std::pair<const char*, const char*> proj[] = {
      {"gate_proj.", "w1."}, {"up_proj.", "w3."}, {"down_proj.", "w2."}};
  for (const auto& [from, to] : proj)
    if (starts_with(tail, from)) return rest.substr(0, i + 1) + to + tail.substr(std::string(from).size());
  return rest;
}

std::string rename_scale_suffix(std::string n) {
  const std::string inv = ".weight_scale_inv";
  if (n.size() > inv.size() && n.compare(n.size() - inv.size(), inv.size(), inv) == 0)
    return n.substr(0, n.size() - inv.size()) + ".scale";
  return n;
}

}  // namespace

std::string canonical_tensor_name(const std::string& stored) {
  std::string n = stored;
  if (n == "model.embed_tokens.weight") return "embed.weight";
  if (n == "lm_head.weight") return "head.weight";
  if (n == "model.norm.weight") return "norm.weight";
  if (n == "model.hc_head.hc_fn") return "hc_head_fn";
  if (n == "model.hc_head.hc_base") return "hc_head_base";
  if (n == "model.hc_head.hc_scale") return "hc_head_scale";
  if (starts_with(n, "model.")) n = n.substr(6);

  // Split "layers.N." or "mtp.N." prefixes from the rest.
  std::string prefix;
  for (const char* p : {"layers.", "mtp."}) {
    if (!starts_with(n, p)) continue;
    size_t i = std::string(p).size();
    while (i < n.size() && std::isdigit(static_cast<unsigned char>(n[i]))) ++i;
    if (i > std::string(p).size() && i < n.size() && n[i] == '.') {
      prefix = n.substr(0, i + 1);
      n = n.substr(i + 1);
    }
    break;
  }
  if (!prefix.empty()) {
    for (const auto& [from, to] : layer_rules()) {
      if (starts_with(n, from)) {
        n = to + n.substr(from.size());
        break;
      }
    }
    n = rename_expert_projection(n);
  }
  return rename_scale_suffix(prefix + n);
}

}  // namespace dsv4

namespace dsv4 {

Result<TensorIndex> TensorIndex::build(const TensorStore& store) {
  TensorIndex idx;
  for (const auto& [stored, info] : store.tensors()) {
    const std::string c = canonical_tensor_name(stored);
    auto [it, inserted] = idx.by_name_.emplace(c, &info);
    if (!inserted)
      return invalid_argument("tensors '{}' and '{}' both map to '{}'", it->second->name, stored, c);
  }
  return idx;
}

const TensorInfo* TensorIndex::find(const std::string& canonical) const {
  auto it = by_name_.find(canonical);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorInfo* TensorIndex::take(const std::string& canonical) {
  const TensorInfo* t = find(canonical);
  if (t) used_.insert(canonical);
  return t;
}

std::vector<std::string> TensorIndex::unused() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : by_name_)
    if (!used_.count(name)) out.push_back(name);
  return out;
}

}  // namespace dsv4
