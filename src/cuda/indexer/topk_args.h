// topk_args.h: what the indexer's top-k kernels share (indexer_topk.cu: the per-row split
// kernel, the merge and the host entry; indexer_rows.cu: the multi-row split kernel for wide
// launches): their argument block and the multi-row kernel's launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cuda/common/step_batch.h"

namespace dsv4::cuda::indexer_detail {

struct TopkArgs {
  StepBatchView b;
  const __nv_bfloat16* qi;  // bf16 [T, n_heads, 128], prepared
  const float* w;           // f32 [T, n_heads], bf16 values
  const uint8_t* keys;      // u8 paged indexer keys, kKeyBytes each
  int ratio;
  int n_heads, topk, n_splits, ws_topk;
  int min_split_keys;       // split_min_keys(n_tokens)
  int merge_blocks;         // merge blocks per row (merge_blocks_for; 1: no rank path)
  uint64_t* cand;           // u64 [T * n_splits][ws_topk]: each split's keys (sorted when n_splits > 1)
  int32_t* counts;          // i32 [T * n_splits]: keys each split kept
  int32_t* selected;        // i32 [T][topk]
};

// The multi-row split kernel over grid (ceil(T / kRowsPerBlock), n_splits): the same lists and
// counts as the per-row split kernel.
Status launch_indexer_rows(const TopkArgs& g, cudaStream_t stream, bool pdl);

}  // namespace dsv4::cuda::indexer_detail
