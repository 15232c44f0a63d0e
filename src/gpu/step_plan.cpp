// step_plan.cpp: validation and flattening of a step (see step_plan.h).
#include "gpu/step_plan.h"

#include <algorithm>
#include <vector>

#include "base/check.h"

namespace dsv4::gpu {

StepMetaLayout StepMetaLayout::make(int max_tokens, int max_seqs, int max_blocks) {
  StepMetaLayout l;
  l.max_tokens = max_tokens;
  l.max_seqs = max_seqs;
  l.max_blocks = max_blocks;
  int64_t off = 0;
  auto take = [&off](int64_t n) {
    const int64_t at = off;
    off += (n + 3) / 4 * 4;  // 16-byte aligned arrays
    return at;
  };
  l.token_ids = take(max_tokens);
  l.token_seq = take(max_tokens);
  l.token_pos = take(max_tokens);
  l.seq_slot = take(max_seqs);
  l.seq_pos0 = take(max_seqs);
  l.seq_tok0 = take(max_seqs);
  l.seq_ntok = take(max_seqs);
  l.logit_rows = take(max_tokens);
  l.fixed_elems = off;
  l.block_table = take(int64_t(max_seqs) * max_blocks);
  l.total_elems = off;
  return l;
}

bool is_pure_decode(std::span<const GpuStepSeq> seqs) {
  return !seqs.empty() && std::all_of(seqs.begin(), seqs.end(), [](const GpuStepSeq& s) { return s.tokens.size() == 1; });
}

Status validate_step(std::span<const GpuStepSeq> seqs, const StepLimits& lim, std::span<const int64_t> slot_next_pos) {
  DSV4_CHECK(int64_t(slot_next_pos.size()) == lim.max_seqs, "slot table of {} for {} slots", slot_next_pos.size(),
             lim.max_seqs);
  if (int64_t(seqs.size()) > lim.max_seqs)
    return invalid_argument("step has {} sequences, more than the {} state slots", seqs.size(), lim.max_seqs);
  std::vector<char> slot_used(size_t(lim.max_seqs), 0);
  int64_t n_tokens = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const GpuStepSeq& s = seqs[i];
    if (s.slot < 0 || s.slot >= lim.max_seqs)
      return invalid_argument("sequence {} of the step: slot {} outside [0, {})", i, s.slot, lim.max_seqs);
    if (slot_used[size_t(s.slot)]) return invalid_argument("sequence {} of the step: slot {} used twice", i, s.slot);
    slot_used[size_t(s.slot)] = 1;
    if (s.tokens.empty()) return invalid_argument("sequence {} (slot {}) has no tokens", i, s.slot);
    for (size_t t = 0; t < s.tokens.size(); ++t)
      if (s.tokens[t] < 0 || s.tokens[t] >= lim.vocab)
        return invalid_argument("sequence {} (slot {}): token id {} at index {} is outside the vocabulary [0, {})", i,
                                s.slot, s.tokens[t], t, lim.vocab);
    if (s.pos0 < 0) return invalid_argument("sequence {} (slot {}): negative pos0 {}", i, s.slot, s.pos0);
    // NOTE: the window ring and the compressor state of a slot hold exactly one sequence's past;
    // feeding it from any other position would silently attend to the wrong tokens.
    if (s.pos0 != 0 && s.pos0 != slot_next_pos[size_t(s.slot)])
      return invalid_argument("sequence {} (slot {}): pos0 {} does not continue the slot's sequence (next position {}); "
                              "pos0 = 0 starts a new one",
                              i, s.slot, s.pos0, slot_next_pos[size_t(s.slot)]);
    const int64_t end = s.pos0 + int64_t(s.tokens.size());
    if (end > lim.max_positions)
      return out_of_range("sequence {} (slot {}): positions up to {} exceed the model's {}", i, s.slot, end,
                          lim.max_positions);
    const int64_t need = blocks_for_positions(end);
    if (int64_t(s.block_table.size()) < need)
      return invalid_argument("sequence {} (slot {}): block table has {} blocks, positions up to {} need {}", i, s.slot,
                              s.block_table.size(), end, need);
    for (int64_t b = 0; b < need; ++b)
      if (s.block_table[size_t(b)] < 0 || s.block_table[size_t(b)] >= lim.n_kv_blocks)
        return invalid_argument("sequence {} (slot {}): block table entry {} = {} outside [0, {})", i, s.slot, b,
                                s.block_table[size_t(b)], lim.n_kv_blocks);
    n_tokens += int64_t(s.tokens.size());
  }
  if (n_tokens > lim.max_tokens)
    return out_of_range("step has {} tokens, more than max_tokens_per_step = {}", n_tokens, lim.max_tokens);
  return Status::ok();
}

StepShape fill_step(std::span<const GpuStepSeq> seqs, const StepMetaLayout& l, int pad_to, bool all_rows,
                    int32_t* meta) {
  StepShape sh;
  sh.n_real_seqs = int(seqs.size());
  int row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const GpuStepSeq& s = seqs[i];
    const int n = int(s.tokens.size());
    meta[l.seq_slot + int64_t(i)] = s.slot;
    meta[l.seq_pos0 + int64_t(i)] = int32_t(s.pos0);
    meta[l.seq_tok0 + int64_t(i)] = row;
    meta[l.seq_ntok + int64_t(i)] = n;
    for (int t = 0; t < n; ++t) {
      meta[l.token_ids + row + t] = s.tokens[size_t(t)];
      meta[l.token_seq + row + t] = int32_t(i);
      meta[l.token_pos + row + t] = int32_t(s.pos0 + t);
    }
    const int need = int(blocks_for_positions(s.pos0 + n));
    std::copy_n(s.block_table.begin(), need, meta + l.block_table + int64_t(i) * l.max_blocks);
    sh.used_blocks = std::max(sh.used_blocks, need);
    sh.max_seq_rows = std::max(sh.max_seq_rows, n);
    if (s.logits && !all_rows) meta[l.logit_rows + sh.n_logits++] = row + n - 1;
    row += n;
  }
  sh.n_real_tokens = row;
  sh.n_tokens = row;
  sh.n_seqs = sh.n_real_seqs;
  if (all_rows) sh.n_logits = row;
  sh.n_head_rows = sh.n_logits;
  if (pad_to > 0) {
    DSV4_CHECK(pad_to >= sh.n_real_seqs && pad_to <= l.max_seqs && pad_to <= l.max_tokens && row == sh.n_real_seqs,
               "padding {} rows of a decode step to {}", row, pad_to);
    // Padding sequence i owns padding row i: zero rows, so nothing of it is ever read or saved.
    for (int i = sh.n_real_seqs; i < pad_to; ++i) {
      meta[l.seq_slot + i] = -1;
      meta[l.seq_pos0 + i] = 0;
      meta[l.seq_tok0 + i] = i;
      meta[l.seq_ntok + i] = 0;
      meta[l.token_ids + i] = 0;
      meta[l.token_seq + i] = -1;
      meta[l.token_pos + i] = 0;
    }
    sh.used_blocks = std::max(sh.used_blocks, 1);
    for (int i = sh.n_real_seqs; i < pad_to; ++i)
      std::fill_n(meta + l.block_table + int64_t(i) * l.max_blocks, sh.used_blocks, 0);
    for (int i = sh.n_logits; i < pad_to; ++i) meta[l.logit_rows + i] = 0;
    sh.n_tokens = pad_to;
    sh.n_seqs = pad_to;
    sh.n_head_rows = pad_to;
  }
  return sh;
}

}  // namespace dsv4::gpu
