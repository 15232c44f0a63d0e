// sampling.h: token sampling on the GPU, the device twin of runtime::Sampler (src/runtime/
// sampler.h): greedy, temperature, min-p, top-k, top-p (vLLM V1's order), a counter-based draw
// from (seed, index) so results do not depend on the batch, and logprobs of the raw logits (the
// sampled token's and the top-k's, k <= 20). Same (logits, params, seed, index) -> same token as
// the host sampler. Fixed launch shapes for a batch size: graph-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/logit_adjust.h"
#include "base/status.h"
#include "cuda/common/device_buffer.h"

namespace dsv4::cuda {

inline constexpr int kMaxLogprobs = 20;

// One row's parameters (device array, filled by the runner each step).
struct SampleParams {
  float temperature = 1.0f;  // <= 1e-5: greedy (lowest id on ties)
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t top_k = 0;         // 0: off
  int32_t logprobs = -1;     // -1: none; 0..20
  int32_t pad = 0;
  uint64_t seed = 0;
  int64_t index = 0;         // the draw counter (tokens generated so far)
};

struct SampleOutputView {
  int32_t* token = nullptr;       // i32 [B]
  float* logprob = nullptr;       // f32 [B] log-softmax of the raw logits at token
  int32_t* top_ids = nullptr;     // i32 [B][kMaxLogprobs] (first params.logprobs valid)
  float* top_logprobs = nullptr;  // f32 [B][kMaxLogprobs]
};

class SamplerWorkspace {
 public:
  static Result<SamplerWorkspace> create(int max_rows, int vocab);
  void* data() const { return buf_.get(); }
  size_t bytes() const { return buf_.bytes(); }
  int max_rows() const { return max_rows_; }
  int vocab() const { return vocab_; }

 private:
  DeviceBuffer buf_;
  int max_rows_ = 0, vocab_ = 0;
};

// logit_bias and the penalties (base/logit_adjust.h), in place, before sample_tokens: for each i < n
// (device arrays adj [n], rows [n]), logits[rows[i] * ld + adj[i].token] = adjust_logit(that, adj[i]).
// The (row, token) pairs must be distinct; entries outside [0, B) x [0, V) are skipped.
Status adjust_logits(float* logits, int64_t ld, int B, int V, const LogitAdjust* adj, const int32_t* rows, int n,
                     cudaStream_t stream);

// logits: f32 [B, ld] (first V used); params: device [B].
Status sample_tokens(const float* logits, int64_t ld, int B, int V, const SampleParams* params,
                     const SampleOutputView& out, SamplerWorkspace& ws, cudaStream_t stream);

}  // namespace dsv4::cuda
