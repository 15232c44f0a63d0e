// attention_plan.h: the host-side choices of sparse_attention (attention.h): the key tile, the
// shared-memory footprint, the split count and the workspace size. Pure host arithmetic on launch
// shapes (never on device data), so it is graph-safe and unit-tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define DSV4_ATTN_PLAN_HD __host__ __device__
#else
#define DSV4_ATTN_PLAN_HD
#endif

namespace dsv4::cuda::attention_detail {

// The one supported geometry (Flash): d = 448 fp8 nope + 64 bf16 rope, 584-byte records.
inline constexpr int kHeadDim = 512, kRopeDim = 64, kNopeDim = 448;
inline constexpr int kEntryBytes = 584;                       // 448 e4m3 + 64 bf16 + 7 ue8m0 + 1 pad
inline constexpr int kScaleOffset = kNopeDim + 2 * kRopeDim;  // 576: the ue8m0 bytes of a record
inline constexpr int kMaxHeads = 64;                          // 4 head groups of 16 (one m16 MMA tile each)
inline constexpr int kThreads = 256;                          // 8 warps: (head group, dim half)
inline constexpr int kMaxTopk = 2048;                         // selected list held in shared memory
inline constexpr int kMaxSplits = 32;
// A split below ~64 keys spends more on loading Q (H KB) and writing its fp32 partial (2 H KB)
// than on its keys.
inline constexpr int kMinKeysPerSplit = 64;
// HCA rows have (p + 1) / 128 entries, unknown on the host; the split count assumes a 256K
// context (2048 entries). Only speed depends on it.
inline constexpr int kHcaExpectedEntries = 2048;

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Key candidates of a typical row: the window plus the compressed entries.
int expected_keys(int window, int ratio, bool has_selected, int topk);

// Splits of each row's candidates: enough blocks (n_tokens x splits) for one per SM, but no more
// splits than the expected keys fill with kMinKeysPerSplit each; 1 means no combine pass.
int choose_splits(int n_tokens, int expected_keys, int n_sms);

// f32 per split partial: O [H][512] (unnormalized), m [H] at H 512, l [H] at H 513, padded
// to a multiple of 4 floats so every partial's O rows stay 16-byte aligned.
DSV4_ATTN_PLAN_HD inline int64_t partial_floats(int n_heads) {
  return int64_t(n_heads) * kHeadDim + (2 * int64_t(n_heads) + 3) / 4 * 4;
}

// Partials the workspace must hold for any batch up to max_tokens (splits only for batches that
// split; at most kMaxSplits each).
int64_t max_partials(int max_tokens, int n_sms);

// Dynamic shared memory of the split kernel with key tiles of `key_tile` keys: Q [16 HG][512]
// bf16, the decoded key tile [key_tile][512] bf16, the QK exchange f32 [HG][2][16][key_tile],
// the compacted selected list i32 [topk] (CSA; 0 otherwise) and a few counters.
size_t smem_bytes(int key_tile, int n_heads, int topk);

// The key tile: 32 keys when it fits in `smem_optin` bytes, else 16 (sm_86 with 64 heads);
// 0 when neither fits.
int choose_key_tile(int n_heads, int topk, size_t smem_optin);

}  // namespace dsv4::cuda::attention_detail
