// attention_internal.h: the two kernels of sparse_attention as its launcher (attention.cu) sees
// them: the split kernel (attention_split.cu: softmax over one slice of a row's keys for one block
// of heads)
// and the combine kernel (attention_combine.cu: merges the slices, adds the sink, normalizes and
// inverse-rotates). Not a public header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cuda/attention/attention.h"

namespace dsv4::cuda::attention_detail {

// Kernel argument block (by value). Pointers are device pointers; shapes use H = n_heads.
struct SplitKernelArgs {
  int n_tokens = 0;
  const int32_t* token_seq = nullptr;    // i32 [n_tokens], -1 = padding row
  const int32_t* token_pos = nullptr;    // i32 [n_tokens]
  const int32_t* seq_slot = nullptr;     // i32 [n_seqs]
  const int32_t* seq_pos0 = nullptr;     // i32 [n_seqs]
  const int32_t* seq_tok0 = nullptr;     // i32 [n_seqs]
  const int32_t* block_table = nullptr;  // i32 [n_seqs][max_blocks]; ratio > 0 only
  int max_blocks = 0;

  const __nv_bfloat16* q = nullptr;  // bf16 [n_tokens, H, 512]
  const uint8_t* window = nullptr;   // u8 [n_slots][window_size][584]
  int window_size = 0;
  const uint8_t* chunk = nullptr;    // u8 [n_tokens][584]
  const uint8_t* entries = nullptr;  // u8 [n_blocks][256 / ratio][584]; ratio > 0 only
  int ratio = 0;                     // 0: window only; > 0: compressed entries too
  const int32_t* selected = nullptr; // i32 [n_tokens][topk], -1 = none; null: all visible entries
  int topk = 0;

  int n_heads = 0;
  float scale = 0.0f;
  const float* sink = nullptr;      // f32 [H]
  const float* inv_freq = nullptr;  // f32 [32]

  int n_splits = 1;                // grid.x; 1: the split kernel finishes the rows itself (grid.z: head blocks)
  float* partials = nullptr;       // f32 [n_tokens * n_splits][partial_floats(H)] when n_splits > 1
  __nv_bfloat16* o = nullptr;      // bf16 [n_tokens, H, 512] when n_splits == 1
};

struct CombineKernelArgs {
  int n_tokens = 0;
  const int32_t* token_seq = nullptr;  // i32 [n_tokens]
  const int32_t* token_pos = nullptr;  // i32 [n_tokens]
  int n_heads = 0;
  int n_splits = 0;
  const float* partials = nullptr;  // f32 [n_tokens * n_splits][partial_floats(H)]
  const float* sink = nullptr;      // f32 [H]
  const float* inv_freq = nullptr;  // f32 [32]
  __nv_bfloat16* o = nullptr;       // bf16 [n_tokens, H, 512]
};

// Diagnostic launch choices for tests and benchmarks (0 = what sparse_attention picks): the key
// tile (32 or 16, e.g. to run sm_86's tile on an H200), the split count (must fit the workspace)
// and the head groups per block (4: all heads of a row in one block, 1: one block per 16 heads).
struct AttentionDiagnosticLaunch {
  int key_tile = 0;
  int splits = 0;
  int head_groups = 0;
};

// sparse_attention with the launch choices overridden where `diag` says so. *chosen_splits, when
// not null, receives the split count used; *chosen_head_groups the head groups per block.
Status sparse_attention_diagnostic(const StepBatchView& b, const __nv_bfloat16* q, const LayerKvView& kv,
                                   const int32_t* selected, const AttentionParams& p, AttentionWorkspace& ws,
                                   __nv_bfloat16* o, cudaStream_t stream, const AttentionDiagnosticLaunch& diag,
                                   int* chosen_splits = nullptr, int* chosen_head_groups = nullptr);

// Grid (n_splits, n_tokens, head_blocks) of kThreads; a block holds head_groups (4 or 1) groups of
// 16 heads; smem from smem_bytes(key_tile, block_heads(H, head_groups), topk or 0). key_tile is 32
// or 16 (choose_key_tile).
Status launch_split_kernel(const SplitKernelArgs& a, int key_tile, int head_groups, int head_blocks, size_t smem,
                           cudaStream_t stream, bool pdl);
// Grid (H, n_tokens) of 128 threads.
Status launch_combine_kernel(const CombineKernelArgs& a, cudaStream_t stream, bool pdl);

}  // namespace dsv4::cuda::attention_detail
