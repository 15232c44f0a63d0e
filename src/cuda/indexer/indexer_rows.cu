// indexer_rows.cu: the indexer's split kernel for wide launches (prefill chunks: more than
// kWideRows rows). The same lists and counts as the per-row split kernel (indexer_topk.cu), so
// the same merge and bit-exact results, with the work arranged for many rows over the same keys:
//  - a block scores kRowsPerBlock consecutive rows against each 64-key tile, so a tile's fp4
//    records are fetched and decoded once for four rows (the per-row kernel decoded every key
//    once per row: at a 262K prompt, 8192 rows x 65536 keys);
//  - the MMA is transposed: keys are M (ldmatrix from the decoded tile), the rows' heads are N
//    (register fragments loaded once per block). An accumulator pair is then two adjacent heads
//    of one key, so the reference's term chain bf16(relu(bf16(dot)) * w_h) runs on bf16x2 pairs
//    (cvt.rn, max, fma.rn with a -0 addend: the bf16 x bf16 product is exact in fp32, so one
//    rounding of it is the reference's) and lands as one 32-bit store in the [row][key][head]
//    terms the head sums read;
//  - every thread sums one (row, key) over the heads in head order (fp32, the reference's order),
//    so all 8 warps share the sums;
//  - two barriers per tile: while tile i is scored from one decoded buffer, tile i + 1 is decoded
//    into the other and tile i + 2 is copied (cp.async) into the raw slot tile i came from; a
//    tile is one run of 64 records (4352 B, one page at ratio 4) copied in 16-byte pieces, or
//    record by record in 4-byte pieces where a tile spans pages.
// On the H200 (bench/results/forward_h200.md, TopkPrefillTiming) it scores a 256K prefill chunk
// at 4.9 us per row against 11.3 for the per-row kernel; it is issue-bound (per-term chain,
// fp4 decode), not MMA-bound.
// Rows of one block that belong to different sequences (several prompts in one step) are scored
// as consecutive groups, each over its own sequence's keys with the other rows masked. Within a
// group the split boundaries come from the group's longest row; a row masks keys past its own
// n_vis. Every (row, split) slot is written by exactly one block.
#include <algorithm>

#include "cuda/common/cuda_check.h"
#include "cuda/common/kv_view.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/indexer/candidates.cuh"
#include "cuda/indexer/ref_numerics.cuh"
#include "cuda/indexer/topk_args.h"
#include "cuda/indexer/topk_plan.h"

namespace dsv4::cuda::indexer_detail {
namespace {

using mma::cp_async16;
using mma::cp_async4;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::ldmatrix_x4;
using mma::mma_bf16;
using mma::smem_u32;

constexpr int kThreads = 256;  // 8 warps: warp w scores row w / 2, heads 32 (w % 2) .. + 31
constexpr int kRows = kRowsPerBlock;
constexpr int kMaxHeads = 64;
constexpr int kRecordWords = kKeyBytes / 4;            // 17
constexpr int kRawTileBytes = kTileKeys * kKeyBytes;   // 4352
constexpr int kCap = kMaxTopk + 256;                   // candidate buffer of one row
// Shared memory: two raw tiles (as in the pool), two decoded tiles (bf16 [64 keys][128 dims],
// 256-byte rows), the terms (bf16 [kRows x 64 keys][64 heads], 128-byte rows) and the rows'
// candidate buffers. The bf16 rows are XOR-swizzled by 16-byte chunk (chunk c of row j lives at
// c ^ (j & 7)), so ldmatrix, the term stores and the head-sum reads are all free of bank
// conflicts without padding: 98816 B, which fits one block on an SM86 SM (99 KB) and two on SM90.
constexpr int kRawBytes = 2 * kRawTileBytes;
constexpr int kTileBytes = kTileKeys * kHeadDim * 2;
constexpr int kTermBytes = kRows * kTileKeys * kMaxHeads * 2;
constexpr int kCandBytes = kRows * kCap * 8;
constexpr int kSmemBytes = kRawBytes + 2 * kTileBytes + kTermBytes + kCandBytes;
// Blocks per SM the registers are bounded for: two on SM90 (228 KB of shared memory per SM), one
// on SM86 (100 KB), which may then use more than 128 registers per thread.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr int kMinBlocks = 1;
#else
constexpr int kMinBlocks = 2;
#endif
static_assert(kThreads == 2 * 32 * kRows, "two warps per row");
static_assert(kCap % kThreads == 0 && kCap >= kMaxTopk + kTileKeys, "cut_candidates covers the buffer");
static_assert(kMaxTopk % kThreads == 0, "a split sorts its list in kMaxTopk / kThreads slots");
static_assert(kRawBytes % 16 == 0 && kTileBytes % 16 == 0 && kTermBytes % 16 == 0, "16-byte aligned regions");

// bf16 offset of 16-byte chunk c (8 values) of row j in a swizzled buffer of `row` bf16 per row.
__device__ __forceinline__ int swz(int j, int c, int row) { return j * row + ((c ^ (j & 7)) << 3); }

// The reference's terms for heads (h, h + 1) of one key: bf16(relu(bf16(dot)) * w_h) as bf16x2.
__device__ __forceinline__ uint32_t head_terms(float dot_lo, float dot_hi, uint32_t w2) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(dot_hi), "f"(dot_lo));
  asm("max.bf16x2 %0, %0, %1;" : "+r"(d) : "r"(0u));
  asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(d) : "r"(w2), "r"(0x80008000u));
  return d;
}

