// attention_split.cu: the split kernel of sparse_attention. One block per (split, row, head block)
// holds the row's query for HG groups of 16 heads (HG = 4: up to 64 heads; HG = 1: one group) in
// shared memory and walks its slice of the row's keys in tiles of NK keys: the tile's 584-byte
// records are decoded once (fp8 -> bf16) into shared memory and used by the block's heads,
// S = Q K^T and O += P V run on mma.sync with an online softmax in fp32.
//
// Warp w = (head group g = w / DS: heads 16 g .. 16 g + 15 of the block, dim slice ds = w % DS:
// dims ds 512 / DS ..), DS = 8 / HG (2 or 8). Both products split over the dim slice: QK^T gives
// each warp a partial S over its slice, the group's warps add the DS partials through shared
// memory in the same order (so all hold the same S, the same softmax state and the same P), and
// P.V accumulates the warp's 16 x (512 / DS) slice of O in registers. So a warp only ever reads
// its own slice of the key tile, and O needs 1024 / DS registers per thread.
//
// With one split the block finishes the row (sink, normalization, bf16, inverse RoPE); with
// several it writes an fp32 partial (O, running max m, sum l) for the combine kernel.
#include <cmath>

#include "cuda/attention/attention_device.cuh"
#include "cuda/attention/attention_internal.h"
#include "cuda/attention/attention_plan.h"
#include "cuda/attention/fp8_decode.h"
#include "cuda/common/kv_view.h"
#include "cuda/common/l2_prefetch.cuh"
#include "cuda/common/pdl.cuh"

namespace dsv4::cuda::attention_detail {
namespace {

constexpr int kRowBytes = kHeadDim * 2;     // one bf16 row of Q or of the key tile: 1024 B
constexpr int kChunks = kHeadDim / 8;       // 16-byte chunks (8 dims) of a row: 64
constexpr int kNopeChunks = kNopeDim / 8;   // 56: the rest (8) are the rope dims
constexpr int kPrefetchLanes = 6;           // threads per record in the L2 prefetch: bytes 0, 128, .., 583
constexpr int kWarps = kThreads / 32;

// Shared-memory rows are [64 chunks of 16 B]; chunk c of row r lives at chunk c ^ (r & 7), so the
// 8 rows an ldmatrix reads at one column fall in 8 different bank groups.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return uint32_t(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// Where one row's keys come from: window positions pos - n_win + 1 .. pos (the step's chunk for
// positions >= pos0, the ring before), then n_keys - n_win compressed entries.
struct RowKeys {
  int pos = 0;
  int n_win = 0;
  int n_keys = 0;
  int pos0 = 0, tok0 = 0, slot = 0;
  const int32_t* bt = nullptr;  // the sequence's block-table row (ratio > 0)
};

__device__ __forceinline__ const uint8_t* key_record(const SplitKernelArgs& a, const RowKeys& r,
                                                     const int32_t* sel_s, int j) {
  if (j < r.n_win) {
    const int pos = r.pos - r.n_win + 1 + j;
    if (pos >= r.pos0) return a.chunk + int64_t(r.tok0 + (pos - r.pos0)) * kEntryBytes;
    return a.window + (int64_t(r.slot) * a.window_size + pos % a.window_size) * kEntryBytes;
  }
  const int i = j - r.n_win;
  const int e = a.selected != nullptr ? sel_s[i] : i;
  // paged_record_offset in 32 bits (entry indices stay far below 2^31): no 64-bit division.
  const int per_block = kKvBlockTokens / a.ratio;
  return a.entries + (int64_t(r.bt[e / per_block]) * per_block + e % per_block) * kEntryBytes;
}

// The L2 prefetch of a split's first tile of NK keys before the PDL wait (attention_split_kernel):
// thread tid < 6 NK asks for line tid % 6 of key tid / 6 where that key is a window position
// before the step (a ring record, written steps ago); the tile is the one the split takes if every
// compressed candidate counts (a guess: a wrong one costs a few wasted lines).
template <int NK>
__device__ __forceinline__ void prefetch_first_tile(const SplitKernelArgs& a, const RowKeys& r, int split, int tid) {
  const int n_vis = a.ratio > 0 ? (r.pos + 1) / a.ratio : 0;
  const int keys = r.n_win + (a.selected != nullptr ? min(n_vis, a.topk) : n_vis);
  const int tiles = (keys + NK - 1) / NK;
  const int j = split * ((tiles + a.n_splits - 1) / a.n_splits) * NK + tid / kPrefetchLanes;
  const int pos = r.pos - r.n_win + 1 + j;
  if (j < r.n_win && pos < r.pos0)
    prefetch_l2_line(a.window + (int64_t(r.slot) * a.window_size + pos % a.window_size) * kEntryBytes +
                     min(tid % kPrefetchLanes * 128, kEntryBytes - 1));
}

// Compacts the row's selected entries (dropping -1 and anything not visible, keeping the order)
// into sel_s; returns their count. Block-wide: every thread calls it.
__device__ int compact_selected(const int32_t* row, int topk, int n_vis, int32_t* sel_s, int32_t* cnt_s) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int total = 0;
  for (int i0 = 0; i0 < topk; i0 += kThreads) {
    const int i = i0 + tid;
    const int e = i < topk ? __ldcg(row + i) : -1;
    const bool ok = e >= 0 && e < n_vis;
    const uint32_t vote = __ballot_sync(0xffffffffu, ok);
    if (lane == 0) cnt_s[warp] = __popc(vote);
    __syncthreads();
    int before = 0, sum = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const int c = cnt_s[w];
      before += w < warp ? c : 0;
      sum += c;
    }
    if (ok) sel_s[total + before + __popc(vote & ((1u << lane) - 1u))] = e;
    total += sum;
    __syncthreads();  // cnt_s is rewritten next round; sel_s is complete after the last
  }
  return total;
}

