// weights.h: every tensor of a DeepSeek-V4 model, found by canonical name, checked against the
// config, and grouped the way the forward pass reads them. Small parameters (norms, mHC, sinks,
// biases, ape) are copied to fp32 vectors; large ones stay in the mapped files (LinearWeight).
// Loading stops at the first inconsistency with a message naming the tensor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/linear_weight.h"
#include "model/safetensors.h"

namespace dsv4 {

using Vec = std::vector<float>;

struct HcParams {
  Vec fn;     // f32 [mix, hc*D]
  Vec base;   // f32 [mix]
  Vec scale;  // f32 [3] (blocks) or [1] (head)
};

struct CompressorWeights {
  LinearWeight wkv;    // [c*Dc, D], c = 2 for CSA (overlap), 1 for HCA
  LinearWeight wgate;  // [c*Dc, D]
  Vec ape;             // f32 [m, c*Dc], added to the gate logits by slot (p mod m)
  Vec norm;            // f32 [Dc]
};

struct IndexerWeights {
  LinearWeight wq_b;          // [nI*dI, q_lora]
  LinearWeight weights_proj;  // [nI, D]
  CompressorWeights compressor;
};

struct AttentionWeights {
  LinearWeight wq_a;   // [q_lora, D]
  Vec q_norm;          // [q_lora]
  LinearWeight wq_b;   // [H*d, q_lora]
  LinearWeight wkv;    // [d, D]
  Vec kv_norm;         // [d]
  LinearWeight wo_a;   // [o_groups*o_lora, H*d/o_groups]
  LinearWeight wo_b;   // [D, o_groups*o_lora]
  Vec sink;            // [H]
  bool has_compressor = false;
  CompressorWeights compressor;
  bool has_indexer = false;
  IndexerWeights indexer;
};

struct ExpertWeights {
  LinearWeight w1;  // gate [I, D]
  LinearWeight w3;  // up   [I, D]
  LinearWeight w2;  // down [D, I]
};

struct MoeWeights {
  LinearWeight gate;              // router [E, D]
  Vec bias;                       // f32 [E], score layers only
  std::vector<int32_t> tid2eid;   // [vocab, top_k], hash layers only
  std::vector<ExpertWeights> experts;  // [E]
  bool has_shared = false;
  ExpertWeights shared;
};

struct LayerWeights {
  LayerSpec spec;
  Vec attn_norm, ffn_norm;  // [D]
  HcParams hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights moe;
};

struct MtpWeights {
  LinearWeight e_proj, h_proj;  // [D, D]
  Vec enorm, hnorm, norm;       // [D]
  HcParams hc_head;
  LayerWeights layer;
};

struct ModelWeights {
  std::unique_ptr<TensorStore> store;  // owns the mappings everything below points into
  const TensorInfo* embed = nullptr;   // [vocab, D], any float dtype
  LinearWeight head;                   // [vocab, D]
  Vec norm;                            // [D]
  HcParams hc_head;
  std::vector<LayerWeights> layers;
  bool has_mtp = false;
  MtpWeights mtp;

  // Opens `model_dir`, indexes its tensors and loads everything `cfg` needs; tensors the config
  // does not account for are an error.
  static Result<std::unique_ptr<ModelWeights>> load(const std::string& model_dir, const ModelConfig& cfg);
  // Shapes without data, for benchmarks whose weights are generated in GPU memory (`dsv4 bench
  // --synthetic`): every LinearWeight has its format (GPTQ INT4 where Intel's W4A16 checkpoint has
  // it, dense BF16 elsewhere), n, k and group size but no tensors; small parameters (norms, mHC,
  // sinks, ape, router bias, tid2eid) are real random values drawn as make-model draws them.
  // `embed` is null. The CPU reference cannot run such weights.
  static std::unique_ptr<ModelWeights> synthetic(const ModelConfig& cfg, uint64_t seed);
  bool is_synthetic = false;
  // Fills `out` with the fp32 embedding row of `token`.
  void embed_row(int32_t token, float* out) const;
};

}  // namespace dsv4
