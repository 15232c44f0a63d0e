// indexer.h: the Lightning Indexer on the GPU (MODEL_SPEC.md §6.6; CPU twins: the indexer part of
// cpu::attention_forward, cpu::indexer_scores, cpu::topk_indices). For each token row at position
// p the visible keys are the sequence's first n_vis = (p + 1) / m indexer keys (68-byte fp4
// records in the paged pool); score[s] = bf16(sum_h bf16(relu(bf16(q_h . k_s)) * w_h)) with the
// head sum in fp32 in head order (bit-identical to the reference: q and k are on fp4 grids, so
// the dot products are exact); the top min(k, n_vis) by score, ties to the lowest index. No buffer
// grows with the context: candidates are scored in fixed-size splits that each keep their own
// top-k, then merged.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cuda/ops/q_head.h"
#include "cuda/common/device_buffer.h"
#include "cuda/common/kv_view.h"
#include "cuda/common/step_batch.h"

namespace dsv4::cuda {

// Query prep, in place on qi bf16 [T, nI, dI] (the bf16 wq_b output): RoPE on the last rope_dim
// dims at token_pos (compress rope), bf16, Hadamard (fp32, orthonormal, Sylvester order) to bf16,
// fp4 block quantization per 32 (values stay bf16, on the fp4 grid).
Status indexer_prepare_q(__nv_bfloat16* qi, int T, int n_heads, int head_dim, int rope_dim, const int32_t* token_pos,
                         const float* inv_freq, cudaStream_t stream);

// Head weights: w[t, h] = bf16(bf16(proj[t, h]) * scale), scale = dI^-0.5 * nI^-0.5 in fp32.
// proj: f32 [T, ld] (weights_proj output, unrounded); w: f32 [T, nI].
Status indexer_weights(const float* proj, int64_t ld, int T, int n_heads, float scale, float* w, cudaStream_t stream);

// indexer_prepare_q and indexer_weights in one launch (the same results; one block per row does
// both), for the decode step where each launch costs more than its work; with q_heads, the
// attention query's q_norm_rope as well (cuda/ops/q_head.h; its blocks run beside the prep blocks).
Status indexer_prepare(__nv_bfloat16* qi, int T, int n_heads, int head_dim, int rope_dim, const int32_t* token_pos,
                       const float* inv_freq, const float* proj, int64_t ld, float w_scale, float* w,
                       cudaStream_t stream, const QueryNormRope* q_heads = nullptr);

// Scratch for the split top-k: sized for max_tokens rows and the longest context.
class IndexerWorkspace {
 public:
  static Result<IndexerWorkspace> create(int max_tokens, int64_t max_positions, int ratio = 4, int topk = 512);
  size_t bytes() const { return buf_.bytes(); }
  void* data() const { return buf_.get(); }
  int max_tokens() const { return max_tokens_; }
  int n_splits() const { return n_splits_; }
  int topk() const { return topk_; }

 private:
  DeviceBuffer buf_;
  int max_tokens_ = 0, n_splits_ = 0, topk_ = 0;
};

// Which kernel scores the splits. kAuto: the per-row kernel for decode-sized launches (at most
// kWideRows rows: few rows, each spread over many splits), the multi-row kernel otherwise
// (prefill chunks: it decodes each key tile once for 4 rows). The others force one, for tests
// and the timing comparison; the selection does not depend on it.
enum class IndexerSplitKernel { kAuto, kPerRow, kRows };

// selected: i32 [n_tokens][topk], highest score first, -1 after the n_vis-th. Padding rows get -1.
// qi prepared, w from indexer_weights; kv.index_keys / ratio / index_dim / index_key_bytes used.
// max_splits > 0 caps the splits per row (tests and tuning sweeps; the result does not depend
// on it). merge_blocks > 0 (at most 16) sets the merge's blocks per row, 1 turning its rank path
// off (tests and A/B runs; 0: by the row count, the result the same).
Status indexer_topk(const StepBatchView& b, const __nv_bfloat16* qi, const float* w, int n_heads,
                    const LayerKvView& kv, int topk, IndexerWorkspace& ws, int32_t* selected, cudaStream_t stream,
                    int max_splits = 0, IndexerSplitKernel kernel = IndexerSplitKernel::kAuto, int merge_blocks = 0);

}  // namespace dsv4::cuda
