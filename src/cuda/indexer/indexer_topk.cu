// indexer_topk.cu: Lightning Indexer scoring and top-k (MODEL_SPEC.md §6.6 steps 6-8), bit-exact
// with cpu::indexer_scores + cpu::topk_indices. Two launches:
//   split: one block per (row, split) scores its share of the row's n_vis keys 64 at a time
//          (decode the fp4 records to bf16 in shared memory, mma.sync m16n8k16 with the 64
//          heads as M, then the reference's rounding chain and the head sum in head order) and
//          keeps its own top-k of 64-bit (score, index) keys (a split of at most topk keys keeps
//          them all without selecting), sorted descending when the row has more than one split
//          and more than kSortAllKeys keys.
//          This is the decode kernel (at most kWideRows rows); wide launches (prefill chunks)
//          run the multi-row kernel of indexer_rows.cu, which writes the same lists;
//   merge: a row of at most kRankKeysPerBlock x R candidates (R = merge_blocks_for(rows): 16 up
//          to 16 rows) is ranked by R blocks: each counts, for its share of the keys, the keys
//          above it, which is the key's place in the output (topk_plan.h rank_merge); its splits
//          skip their sorts. Any other row: one block selects the global top-k from the splits'
//          lists (only their valid entries). A row of at most kSortAllKeys candidates is sorted
//          whole. Otherwise the lists' heads bound the k-th key from below: with the smallest
//          c such that the lists' first min(c, count) keys number at least k, the least of those
//          keys, T, has at least k keys at or above it, so only keys >= T (each list's head, read up
//          to the first key below T) can be selected: usually a few times k of the S x topk
//          candidates. They are gathered into shared memory and radix-selected there (at most
//          one per thread: sorted whole, the first k taken). Should they not fit (heavy ties
//          around T), the general path runs: histogram passes over the lists (L2) until the keys
//          in play fit, then the passes in shared memory. The k winners are sorted (bitonic, in
//          registers and warp shuffles) into the output.
// Nothing is sized by the context: the workspace holds topk keys per (row, split) slot.
//
// Why the scores are exact: q and the keys are e2m1 codes times powers of two, so every product
// is exact and, with block scales a few binades apart (as fp4sim after a Hadamard gives), every
// partial sum of the 128-term dot fits in 24 bits: the tensor core's fp32 accumulation and the
// reference's loop give the same float in any order. The rest (bf16 roundings, the fp32 head sum
// in head order) is done exactly as the reference.
//
// Both launch as programmatic dependents (common/pdl.cuh) on SM90 and wait before anything else:
// every input is step data (the keys come from the indexer compressor just before).
#include <algorithm>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/l2_prefetch.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/indexer/candidates.cuh"
#include "cuda/indexer/indexer.h"
#include "cuda/indexer/ref_numerics.cuh"
#include "cuda/indexer/topk_args.h"
#include "cuda/indexer/topk_plan.h"

