// route.cu: the MoE router in one launch. Blocks of the grid (token tiles x expert slices)
// compute fp32 logits; the last slice block of a token tile selects experts and weights for its
// tokens; the last token tile's block groups all (token, expert) pairs by expert and writes the
// tile list the GEMMs run over. Decode batches (one token per block): the logit warps also leave
// each expert's selection key and score (RouteKernelArgs::keyed), and the last block of the grid
// selects from those, a warp per token, and groups. Deterministic: every logit is summed in the
// same fixed order, so equal router rows give equal logits and ties resolve to the lowest expert
// index.
#include <cmath>
#include <mutex>
#include <type_traits>

#include "cuda/common/arch.h"
#include "cuda/common/arrival.cuh"
#include "cuda/common/bf16_bits.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/common/trace.cuh"
#include "cuda/moe/route.h"

namespace dsv4::cuda::moe_detail {

namespace {

constexpr int kThreads = 256;
static_assert(kThreads == kRouterExperts, "the grouping scan gives each thread one expert");
constexpr int kShared = kRouterExperts;  // expert id of the shared expert in tiles

__device__ __forceinline__ uint4 ld_nc_v4(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Order-preserving map of a (non-NaN) float to an unsigned key: a < b exactly when key(a) < key(b).
__device__ __forceinline__ unsigned ordered_key(float f) {
  const unsigned u = __float_as_uint(f == 0.0f ? 0.0f : f);  // -0 and +0 are one value
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// The score s = sqrt(softplus(logit)) (torch softplus: threshold 20), the value the top-k
// compares, v = s + bias (NaN -> -inf), and v as an order-preserving key.
__device__ __forceinline__ float expert_score(float logit) {
  return sqrtf(logit > 20.0f ? logit : log1pf(expf(logit)));
}
__device__ __forceinline__ float expert_value(float s, float bias) {
  const float v = s + bias;
  return isnan(v) ? -INFINITY : v;
}
__device__ __forceinline__ unsigned expert_key(float s, float bias) { return ordered_key(expert_value(s, bias)); }

// The scores of tokens tok0 .. tok0 + n - 1 by the whole block, thread e for expert e:
// s = sqrt(softplus(logit)) and v = s + bias (NaN -> -inf; what the top-k compares) to
// scores[t][0, 256) and scores[t][256, 512). Spread over the block so that the selection warps
// below find them ready: on one warp (8 experts per lane) this was the longest serial step of a
// decode MoE layer (bench/results/NOTES.md, "MoE decode timeline").
// b: this thread's bias (0 without one), loaded at the kernel's start.
__device__ void expert_scores(const RouteKernelArgs& p, int tok0, int n, float b, float* scores) {
  const int e = threadIdx.x;
#pragma unroll 1
  for (int t = 0; t < n; t += 2) {
    float l[2];
#pragma unroll
    for (int u = 0; u < 2; ++u)
      if (t + u < n) l[u] = __ldcg(&p.logits[int64_t(tok0 + t + u) * kRouterExperts + e]);
#pragma unroll
    for (int u = 0; u < 2; ++u)
      if (t + u < n) {
        const float sv = expert_score(l[u]);
        scores[(t + u) * 512 + e] = sv;
        scores[(t + u) * 512 + 256 + e] = expert_value(sv, b);
      }
  }
  __syncthreads();
}

// Expert selection and weights of token `tok` by one warp. ck / cs: the lane's 8 candidates
// (experts lane + 32 j) as keys (expert_key) and scores; score_of(e): expert e's score (hash
// layers: the table's experts). Returns in lanes k < top_k the k-th selection's expert, weight
// and rank (its place in increasing expert id); round k's expert and score end up in lane k.
// One warp runs this once per call on the decode critical path, so the loops over rounds stay
// rolled: fully unrolled (with a sorting network) it was ~40 KB of code (bench/results/NOTES.md,
// "MoE decode timeline").
template <class ScoreOf>
__device__ __forceinline__ void select_core(const RouteKernelArgs& p, int tok, int lane, unsigned (&ck)[8],
                                            const float (&cs)[8], ScoreOf score_of, int* id_out, float* w_out,
                                            int* rank_out) {
  constexpr unsigned kAll = 0xffffffffu;
  int my_id = 0;
  float my_sc = 0.0f;
  float denom = 0.0f;  // the selected scores summed in selection order
  if (p.tid2eid != nullptr) {
    const int64_t row = int64_t(p.token_ids[tok]) * p.top_k;
#pragma unroll 1
    for (int k = 0; k < p.top_k; ++k) {
      const int e = p.tid2eid[row + k];
      const float sc = score_of(e);
      if (lane == k) {
        my_id = e;
        my_sc = sc;
      }
      denom += sc;
    }
  } else {
    // Each round: every lane's best candidate by a 3-level tree (ties go to the lower j, the
    // lower expert id), then the warp's largest key by one redux and, among the lanes holding it,
    // the lowest id by another. A taken candidate's key becomes 0 (keys are > 0, even for -inf).
#pragma unroll 1
    for (int k = 0; k < p.top_k; ++k) {
      unsigned tk[4];
      int tj[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool hi = ck[2 * i + 1] > ck[2 * i];
        tk[i] = hi ? ck[2 * i + 1] : ck[2 * i];
        tj[i] = hi ? 2 * i + 1 : 2 * i;
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const bool hi = tk[2 * i + 1] > tk[2 * i];
        tk[i] = hi ? tk[2 * i + 1] : tk[2 * i];
        tj[i] = hi ? tj[2 * i + 1] : tj[2 * i];
      }
      const bool hi = tk[1] > tk[0];
      const unsigned key = hi ? tk[1] : tk[0];
      const int bj = hi ? tj[1] : tj[0];
      float bs = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) bs = bj == j ? cs[j] : bs;
      const unsigned top = __reduce_max_sync(kAll, key);
      const int winner = int(__reduce_min_sync(kAll, key == top ? unsigned(lane + 32 * bj) : 0xffffffffu));
      const float sc = __shfl_sync(kAll, bs, winner & 31);
      if (lane == k) {
        my_id = winner;
        my_sc = sc;
      }
      denom += sc;
      if ((winner & 31) == lane) {
#pragma unroll
        for (int j = 0; j < 8; ++j) ck[j] = (winner >> 5) == j ? 0u : ck[j];
      }
    }
  }
  // Increasing expert id (the order the MoE combine sums the expert outputs in); equal ids (a
  // hash row may repeat one) keep their selection order. Unrolled (top_k <= 8): the shuffles
  // are independent.
  int rank = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int other = __shfl_sync(kAll, my_id, j);
    if (j < p.top_k) rank += (other < my_id || (other == my_id && j < lane)) ? 1 : 0;
  }
  *id_out = my_id;
  *w_out = my_sc / denom * p.route_scale;
  *rank_out = rank;
}

// Writes a selection (select_core's lanes) to topk_ids / topk_w and, when s_ids is not null, to
// s_ids / s_w [tok * top_k ..] in shared memory too.
__device__ __forceinline__ void store_selection(const RouteKernelArgs& p, int tok, int lane, int id, float w, int rank,
                                                int* s_ids, float* s_w) {
  if (lane < p.top_k) {
    const int64_t at = int64_t(tok) * p.top_k + rank;
    p.topk_ids[at] = id;
    p.topk_w[at] = w;
    if (s_ids != nullptr) {
      s_ids[at] = id;
      s_w[at] = w;
    }
  }
}

// Selection of token `tok` from its scores in shared memory (expert_scores: prefill).
__device__ void select_experts(const RouteKernelArgs& p, int tok, int lane, const float* scores,
                               int* s_ids = nullptr, float* s_w = nullptr) {
  const float* ss = scores;        // [256] s_e
  const float* vs = scores + 256;  // [256] v_e
  unsigned ck[8];
  float cs[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    ck[j] = ordered_key(vs[lane + 32 * j]);
    cs[j] = ss[lane + 32 * j];
  }
  int id, rank;
  float w;
  select_core(p, tok, lane, ck, cs, [&](int e) { return ss[e]; }, &id, &w, &rank);
  store_selection(p, tok, lane, id, w, rank, s_ids, s_w);
}

// Decode batches: the logit blocks left each expert's (key, score) in p.keyed [m][256]; the
// lane's 8 candidates are read straight from there (one round trip, all in flight), with no
// block-wide pass over the logits first.
__device__ __forceinline__ void load_keyed(const RouteKernelArgs& p, int tok, int lane, unsigned (&ck)[8],
                                           float (&cs)[8]) {
  uint2 v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = __ldcg(p.keyed + int64_t(tok) * kRouterExperts + lane + 32 * j);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    ck[j] = v[j].x;
    cs[j] = __uint_as_float(v[j].y);
  }
}

// Counting sort of all pairs by expert (expert 256 = shared, every token once), by one block.
// The shared expert's rows come last, at M top_k + token, whatever the routing: the GEMMs rely on
// that to start the shared expert before the router finishes. The selections come from shared
// memory (kSmem: this block made them) or from global memory (other blocks made them).
template <bool kSmem>
__device__ __forceinline__ int load_sel(const int* p) {
  return kSmem ? *p : __ldcg(p);
}
template <bool kSmem>
__device__ __forceinline__ float load_sel(const float* p) {
  return kSmem ? *p : __ldcg(p);
}

template <bool kSmem>
__device__ void group_pairs(const RouteKernelArgs& p, const int* sel_ids, const float* sel_w) {
  __shared__ int s_cnt[kRouterExperts + 1], s_off[kRouterExperts + 1], s_toff[kRouterExperts + 1];
  const int tid = threadIdx.x, top_k = p.top_k, m = p.m;
  // A tile holds at most min(block rows, m) rows: the GEMMs stage that many A rows (moe_forward's
  // tile_rows). An expert gets more than m rows only from a hash row that names it twice; its
  // rows then take more tiles, within moe_max_tiles' bound (which it computes with the same cap).
  const int bm = min(p.block_m, m);
  const int n_pairs = m * top_k;
  for (int e = tid; e <= kRouterExperts; e += kThreads) s_cnt[e] = 0;
  __syncthreads();
  // The selections of a prefill batch come from L2 (other blocks made them): kBatch loads are in
  // flight before the first is used, here and in walk() below, so the single block that groups
  // pays one round trip per kBatch pairs a thread instead of one per pair. (Decode batches read
  // them from shared memory.)
  constexpr int kBatch = kSmem ? 1 : 8;
#pragma unroll 1
  for (int i0 = tid; i0 < n_pairs; i0 += kBatch * kThreads) {
    int e[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kThreads;
      e[b] = i < n_pairs ? load_sel<kSmem>(sel_ids + i) : -1;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (e[b] >= 0) atomicAdd(&s_cnt[e[b]], 1);
  }
  __syncthreads();
  {
    // Exclusive scan of (pairs, tiles) over the 256 routed experts, one expert per thread;
    // the shared expert (id 256) comes last with every token.
    __shared__ int s_wsum[2][kThreads / 32];
    const int lane = tid & 31, warp = tid >> 5;
    const int cnt = s_cnt[tid], tl = (cnt + bm - 1) / bm;
    int a = cnt, b = tl;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int ua = __shfl_up_sync(0xffffffffu, a, off), ub = __shfl_up_sync(0xffffffffu, b, off);
      if (lane >= off) {
        a += ua;
        b += ub;
      }
    }
    if (lane == 31) {
      s_wsum[0][warp] = a;
      s_wsum[1][warp] = b;
    }
    __syncthreads();
    int wa = 0, wb = 0;
#pragma unroll 1
    for (int w = 0; w < warp; ++w) {
      wa += s_wsum[0][w];
      wb += s_wsum[1][w];
    }
    s_off[tid] = wa + a - cnt;
    s_toff[tid] = wb + b - tl;
    if (tid == kThreads - 1) {
      s_off[kShared] = wa + a;
      s_toff[kShared] = wb + b;
      s_cnt[kShared] = m;
      *p.n_tiles = wb + b;  // routed tiles only: the GEMMs place the shared expert's tiles statically
    }
  }
  __syncthreads();
  for (int e = tid; e < kRouterExperts; e += kThreads) {
    const int cnt = s_cnt[e];
#pragma unroll 1
    for (int j = 0; j * bm < cnt; ++j) p.tiles[s_toff[e] + j] = make_int4(e, s_off[e] + j * bm, min(bm, cnt - j * bm), 0);
  }
  // Rows inside an expert in pair order (token, then k): a stable counting sort, so the tiles and
  // each token's place in them are the same every run. Arrival order (an atomic per pair) was not
  // enough: the tile a row lands in decides the tile's row count, and with it the kernel path (8
  // rows or fewer: swapped operands) and the rounding of that row's sums, so prefill chunks of a
  // few hundred rows differed in the last bits between identical runs
  // (MoeForwardGraph.PrefillRowsAreDeterministic). Warp w ranks the pairs of its contiguous range
  // [w * per_warp, ...): counts per expert, a prefix over the warps, then a second pass in order.
  constexpr int kWarps = kThreads / 32;
  __shared__ int s_wbase[kWarps][kRouterExperts];
  const int lane = tid & 31, warp = tid >> 5;
  const int per_warp = (n_pairs + kWarps - 1) / kWarps;
  const int w_begin = min(n_pairs, warp * per_warp), w_end = min(n_pairs, w_begin + per_warp);
  for (int e = lane; e < kRouterExperts; e += 32) s_wbase[warp][e] = 0;
  __syncwarp();
  // The warp's pairs in order, 32 at a time: f(i, e, w, same) in every lane (e = -1 past the
  // range, w its routing weight when kWeights, same: the lanes holding the same expert), then the
  // last lane of each such group moves that expert's count on by the group's size. The ids (and
  // weights) of kBatch rounds are loaded before the first round runs.
  auto walk = [&](auto&& f, auto weights) {
    constexpr bool kWeights = decltype(weights)::value;
#pragma unroll 1
    for (int i0 = w_begin; i0 < w_end; i0 += 32 * kBatch) {
      int eb[kBatch];
      float wb[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = i0 + 32 * b + lane;
        eb[b] = i < w_end ? load_sel<kSmem>(sel_ids + i) : -1;
        wb[b] = kWeights && i < w_end ? load_sel<kSmem>(sel_w + i) : 0.0f;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = i0 + 32 * b + lane, e = eb[b];
        const unsigned same = __match_any_sync(0xffffffffu, e);
        f(i, e, wb[b], same);
        __syncwarp();
        if (e >= 0 && lane == 31 - __clz(same)) s_wbase[warp][e] += __popc(same);
        __syncwarp();
      }
    }
  };
  walk([](int, int, float, unsigned) {}, std::false_type{});  // counts per expert of the warp's range
  __syncthreads();
  for (int e = tid; e < kRouterExperts; e += kThreads) {
    int base = s_off[e];
#pragma unroll 1
    for (int w = 0; w < kWarps; ++w) {
      const int c = s_wbase[w][e];
      s_wbase[w][e] = base;
      base += c;
    }
  }
  __syncthreads();
  walk(
      [&](int i, int e, float w, unsigned same) {  // positions: the warp's base plus the lanes before
        if (e < 0) return;
        const int pos = s_wbase[warp][e] + __popc(same & ((1u << lane) - 1));
        const int t = i / top_k;
        p.sorted_token[pos] = t;
        p.sorted_weight[pos] = w;
        p.token_pairs[int64_t(t) * (top_k + 1) + (i % top_k)] = pos;
      },
      std::true_type{});
#pragma unroll 1
  for (int t = tid; t < m; t += kThreads) {
    const int pos = s_off[kShared] + t;
    p.sorted_token[pos] = t;
    p.sorted_weight[pos] = 1.0f;
    p.token_pairs[int64_t(t) * (top_k + 1) + top_k] = pos;
  }
}

// The grouping of a single token (decode batch 1), by the warp that selected its experts, from
// its lanes' selections (select_core): pair k in increasing expert order is sorted row k and, one
// row each, tile k; the shared expert's row is top_k as always. group_pairs (a counting sort: six
// barriers and scans) took ~1 us of the decode MoE's serial tail for this. A hash row may name an
// expert twice: that expert gets two one-row tiles instead of one two-row tile (rows are
// independent in the GEMMs, so no value changes).
__device__ void group_one_token(const RouteKernelArgs& p, int lane, int id, float w, int rank) {
  const int top_k = p.top_k;
  if (lane < top_k) {
    p.tiles[rank] = make_int4(id, rank, 1, 0);
    p.sorted_token[rank] = 0;
    p.sorted_weight[rank] = w;
    p.token_pairs[rank] = rank;
  } else if (lane == top_k) {
    p.sorted_token[top_k] = 0;
    p.sorted_weight[top_k] = 1.0f;
    p.token_pairs[top_k] = top_k;
  }
  if (lane == 0) *p.n_tiles = top_k;
}

// TM tokens per block (x rows staged in smem), EPW experts per warp, 8 warps.
template <int TM, int EPW>
__global__ void __launch_bounds__(kThreads) moe_route_kernel(const RouteKernelArgs p) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int s_flag;
  const uint4* xs = reinterpret_cast<const uint4*>(smem);  // bf16 [TM][hidden]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  trace_stamp(p.trace, 0);
  // The selection's bias of expert tid (prefill), or of the warp's experts (decode: the logit
  // warps turn their logits into keys); weights, loaded before the wait, off the serial tail.
  [[maybe_unused]] const float bias_e = TM != 1 && p.bias != nullptr ? __ldg(p.bias + tid) : 0.0f;
  float bias_w[EPW];
#pragma unroll
  for (int j = 0; j < EPW; ++j)
    bias_w[j] = TM == 1 && p.bias != nullptr ? __ldg(p.bias + blockIdx.y * (8 * EPW) + warp * EPW + j) : 0.0f;
  if constexpr (TM == 1) {
    // Decode: the block's 8 EPW router rows go to smem through cp.async, every request in flight
    // at once (one DRAM round trip); they do not depend on the previous kernel.
    const uint4* wsrc = reinterpret_cast<const uint4*>(p.gate_w + int64_t(blockIdx.y) * (8 * EPW) * kRouterHidden);
    const uint32_t wdst = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + TM * kRouterHidden * 2;
    constexpr int kChunks = 8 * EPW * kRouterHidden / 8;
    for (int i = tid; i < kChunks; i += kThreads)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(wdst + i * 16), "l"(wsrc + i));
  }
  pdl_wait();  // x comes from the previous kernel (and our dependents launch only from here:
               // the gate/up GEMM's shared-expert blocks read x without waiting for us)
  trace_stamp(p.trace, 1);
  const int tok0 = blockIdx.x * TM;
  const int n_tok = min(TM, p.m - tok0);
  constexpr int cpr = kRouterHidden / 8;  // 16-byte chunks per row

  static_assert(TM * cpr % (2 * kThreads) == 0, "x is staged two chunks per thread at a time");
  for (int i0 = tid; i0 < TM * cpr; i0 += 2 * kThreads) {
    uint4 v[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {  // both loads in flight before either store
      const int i = i0 + u * kThreads, t = i / cpr, c = i % cpr;
      v[u] = make_uint4(0, 0, 0, 0);
      if (t < n_tok) v[u] = *reinterpret_cast<const uint4*>(p.x + int64_t(tok0 + t) * p.ldx + c * 8);
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) reinterpret_cast<uint4*>(smem)[i0 + u * kThreads] = v[u];
  }
  __syncthreads();

  const int e0 = blockIdx.y * (8 * EPW) + warp * EPW;
  float acc[TM][EPW];
#pragma unroll
  for (int t = 0; t < TM; ++t)
#pragma unroll
    for (int j = 0; j < EPW; ++j) acc[t][j] = 0.0f;
  // Each lane owns chunks lane + 32 i of every router row.
  constexpr int kPerLane = kRouterHidden / 8 / 32;
  if constexpr (TM == 1) {
    // Decode: each warp reads its rows from the smem copy requested at the top.
    asm volatile("cp.async.wait_all;\n" ::);  // issued before pdl_wait (the weights are constant)
    __syncthreads();
    const uint4* ws = xs + TM * cpr;  // bf16 [8 EPW][hidden]
    // Partly unrolled: the operands are in smem, and fully unrolled code took ~1.5 us more to
    // fetch than to run (the decode timeline).
#pragma unroll
    for (int j = 0; j < EPW; ++j)
#pragma unroll 4
      for (int i = 0; i < kPerLane; ++i) {
        float xv[8], wf[8];
        bf16x8_to_f32(xs[lane + 32 * i], xv);
        bf16x8_to_f32(ws[(warp * EPW + j) * cpr + lane + 32 * i], wf);
#pragma unroll
        for (int v = 0; v < 8; ++v) acc[0][j] = fmaf(xv[v], wf[v], acc[0][j]);
      }
  } else {
    // Prefill: one chunk of EPW rows at a time (L2-resident after the first token tile), each x
    // chunk converted once for all EPW rows.
    const uint4* wrow = reinterpret_cast<const uint4*>(p.gate_w + int64_t(e0) * kRouterHidden) + lane;
#pragma unroll 1
    for (int i = 0; i < kPerLane; ++i) {
      uint4 wv[EPW];
#pragma unroll
      for (int j = 0; j < EPW; ++j) wv[j] = ld_nc_v4(wrow + j * cpr + 32 * i);
#pragma unroll
      for (int t = 0; t < TM; ++t) {
        float xv[8];
        bf16x8_to_f32(xs[t * cpr + lane + 32 * i], xv);
#pragma unroll
        for (int j = 0; j < EPW; ++j) {
          float wf[8];
          bf16x8_to_f32(wv[j], wf);
#pragma unroll
          for (int v = 0; v < 8; ++v) acc[t][j] = fmaf(xv[v], wf[v], acc[t][j]);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < TM; ++t)
#pragma unroll
    for (int j = 0; j < EPW; ++j) {
      float v = acc[t][j];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      // Lane 0's association is the same for every expert: equal rows give equal logits.
      if (lane == 0 && t < n_tok) {
        p.logits[int64_t(tok0 + t) * kRouterExperts + e0 + j] = v;
        if constexpr (TM == 1) {
          const float sv = expert_score(v);
          p.keyed[int64_t(tok0 + t) * kRouterExperts + e0 + j] = make_uint2(expert_key(sv, bias_w[j]), __float_as_uint(sv));
        }
      }
    }

  trace_stamp(p.trace, 2);
  if constexpr (TM == 1) {
    // Decode: one arrival counter over the whole grid; the last block selects experts for every
    // token (a warp per token) and groups the pairs: one serialized round trip instead of two.
    if (!arrive_last(p.done_counter, int(gridDim.x * gridDim.y), &s_flag)) {
      trace_stamp(p.trace, 3);
      return;
    }
    // Each selecting warp reads its token's keys straight from p.keyed (load_keyed). Trace: the
    // tail's steps go to the pseudo-block past the grid (moe_route_blocks counts it).
    const int64_t tail = int64_t(gridDim.x) * gridDim.y;
    trace_stamp(p.trace, 0, tail);
    trace_stamp(p.trace, 1, tail);
    auto select_token = [&](int tok, int* id, float* w, int* rank) {
      unsigned ck[8];
      float cs[8];
      load_keyed(p, tok, lane, ck, cs);
      const uint2* keyed = p.keyed + int64_t(tok) * kRouterExperts;
      select_core(p, tok, lane, ck, cs, [&](int e) { return __uint_as_float(__ldcg(&keyed[e].y)); }, id, w, rank);
    };
    if (p.m == 1) {
      // One token: warp 0 selects and groups from its registers, no block-wide step.
      if (warp == 0) {
        int id, rank;
        float w;
        select_token(0, &id, &w, &rank);
        store_selection(p, 0, lane, id, w, rank, nullptr, nullptr);
        trace_stamp(p.trace, 2, tail);
        group_one_token(p, lane, id, w, rank);
      }
    } else {
      // The selections stay in shared memory for the grouping: no global round trip between them.
      __shared__ int s_ids[kRouterDecodeMaxTokens * 8];
      __shared__ float s_w[kRouterDecodeMaxTokens * 8];
      for (int tok = warp; tok < p.m; tok += kThreads / 32) {
        int id, rank;
        float w;
        select_token(tok, &id, &w, &rank);
        store_selection(p, tok, lane, id, w, rank, s_ids, s_w);
      }
      __syncthreads();
      trace_stamp(p.trace, 2, tail);
      group_pairs<true>(p, s_ids, s_w);
    }
    trace_stamp(p.trace, 3, tail);
    trace_stamp(p.trace, 3);
  } else {
    // Prefill: the last expert slice of this token tile selects experts for its tokens.
    if (!arrive_last(&p.tile_counters[blockIdx.x], int(gridDim.y), &s_flag)) return;
    float* scores = reinterpret_cast<float*>(smem);  // [n_tok][512], where x was
    expert_scores(p, tok0, n_tok, bias_e, scores);
    if (warp < n_tok) select_experts(p, tok0 + warp, lane, scores + warp * 512);

    // The last token tile groups every pair.
    if (!arrive_last(p.done_counter, int(gridDim.x), &s_flag)) return;
    group_pairs<false>(p, p.topk_ids, p.topk_w);
  }
}

template <int TM, int EPW>
Status launch_variant(const RouteKernelArgs& p, cudaStream_t stream, bool pdl) {
  static_assert(TM <= 8, "one warp per token in the selection step");
  // x rows, plus (decode) the block's router rows.
  constexpr int smem = TM * kRouterHidden * 2 + (TM == 1 ? 8 * EPW * kRouterHidden * 2 : 0);
  static_assert(TM == 1 || TM * 512 * 4 <= smem, "the prefill selection's scores reuse the dynamic smem");
  auto* kernel = &moe_route_kernel<TM, EPW>;
  if (smem > 48 * 1024) {
    // Once per device: the attribute is a property of the function on that device.
    static std::mutex mu;
    static bool done[64] = {};
    DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
    std::lock_guard<std::mutex> lock(mu);
    if (!done[dev->device]) {
      DSV4_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                                       "cudaFuncSetAttribute(moe_route_kernel)"));
      done[dev->device] = true;
    }
  }
  const dim3 grid((p.m + TM - 1) / TM, kRouterExperts / (8 * EPW));
  return launch_kernel(kernel, grid, dim3(kThreads), size_t(smem), stream, pdl, p, "moe_route_kernel");
}

}  // namespace

int moe_route_blocks(int m) {
  // Decode: one more trace slot, for the last block's tail.
  return m <= kRouterDecodeMaxTokens ? m * (kRouterExperts / 8) + 1 : (m + 7) / 8 * (kRouterExperts / 32);
}

Status launch_moe_route(const RouteKernelArgs& p, cudaStream_t stream, bool pdl) {
  if (p.hidden != kRouterHidden) return invalid_argument("moe router: hidden {} != {}", p.hidden, kRouterHidden);
  if (p.m <= kRouterDecodeMaxTokens && p.keyed == nullptr)
    return invalid_argument("moe router: a decode batch ({} tokens) needs the keyed scores buffer", p.m);
  if (p.top_k < 1 || p.top_k > 8) return invalid_argument("moe router: top_k {} not in 1..8", p.top_k);
  // Decode batches: one token per block and 32 blocks per token, so the 2 MB router weight is
  // streamed by many SMs. Prefill: 8 tokens per block reuse each weight load 8 times.
  if (p.m <= kRouterDecodeMaxTokens) return launch_variant<1, 1>(p, stream, pdl);
  return launch_variant<8, 4>(p, stream, pdl);
}

}  // namespace dsv4::cuda::moe_detail