// 8 nope codes (two words, low byte first) times the block scale -> 8 bf16 (exact).
__device__ __forceinline__ uint4 decode_nope8(uint32_t w0, uint32_t w1, float scale) {
  uint4 out;
  out.x = pack_bf16x2(decode_nope(w0, scale), decode_nope(w0 >> 8, scale));
  out.y = pack_bf16x2(decode_nope(w0 >> 16, scale), decode_nope(w0 >> 24, scale));
  out.z = pack_bf16x2(decode_nope(w1, scale), decode_nope(w1 >> 8, scale));
  out.w = pack_bf16x2(decode_nope(w1 >> 16, scale), decode_nope(w1 >> 24, scale));
  return out;
}

template <int NK, int HG>
__global__ void __launch_bounds__(kThreads, HG == 1 ? 2 : 1) attention_split_kernel(const SplitKernelArgs a) {
  static_assert(NK % 16 == 0 && NK * kChunks % kThreads == 0, "key tile");
  static_assert(HG == 1 || HG == 2 || HG == 4, "head groups per block");
  constexpr int kLoads = NK * kChunks / kThreads;  // 16-byte chunks a thread decodes per tile
  constexpr int kKeyTiles = NK / 8;                // n8 tiles of S
  constexpr int kKeySteps = NK / 16;               // k16 steps of P.V
  constexpr int DS = kWarps / HG;                  // dim slices of a head group: 2 or 8
  constexpr int kSliceChunks = kChunks / DS;       // 16-byte chunks of a slice: 32 or 8
  constexpr int kQkSteps = kHeadDim / DS / 16;     // k16 steps of a slice's QK^T: 16 or 4
  constexpr int kDimTiles = kHeadDim / DS / 8;     // n8 tiles of a warp's O: 32 or 8
  constexpr int kQkUnroll = HG == 1 ? 2 : 4;       // HG = 1 runs at 2 blocks per SM: 128 registers

  extern __shared__ __align__(16) uint8_t smem[];
  const int n_heads = a.n_heads;
  const int h0 = blockIdx.z * HG * 16;                // the block's first head
  const int nh = min(n_heads - h0, HG * 16);          // its heads
  const int groups = (nh + 15) / 16;                  // its head groups (warps of others only decode)
  const int q_groups = min(HG, (n_heads + 15) / 16);  // Q rows in shared memory: as smem_bytes
  uint8_t* q_s = smem;                                                     // bf16 [16 q_groups][512]
  uint8_t* k_s = q_s + q_groups * 16 * kRowBytes;                          // bf16 [NK][512]
  float* x_s = reinterpret_cast<float*>(k_s + NK * kRowBytes);             // f32 [kWarps][16 NK]
  int32_t* sel_s = reinterpret_cast<int32_t*>(x_s + kWarps * 16 * NK);     // i32 [topk]
  int32_t* cnt_s = sel_s + (a.selected != nullptr ? (a.topk + 3) / 4 * 4 : 0);  // i32 [kWarps]

  const int split = blockIdx.x, t = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  // The row's place: the step's arrays, host copies that no kernel writes (pdl.cuh), so their
  // dependent loads run before the wait.
  const int seq = __ldcg(a.token_seq + t);
  RowKeys r;
  if (seq >= 0) {
    r.pos = __ldcg(a.token_pos + t);
    r.n_win = min(r.pos + 1, a.window_size);
    r.pos0 = __ldcg(a.seq_pos0 + seq);
    r.tok0 = __ldcg(a.seq_tok0 + seq);
    r.slot = __ldcg(a.seq_slot + seq);
    if (a.ratio > 0) r.bt = a.block_table + int64_t(seq) * a.max_blocks;
    // L2 gets this split's first tile's ring records while the previous kernel finishes
    // (l2_prefetch.cuh: safe before the wait); written steps ago, they come from DRAM. (The
    // compressed entries are left out: their records' addresses cost the main loop registers.)
    if (tid < NK * kPrefetchLanes) prefetch_first_tile<NK>(a, r, split, tid);
  }
  pdl_wait();  // everything below reads what earlier kernels of the step wrote

  if (seq < 0) {  // padding row: zeros (the combine kernel writes them when there are splits)
    if (a.n_splits == 1) {
      uint4* out = reinterpret_cast<uint4*>(a.o + (int64_t(t) * n_heads + h0) * kHeadDim);
      for (int i = tid; i < nh * kChunks; i += kThreads) out[i] = make_uint4(0, 0, 0, 0);
    }
    return;
  }

  int n_comp = 0;
  if (a.ratio > 0) {
    const int n_vis = (r.pos + 1) / a.ratio;
    n_comp = a.selected != nullptr ? compact_selected(a.selected + int64_t(t) * a.topk, a.topk, n_vis, sel_s, cnt_s)
                                   : n_vis;
  }
  r.n_keys = r.n_win + n_comp;

  // This split's tiles: an even share of the row's ceil(n_keys / NK) tiles.
  const int n_tiles = (r.n_keys + NK - 1) / NK;
  const int per_split = (n_tiles + a.n_splits - 1) / a.n_splits;
  const int tile0 = split * per_split, tile1 = min(n_tiles, tile0 + per_split);
  float* part = a.n_splits > 1 ? a.partials + (int64_t(t) * a.n_splits + split) * partial_floats(n_heads) : nullptr;
  if (tile0 >= tile1) {  // only with splits: nothing here, m = -inf tells the combine to skip it
    for (int h = h0 + tid; h < h0 + nh; h += kThreads) {
      part[n_heads * kHeadDim + h] = -INFINITY;
      part[n_heads * (kHeadDim + 1) + h] = 0.0f;
    }
    return;
  }

  for (int i = tid; i < q_groups * 16 * kChunks; i += kThreads) {
    const int hl = i / kChunks, c = i % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);  // heads past the block's: zero query rows, never written out
    if (hl < nh) v = __ldcg(reinterpret_cast<const uint4*>(a.q + (int64_t(t) * n_heads + h0 + hl) * kHeadDim) + c);
    *reinterpret_cast<uint4*>(q_s + swz(hl, c)) = v;
  }

  // Tile decode: thread tid owns chunk column dc of keys kt0, kt0 + 4, ...; the raw bytes of the
  // next tile are loaded into registers while the current one is in the tensor cores. A warp's
  // lanes share kt0 and so the tile's kLoads keys: lane l finds the record of key l (its block
  // table load and division) and the warp takes the addresses from it by shuffle. Every thread
  // computing all of them itself made the address code most of the loop's instructions.
  const int dc = tid % kChunks, kt0 = tid / kChunks;
  static_assert(kChunks % 32 == 0 && kLoads <= 32, "a warp's lanes share their keys");
  uint4 raw[kLoads];
  auto load_tile = [&](int tile) {
    const uint8_t* mine = nullptr;  // lane l < kLoads: the record of key l, null past the row
    if (lane < kLoads) {
      const int j = tile * NK + kt0 + lane * (kThreads / kChunks);
      if (j < r.n_keys) mine = key_record(a, r, sel_s, j);
    }
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const uint8_t* rec = reinterpret_cast<const uint8_t*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine), l));
      uint4 v = make_uint4(0, 0, 0, 0);  // keys past the row: zero (P = 0 must not meet NaN)
      if (rec != nullptr) {
        if (dc < kNopeChunks) {
          const uint2 w = __ldcg(reinterpret_cast<const uint2*>(rec) + dc);
          v.x = w.x;
          v.y = w.y;
          v.z = __ldcg(rec + kScaleOffset + dc / 8);
        } else {
          const uint2* rp = reinterpret_cast<const uint2*>(rec + kNopeDim) + 2 * (dc - kNopeChunks);
          const uint2 w0 = __ldcg(rp), w1 = __ldcg(rp + 1);
          v = make_uint4(w0.x, w0.y, w1.x, w1.y);
        }
      }
      raw[l] = v;
    }
  };
  auto store_tile = [&]() {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int kt = kt0 + l * (kThreads / kChunks);
      const uint4 v = raw[l];
      const uint4 out = dc < kNopeChunks ? decode_nope8(v.x, v.y, ue8m0_value(v.z & 0xffu)) : v;
      *reinterpret_cast<uint4*>(k_s + swz(kt, dc)) = out;
    }
  };

  const int g = warp / DS, ds = warp % DS;
  const bool active = g < groups;  // warps of absent head groups only decode
  const uint32_t q_base = smem_u32(q_s), k_base = smem_u32(k_s);
  float* x_mine = x_s + warp * 16 * NK;
  const float* x_group = x_s + g * DS * 16 * NK;  // the group's DS partials, slice order

  float o_acc[kDimTiles][4];
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.0f;
  // Rows lane / 4 and lane / 4 + 8 of the head group; l is this thread's share of the row sum.
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  load_tile(tile0);
  for (int tile = tile0; tile < tile1; ++tile) {
    __syncthreads();  // every warp is done with the previous key tile (first pass: Q is stored)
    store_tile();
    __syncthreads();
    if (tile + 1 < tile1) load_tile(tile + 1);
    if (!active) continue;

    // ---- S (partial over this warp's dim half) = Q K^T ----
    float s_acc[kKeyTiles][4];
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) s_acc[n][0] = s_acc[n][1] = s_acc[n][2] = s_acc[n][3] = 0.0f;
#pragma unroll(kQkUnroll)
    for (int ks = 0; ks < kQkSteps; ++ks) {
      const int qrow = g * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      uint32_t qa[4];
      ldmatrix_x4(qa, q_base + swz(qrow, ds * kSliceChunks + ks * 2 + (lane >> 4)));
#pragma unroll
      for (int np = 0; np < NK / 16; ++np) {
        const int krow = np * 16 + (lane & 7) + (lane >> 4) * 8;
        uint32_t kb[4];
        ldmatrix_x4(kb, k_base + swz(krow, ds * kSliceChunks + ks * 2 + ((lane >> 3) & 1)));
        mma_bf16(s_acc[2 * np], qa, kb[0], kb[1]);
        mma_bf16(s_acc[2 * np + 1], qa, kb[2], kb[3]);
      }
    }
    // ---- the group's DS slices -> the full S in each of its warps (summed in slice order in
    // every warp, so all hold the same bits) ----
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) x_mine[(n * 4 + i) * 32 + lane] = s_acc[n][i];
    named_barrier(1 + g, DS * 32);
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float sum = x_group[(n * 4 + i) * 32 + lane];
#pragma unroll
        for (int j = 1; j < DS; ++j) sum += x_group[(j * 16 * NK) + (n * 4 + i) * 32 + lane];
        s_acc[n][i] = sum;
      }

    // ---- online softmax (logit = (q . k) scale; keys past the row: -inf) ----
    const int key0 = tile * NK;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = key0 + n * 8 + 2 * (lane & 3) + (i & 1);
        const float v = key < r.n_keys ? s_acc[n][i] * a.scale : -INFINITY;
        s_acc[n][i] = v;
        mx[i >> 1] = fmaxf(mx[i >> 1], v);
      }
    float alpha[2], m_use[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], 1));
      mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], 2));
      const float m_new = fmaxf(m_run[rr], mx[rr]);
      // A row with no real key yet keeps m = -inf; exponentiate against 0 so nothing is NaN.
      m_use[rr] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[rr] = expf(m_run[rr] - m_use[rr]);
      m_run[rr] = m_new;
      l_run[rr] *= alpha[rr];
    }
    // P in bf16 as the A operand of P.V (the C layout of two n8 tiles is the A layout of a k16
    // step); the denominator sums the unrounded fp32 values, as the reference.
    uint32_t pa[kKeySteps][4];
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) {
      float e[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        e[i] = expf(s_acc[n][i] - m_use[i >> 1]);
        l_run[i >> 1] += e[i];
      }
      pa[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(e[0], e[1]);
      pa[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(e[2], e[3]);
    }
    // Once a row's running max settles, alpha is exactly 1: skip the 4 kDimTiles multiplies
    // then (the same bits), unless a row of the warp moved.
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        o_acc[n][0] *= alpha[0];
        o_acc[n][1] *= alpha[0];
        o_acc[n][2] *= alpha[1];
        o_acc[n][3] *= alpha[1];
      }
    }

    // ---- O (this warp's 16 heads x 512 / DS dims) += P V, V = the key tile ----
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      const int krow = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int dp = 0; dp < kDimTiles / 2; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, k_base + swz(krow, ds * kSliceChunks + dp * 2 + (lane >> 4)));
        mma_bf16(o_acc[2 * dp], pa[kk], vb[0], vb[1]);
        mma_bf16(o_acc[2 * dp + 1], pa[kk], vb[2], vb[3]);
      }
    }
  }
  if (!active) return;

