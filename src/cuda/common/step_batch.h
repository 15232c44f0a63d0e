// step_batch.h: the tokens of one engine step as every kernel of the forward pass sees them. A
// step is a flat list of token rows (decode tokens and prompt chunks of several sequences, each
// sequence's rows contiguous and in position order); per-sequence arrays say where each
// sequence's rows start, its state slot and its KV block table.
//
// Graph rule: kernel grids depend only on n_tokens / n_seqs (host values fixed for a captured
// batch size); everything else (positions, lengths, block ids) is read on the device. Padding
// rows (token_seq == -1) and padding sequences (seq_ntok == 0, seq_slot == -1) may compute
// anything finite but must never write KV, window or compressor state.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

inline constexpr int kKvBlockTokens = 256;  // logical KV block (ARCHITECTURE.md §4)

struct StepBatchView {
  int n_tokens = 0;                   // rows of every activation of this step (padded)
  int n_seqs = 0;                     // sequences (padded)
  const int32_t* token_ids = nullptr; // i32 [n_tokens] vocabulary ids (0 for padding)
  const int32_t* token_seq = nullptr; // i32 [n_tokens] sequence index, -1 for padding
  const int32_t* token_pos = nullptr; // i32 [n_tokens] absolute position (0 for padding)
  const int32_t* seq_slot = nullptr;  // i32 [n_seqs] window/compressor state slot, -1 for padding
  const int32_t* seq_pos0 = nullptr;  // i32 [n_seqs] position of the sequence's first row this step
  const int32_t* seq_tok0 = nullptr;  // i32 [n_seqs] index of that row in the flat list
  const int32_t* seq_ntok = nullptr;  // i32 [n_seqs] rows this step (0 for padding)
  const int32_t* block_table = nullptr;  // i32 [n_seqs][max_blocks] KV block ids, position order
  int max_blocks = 0;                 // row stride of block_table
  // Host: every sequence has at most one row this step (a decode step; the captured graphs'
  // steps). Lets writes that otherwise need a later launch to order them after the reads of the
  // sequence's other rows happen early: the compressor's ring save (in its emit kernel) and the
  // window ring copy (in qkv_norm_finish, before attention). False is always safe.
  bool one_row_per_seq = false;
};

}  // namespace dsv4::cuda
