// cuda_runner.h: ModelRunner over gpu::GpuModel (one GPU). A step's sequences go to the GPU as one
// batch (decode tokens and prompt chunks together; pure-decode steps replay captured CUDA graphs);
// the last-token logits of the sequences that sample never leave the device: the GPU sampler draws
// from them with each request's (seed, index), and only token ids and logprobs come back.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "model/config.h"
#include "model/weights.h"
#include "runtime/runner.h"

namespace dsv4::gpu {
class GpuModel;
}

namespace dsv4::runtime {

class CudaRunner : public ModelRunner {
 public:
  // Loads cfg.model_dir onto the current CUDA device with room for cfg.max_num_seqs sequences,
  // steps of cfg.max_num_batched_tokens rows and cfg.num_kv_blocks KV blocks (0: as many as fit
  // after the weights, leaving a margin). Graphs are captured for decode batches 1, 2, 4, ...
  // up to max_num_seqs. kv_dtype must be fp8 (the GPU cache stores fp8_ds_mla records).
  static Result<std::unique_ptr<CudaRunner>> load(const EngineConfig& cfg);
  ~CudaRunner() override;

  const RunnerInfo& info() const override { return info_; }
  Status on_engine_thread_start() override;
  Status execute(const StepInput& in, StepOutput* out) override;
  void release(int64_t seq_id, int32_t slot) override;
  bool can_fork() const override { return true; }
  Status fork(const ForkSpec& f) override;  // device copies (gpu::GpuModel::fork_slot)

  const ModelConfig& model_config() const { return *cfg_; }

 private:
  CudaRunner();
  struct Device;  // sampler buffers (device + pinned) and the step lists, owned here
  // The step's logit adjustments (logit_bias, penalties) on a copy of the B sampled rows.
  Status adjust(int B, int V, const float** logits);

  std::unique_ptr<ModelConfig> cfg_;
  std::unique_ptr<ModelWeights> weights_;  // host mappings; the GPU copy lives in model_
  std::unique_ptr<gpu::GpuModel> model_;
  std::unique_ptr<Device> dev_;
  RunnerInfo info_;
  int device_ = 0;
};

}  // namespace dsv4::runtime
