// config.h: ModelConfig, the architecture of one DeepSeek-V4 checkpoint, parsed from any of the
// three config.json styles in circulation (HF new style, DeepSeek legacy HF style, and DeepSeek's
// inference/config.json). Everything after the loader reads dimensions from here; validate()
// rejects configurations the engine cannot run, with the field, the expected and the found value.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4 {

enum class AttnType { kSliding, kCsa, kHca };
enum class MoeType { kHash, kScore };

const char* attn_type_name(AttnType t);
const char* moe_type_name(MoeType t);

// RoPE frequencies for one family of layers. Sliding-only layers use the "main" rope (theta
// 10000, no YaRN); CSA/HCA layers use the "compress" rope (theta 160000 + YaRN), for their window
// keys as well as their compressed entries (MODEL_SPEC.md §6.3).
struct RopeConfig {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  int64_t original_max_position = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

struct LayerSpec {
  AttnType attn = AttnType::kSliding;
  int compress_ratio = 0;  // 0 for sliding, m (4) for CSA, m' (128) for HCA
  MoeType moe = MoeType::kScore;
};

// How the checkpoint was quantized, from quantization_config; per-tensor formats are still decided
// from the safetensors headers (CHECKPOINTS.md §7), this only says what to expect.
struct QuantConfig {
  std::string method;      // "", "fp8", "auto-round", "gptq", "compressed-tensors", ...
  std::string packing;     // e.g. "auto_round:auto_gptq"
  int bits = 0;
  int group_size = 0;
  bool sym = true;
  bool gptq_v2 = false;    // zeros stored as-is (v2) instead of minus one (v1)
};

struct ModelConfig {
  std::string config_style;  // "hf", "deepseek-hf" (legacy field names) or "deepseek-inference"
  std::string model_type;

  int vocab_size = 0;
  int hidden = 0;          // D
  int n_layers = 0;
  int n_heads = 0;         // H
  int n_kv_heads = 1;
  int head_dim = 0;        // d
  int rope_dim = 0;        // r, the trailing rope part of every head
  int q_lora_rank = 0;
  int o_groups = 0;
  int o_lora_rank = 0;

  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int n_experts_per_tok = 0;
  int moe_inter = 0;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;
  bool norm_topk_prob = true;
  std::string scoring_func;  // "sqrtsoftplus"

  int sliding_window = 0;
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;

  int hc_mult = 0;
  int hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;
  double norm_eps = 1e-6;

  RopeConfig rope_main;
  RopeConfig rope_compress;

  std::vector<LayerSpec> layers;  // [n_layers]
  int n_mtp_layers = 0;
  LayerSpec mtp_layer;            // the MTP block's layer (sliding, score routing)

  int bos_token_id = 0;
  int eos_token_id = 1;
  int64_t max_position_embeddings = 0;
  QuantConfig quant;

  // Parses a config.json object; `origin` names the file for error messages.
  static Result<ModelConfig> from_json(const nlohmann::json& j, const std::string& origin);
  static Result<ModelConfig> load(const std::string& model_dir);
  // Rejects configurations the engine cannot run.
  Status validate() const;
  std::string summary() const;
  // Serializes in the DeepSeek legacy HF style (what Intel's AutoRound export ships).
  nlohmann::json to_legacy_json() const;

  int hc_dim() const { return hc_mult * hidden; }                 // 16384 for Flash
  int hc_mix() const { return (2 + hc_mult) * hc_mult; }          // 24 for Flash
  int nope_dim() const { return head_dim - rope_dim; }            // 448 for Flash
  int q_dim() const { return n_heads * head_dim; }                // 32768 for Flash
  int group_in_dim() const { return q_dim() / o_groups; }         // 4096 for Flash
  const RopeConfig& rope_for(const LayerSpec& l) const {
    return l.attn == AttnType::kSliding ? rope_main : rope_compress;
  }
};

}  // namespace dsv4