#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l_run[rr] += __shfl_xor_sync(0xffffffffu, l_run[rr], 1);
    l_run[rr] += __shfl_xor_sync(0xffffffffu, l_run[rr], 2);
  }
  const int d_lane = ds * (kHeadDim / DS) + 2 * (lane & 3);  // + 8 n: this thread's dim pair
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int h = h0 + g * 16 + (lane >> 2) + rr * 8;
    if (h >= n_heads) continue;
    if (a.n_splits > 1) {
      float* po = part + int64_t(h) * kHeadDim;
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n)
        *reinterpret_cast<float2*>(po + d_lane + n * 8) = make_float2(o_acc[n][2 * rr], o_acc[n][2 * rr + 1]);
      if (ds == 0 && (lane & 3) == 0) {
        part[n_heads * kHeadDim + h] = m_run[rr];
        part[n_heads * (kHeadDim + 1) + h] = l_run[rr];
      }
      continue;
    }
    // One split: the sink enters the denominator only (m is over real keys: the row has one).
    const float den = l_run[rr] + expf(a.sink[h] - m_run[rr]);
    __nv_bfloat16* out = a.o + (int64_t(t) * n_heads + h) * kHeadDim;
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) {
      const int d = d_lane + n * 8;
      float x0 = round_bf16(o_acc[n][2 * rr] / den), x1 = round_bf16(o_acc[n][2 * rr + 1] / den);
      if (d >= kNopeDim) inverse_rope_pair(x0, x1, r.pos, a.inv_freq[(d - kNopeDim) / 2]);
      *reinterpret_cast<uint32_t*>(out + d) = pack_bf16x2(x0, x1);
    }
  }
}

}  // namespace

