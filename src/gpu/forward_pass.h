// forward_pass.h: the launch sequence of one step on the model's stream: embedding, the layer
// loop (MODEL_SPEC.md §3; the CPU twin is cpu::CpuModel::block) and the head. Only launches: no
// allocation, no host synchronization, launch shapes fixed by n_tokens / n_seqs, so the same code
// runs eagerly and under CUDA graph capture. Every output is rounded where the reference rounds
// (bf16 at op boundaries; the compressor projections and indexer head weights stay fp32 until
// their kernels; the logits are fp32).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "cuda/attention/attention.h"
#include "cuda/common/step_batch.h"
#include "cuda/dense/dense.h"
#include "cuda/indexer/indexer.h"
#include "cuda/moe/moe.h"
#include "cuda/w4a16/w4a16.h"
#include "gpu/blas.h"
#include "gpu/device_weights.h"
#include "gpu/gpu_model.h"
#include "gpu/kv_state.h"
#include "gpu/profiler.h"
#include "model/config.h"

namespace dsv4::gpu {

// Static activation buffers, sized once for max_tokens rows (head buffers for logit_rows rows).
struct Activations {
  __nv_bfloat16* X = nullptr;    // bf16 [max_tokens, hc * D]: the residual streams
  __nv_bfloat16* x = nullptr;    // bf16 [max_tokens, D]: sublayer input (after HCPre + norm)
  float* mix = nullptr;          // f32 [max_tokens, hc + hc * hc]: HCPost weights of the sublayer
  __nv_bfloat16* qkv = nullptr;  // bf16 [max_tokens, q_lora + d]: qa (q-normed in place) | kv
  __nv_bfloat16* q = nullptr;    // bf16 [max_tokens, H * d]: queries
  __nv_bfloat16* o = nullptr;    // bf16 [max_tokens, H * d]: attention output
  __nv_bfloat16* u = nullptr;    // bf16 [max_tokens, o_groups * o_lora]: grouped wo_a output
  __nv_bfloat16* y = nullptr;    // bf16 [max_tokens, D]: sublayer output
  float* proj = nullptr;         // f32 [max_tokens, max ProjColumns::n]: compressor/indexer projections
  __nv_bfloat16* qi = nullptr;   // bf16 [max_tokens, nI * dI]: indexer queries
  float* wi = nullptr;           // f32 [max_tokens, nI]: indexer head weights
  int32_t* selected = nullptr;   // i32 [max_tokens, index_topk]: indexer selection
  __nv_bfloat16* xh = nullptr;   // bf16 [logit_rows, D]: head input
  float* logits = nullptr;       // f32 [logit_rows, vocab]
  int max_tokens = 0, logit_rows = 0, proj_cols = 0;
};

struct Workspaces {
  cuda::W4A16Workspace w4a16;
  cuda::MoeWorkspace moe;
  cuda::IndexerWorkspace indexer;    // present when the model has a CSA layer
  cuda::AttentionWorkspace attention;
  Blas blas;       // on the model's stream
  Blas side_blas;  // on SideStream::stream, with a workspace of its own (initialized with the side stream)
  // Split-K scratch of the W4A16 GEMMs on the side stream (the query branch's wq_b), which may run
  // beside the model stream's (a workspace serves one GEMM at a time); empty when the branch is off.
  cuda::W4A16Workspace side_w4a16;
  // bf16 [o_groups * o_lora, H*d / o_groups]: an fp8-form wo_a as bf16 for steps past the decode
  // kernels' rows (null when no layer has one or no step has that many rows).
  __nv_bfloat16* wo_a_bf16 = nullptr;
  bool has_indexer = false;
};

// A second stream of the step: a fork records `fork` on the model's stream and makes `stream`
// wait for it; a join records `join` on `stream` and makes the model's stream wait. In a captured
// graph these become edges. Owned by GpuModel. Two of them:
//  - the compressor branch (GpuModelOptions::compressor_branch): the launches of a layer that
//    depend only on the layer's input x and that only the layer's indexer and attention read (the
//    compressor/indexer projections and the compressors' emits), beside the query path (wqkv, its
//    norms, wq_b, the indexer's wq_b), joined before their first reader;
//    In steps without that branch the same stream may carry the query branch
//    (GpuModelOptions::query_branch): a CSA layer's compress launches from the layer's start, then
//    wq_b and the heads' norm + RoPE after the q norm, beside the indexer chain;
//  - the weight prefetch (GpuModelOptions::l2_prefetch_mb): L2 prefetches of each layer's wo_a,
//    forked at the layer's start (or after wq_b) so that DRAM reads them while the layer's
//    latency-bound kernels run; they change no value, so one join at the end of the layers
//    suffices.
struct SideStream {
  cudaStream_t stream = nullptr;  // null: off
  cudaEvent_t fork = nullptr, join = nullptr;
  // The query branch's second fork and join on the same stream (the compress launches use the
  // first pair); null where the branch is off.
  cudaEvent_t query_fork = nullptr, query_join = nullptr;
};

// The weight prefetch branch and its budget: bytes of each layer's bf16 wo_a asked for (the same
// prefix of every row, dense/weight_prefetch.h), in decode steps of at most kMaxRows rows, where
// wo_a is a pure weight stream (the register GEMV). 0 bytes or a null stream: off.
struct WeightPrefetch {
  static constexpr int kMaxRows = cuda::kDenseGemvMaxRows;
  SideStream branch;
  int64_t wo_a_bytes = 0;
  bool early = false;  // fork at the layer's start (before wqkv) instead of after wq_b
};

// Host copies of one step's discrete choices (filled only when asked; a D2H copy per layer).
struct TraceSink {
  std::vector<std::vector<int32_t>> selected;  // [layer] i32 [n_tokens * topk] (CSA layers)
  std::vector<std::vector<int32_t>> experts;   // [layer] i32 [n_tokens * top_k]
};

class ForwardPass {
 public:
  // attention_head_groups: GpuModelOptions::attention_head_groups (0: the plan picks). side: the
  // side stream (null stream: no branch); ws.side_blas must then be bound to it, and
  // ws.side_w4a16 created where query_branch is on. compressor_branch: whether the compressor
  // branch uses it. prefetch: the weight prefetch branch (off by default).
  ForwardPass(const ModelConfig& cfg, const DeviceModelWeights& w, const KvState& kv, const Activations& a,
              Workspaces& ws, cudaStream_t stream, int attention_head_groups = 0, SideStream side = {},
              WeightPrefetch prefetch = {}, QueryBranch query_branch = QueryBranch::kOff, bool compressor_branch = true)
      : cfg_(cfg),
        w_(w),
        kv_(kv),
        a_(a),
        ws_(ws),
        stream_(stream),
        attention_head_groups_(attention_head_groups),
        side_(side),
        prefetch_(prefetch),
        query_branch_(query_branch),
        compressor_branch_(compressor_branch) {}

