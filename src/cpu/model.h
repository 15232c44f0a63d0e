// model.h: CpuModel, the exact CPU reference of the whole DeepSeek-V4 forward pass: embedding,
// mHC streams, 43 (or L) blocks of attention + MoE, HC head, final norm, LM head; and the MTP
// block. It is the oracle for every GPU kernel and the backend CI runs. Numerics: numerics.h.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "cpu/attention.h"
#include "cpu/numerics.h"
#include "cpu/rope.h"
#include "cpu/state.h"
#include "model/config.h"
#include "model/weights.h"

namespace dsv4::cpu {

enum class LogitsRows { kAll, kLast, kNone };

// Discrete choices made by each layer, for tests and GPU comparisons.
struct LayerTrace {
  AttentionTrace attention;
  std::vector<int32_t> experts;  // [T, top_k] routed experts per token
};
struct ForwardTrace {
  std::vector<LayerTrace> layers;  // [n_layers], filled when requested
};

class CpuModel {
 public:
  CpuModel(const ModelConfig& cfg, const ModelWeights& w, Numerics numerics);

  std::unique_ptr<SequenceState> new_sequence() const;

  // Feeds `tokens` at the sequence's next positions. logits: fp32 [T, vocab] for kAll, [vocab]
  // for kLast. hidden (optional): fp32 [T, hc, D], the final streams before the HC head (the MTP
  // block's input). Errors: a token outside the vocabulary.
  Status forward(SequenceState& s, std::span<const int32_t> tokens, LogitsRows rows, float* logits,
                 float* hidden = nullptr, ForwardTrace* trace = nullptr) const;

  // MTP block: hidden fp32 [T, hc, D] from forward() and the ids of the tokens that follow each
  // position ([T]); logits fp32 [T, vocab] predict the token after those. Needs has_mtp().
  Status mtp_forward(SequenceState& s, const float* hidden, std::span<const int32_t> next_tokens, float* logits) const;
  bool has_mtp() const { return w_.has_mtp; }

  const ModelConfig& config() const { return cfg_; }
  Numerics numerics() const { return numerics_; }

 private:
  void block(const LayerWeights& lw, const Rope& rope, LayerState& st, int64_t p0, std::span<const int32_t> tokens,
             float* X, LayerTrace* trace) const;
  void head_logits(const HcParams& hc, const Vec& norm, const float* X, int64_t n_rows, float* logits) const;

  const ModelConfig& cfg_;
  const ModelWeights& w_;
  Numerics numerics_;
  Rope rope_main_, rope_compress_;
};

}  // namespace dsv4::cpu
