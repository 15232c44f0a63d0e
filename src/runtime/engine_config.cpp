// engine_config.cpp: EngineConfig's own checks and its manifest fields (include/dsv4/engine.h).
// Here, below the engine, because the runners read the same settings when they load.
#include <fmt/format.h>

#include "dsv4/engine.h"

namespace dsv4 {

Status EngineConfig::check() const {
  if (max_num_seqs < 1) return invalid_argument("--max-num-seqs must be >= 1, found {}", max_num_seqs);
  if (max_num_batched_tokens < max_num_seqs) {
    return invalid_argument("--max-num-batched-tokens ({}) must be >= --max-num-seqs ({}): every running sequence "
                            "needs room for its decode token in each step",
                            max_num_batched_tokens, max_num_seqs);
  }
  if (max_model_len < 0) return invalid_argument("--max-model-len must be >= 0, found {}", max_model_len);
  if (num_kv_blocks < 0) return invalid_argument("--num-gpu-blocks must be >= 0, found {}", num_kv_blocks);
  if (max_waiting < 0) return invalid_argument("--max-waiting must be >= 0, found {}", max_waiting);
  return Status::ok();
}

std::vector<std::pair<std::string, std::string>> EngineConfig::fields() const {
  return {
      {"device", device},
      {"model", model_dir},
      {"kv_dtype", kv_dtype},
      {"cpu_numerics", cpu_numerics},
      {"wo_a", wo_a},
      {"cpu_threads", fmt::format("{}", cpu_threads)},
      {"diagnostic_script", diagnostic_script},
      {"max_num_seqs", fmt::format("{}", max_num_seqs)},
      {"max_num_batched_tokens", fmt::format("{}", max_num_batched_tokens)},
      {"max_model_len", fmt::format("{}", max_model_len)},
      {"num_gpu_blocks", fmt::format("{}", num_kv_blocks)},
      {"max_waiting", fmt::format("{}", max_waiting)},
      {"sampling_seed", fmt::format("{}", sampling_seed)},
  };
}

}  // namespace dsv4