namespace dsv4::cuda {

using namespace indexer_detail;

namespace {

constexpr int kSplitThreads = 256;              // 8 warps: 4 head groups of 16 x 2 key halves of 32
constexpr int kMergeThreads = 1024;
constexpr int kMaxHeads = 64;
constexpr int kRowPad = kHeadDim + 8;           // bf16 per shared row (272 B): ldmatrix rows hit distinct banks
constexpr int kVPad = kMaxHeads + 8;            // bf16 per row of per-head terms (144 B)
constexpr int kSplitCap = 2 * kMaxTopk;         // candidate buffer of a split
constexpr int kMergeCap = 8 * kMaxTopk;         // keys in play the merge holds in shared memory
constexpr int kMergeUnroll = 8;                 // list loads in flight per thread in a merge pass
static_assert(kMergeThreads >= kMaxTopk, "the merge sorts its k winners one per thread");
// Keys in play the merge sorts whole (one per thread): at 4K context (~650 in play) that beat the
// select + take + sort by 0.6 us a call; at 2048 (two per thread) it lost 2.4 us at 64K keys (~1125
// in play) on the H200 (bench/results/NOTES.md).
constexpr int kSortAllKeys = kMergeThreads;
static_assert(2 * kSortAllKeys <= kMergeCap, "the whole sort uses s_keys as two buffers");
static_assert(kMaxTopk % kSplitThreads == 0, "a split sorts its list in kMaxTopk / kSplitThreads slots");
static_assert(kSplitCap >= 2 * kMaxTopk, "a split sorts its list with the buffer's second half as scratch");
constexpr int kItemsPerThread = kTileKeys * (kHeadDim / 8) / kSplitThreads;  // 8-dim words per thread per tile

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The raw words of one tile a thread decodes: item i = threadIdx.x + 256 i is (key i / 16,
// 8-dim word i % 16) of the tile.
struct TileWords {
  uint32_t word[kItemsPerThread];
  uint32_t scale[kItemsPerThread];  // the ue8m0 byte of the word's 32-dim block
};

__device__ __forceinline__ void load_tile(TileWords& r, const TopkArgs& g, const int32_t* bt, int64_t e0, int64_t end) {
  // One page lookup per tile (kv_view.h), unless the tile spans pages (ratio > 4).
  const int64_t run = e0 < end ? paged_run_offset(bt, e0, kTileKeys, g.ratio, kKeyBytes) : 0;
#pragma unroll
  for (int i = 0; i < kItemsPerThread; ++i) {
    const int item = threadIdx.x + kSplitThreads * i;
    const int64_t e = e0 + item / 16;
    const int wi = item % 16;
    r.word[i] = 0;
    r.scale[i] = 127;
    if (e < end) {
      const uint8_t* rec =
          g.keys + (run >= 0 ? run + int64_t(item / 16) * kKeyBytes : paged_record_offset(bt, e, g.ratio, kKeyBytes));
      r.word[i] = __ldg(reinterpret_cast<const uint32_t*>(rec) + wi);
      r.scale[i] = __ldg(rec + kHeadDim / 2 + wi / 4);
    }
  }
}

__device__ __forceinline__ void store_tile(const TileWords& r, __nv_bfloat16* s_keys) {
#pragma unroll
  for (int i = 0; i < kItemsPerThread; ++i) {
    const int item = threadIdx.x + kSplitThreads * i;
    uint32_t v[4];
    decode_e2m1x8(r.word[i], r.scale[i], v);
    *reinterpret_cast<uint4*>(s_keys + (item / 16) * kRowPad + (item % 16) * 8) = make_uint4(v[0], v[1], v[2], v[3]);
  }
}

// The reference's per-(head, key) term: bf16(relu(bf16(q . k)) * w_h).
__device__ __forceinline__ __nv_bfloat16 head_term(float dot, float w) {
  return __float2bfloat16_rn(__fmul_rn(fmaxf(ref::round_bf16(dot), 0.0f), w));
}

__global__ void __launch_bounds__(kSplitThreads) indexer_split_kernel(const TopkArgs g) {
  __shared__ __align__(16) __nv_bfloat16 s_tile[kTileKeys * kRowPad];  // q rows first, then key tiles
  __shared__ __align__(16) __nv_bfloat16 s_v[kTileKeys * kVPad];       // [key][head] terms
  __shared__ uint64_t s_keys[kSplitCap];
  __shared__ float s_w[kMaxHeads];
  __shared__ int s_hist[256];
  __shared__ SelectState s_sel;
  __shared__ int s_count;
  __shared__ uint64_t s_thr;

  // The row's keys: the step's arrays, host copies that no kernel writes (pdl.cuh), before the wait.
  const int t = blockIdx.x, split = blockIdx.y;
  const int64_t slot = int64_t(t) * g.n_splits + split;
  const int seq = g.b.token_seq[t];
  const int64_t n_vis = seq < 0 ? 0 : (int64_t(g.b.token_pos[t]) + 1) / g.ratio;
  const int64_t chunk = split_keys(n_vis, g.n_splits, g.min_split_keys);
  const int64_t begin = split * chunk, end = std::min(n_vis, begin + chunk);
  const int32_t* bt = g.b.block_table + int64_t(seq < 0 ? 0 : seq) * g.b.max_blocks;
  // L2 gets the keys of the block's first tiles (those load_tile has in flight first) while the
  // previous kernel finishes: written steps ago, they come from DRAM; a prefetch is safe before
  // the wait (common/l2_prefetch.cuh). Two threads per 68-byte key: its first and last line.
  for (int64_t i = threadIdx.x; i < 2 * std::min<int64_t>(end - begin, 3 * kTileKeys); i += kSplitThreads) {
    const uint8_t* rec = g.keys + paged_record_offset(bt, begin + i / 2, g.ratio, kKeyBytes);
    prefetch_l2_line(rec + (i % 2) * (kKeyBytes - 1));
  }
  pdl_wait();  // q, w and the keys: earlier kernels
  if (begin >= end) {  // padding row, nothing visible, or nothing left for this split
    if (threadIdx.x == 0) g.counts[slot] = 0;
    return;
  }
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Stage q (n_heads x 128 bf16) and w; each MMA warp keeps its 16 heads' A fragments.
  const __nv_bfloat16* q = g.qi + int64_t(t) * g.n_heads * kHeadDim;
  for (int i = tid; i < g.n_heads * (kHeadDim / 8); i += kSplitThreads) {
    const int h = i / (kHeadDim / 8), c = i % (kHeadDim / 8);
    *reinterpret_cast<uint4*>(s_tile + h * kRowPad + c * 8) = *reinterpret_cast<const uint4*>(q + h * kHeadDim + c * 8);
  }
  for (int h = tid; h < g.n_heads; h += kSplitThreads) s_w[h] = g.w[int64_t(t) * g.n_heads + h];
  if (tid == 0) {
    s_count = 0;
    s_thr = 0;
  }
  // Three tiles in flight (load_tile reads nothing past `end`): at long contexts the keys come
  // from DRAM, and a split walks its tiles one after the other.
  TileWords words, next1, next2;
  load_tile(words, g, bt, begin, end);
  load_tile(next1, g, bt, begin + kTileKeys, end);
  load_tile(next2, g, bt, begin + 2 * kTileKeys, end);
  __syncthreads();
  const int mw = warp & 3, nw = warp >> 2;  // heads 16 mw .. +15, tile keys 32 nw .. +31
  const bool mma_warp = 16 * mw < g.n_heads;
  uint32_t afrag[kHeadDim / 16][4];
  if (mma_warp) {
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks)
      ldmatrix_x4(afrag[ks], s_tile + (16 * mw + lane % 16) * kRowPad + ks * 16 + (lane / 16) * 8);
  }
  __syncthreads();  // s_tile now holds key tiles

  const CandidateBuffer buf{s_keys, &s_count, &s_thr};
  for (int64_t e0 = begin; e0 < end; e0 += kTileKeys) {
    store_tile(words, s_tile);
    __syncthreads();
    words = next1;
    next1 = next2;
    if (e0 + 3 * kTileKeys < end) load_tile(next2, g, bt, e0 + 3 * kTileKeys, end);  // in flight during the MMA

    if (mma_warp) {
      float acc[4][4] = {};
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks) {
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          // Matrices: (n-tile 2np, k 0-7), (2np, k 8-15), (2np+1, k 0-7), (2np+1, k 8-15).
          uint32_t bfrag[4];
          const int key = 32 * nw + 16 * np + (lane / 16) * 8 + lane % 8;
          ldmatrix_x4(bfrag, s_tile + key * kRowPad + ks * 16 + ((lane / 8) % 2) * 8);
          mma_bf16(acc[2 * np], afrag[ks], bfrag[0], bfrag[1]);
          mma_bf16(acc[2 * np + 1], afrag[ks], bfrag[2], bfrag[3]);
        }
      }
      // acc[nt]: c0, c1 = head h0, keys k0, k0 + 1; c2, c3 = head h0 + 8.
      const int h0 = 16 * mw + lane / 4;
      const float w0 = s_w[h0], w1 = s_w[h0 + 8];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int k0 = 32 * nw + 8 * nt + 2 * (lane % 4);
        s_v[k0 * kVPad + h0] = head_term(acc[nt][0], w0);
        s_v[(k0 + 1) * kVPad + h0] = head_term(acc[nt][1], w0);
        s_v[k0 * kVPad + h0 + 8] = head_term(acc[nt][2], w1);
        s_v[(k0 + 1) * kVPad + h0 + 8] = head_term(acc[nt][3], w1);
      }
    }
    __syncthreads();