__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t bf16_bits_pair(float lo, float hi) {
  // lo and hi are bf16 values held in fp32: their top halves are the bf16 bits.
  return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}

struct Shared {
  unsigned char* raw;     // u8 [2][64 keys x 68 B], as in the pool
  __nv_bfloat16* tile;    // bf16 [2][64 keys][128 dims], decoded, swizzled
  __nv_bfloat16* terms;   // bf16 [kRows x 64 keys][64 heads], swizzled
  uint64_t* cand;         // u64 [kRows][kCap]
  int* count;             // [kRows]
  uint64_t* thr;          // [kRows]
  int* hist;              // [256]
  SelectState* sel;
  __device__ CandidateBuffer buf(int r) const { return CandidateBuffer{cand + r * kCap, count + r, thr + r}; }
};

// Scores rows [ga, gb) of the block (rows t0 .. t0 + kRows - 1), all of sequence seq, over this
// split's share of their keys. Called by the whole block; returns synchronized. Key indices are
// int: n_vis = (position + 1) / ratio < 2^31.
__device__ __forceinline__ void score_group(const TopkArgs& g, const Shared& s, int t0, int ga, int gb, int seq) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, split = blockIdx.y;
  // Keys row t0 + r sees (0 for rows outside the group).
  auto n_vis = [&](int r) {
    const int t = t0 + r;
    return seq >= 0 && t >= ga && t < gb ? (g.b.token_pos[t] + 1) / g.ratio : 0;
  };
  int n_max = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) n_max = std::max(n_max, n_vis(r));
  const int chunk = int(split_keys(n_max, g.n_splits, g.min_split_keys));
  const int begin = split * chunk, end = std::min(n_max, begin + chunk);
  if (begin >= end) {  // padding rows, nothing visible, or nothing left for this split
    if (tid < kRows && t0 + tid >= ga && t0 + tid < gb) g.counts[int64_t(t0 + tid) * g.n_splits + split] = 0;
    return;
  }
  const int32_t* bt = g.b.block_table + int64_t(seq) * g.b.max_blocks;

  __syncthreads();  // the previous group is done with shared memory
  if (tid < kRows) {
    s.count[tid] = 0;
    s.thr[tid] = 0;
  }
  // This warp's row and heads: B fragments (q) and the bf16x2 weights of its head pairs.
  const int r = warp >> 1, h_base = 32 * (warp & 1);
  const int row_end = std::min(n_vis(r), begin + chunk);
  const bool mma_on = row_end > begin && h_base < g.n_heads;
  uint32_t qf[4][kHeadDim / 16][2];
  uint32_t w2[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int h = h_base + 8 * nt + lane / 4, hw = h_base + 8 * nt + 2 * (lane % 4);
    const bool h_ok = mma_on && h < g.n_heads;
    const uint32_t* q = reinterpret_cast<const uint32_t*>(g.qi + (int64_t(t0 + r) * g.n_heads + (h_ok ? h : 0)) * kHeadDim);
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      qf[nt][ks][0] = h_ok ? q[8 * ks + lane % 4] : 0u;
      qf[nt][ks][1] = h_ok ? q[8 * ks + 4 + lane % 4] : 0u;
    }
    const float* w = g.w + int64_t(t0 + r) * g.n_heads;
    w2[nt] = mma_on && hw < g.n_heads ? bf16_bits_pair(w[hw], w[hw + 1]) : 0u;
  }

  // Per-lane shared addresses of the MMA loop. ldmatrix: row lane % 16 of the first decoded
  // tile (row & 7 = lane & 7); its logical chunk 2 ks + lane / 16 lives at 2 ks ^ tile_x. Terms:
  // key lane / 4, head pair hw of n tile nt (keys lane / 4 + 16 mt and + 8 share its swizzle).
  const uint32_t tile_lane = smem_u32(s.tile) + (lane % 16) * kHeadDim * 2;
  const uint32_t tile_x = (lane & 7) ^ (lane >> 4);
  uint32_t term_lane[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
    term_lane[nt] = smem_u32(s.terms + swz(r * kTileKeys + lane / 4, (h_base >> 3) + nt, kMaxHeads) + 2 * (lane % 4));

  const int per_page = kKvBlockTokens / g.ratio, page_shift = __ffs(per_page) - 1;  // ratio divides 256
  // Raw tile of keys e0 .. e0 + 63 into slot `stage`; every thread commits one group per call.
  auto issue_raw = [&](int e0, int stage) {
    if (e0 < end) {
      const uint32_t dst = smem_u32(s.raw + stage * kRawTileBytes);
      // paged_run_offset (kv_view.h) with shifts: a page's record count is a power of two.
      const int in_page = e0 & (per_page - 1);
      const int64_t run = in_page + kTileKeys <= per_page
                              ? (int64_t(bt[e0 >> page_shift]) * per_page + in_page) * kKeyBytes
                              : int64_t(-1);
      if (run >= 0 && (reinterpret_cast<uintptr_t>(g.keys + run) & 15) == 0) {
        // The tile is one run of records (ratio <= 4: a page holds whole tiles): 16-byte pieces.
        // Records past `end` are read too (they are in the same page) and masked when scored.
        for (int i = tid; i < kRawTileBytes / 16; i += kThreads) cp_async16(dst + 16 * i, g.keys + run + 16 * i, true);
      } else {
        for (int i = tid; i < kTileKeys * kRecordWords; i += kThreads) {
          const int j = i / kRecordWords, word = i - j * kRecordWords;
          const bool ok = e0 + j < end;
          const uint8_t* src = ok ? g.keys + paged_record_offset(bt, e0 + j, g.ratio, kKeyBytes) + 4 * word : g.keys;
          cp_async4(dst + 4 * i, src, ok);
        }
      }
    }
    cp_async_commit();
  };
  // Raw slot `stage` -> decoded buffer `buf`: 64 keys x 16 words of 8 codes, 4 per thread.
  auto decode = [&](int stage, int buf) {
    const unsigned char* raw = s.raw + stage * kRawTileBytes;
    __nv_bfloat16* tile = s.tile + buf * (kTileKeys * kHeadDim);
#pragma unroll
    for (int p = 0; p < kTileKeys * 16 / kThreads; ++p) {
      const int i = tid + p * kThreads, j = i >> 4, wi = i & 15;
      const unsigned char* rec = raw + j * kKeyBytes;
      uint32_t v[4];
      decode_e2m1x8(*reinterpret_cast<const uint32_t*>(rec + 4 * wi), rec[kHeadDim / 2 + wi / 4], v);
      *reinterpret_cast<uint4*>(tile + swz(j, wi, kHeadDim)) = make_uint4(v[0], v[1], v[2], v[3]);
    }
  };

  // Pipeline, two barriers per tile: phase A scores tile it from one decoded buffer into the
  // terms while tile it + 1 is decoded into the other and tile it + 2 is copied into the raw
  // slot tile it came from; phase B sums the terms and offers the scores.
  const int n_tiles = int(ceil_div(end - begin, kTileKeys));
  issue_raw(begin, 0);
  issue_raw(begin + kTileKeys, 1);
  cp_async_wait<1>();
  __syncthreads();  // raw tile 0 has landed
  decode(0, 0);
  cp_async_wait<0>();
  __syncthreads();  // tile 0 decoded, raw tile 1 landed, counts reset

  for (int it = 0; it < n_tiles; ++it) {
    const int e0 = begin + it * kTileKeys, cur = it & 1;
    issue_raw(e0 + 2 * kTileKeys, cur);  // raw tile it was decoded before the last barrier
    if (mma_on) {
      // One m16 tile of keys per pass: 4 accumulators in flight. Two tiles per pass (8 in
      // flight) spilled at the 128-register bound of two blocks per SM and measured 5% slower.
      const uint32_t tile = tile_lane + cur * kTileBytes;
#pragma unroll
      for (int mt = 0; mt < kTileKeys / 16; ++mt) {
        float acc[4][4] = {};
#pragma unroll
        for (int ks = 0; ks < kHeadDim / 16; ++ks) {
          uint32_t a[4];
          ldmatrix_x4(a, tile + mt * 16 * kHeadDim * 2 + (((2 * ks) ^ tile_x) << 4));
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) mma_bf16(acc[nt], a, qf[nt][ks][0], qf[nt][ks][1]);
        }
        // acc[nt]: c0, c1 = key 16 mt + lane / 4, heads hw, hw + 1; c2, c3 = the key 8 further.
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const uint32_t t = term_lane[nt] + mt * 16 * kMaxHeads * 2;
          st_shared_u32(t, head_terms(acc[nt][0], acc[nt][1], w2[nt]));
          st_shared_u32(t + 8 * kMaxHeads * 2, head_terms(acc[nt][2], acc[nt][3], w2[nt]));
        }
      }
    }
    if (it + 1 < n_tiles) decode(cur ^ 1, cur ^ 1);
    __syncthreads();

    {  // score = bf16(sum over heads in head order, fp32): thread = (row tid / 64 = r, key tid % 64)
      const int key = tid % kTileKeys;
      uint64_t k64 = 0;  // none
      if (e0 + key < row_end) {
        const __nv_bfloat16* row = s.terms + (r * kTileKeys + key) * kMaxHeads;
        float total = 0.0f;
#pragma unroll
        for (int c = 0; c < kMaxHeads / 8; ++c) {
          if (8 * c >= g.n_heads) break;
          total = ref::add_bf16x8_in_order(total, *reinterpret_cast<const uint4*>(row + ((c ^ (key & 7)) << 3)));
        }
        k64 = topk_key(ref::round_bf16(total), e0 + key);
      }
      offer(s.buf(r), k64);  // warp-uniform: both warps of a row offer to its buffer
    }
    cp_async_wait<0>();  // raw tile it + 2 (this thread's pieces)
    __syncthreads();     // ... everyone's; the terms are free again; the offers are counted
