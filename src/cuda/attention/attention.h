// attention.h: sparse attention with sinks on the GPU (MODEL_SPEC.md §6.7; CPU twin: the core
// attention and inverse RoPE of cpu::attention_forward). One shared KV head (K = V, 584-byte fp8
// records read directly); each query row at position p attends to
//   the window: positions max(0, p - W + 1) .. p (ring for positions before the step, chunk
//               records for positions of the step), and
//   compressed entries: CSA the indexer's selected entries (selected[t][0..topk), -1 = none);
//               HCA all visible entries e < (p + 1) / m; SWA none,
// softmax in fp32 with the sink in the denominator only, P.V with bf16 probabilities (as the
// reference), output bf16, then inverse RoPE on the last rope dims, bf16. Candidates are split over
// blocks (flash-decoding) so a batch of one fills the GPU; the split count depends only on the
// launch shape (graph-safe).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cuda/common/device_buffer.h"
#include "cuda/common/kv_view.h"
#include "cuda/common/step_batch.h"

namespace dsv4::cuda {

struct AttentionParams {
  int n_heads = 64;                 // H (heads of this rank)
  int head_dim = 512;               // d = nope + rope
  int rope_dim = 64;
  float softmax_scale = 0.0f;       // d^-0.5
  const float* sink = nullptr;      // f32 [H]
  const float* inv_freq = nullptr;  // f32 [rope_dim / 2], the layer's rope (inverse rotation)
  int topk = 512;                   // row stride of `selected` (CSA)
  // Blocks of 1 or 4 groups of 16 heads; 0: the plan's pick (attention_plan.h). An explicit model
  // option (GpuModelOptions::attention_head_groups) for A/B runs of the two kernel variants.
  int head_groups = 0;
};

// Split-softmax scratch, sized once for the largest step.
class AttentionWorkspace {
 public:
  static Result<AttentionWorkspace> create(int max_tokens, int n_heads = 64, int head_dim = 512);
  void* data() const { return buf_.get(); }
  size_t bytes() const { return buf_.bytes(); }
  int max_tokens() const { return max_tokens_; }

 private:
  DeviceBuffer buf_;
  int max_tokens_ = 0;
};

// q: bf16 [n_tokens, H, d] (after q_norm_rope); selected: i32 [n_tokens][topk] for CSA layers
// (kv.ratio == 4 with index keys), else null; o: bf16 [n_tokens, H, d]. Padding rows: o zero.
Status sparse_attention(const StepBatchView& b, const __nv_bfloat16* q, const LayerKvView& kv, const int32_t* selected,
                        const AttentionParams& p, AttentionWorkspace& ws, __nv_bfloat16* o, cudaStream_t stream);

}  // namespace dsv4::cuda
