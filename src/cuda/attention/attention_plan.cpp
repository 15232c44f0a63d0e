// attention_plan.cpp: split count, shared memory and workspace sizing of sparse_attention (see
// attention_plan.h). Host arithmetic only.
#include "cuda/attention/attention_plan.h"

#include <algorithm>

namespace dsv4::cuda::attention_detail {

int expected_keys(int window, int ratio, bool has_selected, int topk) {
  if (ratio <= 0) return window;
  return window + (has_selected ? topk : kHcaExpectedEntries);
}

LaunchPlan choose_plan(int n_tokens, int n_heads, int expected_keys, int n_sms, int force_head_groups) {
  LaunchPlan p;
  const int groups = ceil_div(std::max(n_heads, 1), 16);
  n_sms = std::max(n_sms, 1);
  // One-group blocks decode each key tile once per group; that pays only while all-heads blocks
  // would leave most SMs idle. H200 A/B at 4K context (bench --attention-head-groups, 20 layers,
  // bench/results/forward_h200.md): batch 1 0.54 vs 0.65 ms of attention per step with one
  // group, batch 4 a tie, batch 8 0.70 vs 0.66, batch 16 0.94 vs 0.78, batch 32 1.38 vs 1.26.
  const bool small = groups == 1 || int64_t(n_tokens) * groups * 4 <= n_sms;
  p.head_groups = force_head_groups != 0 ? force_head_groups : small ? 1 : 4;
  p.head_blocks = ceil_div(groups, p.head_groups);
  if (n_tokens < 1) return p;
  int fill = 0, useful = 0;
  if (p.head_groups == 1) {
    const int64_t row_blocks = int64_t(n_tokens) * p.head_blocks;
    fill = int(std::min<int64_t>(kMaxSplits, int64_t(kGroupBlocksPerSm) * n_sms / row_blocks));
    useful = expected_keys / kMinKeysPerSplitGroup;
  } else {
    fill = ceil_div(n_sms, n_tokens);
    useful = expected_keys / kMinKeysPerSplit;
  }
  p.splits = std::clamp(std::min(fill, useful), 1, kMaxSplits);
  return p;
}

int choose_splits(int n_tokens, int n_heads, int expected_keys, int n_sms) {
  return choose_plan(n_tokens, n_heads, expected_keys, n_sms).splits;
}

int64_t max_partials(int max_tokens, int n_heads, int n_sms) {
  int64_t most = 0;
  // Beyond 2 kGroupBlocksPerSm n_sms rows neither variant splits; stop there.
  const int last = std::min(max_tokens, 2 * kGroupBlocksPerSm * std::max(n_sms, 1) + 1);
  for (int n = 1; n <= last; ++n) {
    const int s = choose_splits(n, n_heads, kMaxSplits * kMinKeysPerSplit, n_sms);
    if (s > 1) most = std::max(most, int64_t(n) * s);
  }
  return most;
}

size_t smem_bytes(int key_tile, int n_heads, int topk) {
  const size_t groups = size_t(ceil_div(n_heads, 16));
  const size_t q = groups * 16 * kHeadDim * 2;
  const size_t k = size_t(key_tile) * kHeadDim * 2;
  const size_t x = 8 * 16 * size_t(key_tile) * 4;
  const size_t sel = size_t(std::max(topk, 0)) * 4;
  return q + k + x + (sel + 15) / 16 * 16 + 64;
}

int choose_key_tile(int n_heads, int topk, size_t smem_optin) {
  for (int tile : {32, 16})
    if (smem_bytes(tile, n_heads, topk) <= smem_optin) return tile;
  return 0;
}

}  // namespace dsv4::cuda::attention_detail