    // Score = bf16(sum over heads in head order, fp32), one key per thread (warps 0, 1 whole).
    if (tid < kTileKeys) {
      uint64_t key = 0;  // none
      if (e0 + tid < end) {
        const uint4* row = reinterpret_cast<const uint4*>(s_v + tid * kVPad);
        float total = 0.0f;
        for (int i = 0; i < g.n_heads / 8; ++i) total = ref::add_bf16x8_in_order(total, row[i]);
        key = topk_key(ref::round_bf16(total), int32_t(e0 + tid));
      }
      offer(buf, key);
    }
    __syncthreads();
    if (s_count > kSplitCap - kTileKeys) cut_candidates<kSplitCap / kSplitThreads>(buf, g.topk, s_hist, &s_sel);
  }

  // Sorted lists are what the merge's bound search needs; a row of at most kSortAllKeys keys has
  // no search (the merge sorts all of them), nor has a row the merge ranks (rank_merge), so their
  // splits skip their sorts.
  write_split_list<kSplitCap / kSplitThreads, kMaxTopk / kSplitThreads>(
      buf, g.topk, g.n_splits > 1 && n_vis > kSortAllKeys && !rank_merge(n_vis, g.merge_blocks), s_hist, &s_sel,
      g.cand + slot * g.ws_topk, g.counts + slot, buf.keys + kMaxTopk);
}