Status launch_split_kernel(const SplitKernelArgs& a, int key_tile, int head_groups, int head_blocks, size_t smem,
                          cudaStream_t stream, bool pdl) {
  void (*kernel)(SplitKernelArgs) = nullptr;
  const char* name = nullptr;
  if (key_tile == 32 && head_groups == 4) {
    kernel = &attention_split_kernel<32, 4>;
    name = "attention_split_kernel<32, 4>";
  } else if (key_tile == 16 && head_groups == 4) {
    kernel = &attention_split_kernel<16, 4>;
    name = "attention_split_kernel<16, 4>";
  } else if (key_tile == 32 && head_groups == 1) {
    kernel = &attention_split_kernel<32, 1>;
    name = "attention_split_kernel<32, 1>";
  } else if (key_tile == 16 && head_groups == 1) {
    kernel = &attention_split_kernel<16, 1>;
    name = "attention_split_kernel<16, 1>";
  } else {
    return invalid_argument("sparse_attention: key tile {} (32 or 16) with {} head groups per block (4 or 1)",
                            key_tile, head_groups);
  }
  if (head_blocks < 1 || head_blocks > 65535)
    return invalid_argument("sparse_attention: {} head blocks", head_blocks);
  DSV4_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                                   "cudaFuncSetAttribute(attention_split_kernel)"));
  return launch_kernel(kernel, dim3(a.n_splits, a.n_tokens, head_blocks), dim3(kThreads), smem, stream, pdl, a, name);
}

}  // namespace dsv4::cuda::attention_detail
