// topk_plan.h: the host-and-device pieces of the indexer's split top-k that are pure integer
// logic, kept here so a CPU test can check them without a GPU: how many splits a launch uses and
// how many keys each split scores, the 64-bit candidate keys (score and index in one ordered
// word), the digit choice of the radix select, and the decode of eight packed e2m1 codes to bf16
// (byte-permute tables).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DSV4_TOPK_HD __host__ __device__ __forceinline__
#else
#define DSV4_TOPK_HD inline
#endif

namespace dsv4::cuda::indexer_detail {

inline constexpr int kMaxTopk = 512;         // candidate buffers hold 2 x this
inline constexpr int kMaxSplits = 128;       // splits of one row (and lists the merge reads): a
                                             // batch-1 row at 256K (65536 keys) fills the GPU with
                                             // splits of 512 keys, which need no selection
inline constexpr int kTileKeys = 64;         // keys scored per step of a split: one CSA page
inline constexpr int kMinSplitKeys = 1024;   // keys per split of a wide launch (more than kWideRows rows)
inline constexpr int kWideRows = 64;         // rows that may each use kMaxSplits splits
inline constexpr int kRowsPerBlock = 4;      // rows a block of the multi-row split kernel scores together
inline constexpr int kRowsTargetBlocks = 1024;  // blocks a multi-row launch aims for (several waves)
inline constexpr int kHeadDim = 128;         // indexer head dim the kernels are built for
inline constexpr int kKeyBytes = kHeadDim / 2 + kHeadDim / 32;  // 68: [64 B e2m1 pairs][4 ue8m0]

DSV4_TOPK_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The merge's rank path: a decode row of at most kRankKeysPerBlock x R candidates is merged by R
// blocks, each of which counts, for its share of the keys, how many of the row's keys are larger:
// that count is the key's place in the output (keys are unique), so no sort and no selection is
// needed, and the splits need not sort their lists. R is a launch value (merge_blocks_for) so a
// captured graph stays valid; a row with more candidates takes the one-block merge.
inline constexpr int kRankKeysPerBlock = 128;   // keys one merge block ranks at most
inline constexpr int kRankTargetBlocks = 256;   // merge blocks a launch aims for over all its rows
inline constexpr int kMaxMergeBlocks = 16;      // merge blocks per row

// Splits per row of the workspace at max_tokens rows: enough that kWideRows decode rows each get
// kMaxSplits, no more than the longest context needs.
inline int workspace_splits(int max_tokens, int64_t max_entries) {
  const int64_t by_rows = ceil_div(int64_t(kWideRows) * kMaxSplits, max_tokens);
  const int64_t by_keys = ceil_div(max_entries, kMinSplitKeys);
  int64_t s = by_rows < by_keys ? by_rows : by_keys;
  return int(s < 1 ? 1 : s > kMaxSplits ? kMaxSplits : s);
}

// Splits per row of a launch with n_tokens rows over `slots` = max_tokens x workspace_splits
// (row, split) slots: a host value fixed by the batch size, so a captured graph stays valid.
DSV4_TOPK_HD int launch_splits(int n_tokens, int64_t slots) {
  const int64_t s = slots / (n_tokens > 0 ? n_tokens : 1);
  return int(s < 1 ? 1 : s > kMaxSplits ? kMaxSplits : s);
}

// Splits per row of a wide launch (more than kWideRows rows), which runs the multi-row kernel:
// blocks of kRowsPerBlock rows already number ceil(n_tokens / kRowsPerBlock), so only enough
// splits for about kRowsTargetBlocks blocks (each split costs a sort per row and a list to merge),
// never more than launch_splits allows.
DSV4_TOPK_HD int rows_launch_splits(int n_tokens, int64_t slots) {
  const int64_t groups = ceil_div(n_tokens > 0 ? n_tokens : 1, kRowsPerBlock);
  const int64_t want = ceil_div(kRowsTargetBlocks, groups);
  const int cap = launch_splits(n_tokens, slots);
  return int(want < cap ? want : cap);
}

// Whether indexer_topk's automatic choice runs the multi-row kernel for n_tokens rows.
DSV4_TOPK_HD bool rows_kernel_for(int n_tokens) { return n_tokens > kWideRows; }

// The splits indexer_topk launches with (before a test's max_splits cap), for the multi-row
// kernel or the per-row one.
DSV4_TOPK_HD int topk_launch_splits(int n_tokens, int64_t slots, bool rows_kernel) {
  return rows_kernel ? rows_launch_splits(n_tokens, slots) : launch_splits(n_tokens, slots);
}

// Merge blocks per row of a launch with n_tokens rows (a host value): 16 for up to 16 rows, then
// fewer, down to 1 (no rank path) past 128 rows.
DSV4_TOPK_HD int merge_blocks_for(int n_tokens) {
  const int r = kRankTargetBlocks / (n_tokens > 0 ? n_tokens : 1);
  return r < 1 ? 1 : r > kMaxMergeBlocks ? kMaxMergeBlocks : r;
}

// Whether a row with n_vis visible keys is merged by ranking over merge_blocks blocks (its
// candidates number at most n_vis). The split kernel asks the same question to skip its sort.
DSV4_TOPK_HD bool rank_merge(int64_t n_vis, int merge_blocks) {
  return merge_blocks > 1 && n_vis <= int64_t(kRankKeysPerBlock) * merge_blocks;
}

// Smallest split of a launch with n_tokens rows (a host value): decode-sized launches spread a
// row's keys over all its splits down to one tile each (short contexts then use many blocks, and
// a split of at most topk keys skips its selection); wide launches have blocks enough and keep
// kMinSplitKeys per split, so each block's staged q serves many tiles.
DSV4_TOPK_HD int split_min_keys(int n_tokens) { return n_tokens <= kWideRows ? kTileKeys : kMinSplitKeys; }

// Keys per split of a row with n_vis candidates: a multiple of kTileKeys (so every tile of a
// split lies in one page when the ratio is 4), at least min_keys (a multiple of kTileKeys).
DSV4_TOPK_HD int64_t split_keys(int64_t n_vis, int n_splits, int min_keys = kTileKeys) {
  const int64_t c = ceil_div(ceil_div(n_vis, n_splits), kTileKeys) * kTileKeys;
  return c < min_keys ? min_keys : c;
}

// One step of the MSB-first radix select over unique 64-bit keys: hist[0, n_bins) counts the
// keys still in play by digit; the wanted key is the need-th largest of them (1 <= need <= their
// count). Returns the bin that holds it and sets *above to the keys in higher bins and *bucket to
// the keys in that bin (every key of the bin is taken when *bucket == need - *above). The device
// scans 256 bins a warp at a time: the lane whose group of 8 holds the key runs this on its group.
DSV4_TOPK_HD int radix_digit(const int* hist, int n_bins, int need, int* above, int* bucket) {
  int acc = 0;
  for (int d = n_bins - 1; d >= 0; --d) {
    if (acc + hist[d] >= need) {
      *above = acc;
      *bucket = hist[d];
      return d;
    }
    acc += hist[d];
  }
  *above = acc;
  *bucket = 0;
  return -1;  // fewer than need keys: the caller's contract was broken
}

DSV4_TOPK_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// Candidate key: order-preserving bits of the score in the high word, ~index in the low word, so
// a larger key is a higher score or, on equal scores, a lower index (cpu::topk_indices). Scores
// +0 and -0 compare equal in the reference, so -0 is folded to +0. Key 0 is "no candidate".
DSV4_TOPK_HD uint64_t topk_key(float score, int32_t index) {
  uint32_t u = score == 0.0f ? 0u : float_bits(score);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (uint64_t(u) << 32) | uint64_t(~uint32_t(index));
}
DSV4_TOPK_HD int32_t topk_key_index(uint64_t key) { return int32_t(~uint32_t(key)); }

DSV4_TOPK_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t v = (uint64_t(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= uint32_t((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
  return r;
#endif
}

// Multiplies both bf16 halves of `pair` (non-negative magnitudes) by the bf16 power of two
// `scale2` (replicated). Exact: the products are e2m1 magnitudes times 2^e.
DSV4_TOPK_HD uint32_t bf16x2_scale(uint32_t pair, uint32_t scale2) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  // fma with -0 addend (so +0 stays +0): mul.bf16x2 needs SM90, fma.rn.bf16x2 is SM80.
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(pair), "r"(scale2), "r"(0x80008000u));
  return d;
#else
  uint32_t out = 0;
  for (int h = 0; h < 2; ++h) {
    const uint32_t a = ((pair >> (16 * h)) & 0xffffu) << 16, b = ((scale2 >> (16 * h)) & 0xffffu) << 16;
    float fa, fb;
    std::memcpy(&fa, &a, 4);
    std::memcpy(&fb, &b, 4);
    const float p = fa * fb;
    uint32_t u;
    std::memcpy(&u, &p, 4);
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (the products are exact)
    out |= (u >> 16) << (16 * h);
  }
  return out;
#endif
}

// bf16 bits of the ue8m0 scale byte sb (2^(sb - 127); byte 0 is 2^-127, a bf16 subnormal),
// replicated in both halves.
DSV4_TOPK_HD uint32_t ue8m0_bf16x2(uint32_t sb) {
  const uint32_t h = sb == 0 ? 0x0040u : (sb << 7);
  return h | (h << 16);
}

// Eight e2m1 codes (nibble n of `word` = element n, sign in bit 3) times 2^(sb - 127) as four
// bf16x2 words (elements 2i, 2i + 1 in word i, low half first). The magnitude tables hold the
// low and high bytes of the bf16 bits of 0, .5, 1, 1.5, 2, 3, 4, 6; a byte permute looks up
// four codes at once.
DSV4_TOPK_HD void decode_e2m1x8(uint32_t word, uint32_t sb, uint32_t out[4]) {
  constexpr uint32_t kLo03 = 0xC0800000u, kLo47 = 0xC0804000u;  // low bytes:  00 00 80 C0 | 00 40 80 C0
  constexpr uint32_t kHi03 = 0x3F3F3F00u, kHi47 = 0x40404040u;  // high bytes: 00 3F 3F 3F | 40 40 40 40
  const uint32_t scale2 = ue8m0_bf16x2(sb);
  for (int half = 0; half < 2; ++half) {
    const uint32_t g = (word >> (16 * half)) & 0xffffu;  // four codes
    const uint32_t sel = g & 0x7777u;                   // magnitudes only (selector bit 3 = sign mode)
    const uint32_t lo = byte_perm(kLo03, kLo47, sel), hi = byte_perm(kHi03, kHi47, sel);
    const uint32_t m01 = byte_perm(lo, hi, 0x5140u), m23 = byte_perm(lo, hi, 0x7362u);
    const uint32_t s01 = ((g << 12) & 0x8000u) | ((g << 24) & 0x80000000u);
    const uint32_t s23 = ((g << 4) & 0x8000u) | ((g << 16) & 0x80000000u);
    out[2 * half] = bf16x2_scale(m01, scale2) | s01;
    out[2 * half + 1] = bf16x2_scale(m23, scale2) | s23;
  }
}

}  // namespace dsv4::cuda::indexer_detail