// One block per row. The row's candidates are the valid entries of its splits' lists (list s
// holds counts[s] keys); entry j of the concatenation is found through the prefix offsets. With
// k = min(topk, candidates): while more keys are in play than kMergeCap, each radix pass reads
// the lists; then the keys in play are gathered into shared memory (those already taken into
// s_take) and the remaining passes run there. The k taken keys are sorted descending.
__global__ void __launch_bounds__(kMergeThreads) indexer_merge_kernel(const TopkArgs g) {
  __shared__ uint64_t s_keys[kMergeCap];  // keys in play
  __shared__ uint64_t s_take[kMaxTopk];   // taken keys, then sorted
  __shared__ int s_off[kMaxSplits + 1];
  __shared__ int s_hist[256];
  __shared__ SelectState s_sel;
  __shared__ int s_n_play, s_n_take;
  __shared__ uint64_t s_thr;

  // The row: the step's arrays (host copies that no kernel writes, pdl.cuh) before the wait.
  const int t = blockIdx.x, part = blockIdx.y, tid = threadIdx.x;
  int32_t* out = g.selected + int64_t(t) * g.topk;
  const int seq = g.b.token_seq[t];
  const int64_t n_vis = seq < 0 ? 0 : (int64_t(g.b.token_pos[t]) + 1) / g.ratio;
  pdl_wait();  // the split kernel's lists
  if (seq < 0) {
    if (part == 0)
      for (int i = tid; i < g.topk; i += kMergeThreads) out[i] = -1;
    return;
  }
  const bool rank = rank_merge(n_vis, g.merge_blocks);
  if (!rank && part > 0) return;  // the one-block merge runs in block 0
  const int n_splits = g.n_splits;
  const int64_t slot0 = int64_t(t) * n_splits;
  if (tid < 32) {  // prefix offsets of the lists: lane l sums lists kPer l .. kPer l + kPer - 1
    constexpr int kPer = kMaxSplits / 32;
    int c[kPer], sum = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int sl = kPer * tid + i;
      c[i] = sl < n_splits ? g.counts[slot0 + sl] : 0;
      sum += c[i];
    }
    int incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, o);
      if (tid >= o) incl += v;
    }
    int off = incl - sum;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      s_off[kPer * tid + i] = off;
      off += c[i];
    }
    if (tid == 31) s_off[kMaxSplits] = incl;
    if (tid == 0) {
      select_init(&s_sel, 0);
      s_n_play = 0;
      s_n_take = 0;
    }
  }
  __syncthreads();
  const int n_cand = s_off[kMaxSplits];  // lists past n_splits count 0
  const int k = std::min(n_cand, g.topk);
  if (tid == 0) s_sel.need = k;
  __syncthreads();

  // Entry j (< n_cand) of the concatenated lists.
  auto entry = [&](int j) {
    int s = 0;
#pragma unroll
    for (int step = kMaxSplits / 2; step > 0; step >>= 1)
      if (s_off[s + step] <= j) s += step;  // the last list s with s_off[s] <= j (s_off[64] = n_cand > j)
    return g.cand[(slot0 + s) * g.ws_topk + (j - s_off[s])];
  };
  auto each_listed = [&](const auto& f) {  // warp-uniform, key 0 past the end (candidates.cuh)
    for (int base = tid & ~31; base < n_cand; base += kMergeUnroll * kMergeThreads) {
      uint64_t key[kMergeUnroll];
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) {
        const int j = base + (tid & 31) + u * kMergeThreads;
        key[u] = j < n_cand ? entry(j) : 0;
      }
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) f(key[u]);
    }
  };

  // The end of both paths: select among the n_play keys in play in shared memory (from digit
  // `shift`, when `select`), take those at or above the select's prefix, sort the k taken keys
  // and write their indices.
  auto select_take_write = [&](int n_play, int shift, bool select) {
    if (select) {
      radix_select(
          [&](const auto& f) {
            for (int i0 = tid & ~31; i0 < n_play; i0 += kMergeThreads) {
              const int i = i0 + (tid & 31);
              f(i < n_play ? s_keys[i] : uint64_t(0));
            }
          },
          shift, s_hist, &s_sel);
    }
    const uint64_t thr = s_sel.prefix;
    for (int i0 = tid & ~31; i0 < n_play; i0 += kMergeThreads) {
      const int i = i0 + (tid & 31);
      const uint64_t key = i < n_play ? s_keys[i] : 0;
      warp_append(key != 0 && key >= thr, key, s_take, &s_n_take, kMaxTopk);
    }
    __syncthreads();
    sort_keys_desc<1>(s_take, k, s_keys);  // s_n_take == k <= kMaxTopk <= kMergeThreads; s_keys is free
    for (int i = tid; i < g.topk; i += kMergeThreads) out[i] = i < k ? topk_key_index(s_take[i]) : -1;
  };
  // The n (<= kSortAllKeys) keys in s_keys sorted whole (one per thread, s_keys' second half as
  // scratch): the first k are the selection.
  auto sort_all_write = [&](int n) {
    sort_keys_desc<kSortAllKeys / kMergeThreads>(s_keys, n, s_keys + kSortAllKeys);
    for (int i = tid; i < g.topk; i += kMergeThreads) out[i] = i < k ? topk_key_index(s_keys[i]) : -1;
  };

  // Rows the launch's merge_blocks blocks rank (contexts up to ~8K at batch 1): block `part` takes
  // keys [part * per, +per) of the concatenation and counts, for each, the row's keys above it, in
  // kMergeThreads / per slices of the row (shared-memory atomics sum the slices). Keys are unique,
  // so the counts are the places 0 .. n_cand - 1: each of the first k is written by one block.
  if (rank) {
    int* s_rank = s_hist;  // per <= kRankKeysPerBlock <= 256 counts
    static_assert(kRankKeysPerBlock <= 256 && kRankKeysPerBlock * kMaxMergeBlocks <= kMergeCap,
                  "the rank path's counts live in s_hist, the row's keys in s_keys");
    const int per = (n_cand + g.merge_blocks - 1) / g.merge_blocks;
    const int i0 = part * per, cnt = std::min(per, n_cand - i0);
    if (part == 0)
      for (int i = k + tid; i < g.topk; i += kMergeThreads) out[i] = -1;
    if (cnt <= 0) return;  // block-uniform
    for (int j = tid; j < n_cand; j += kMergeThreads) s_keys[j] = entry(j);
    if (tid < cnt) s_rank[tid] = 0;
    __syncthreads();
    const int slices = kMergeThreads / per, il = tid % per, slice = tid / per;
    if (slice < slices && il < cnt) {
      const uint64_t key = s_keys[i0 + il];
      const int jb = slice * n_cand / slices, je = (slice + 1) * n_cand / slices;
      int above = 0;
#pragma unroll 4
      for (int j = jb; j < je; ++j) above += s_keys[j] > key;
      atomicAdd(&s_rank[il], above);
    }
    __syncthreads();
    if (tid < cnt) {
      const int place = s_rank[tid];
      if (place < k) out[place] = topk_key_index(s_keys[i0 + tid]);
    }
    return;
  }

  // Short rows (contexts up to ~4K): every candidate is in play, sorted whole (one per thread),
  // the first k taken. No bound search, no second round trip to the lists, and the splits did
  // not sort theirs.
  if (n_cand <= kSortAllKeys) {
    static_assert(kSortAllKeys == kMergeThreads, "one candidate per thread");
    if (tid < n_cand) s_keys[tid] = entry(tid);
    __syncthreads();
    sort_all_write(n_cand);
    return;
  }

  // Fast path: gather the keys >= T from the sorted lists' heads (see the file comment).
  if (k < n_cand) {
    if (tid < 32) {
      // Lane l holds the counts of lists l, l + 32, ...: the search below reads no shared memory.
      constexpr int kPer = kMaxSplits / 32;
      int cnt[kPer], longest = 0;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int sl = tid + 32 * i;
        cnt[i] = sl < n_splits ? s_off[sl + 1] - s_off[sl] : 0;
        longest = max(longest, cnt[i]);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) longest = max(longest, __shfl_xor_sync(0xffffffffu, longest, o));
      auto covered = [&](int c) {  // sum over lists of min(c, count)
        int sum = 0;
#pragma unroll
        for (int i = 0; i < kPer; ++i) sum += min(c, cnt[i]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        return sum;
      };
      int lo = 1, hi = longest;  // covered(longest) = n_cand > k
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (covered(mid) >= k) hi = mid;
        else lo = mid + 1;
      }
      uint64_t t_key = ~uint64_t(0);
      for (int sl = tid; sl < n_splits; sl += 32) {
        const int c = min(lo, s_off[sl + 1] - s_off[sl]);
        if (c > 0) {
          const uint64_t v = g.cand[(slot0 + sl) * g.ws_topk + (c - 1)];
          t_key = v < t_key ? v : t_key;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const uint64_t v = __shfl_xor_sync(0xffffffffu, t_key, o);
        t_key = v < t_key ? v : t_key;
      }
      if (tid == 0) s_thr = t_key;
    }
    __syncthreads();
    const uint64_t thr = s_thr;
    const int warp = tid >> 5, lane = tid & 31;
    for (int sl = warp; sl < n_splits; sl += kMergeThreads / 32) {
      const uint64_t* list = g.cand + (slot0 + sl) * g.ws_topk;
      const int n = s_off[sl + 1] - s_off[sl];
      for (int i0 = 0; i0 < n; i0 += 32) {
        const uint64_t key = i0 + lane < n ? list[i0 + lane] : 0;
        const bool keep = key != 0 && key >= thr;
        warp_append(keep, key, s_keys, &s_n_play, kMergeCap);
        if (!__all_sync(0xffffffffu, keep)) break;  // sorted: the rest of the list is below T
      }
    }
    __syncthreads();
    if (s_n_play <= kSortAllKeys) {
      // Few keys in play: sorting them all (registers, shuffles, two buffers in s_keys) costs
      // less than the radix select, the take and the sort of the k winners, which are then the
      // first k.
      sort_all_write(s_n_play);
      return;
    }
    if (s_n_play <= kMergeCap) {
      select_take_write(s_n_play, 56, true);
      return;
    }
    __syncthreads();  // too many ties around T: the general path below, from a fresh state
    if (tid == 0) {
      select_init(&s_sel, k);
      s_n_play = 0;
    }
    __syncthreads();
  }

  // Passes over the lists until the keys in play fit (or the select is finished).
  int shift = 56;
  bool done = k == n_cand;  // everything is taken (prefix 0)
  if (!done && n_cand > kMergeCap) {
    for (; shift >= 0; shift -= 8) {
      done = radix_pass(each_listed, shift, s_hist, &s_sel);
      if (done || s_sel.bucket <= kMergeCap) break;
    }
    shift -= 8;
  }
  // Gather: keys above the prefix are taken (fewer than k), keys on it stay in play (at most
  // kMergeCap). The bounds checks only guard shared memory should the keys not be unique.
  {
    const uint64_t mask = s_sel.mask, prefix = s_sel.prefix;
    each_listed([&](uint64_t key) {
      const uint64_t m = key & mask;
      warp_append(key != 0 && m > prefix, key, s_take, &s_n_take, kMaxTopk);
      warp_append(key != 0 && m == prefix, key, s_keys, &s_n_play, kMergeCap);
    });
  }
  __syncthreads();
  select_take_write(s_n_play < kMergeCap ? s_n_play : kMergeCap, shift, !done);
}

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

