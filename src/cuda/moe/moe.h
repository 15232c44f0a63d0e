// moe.h: one MoE layer of DeepSeek-V4-Flash on the GPU (MODEL_SPEC.md §7, W4A16 weights):
// router on the device, grouping of (token, expert) pairs by expert, the gate/up GEMM with the
// clamped SwiGLU and routing weight fused, and the down GEMM with the sum over the top-k experts
// and the shared expert fused. Three launches, no host synchronization, launch shapes fixed by
// the batch size: graph-safe. With PDL (SM90) the shared expert's gate/up tiles run alongside the
// router, and the down GEMM prefetches its routed experts' weights while gate/up finishes. All
// experts stay resident; the caller owns weights and workspace. With MoeArgs::deferred the down
// GEMM stops at the pair rows and the next HCPost adds them (common/deferred_sum.h).
//
// Numerics (the engine's CPU reference semantics): logits = fp32(x) . fp32(gate_w)^T;
// s = sqrt(softplus(logit)); hash layers take experts tid2eid[token], score layers the top-k of
// s + bias (ties: lowest expert index); w_e = s_e / sum_E s * route_scale (sum in selection
// order). g = bf16(W1 x), u = bf16(W3 x), a = bf16(silu(min(g, L)) * clamp(u, -L, L) * w_e),
// out_e = bf16(W2 a); y = bf16(sum over experts by increasing id of out_e, then + shared_out).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cuda/common/device_buffer.h"
#include "cuda/w4a16/w4a16.h"

namespace dsv4::cuda {

// n_experts packed weights of one shape stored back to back: expert e starts at
// qweight + e * w4a16_qweight_bytes(n, k) / 4 and scales + e * w4a16_scales_bytes(n, k) / 2.
struct W4A16ExpertStack {
  const uint32_t* qweight = nullptr;
  const __half* scales = nullptr;
  int n = 0, k = 0, n_experts = 0;
};

struct MoeLayerWeights {
  const __nv_bfloat16* gate_w = nullptr;  // bf16 [n_experts, hidden] router weight
  const float* gate_bias = nullptr;       // f32 [n_experts]: score layers (null = no bias)
  const int32_t* tid2eid = nullptr;       // i32 [vocab, top_k]: hash layers, else null; ids < n_experts
  W4A16ExpertStack w13;                   // [n_experts] packed [2 inter, hidden]: w1 | w3 interleaved
                                          // by RepackPlacement::gate_up (w1 slot 0, w3 slot 1)
  W4A16ExpertStack w2;                    // [n_experts] packed [hidden, inter]
  W4A16Weight shared_w13;                 // packed [2 inter, hidden], same interleave
  W4A16Weight shared_w2;                  // packed [hidden, inter]
  int hidden = 4096;
  int inter = 2048;
  int n_experts = 256;                    // the router kernels are built for exactly 256
  int top_k = 6;                          // 1..8
  float route_scale = 1.5f;
  float swiglu_limit = 10.0f;
};

struct MoeArgs {
  const __nv_bfloat16* x = nullptr;  // bf16 [M, hidden] (after ffn_norm), row stride ldx
  int64_t ldx = 0;
  const int32_t* token_ids = nullptr;  // i32 [M]: hash layers only
  int m = 0;
  __nv_bfloat16* y = nullptr;        // bf16 [M, hidden] routed + shared output, row stride ldy
  int64_t ldy = 0;
  // Non-null: where the down GEMM is a decode launch, the sum over each token's pairs is left to
  // the consumer (common/deferred_sum.h; the next HCPost) and y is not written: *deferred then
  // describes the pair rows (in the workspace, valid until its next call). Otherwise y is written
  // and deferred->pairs_per_token is 0.
  PairSumView* deferred = nullptr;
};

// Diagnostics only (benchmark lab, tests): force the two GEMM launches instead of the heuristics'.
// Configurations are w4a16_config_name indices; they must have the block rows the heuristic
// picks for this batch (the router cuts tiles by it), or (decode configurations) at least the
// forced block_rows. stages 0: the launcher's default; block_rows 0: moe_block_rows().
inline constexpr int kMoeTracePoints = 4;  // stamps per block in a trace: entry, dependency met,
                                           // weights streamed, exit (common/trace.cuh)
struct MoeDiagnosticLaunches {
  int up_config = 0, up_splits = 1, up_stages = 0;
  int down_config = 0, down_splits = 1, down_stages = 0;
  int block_rows = 0;  // rows per (expert, row block) tile the router cuts: 4, 16, 32, 64 or 128
  int launches = 3;    // benchmark breakdown: 1 = the router only, 2 = router + gate/up, 3 = all
  bool force_configs = true;  // false: the heuristics' GEMM launches (for a breakdown of them)
  // Timeline: per-block stamps (common/trace.cuh; decode GEMM kernels and the router) of the
  // launches at trace, router blocks first, then gate/up's, then down's; the block count of each
  // launch goes to trace_blocks[0..2]. Null: no stamps. trace holds trace_capacity blocks of
  // kMoeTracePoints stamps; a call that needs more is refused.
  unsigned long long* trace = nullptr;
  int64_t trace_capacity = 0;
  int* trace_blocks = nullptr;
};

// Everything moe_forward needs besides weights, sized for up to max_tokens rows. Created once
// (allocates), reused by every layer on one stream. Counters inside return to zero after each call.
class MoeWorkspace {
 public:
  static Result<MoeWorkspace> create(int max_tokens, int hidden = 4096, int inter = 2048, int n_experts = 256,
                                     int top_k = 6);
  int max_tokens() const { return max_tokens_; }
  size_t bytes() const;

