// profiler.cpp: see profiler.h.
#include "gpu/profiler.h"

#include "cuda/common/cuda_check.h"

namespace dsv4::gpu {

const char* step_category_name(StepCategory c) {
  switch (c) {
    case StepCategory::kMhcNorm: return "mhc_norms";
    case StepCategory::kW4A16Linear: return "w4a16_linear";
    case StepCategory::kDenseLinear: return "dense_linear";
    case StepCategory::kCompressor: return "compressors";
    case StepCategory::kIndexer: return "indexer";
    case StepCategory::kAttention: return "attention";
    case StepCategory::kMoe: return "moe";
    case StepCategory::kHead: return "lm_head";
    case StepCategory::kOther: return "other";
    case StepCategory::kCount: break;
  }
  return "?";
}

StepProfiler::~StepProfiler() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

Status StepProfiler::init() {
  events_.resize(kMaxMarks + 1, nullptr);
  for (cudaEvent_t& e : events_) DSV4_RETURN_IF_ERROR(cuda::cuda_status(cudaEventCreate(&e), "cudaEventCreate"));
  cats_.resize(kMaxMarks);
  return Status::ok();
}

void StepProfiler::begin(cudaStream_t s) {
  stream_ = s;
  n_ = 0;
}

void StepProfiler::mark(StepCategory c) {
  if (events_.empty() || n_ >= kMaxMarks) return;
  // Consecutive launches of one category need no new mark.
  if (n_ > 0 && cats_[size_t(n_ - 1)] == c) return;
  cudaEventRecord(events_[size_t(n_)], stream_);
  cats_[size_t(n_)] = c;
  ++n_;
}

std::vector<std::pair<std::string, double>> StepProfiler::finish() {
  std::vector<std::pair<std::string, double>> out;
  if (n_ == 0) return out;
  cudaEventRecord(events_[size_t(n_)], stream_);
  cudaEventSynchronize(events_[size_t(n_)]);
  std::vector<double> ms(size_t(StepCategory::kCount), 0.0);
  for (int i = 0; i < n_; ++i) {
    float t = 0;
    cudaEventElapsedTime(&t, events_[size_t(i)], events_[size_t(i + 1)]);
    ms[size_t(cats_[size_t(i)])] += double(t);
  }
  double total = 0;
  for (size_t c = 0; c < ms.size(); ++c) {
    out.emplace_back(step_category_name(StepCategory(c)), ms[c]);
    total += ms[c];
  }
  out.emplace_back("total", total);
  n_ = 0;
  return out;
}

}  // namespace dsv4::gpu
