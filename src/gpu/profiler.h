// profiler.h: StepProfiler, the per-category time split of an eager step (`dsv4 bench`). The
// forward pass marks the start of each group of launches with its category; the time between a
// mark and the next one (CUDA events on the model's stream) goes to the earlier mark's category.
// Events are created once at load; a profiled step is never captured into a graph.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dsv4::gpu {

enum class StepCategory { kMhcNorm, kW4A16Linear, kDenseLinear, kCompressor, kIndexer, kAttention, kMoe, kHead, kOther, kCount };
const char* step_category_name(StepCategory c);

class StepProfiler {
 public:
  static constexpr int kMaxMarks = 8192;
  StepProfiler() = default;
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  Status init();
  void begin(cudaStream_t s);                 // a new step: forget earlier marks
  void mark(StepCategory c);                  // from here on, launches belong to c
  // Milliseconds per category of the marked step (synchronizes on its last event).
  std::vector<std::pair<std::string, double>> finish();

 private:
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;           // [kMaxMarks + 1]
  std::vector<StepCategory> cats_;
  int n_ = 0;
};

}  // namespace dsv4::gpu