#pragma unroll 1
    for (int rr = 0; rr < kRows; ++rr)
      if (s.count[rr] > kCap - kTileKeys) cut_candidates<kCap / kThreads>(s.buf(rr), g.topk, s.hist, s.sel);
  }

  // Each row's list: its best topk keys, sorted when the merge reads several lists per row.
#pragma unroll 1
  for (int rr = 0; rr < kRows; ++rr) {
    const int t = t0 + rr;
    if (t < ga || t >= gb) continue;  // another group's row (block-uniform)
    const int64_t slot = int64_t(t) * g.n_splits + split;
    if (std::min(n_vis(rr), begin + chunk) <= begin) {
      if (tid == 0) g.counts[slot] = 0;
      continue;
    }
    // The row's buffer (kCap keys) has no room for the sort's second buffer.
    write_split_list<kCap / kThreads, kMaxTopk / kThreads>(s.buf(rr), g.topk, g.n_splits > 1, s.hist, s.sel,
                                                           g.cand + slot * g.ws_topk, g.counts + slot,
                                                           /*sort_scratch=*/nullptr);
  }
}

__global__ void __launch_bounds__(kThreads, kMinBlocks) indexer_rows_kernel(const TopkArgs g) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int s_count[kRows];
  __shared__ uint64_t s_thr[kRows];
  __shared__ int s_hist[256];
  __shared__ SelectState s_sel;
  Shared s;
  s.raw = smem;
  s.tile = reinterpret_cast<__nv_bfloat16*>(smem + kRawBytes);
  s.terms = reinterpret_cast<__nv_bfloat16*>(smem + kRawBytes + 2 * kTileBytes);
  s.cand = reinterpret_cast<uint64_t*>(smem + kRawBytes + 2 * kTileBytes + kTermBytes);
  s.count = s_count;
  s.thr = s_thr;
  s.hist = s_hist;
  s.sel = &s_sel;

  pdl_wait();
  const int t0 = blockIdx.x * kRows, t_end = std::min(g.b.n_tokens, t0 + kRows);
  for (int ga = t0; ga < t_end;) {  // groups of consecutive rows of one sequence
    const int seq = g.b.token_seq[ga];
    int gb = ga + 1;
    while (gb < t_end && g.b.token_seq[gb] == seq) ++gb;
    score_group(g, s, t0, ga, gb, seq);
    ga = gb;
  }
}

}  // namespace

Status launch_indexer_rows(const TopkArgs& g, cudaStream_t stream, bool pdl) {
  DSV4_RETURN_IF_ERROR(
      cuda_status(cudaFuncSetAttribute(indexer_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
                  "cudaFuncSetAttribute(indexer_rows_kernel)"));
  const unsigned groups = unsigned(ceil_div(g.b.n_tokens, kRows));
  return launch_kernel(&indexer_rows_kernel, dim3(groups, unsigned(g.n_splits)), dim3(kThreads), kSmemBytes, stream,
                       pdl, g, "indexer_rows_kernel");
}

}  // namespace dsv4::cuda::indexer_detail