int64_t workspace_slots(const IndexerWorkspace& ws) { return int64_t(ws.max_tokens()) * ws.n_splits(); }

}  // namespace

Result<IndexerWorkspace> IndexerWorkspace::create(int max_tokens, int64_t max_positions, int ratio, int topk) {
  if (max_tokens < 1 || max_positions < 1 || ratio < 1 || topk < 1 || topk > kMaxTopk)
    return invalid_argument("IndexerWorkspace: bad sizes (max_tokens {}, max_positions {}, ratio {}, topk {} <= {})",
                            max_tokens, max_positions, ratio, topk, kMaxTopk);
  IndexerWorkspace ws;
  ws.max_tokens_ = max_tokens;
  ws.n_splits_ = workspace_splits(max_tokens, max_positions / ratio);
  ws.topk_ = topk;
  const size_t slots = size_t(max_tokens) * size_t(ws.n_splits_);
  DSV4_ASSIGN_OR_RETURN(ws.buf_, DeviceBuffer::create(slots * size_t(topk) * 8 + slots * 4));
  return Result<IndexerWorkspace>(std::move(ws));
}

Status indexer_topk(const StepBatchView& b, const __nv_bfloat16* qi, const float* w, int n_heads,
                    const LayerKvView& kv, int topk, IndexerWorkspace& ws, int32_t* selected, cudaStream_t stream,
                    int max_splits, IndexerSplitKernel kernel, int merge_blocks) {
  if (max_splits < 0) return invalid_argument("indexer_topk: max_splits {} < 0", max_splits);
  if (merge_blocks < 0 || merge_blocks > kMaxMergeBlocks)
    return invalid_argument("indexer_topk: merge_blocks {} outside 0..{}", merge_blocks, kMaxMergeBlocks);
  if (b.n_tokens < 0 || b.n_tokens > ws.max_tokens())
    return invalid_argument("indexer_topk: n_tokens {} outside 0..{} (workspace size)", b.n_tokens, ws.max_tokens());
  if (n_heads < 16 || n_heads > kMaxHeads || n_heads % 16 != 0)
    return invalid_argument("indexer_topk: n_heads {} must be a multiple of 16 up to {}", n_heads, kMaxHeads);
  if (kv.index_dim != kHeadDim || kv.index_key_bytes != kKeyBytes)
    return invalid_argument("indexer_topk: index keys of {} dims / {} bytes (the kernel is built for {} / {})",
                            kv.index_dim, kv.index_key_bytes, kHeadDim, kKeyBytes);
  if (kv.ratio < 1 || kKvBlockTokens % kv.ratio != 0)
    return invalid_argument("indexer_topk: ratio {} must divide {}", kv.ratio, kKvBlockTokens);
  if (topk < 1 || topk > ws.topk()) return invalid_argument("indexer_topk: topk {} outside 1..{}", topk, ws.topk());
  if (b.n_tokens == 0) return Status::ok();
  if (b.token_seq == nullptr || b.token_pos == nullptr || b.block_table == nullptr || b.max_blocks < 1)
    return invalid_argument("indexer_topk: step batch without token_seq, token_pos or block_table");
  if (qi == nullptr || w == nullptr || kv.index_keys == nullptr || selected == nullptr || ws.data() == nullptr)
    return invalid_argument("indexer_topk: null qi, w, index_keys, selected or workspace");
  if (!aligned(qi, 16) || !aligned(kv.index_keys, 4))
    return invalid_argument("indexer_topk: qi must be 16-byte and index_keys 4-byte aligned");

  const bool rows = kernel == IndexerSplitKernel::kRows ||
                    (kernel == IndexerSplitKernel::kAuto && rows_kernel_for(b.n_tokens));
  int n_splits = topk_launch_splits(b.n_tokens, workspace_slots(ws), rows);
  if (max_splits > 0) n_splits = std::min(n_splits, max_splits);
  const size_t slots = size_t(ws.max_tokens()) * size_t(ws.n_splits());
  TopkArgs g;
  g.b = b;
  g.qi = qi;
  g.w = w;
  g.keys = kv.index_keys;
  g.ratio = kv.ratio;
  g.n_heads = n_heads;
  g.topk = topk;
  g.n_splits = n_splits;
  g.min_split_keys = split_min_keys(b.n_tokens);
  g.merge_blocks = merge_blocks > 0 ? merge_blocks : merge_blocks_for(b.n_tokens);
  g.ws_topk = ws.topk();
  g.cand = static_cast<uint64_t*>(ws.data());
  g.counts = reinterpret_cast<int32_t*>(static_cast<char*>(ws.data()) + slots * size_t(ws.topk()) * 8);
  g.selected = selected;
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  if (rows) {
    DSV4_RETURN_IF_ERROR(launch_indexer_rows(g, stream, pdl));
  } else {
    DSV4_RETURN_IF_ERROR(launch_kernel(&indexer_split_kernel, dim3(unsigned(b.n_tokens), unsigned(n_splits)),
                                       dim3(kSplitThreads), 0, stream, pdl, g, "indexer_split_kernel"));
  }
  return launch_kernel(&indexer_merge_kernel, dim3(unsigned(b.n_tokens), unsigned(g.merge_blocks)), dim3(kMergeThreads),
                       0, stream, pdl, g, "indexer_merge_kernel");
}

}  // namespace dsv4::cuda
