// attention_plan.cpp: split count, shared memory and workspace sizing of sparse_attention (see
// attention_plan.h). Host arithmetic only.
#include "cuda/attention/attention_plan.h"

#include <algorithm>

namespace dsv4::cuda::attention_detail {

int expected_keys(int window, int ratio, bool has_selected, int topk) {
  if (ratio <= 0) return window;
  return window + (has_selected ? topk : kHcaExpectedEntries);
}

int choose_splits(int n_tokens, int expected_keys, int n_sms) {
  if (n_tokens < 1) return 1;
  const int fill = ceil_div(std::max(n_sms, 1), n_tokens);
  const int useful = std::max(1, expected_keys / kMinKeysPerSplit);
  return std::clamp(std::min(fill, useful), 1, kMaxSplits);
}

int64_t max_partials(int max_tokens, int n_sms) {
  int64_t most = 0;
  for (int n = 1; n <= max_tokens; ++n) {
    const int s = choose_splits(n, kMaxSplits * kMinKeysPerSplit, n_sms);
    if (s > 1) most = std::max(most, int64_t(n) * s);
    if (s == 1) break;  // splits only shrink as the batch grows
  }
  return most;
}

size_t smem_bytes(int key_tile, int n_heads, int topk) {
  const size_t groups = size_t(ceil_div(n_heads, 16));
  const size_t q = groups * 16 * kHeadDim * 2;
  const size_t k = size_t(key_tile) * kHeadDim * 2;
  const size_t x = groups * 2 * 16 * size_t(key_tile) * 4;
  const size_t sel = size_t(std::max(topk, 0)) * 4;
  return q + k + x + (sel + 15) / 16 * 16 + 64;
}

int choose_key_tile(int n_heads, int topk, size_t smem_optin) {
  for (int tile : {32, 16})
    if (smem_bytes(tile, n_heads, topk) <= smem_optin) return tile;
  return 0;
}

}  // namespace dsv4::cuda::attention_detail
