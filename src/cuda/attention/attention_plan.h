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
inline constexpr int kThreads = 256;                          // 8 warps: (head group, dim slice)
inline constexpr int kMaxTopk = 2048;                         // selected list held in shared memory
inline constexpr int kMaxSplits = 32;  // the combine kernel holds one split per lane
// A split below ~64 keys spends more on loading Q (H KB) and writing its fp32 partial (2 H KB)
// than on its keys; with one head group per block (16 heads: 16 KB of Q, 32 KB of partial) one
// 32-key tile per split is worth it.
inline constexpr int kMinKeysPerSplit = 64;
inline constexpr int kMinKeysPerSplitGroup = 32;
// Blocks of the one-group kernel resident per SM (its launch bound): the split count aims at this
// many blocks per SM.
inline constexpr int kGroupBlocksPerSm = 2;
// HCA rows have (p + 1) / 128 entries, unknown on the host; the split count assumes a 256K
// context (2048 entries). Only speed depends on it.
inline constexpr int kHcaExpectedEntries = 2048;

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Key candidates of a typical row: the window plus the compressed entries.
int expected_keys(int window, int ratio, bool has_selected, int topk);

// How one launch covers the rows: grid (splits, n_tokens, head_blocks); a block holds head_groups
// groups of 16 heads (kernel variants: 4, the 8 warps as 4 groups x 2 dim halves, or 1, the 8
// warps as 8 dim slices of one group) and one slice of the row's keys.
struct LaunchPlan {
  int head_groups = 4;
  int head_blocks = 1;
  int splits = 1;
};

// Small batches (4 n_tokens x ceil(H / 16) <= n_sms) and H <= 16: one group per block, all groups
// of a row in parallel, splits of >= kMinKeysPerSplitGroup keys up to kGroupBlocksPerSm blocks
// per SM. Larger batches: all heads per block (the key tile is decoded once for them), splits as
// before (enough blocks for one per SM, >= kMinKeysPerSplit keys each). force_head_groups (1 or
// 4; 0 = choose) fixes the variant. splits == 1 means no combine pass.
LaunchPlan choose_plan(int n_tokens, int n_heads, int expected_keys, int n_sms, int force_head_groups = 0);

// Split count alone (choose_plan(...).splits).
int choose_splits(int n_tokens, int n_heads, int expected_keys, int n_sms);

// f32 per split partial: O [H][512] (unnormalized), m [H] at H 512, l [H] at H 513, padded
// to a multiple of 4 floats so every partial's O rows stay 16-byte aligned.
DSV4_ATTN_PLAN_HD inline int64_t partial_floats(int n_heads) {
  return int64_t(n_heads) * kHeadDim + (2 * int64_t(n_heads) + 3) / 4 * 4;
}

// Partials the workspace must hold for any batch up to max_tokens (splits only for batches that
// split; at most kMaxSplits each), any variant choose_plan picks for H = n_heads.
int64_t max_partials(int max_tokens, int n_heads, int n_sms);

// Heads whose queries one block holds: min(H, 16 head_groups).
inline int block_heads(int n_heads, int head_groups) { return n_heads < 16 * head_groups ? n_heads : 16 * head_groups; }

// Dynamic shared memory of the split kernel with key tiles of `key_tile` keys for a block of
// `n_heads` heads (block_heads): Q [16 ceil(n_heads / 16)][512] bf16, the decoded key tile
// [key_tile][512] bf16, the QK exchange f32 [8 warps][16][key_tile], the compacted selected list
// i32 [topk] (CSA; 0 otherwise) and a few counters.
size_t smem_bytes(int key_tile, int n_heads, int topk);

// The key tile for a block of `n_heads` heads: 32 keys when it fits in `smem_optin` bytes, else
// 16 (sm_86 with 64 heads per block); 0 when neither fits.
int choose_key_tile(int n_heads, int topk, size_t smem_optin);

}  // namespace dsv4::cuda::attention_detail