  // Routing of the last call (device memory), for tests and diagnostics.
  const int* topk_ids() const { return topk_ids_.as<int>(); }        // i32 [M, top_k], increasing id
  const float* topk_weights() const { return topk_w_.as<float>(); }  // f32 [M, top_k], same order
  const float* logits() const { return logits_.as<float>(); }        // f32 [M, n_experts]

 private:
  friend Status moe_forward(const MoeLayerWeights&, const MoeArgs&, MoeWorkspace&, cudaStream_t,
                           const MoeDiagnosticLaunches*);
  int max_tokens_ = 0, hidden_ = 0, inter_ = 0, n_experts_ = 0, top_k_ = 0, max_tiles_ = 0;
  DeviceBuffer logits_, keyed_, topk_ids_, topk_w_, token_pairs_, sorted_token_, sorted_weight_, tiles_;
  DeviceBuffer act_, down_, partials_;
  DeviceBuffer counters_;  // zeroed: n_tiles, route done, route tile counters, combine, split-K
  int* n_tiles_ = nullptr;
  int* route_done_ = nullptr;
  int* route_tile_counters_ = nullptr;
  int* combine_counters_ = nullptr;
  int* gemm_counters_ = nullptr;
  int n_gemm_counters_ = 0;
};

// Upper bound on the (expert, row block) tiles of a batch of m tokens: the grid depth of the MoE
// GEMMs, fixed for a given m.
int moe_max_tiles(int m, int top_k, int n_experts, int block_m);

// Rows per (expert, row block) tile for a batch of m tokens, from the rows an expert expects
// (m top_k / n_experts): 4 while that is at most 1 (decode batches up to 42 tokens: the decode
// kernels stage only 4 A rows, so two blocks fit per SM), then 16, 32 (decode kernels), 64, 128
// (tiled kernels). moe_forward may still move a decode batch to 64 when its launch does not fit.
int moe_block_rows(int m, int top_k, int n_experts);

Status moe_forward(const MoeLayerWeights& w, const MoeArgs& a, MoeWorkspace& ws, cudaStream_t stream,
                   const MoeDiagnosticLaunches* diagnostic_launches = nullptr);

}  // namespace dsv4::cuda
