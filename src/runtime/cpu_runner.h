// cpu_runner.h: ModelRunner over the exact CPU reference (cpu::CpuModel). Sequences of a step run
// one after another (the reference forwards one sequence per call); each slot holds one
// SequenceState, so prompt chunks and decode tokens continue where the sequence left off. Logits
// stay on the host and go through the host Sampler. KV bytes live in the reference's fp32 state;
// the engine's block pools only account for them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cpu/model.h"
#include "model/config.h"
#include "model/weights.h"
#include "runtime/runner.h"
#include "runtime/sampler.h"

namespace dsv4::runtime {

class CpuRunner : public ModelRunner {
 public:
  // Loads the checkpoint in `model_dir`. numerics: "bf16" (GPU oracle) or "fp32" (HF); kv_dtype
  // "fp8" rounds the KV no-rope dims through fp8 as the fp8_ds_mla cache does, "bf16" does not.
  // threads: OpenMP threads for the forward (0: OpenMP's default).
  static Result<std::unique_ptr<CpuRunner>> load(const std::string& model_dir, const std::string& numerics,
                                                 const std::string& kv_dtype, int threads);

  const RunnerInfo& info() const override { return info_; }
  Status on_engine_thread_start() override;
  Status execute(const StepInput& in, StepOutput* out) override;
  void release(int64_t seq_id, int32_t slot) override;
  bool can_fork() const override { return true; }
  Status fork(const ForkSpec& f) override;  // copies the SequenceState

  const ModelConfig& model_config() const { return *cfg_; }

 private:
  CpuRunner() = default;

  std::unique_ptr<ModelConfig> cfg_;     // CpuModel keeps references to both
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<cpu::CpuModel> model_;
  int threads_ = 0;
  RunnerInfo info_;
  std::vector<std::unique_ptr<cpu::SequenceState>> slots_;  // [slot]
  std::vector<int64_t> slot_seq_;                           // [slot] owning seq_id, -1 free
  std::vector<float> logits_;                               // fp32 [vocab]
  Sampler sampler_;
};

}  // namespace dsv4::runtime