  // Embedding, then every layer. b: the step on the device (step_batch.h).
  Status layers(const cuda::StepBatchView& b, TraceSink* trace) const;
  // Logits f32 [n, vocab] into Activations::logits for rows rows[i] of X (device i32 [n]), or
  // rows 0..n-1 of X when rows is null. n <= logit_rows.
  Status head(const __nv_bfloat16* X, const int32_t* rows, int n) const;
  // Marks each group of launches with its category (eager profiled steps only; null: off).
  void set_profiler(StepProfiler* p) { prof_ = p; }

 private:
  void mark(StepCategory c) const {
    if (prof_) prof_->mark(c);
  }
  Status layer(int l, const cuda::StepBatchView& b, TraceSink* trace) const;
  // Leaves the sublayer output in Activations::y, or, where wo_b's launch splits K
  // (y_split->splits > 1), as its unsummed partials, which the HCPost that follows adds.
  Status attention(int l, const cuda::StepBatchView& b, TraceSink* trace, cuda::SplitSumView* y_split) const;
  // The compressor and indexer projections of x and the compressors' emits of layer l (CSA/HCA),
  // on `stream` with `blas` (bound to it).
  Status compress(int l, const cuda::StepBatchView& b, cudaStream_t stream, const Blas& blas,
                  const cuda::QueryNormRope* q_heads = nullptr) const;
  // compress on the side stream, between the fork and join events (SideStream).
  Status fork_compress(int l, const cuda::StepBatchView& b) const;
  // Whether a step of n_tokens rows prefetches (WeightPrefetch); eager profiled steps do not.
  bool prefetching(int n_tokens) const;
  // Forks the prefetch of layer l's wo_a onto the prefetch branch (nothing for an fp8-form wo_a).
  Status fork_prefetch(int l) const;
  // deferred: w4a16_gemm_deferred (where the launch splits K, y is left as *deferred's partials,
  // which the next kernel adds: common/deferred_sum.h); null: w4a16_gemm.
  Status gemm(const __nv_bfloat16* x, int64_t ldx, int m, const cuda::W4A16Weight& w, __nv_bfloat16* y,
              int64_t ldy, cuda::SplitSumView* deferred = nullptr) const;
  // gemm on `stream` with split-K scratch `ws` (the side stream's GEMMs have their own).
  Status gemm_on(cudaStream_t stream, const cuda::W4A16WorkspaceView& ws, const __nv_bfloat16* x, int64_t ldx, int m,
                 const cuda::W4A16Weight& w, __nv_bfloat16* y, int64_t ldy,
                 cuda::SplitSumView* deferred = nullptr) const;
  // Forks wq_b (q = bf16(qa wq_b^T)) and the heads' norm + RoPE of layer l onto the side stream
  // (the query branch); the caller joins (side_.query_join) before attention, after an error too.
  Status fork_query(int l, const cuda::StepBatchView& b) const;

  const ModelConfig& cfg_;
  const DeviceModelWeights& w_;
  const KvState& kv_;
  const Activations& a_;
  Workspaces& ws_;
  cudaStream_t stream_;
  int attention_head_groups_ = 0;
  SideStream side_;
  WeightPrefetch prefetch_;
  QueryBranch query_branch_ = QueryBranch::kOff;
  bool compressor_branch_ = true;
  StepProfiler* prof_ = nullptr;
  mutable int prefetch_forks_ = 0;  // forks of the step so far (layers() joins them)
};

}  // namespace dsv4::gpu
