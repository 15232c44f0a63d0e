// tensor_names.h: one canonical name per tensor. Checkpoints use either DeepSeek's names
// (`layers.3.attn.wq_a.qweight`, what the original and the Intel W4A16 releases ship) or Hugging
// Face transformers' names (`model.layers.3.self_attn.q_a_proj.weight`); the loader maps every
// stored name to the DeepSeek spelling (CHECKPOINTS.md §4.2) and works only with that.
#pragma once

#include <string>

#include "base/status.h"

namespace dsv4 {

// Returns the DeepSeek-style name for a stored tensor name (identity for DeepSeek names).
// Per-expert HF/vLLM spellings (`gate_proj`/`up_proj`/`down_proj`) become `w1`/`w3`/`w2`; the
// fused HF expert tensors become `layers.N.ffn.experts.gate_up_proj` / `.down_proj`; FP8 scale
// suffixes `weight_scale_inv` become `scale`.
std::string canonical_tensor_name(const std::string& stored);

}  // namespace dsv4

#include <map>
#include <set>
#include <vector>

#include "model/safetensors.h"

namespace dsv4 {

// The tensors of a store under their canonical names, with a record of which ones the loader
// consumed, so that leftovers (a misspelled name, a layer the config does not have) are errors.
class TensorIndex {
 public:
  // Fails if two stored names map to the same canonical name.
  static Result<TensorIndex> build(const TensorStore& store);

  const TensorInfo* find(const std::string& canonical) const;
  // find() and mark as used.
  const TensorInfo* take(const std::string& canonical);
  std::vector<std::string> unused() const;
  const std::map<std::string, const TensorInfo*>& all() const { return by_name_; }

 private:
  std::map<std::string, const TensorInfo*> by_name_;
  std::set<std::string> used_;
};

}  // namespace dsv4
