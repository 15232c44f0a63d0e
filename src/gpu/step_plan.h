// step_plan.h: the host half of one GpuModel step. validate_step() checks the caller's sequences
// against the model's limits before anything is modified; fill_step() writes the flat StepBatch
// arrays (cuda/common/step_batch.h) into one staging area whose layout mirrors the static device
// buffer, so that one copy (plus one strided copy of the used block-table columns) moves a step
// to the device. Decode steps that replay a CUDA graph are padded to the captured batch size here.
// Pure host code, no CUDA calls: unit-tested without a GPU.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "gpu/gpu_model.h"

namespace dsv4::gpu {

struct StepLimits {
  int max_seqs = 0;           // slots: GpuStepSeq::slot < max_seqs
  int max_tokens = 0;         // rows of one step
  int vocab = 0;              // token ids < vocab
  int n_kv_blocks = 0;        // block ids < n_kv_blocks
  int64_t max_positions = 0;  // pos0 + tokens <= max_positions
};

// Offsets, in int32 elements, of the step arrays inside the staging area and the device buffer.
struct StepMetaLayout {
  int max_tokens = 0, max_seqs = 0, max_blocks = 0;
  int64_t token_ids = 0, token_seq = 0, token_pos = 0;           // i32 [max_tokens] each
  int64_t seq_slot = 0, seq_pos0 = 0, seq_tok0 = 0, seq_ntok = 0;  // i32 [max_seqs] each
  int64_t logit_rows = 0;   // i32 [max_tokens]: flat rows whose logits the head computes, in output order
  int64_t fixed_elems = 0;  // everything above: copied whole every step
  int64_t block_table = 0;  // i32 [max_seqs][max_blocks]: copied as used rows x used columns
  int64_t total_elems = 0;

  static StepMetaLayout make(int max_tokens, int max_seqs, int max_blocks);
};

// What fill_step() wrote.
struct StepShape {
  int n_tokens = 0;       // rows of the step as the kernels see it (padded for a graph)
  int n_seqs = 0;         // sequences as the kernels see them (padded for a graph)
  int n_real_tokens = 0;  // rows that belong to a sequence
  int n_real_seqs = 0;
  int n_logits = 0;       // output rows: sequences with logits = true, or every row with all_rows
  int n_head_rows = 0;    // rows of logit_rows the head computes (n_logits; the padded size for a graph)
  int used_blocks = 0;    // block-table columns any sequence needs this step
  int max_seq_rows = 0;   // rows of the longest sequence (<= 1: a decode step)
};

// KV blocks a sequence needs to hold positions [0, end).
inline int64_t blocks_for_positions(int64_t end) { return (end + 255) / 256; }

// True when every sequence feeds exactly one token (the steps CUDA graphs replay).
bool is_pure_decode(std::span<const GpuStepSeq> seqs);

// Checks every sequence: slot in range and used once, >= 1 token, ids in the vocabulary, pos0 == 0
// or pos0 == slot_next_pos[slot] (the slot's sequence continues), positions within max_positions,
// a block table covering pos0 + tokens with ids < n_kv_blocks; and the step within max_tokens.
// slot_next_pos: i64 [max_seqs], the length of each slot's sequence so far.
Status validate_step(std::span<const GpuStepSeq> seqs, const StepLimits& lim, std::span<const int64_t> slot_next_pos);

// Writes the step arrays of validated `seqs` into meta (i32 [layout.total_elems]). pad_to > 0 (a
// pure decode step replayed by the graph of that batch size, >= seqs.size()): rows and sequences
// are padded to pad_to (token_seq = -1, seq_slot = -1, seq_ntok = 0) and logit_rows to pad_to
// entries. all_rows: every row is an output row (the head then reads rows directly, in order).
StepShape fill_step(std::span<const GpuStepSeq> seqs, const StepMetaLayout& layout, int pad_to, bool all_rows,
                    int32_t* meta);

}  // namespace dsv4::gpu
