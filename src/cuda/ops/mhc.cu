// mhc.cu: hc_pre_norm, hc_post_pre_norm and hc_head_norm (ops.h), the mHC collapse of the hc
// residual streams followed by an RMSNorm (cpu::hc_pre / hc_head, then rmsnorm and bf16 as in
// CpuModel::block's `pre` and head_logits). Two launches, plan in mhc_plan.h:
//   1. partials: the fn . v and v . v slice sums of every token (fn read once per token group),
//      parked in the token's output row x[t]; hc_post_pre_norm first applies the previous
//      sublayer's hc_post to the block's columns of X in place (bit-exact with hc_post), with y
//      read as is or, from a deferred producer (wo_b's split-K partials, the MoE's pair rows;
//      common/deferred_sum.h), summed from its terms first;
//   2. finish: one block per token sums the slices; a mixer warp computes rho and pre, then the
//      post weights and the Sinkhorn comb (mix) while 16 worker warps collapse the streams, round
//      to bf16 and apply the RMSNorm, overwriting x[t]. With HcComb::kLogits the mixer leaves the
//      comb logits, and the next hc_post_pre_norm's partials kernel projects them in its prologue
//      (or hc_sinkhorn, a launch of its own, does).
// Numerics: the slice sums differ from the reference's dot only by fp32 summation order; the
// collapse, the norm's products and the Sinkhorn use the reference's order and rounding points.
// Both launch as programmatic dependents (pdl.cuh): the partials kernel loads its fn slice, the
// finish kernel its mHC and norm parameters, before waiting for the previous kernel.
#include <cstdint>

#include "cuda/common/arch.h"
#include "cuda/common/bf16_bits.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/ops/mhc_mix.cuh"
#include "cuda/ops/mhc_plan.h"
#include "cuda/ops/ops.h"
#include "cuda/ops/ops_util.cuh"

namespace dsv4::cuda {

namespace {

using namespace mhc_detail;
using namespace ops_detail;

constexpr int kMaxHc = 4;             // register arrays of the finish kernel
static_assert(kMaxHc == kMixMaxHc, "the partials and the finish kernel cover the same streams");
constexpr int kFinishWorkers = 512;   // finish threads that collapse: 8 columns per chunk
constexpr int kFinishChunks = 1;      // D <= 512 * 8 = 4096 (Flash); registers allow 2 blocks per SM
constexpr int kSinkhornWarps = 4;     // tokens per hc_sinkhorn block
constexpr int kYSplitBatch = 8;       // split-K partials of y requested at once per thread
constexpr int kMaxSplitYTokens = kMixMinTokensPerBlock;  // tokens per block with a deferred y
constexpr int kMaxYPairs = 9;         // pairs per token of a deferred MoE output (top_k 8 + shared)

struct MixPartialsArgs {
  __nv_bfloat16* X;         // bf16 [*, hc*D] residual streams (updated in place with kPost)
  const int32_t* rows;      // i32 [T] X row of token t; null: t (always null with kPost)
  const float* fn;          // f32 [n_mix, hc*D]
  const __nv_bfloat16* y;   // kPost: bf16 [T, D] sublayer output
  SplitSumView y_split;     // kPost, splits > 1: y as a split-K GEMM's partials (y unused)
  PairSumView y_pairs;      // kPost, pairs_per_token > 0: y as the MoE's pair rows (y unused)
  const float* post_mix;    // kPost: f32 [T, hc + hc*hc] the sublayer's mix (hc_post's)
  int hc, D, n_mix, T, tokens_per_block;
  float* partials;          // f32, token t at partials + t * partial_row: [n_splits][n_mix + 1]
  int64_t partial_row;      // floats between tokens (D / 2: the token's bf16 output row)
  bool comb_logits;         // kPost: post_mix holds comb logits (HcComb::kLogits), projected here
  int sinkhorn_iters;
  float hc_eps;
};

// The X values of one token a thread needs: its own stream's 4 columns, or with kPost those
// columns in every stream plus y and the thread's post and comb column (hc_post's inputs).
template <bool kPost>
struct TokenIn;
template <>
struct TokenIn<false> {
  uint2 x = make_uint2(0, 0);
};
template <>
struct TokenIn<true> {
  uint2 xs[kMixMaxHc] = {};
  uint2 y = make_uint2(0, 0);
  float post = 0.0f;
  float comb[kMixMaxHc] = {};
};

__device__ __forceinline__ void unpack_bf16x4(uint2 u, float (&v)[4]) {
  const float2 lo = bf16x2_to_f32x2(u.x);
  const float2 hi = bf16x2_to_f32x2(u.y);
  v[0] = lo.x;
  v[1] = lo.y;
  v[2] = hi.x;
  v[3] = hi.y;
}

__device__ __forceinline__ uint2 pack_bf16x4(const float (&v)[4]) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(v[2], v[3]);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}

// grid (n_splits, n_groups), 64 threads. Thread = 4 columns d .. d + 3 of stream k of the
// block's 64-column slice of D (threads of streams k >= hc only join the reductions); value
// r < n_mix of a token is fn[r] . v over the block's columns in all streams, value kWidth - 1 is
// v . v. With kPost the block first applies hc_post to its columns (every stream of them is in
// this block, so the in-place update races with no other block): the new bf16 values feed the
// dot products and are stored after the token's barrier, when every thread of the block has
// read the old ones. The dot products are written as explicit fma chains, so that both variants
// produce the same bits (hc_post_pre_norm equals hc_post then hc_pre_norm exactly).
template <int kMaxMix, int kWidth, bool kPost>
__global__ void __launch_bounds__(kMixThreads) mix_partials_kernel(MixPartialsArgs a) {
  static_assert(kMaxMix < kWidth, "one reduction lane is kept for v . v");
  constexpr int kWarps = kMixThreads / 32;
  constexpr int kThreadsPerStream = kMixSplitDims / 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int split = blockIdx.x;
  const int k = threadIdx.x / kThreadsPerStream;  // this thread's stream
  const bool active = k < a.hc;
  const int d = split * kMixSplitDims + 4 * (threadIdx.x % kThreadsPerStream);
  const int64_t hcD = int64_t(a.hc) * a.D;
  const int64_t col = int64_t(k) * a.D + d;  // column in hc*D (only used when active)

  // fn stays in registers for all tokens of the group: 1.5 MB per call, read once per group.
  // Constant: loaded before the wait, so the loads overlap the previous kernel's tail.
  float w[kMaxMix][4];
#pragma unroll
  for (int r = 0; r < kMaxMix; ++r) {
    float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (active && r < a.n_mix) f = __ldg(reinterpret_cast<const float4*>(a.fn + int64_t(r) * hcD + col));
    w[r][0] = f.x;
    w[r][1] = f.y;
    w[r][2] = f.z;
    w[r][3] = f.w;
  }
  const int t0 = blockIdx.y * a.tokens_per_block;
  const int t1 = min(a.T, t0 + a.tokens_per_block);
  // HcComb::kLogits: the Sinkhorn of the block's tokens' comb logits, before the wait. The logits
  // come from a finish kernel at least two launches back, complete by the time this grid starts
  // (ops.h); each warp projects every kWarps-th token, as the finish kernel would (same bits).
  __shared__ float s_comb[kHcLogitsMaxTokens][kMixMaxHc * kMixMaxHc];  // launch_hc_mix checks T
  if (kPost && a.comb_logits) {
    const int hc = a.hc;
    for (int i = warp; i < t1 - t0; i += kWarps) {
      const float* m = a.post_mix + int64_t(t0 + i) * (hc + hc * hc) + hc;
      const float logit = lane < hc * hc ? m[lane] : 0.0f;
      const float comb = sinkhorn_warp(logit, hc, a.sinkhorn_iters, a.hc_eps, lane);
      if (lane < hc * hc) s_comb[i][lane] = comb;
    }
  }
  // y as the MoE's pair rows: each token's pair positions, written by the router at least two
  // launches back (complete, as the comb logits above), requested before the wait.
  __shared__ int s_pos[kMaxSplitYTokens][kMaxYPairs];  // launch_hc_mix checks tokens and pairs
  const int ppt = a.y_pairs.pairs_per_token;
  const bool pair_y = kPost && ppt > 0;
  if (pair_y)
    for (int i = threadIdx.x; i < (t1 - t0) * ppt; i += kMixThreads)
      s_pos[i / ppt][i % ppt] = __ldcg(a.y_pairs.token_pairs + int64_t(t0) * ppt + i);
  // X, y, post_mix and rows come from earlier kernels (rows: a host copy); X and partials (x)
  // are written below and may still be read by the previous kernel.
  pdl_wait();
  if ((kPost && a.comb_logits) || pair_y) __syncthreads();  // s_comb and s_pos are complete
  auto load = [&](int t) {
    TokenIn<kPost> in;
    if (!active) return in;
    if constexpr (kPost) {
      const __nv_bfloat16* xt = a.X + int64_t(t) * hcD + d;
#pragma unroll
      for (int j = 0; j < kMixMaxHc; ++j)
        if (j < a.hc) in.xs[j] = *reinterpret_cast<const uint2*>(xt + int64_t(j) * a.D);
      if (a.y_split.splits <= 1 && a.y_pairs.pairs_per_token <= 0)  // else s_y
        in.y = *reinterpret_cast<const uint2*>(a.y + int64_t(t) * a.D + d);
      const float* m = a.post_mix + int64_t(t) * (a.hc + a.hc * a.hc);  // [post (hc), comb (hc x hc)]
      in.post = m[k];
#pragma unroll
      for (int j = 0; j < kMixMaxHc; ++j)
        if (j < a.hc) in.comb[j] = a.comb_logits ? s_comb[t - t0][j * a.hc + k] : m[a.hc + j * a.hc + k];
    } else {
      const int64_t row = a.rows != nullptr ? a.rows[t] : t;
      in.x = *reinterpret_cast<const uint2*>(a.X + row * hcD + col);
    }
    return in;
  };
  // Double-buffered so one barrier per token suffices (see the loop).
  __shared__ float red[2][kWarps][kWidth];
  TokenIn<kPost> next;
  if (t0 < t1) next = load(t0);
  // y given as its producer's terms (deferred_sum.h): the block's 64 columns of each of its tokens
  // are summed here, while the first token's loads are in flight: every (token, 4-column chunk)
  // by one thread with all its terms' loads out at once, into s_y as bf16 (the producer's own
  // bits); the token loop reads y from there.
  __shared__ uint2 s_y[kMaxSplitYTokens][kThreadsPerStream];  // launch_hc_mix checks the tokens
  const bool split_y = kPost && a.y_split.splits > 1;
  if (split_y) {
    const int64_t split_stride = int64_t(a.y_split.block_m) * a.y_split.block_n;
    for (int i = threadIdx.x; i < (t1 - t0) * kThreadsPerStream; i += kMixThreads) {
      const int tt = i / kThreadsPerStream, c = i % kThreadsPerStream;
      const float* p0 = a.y_split.at(0, t0 + tt, split * kMixSplitDims + 4 * c);
      float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int s0 = 0; s0 < a.y_split.splits; s0 += kYSplitBatch) {
        float4 v[kYSplitBatch];
#pragma unroll
        for (int u = 0; u < kYSplitBatch; ++u)  // every load of the batch in flight before the adds
          if (s0 + u < a.y_split.splits) v[u] = __ldcg(reinterpret_cast<const float4*>(p0 + (s0 + u) * split_stride));
#pragma unroll
        for (int u = 0; u < kYSplitBatch; ++u)
          if (s0 + u < a.y_split.splits) {
            sum[0] += v[u].x;
            sum[1] += v[u].y;
            sum[2] += v[u].z;
            sum[3] += v[u].w;
          }
      }
      s_y[tt][c] = pack_bf16x4(sum);
    }
  } else if (pair_y) {
    // The MoE combine's sum (moe_epilogue.cuh): the pair rows' bf16 values in token_pairs order.
    for (int i = threadIdx.x; i < (t1 - t0) * kThreadsPerStream; i += kMixThreads) {
      const int tt = i / kThreadsPerStream, c = i % kThreadsPerStream;
      const int64_t col = split * kMixSplitDims + 4 * c;
      uint2 v[kMaxYPairs];
#pragma unroll
      for (int u = 0; u < kMaxYPairs; ++u)  // every row's load in flight before the adds
        if (u < ppt) v[u] = __ldcg(reinterpret_cast<const uint2*>(a.y_pairs.rows + s_pos[tt][u] * a.y_pairs.ld + col));
      float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int u = 0; u < kMaxYPairs; ++u)
        if (u < ppt) {
          float f[4];
          unpack_bf16x4(v[u], f);
#pragma unroll
          for (int e = 0; e < 4; ++e) sum[e] += f[e];
        }
      s_y[tt][c] = pack_bf16x4(sum);
    }
  }
  if (split_y || pair_y) __syncthreads();  // s_y is complete
  for (int t = t0; t < t1; ++t) {
    const TokenIn<kPost> cur = next;
    if (t + 1 < t1) next = load(t + 1);  // in flight during this token's math
    float x[4];
    uint2 x_new = make_uint2(0, 0);
    if constexpr (kPost) {
      // cpu::hc_post, in hc_post_kernel's order: bf16(post y + sum_j comb[j][k] X_j).
      float yv[4], out[4];
      unpack_bf16x4((split_y || pair_y) && active ? s_y[t - t0][threadIdx.x % kThreadsPerStream] : cur.y, yv);
#pragma unroll
      for (int e = 0; e < 4; ++e) out[e] = __fmul_rn(cur.post, yv[e]);
#pragma unroll
      for (int j = 0; j < kMixMaxHc; ++j) {
        if (j >= a.hc) break;
        float xj[4];
        unpack_bf16x4(cur.xs[j], xj);
#pragma unroll
        for (int e = 0; e < 4; ++e) out[e] = __fadd_rn(out[e], __fmul_rn(cur.comb[j], xj[e]));
      }
      x_new = pack_bf16x4(out);
      unpack_bf16x4(x_new, x);  // inactive threads: zeros (all inputs zero)
    } else {
      unpack_bf16x4(cur.x, x);
    }
    float v[kWidth];
#pragma unroll
    for (int r = 0; r < kMaxMix; ++r)
      v[r] = __fmaf_rn(w[r][3], x[3], __fmaf_rn(w[r][2], x[2], __fmaf_rn(w[r][1], x[1], __fmul_rn(w[r][0], x[0]))));
#pragma unroll
    for (int r = kMaxMix; r < kWidth - 1; ++r) v[r] = 0.0f;
    v[kWidth - 1] = __fmaf_rn(x[3], x[3], __fmaf_rn(x[2], x[2], __fmaf_rn(x[1], x[1], __fmul_rn(x[0], x[0]))));
    const float s = warp_reduce_scatter<kWidth>(v, lane);
    // red[buf] is rewritten two tokens later, after every reader passed the next token's barrier.
    const int buf = (t - t0) & 1;
    if (lane < kWidth) red[buf][warp][lane] = s;
    // Also: every thread has read token t's X (the values above) before any thread stores it.
    __syncthreads();
    if (kPost && active) *reinterpret_cast<uint2*>(a.X + int64_t(t) * hcD + col) = x_new;
    if (threadIdx.x < kWidth) {
      float total = 0.0f;
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) total += red[buf][wi][threadIdx.x];
      float* dst = a.partials + int64_t(t) * a.partial_row + int64_t(split) * (a.n_mix + 1);
      if (int(threadIdx.x) < a.n_mix) dst[threadIdx.x] = total;
      if (threadIdx.x == kWidth - 1) dst[a.n_mix] = total;
    }
  }
}

struct MixFinishArgs {
  const __nv_bfloat16* X;  // bf16 [*, hc*D]
  const int32_t* rows;     // i32 [T] X row of token t; null: t
  const float* base;       // f32 [n_mix]
  const float* scale;      // f32 [3] (blocks) or [1] (head)
  const float* norm_w;     // f32 [D]
  int hc, D, n_mix, n_splits, sinkhorn_iters;
  float hc_eps, norm_eps;
  bool head;               // hc_head: pre weights only, no mix output
  bool comb_logits;        // HcComb::kLogits: leave the comb logits in mix (projected later)
  int64_t partial_row;     // floats between tokens' partials (in x)
  __nv_bfloat16* x;        // bf16 [T, D]; holds the partials on entry
  float* mix;              // f32 [T, hc + hc*hc] (blocks only)
};

// Sum over the 512 worker threads (the mixer warp does not take part): named barrier 1.
__device__ __forceinline__ float worker_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  asm volatile("bar.sync 1, %0;" ::"n"(kFinishWorkers) : "memory");
  float s = lane < kFinishWorkers / 32 ? scratch[lane] : 0.0f;
  return warp_sum(s);
}

// grid T, 16 worker warps + 1 mixer warp. Worker thread = chunks of 8 columns (c = tid + 512 i)
// of every stream. The mixer computes pre for the workers, then runs the Sinkhorn (a serial chain
// of ~40 dependent normalizations) while the workers collapse and normalize.
__global__ void __launch_bounds__(kFinishWorkers + 32) mix_finish_kernel(MixFinishArgs a) {
  constexpr int kWorkerWarps = kFinishWorkers / 32;
  const int t = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool mixer = warp == kWorkerWarps;
  const int n_chunks = a.D / 8;
  __shared__ float s_part[kWorkerWarps][32];
  __shared__ float s_pre[kMaxHc];
  __shared__ float s_red[32];
  __shared__ float s_scale[3];
  __shared__ float s_base[32];
  __shared__ __align__(16) float s_norm_w[kFinishWorkers * kFinishChunks * 8];  // worker c: [8 c, 8 c + 8)

  // Constant parameters first, before the wait. The mixer parks its own in shared memory (read
  // after the first barrier), so that no global load sits on its serial path (pre, then the
  // Sinkhorn); in registers they would be live across the barriers next to raw[] and spill.
  // Each worker requests its chunks' norm weights into shared memory (cp.async: no registers
  // held, no wait here); only the thread itself reads them, after cp.async.wait_all.
  if (mixer) {
    if (lane < 3) s_scale[lane] = lane < (a.head ? 1 : 3) ? __ldg(a.scale + lane) : 0.0f;
    if (lane < a.n_mix) s_base[lane] = __ldg(a.base + lane);
  } else {
#pragma unroll
    for (int ci = 0; ci < kFinishChunks; ++ci) {
      const int c = threadIdx.x + ci * kFinishWorkers;
      if (c >= n_chunks) continue;
      const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(s_norm_w + 8 * c));
      const size_t src = __cvta_generic_to_global(a.norm_w + 8 * c);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + 16), "l"(src + 16));
    }
  }
  pdl_wait();  // X, the partials (in x) and rows come from earlier kernels; x and mix are written

  // The streams' loads go out first and overlap the slice sums and the mixer's pre.
  const int64_t row = a.rows != nullptr ? a.rows[t] : t;
  uint4 raw[kFinishChunks][kMaxHc];
#pragma unroll
  for (int ci = 0; ci < kFinishChunks; ++ci) {
    const int c = threadIdx.x + ci * kFinishWorkers;
#pragma unroll
    for (int i = 0; i < kMaxHc; ++i) {
      raw[ci][i] = make_uint4(0, 0, 0, 0);
      if (!mixer && c < n_chunks && i < a.hc)
        raw[ci][i] = *reinterpret_cast<const uint4*>(a.X + (row * a.hc + i) * a.D + 8 * c);
    }
  }
  // Slice sums: worker warp w adds slices w, w + 16, ... of value `lane` (value n_mix is v . v);
  // the mixer adds the 16 results in warp order. A fixed order: the result is deterministic.
  const int stride = a.n_mix + 1;
  if (!mixer) {
    const float* part = reinterpret_cast<const float*>(a.x) + int64_t(t) * a.partial_row;
    float acc = 0.0f;
    if (lane <= a.n_mix) {
#pragma unroll 4
      for (int s = warp; s < a.n_splits; s += kWorkerWarps) acc += part[s * stride + lane];
    }
    s_part[warp][lane] = acc;
  }
  // Also orders every read of the partials (in x[t]) before the workers overwrite x[t].
  __syncthreads();

  float mu = 0.0f;  // mixer lane i < n_mix: mu_i
  if (mixer) {
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWorkerWarps; ++w) acc += s_part[w][lane];
    const float ss = __shfl_sync(kFullMask, acc, a.n_mix);
    const float rho = 1.0f / sqrtf(ss / float(a.hc * a.D) + a.norm_eps);
    mu = __fmul_rn(acc, rho);
    if (lane < a.hc) s_pre[lane] = sigmoid_dev(__fadd_rn(__fmul_rn(mu, s_scale[0]), s_base[lane])) + a.hc_eps;
  }
  __syncthreads();  // s_pre is ready; the last barrier the mixer takes part in

  if (mixer) {
    if (a.head) return;
    const int hc = a.hc;
    const float mu_post = __shfl_sync(kFullMask, mu, (hc + lane) & 31);
    const float mu_comb = __shfl_sync(kFullMask, mu, (2 * hc + lane) & 31);
    float* mix_t = a.mix + int64_t(t) * (hc + hc * hc);
    if (lane < hc) mix_t[lane] = 2.0f * sigmoid_dev(__fadd_rn(__fmul_rn(mu_post, s_scale[1]), s_base[hc + lane]));
    const float logit = lane < hc * hc ? __fadd_rn(__fmul_rn(mu_comb, s_scale[2]), s_base[2 * hc + lane]) : 0.0f;
    if (a.comb_logits) {
      if (lane < hc * hc) mix_t[hc + lane] = logit;
      return;
    }
    const float comb = sinkhorn_warp(logit, hc, a.sinkhorn_iters, a.hc_eps, lane);
    if (lane < hc * hc) mix_t[hc + lane] = comb;
    return;
  }

  // Workers. Collapse: x = bf16(sum_i pre_i X_i) in stream order, then the RMSNorm over the
  // bf16 values.
  float xv[kFinishChunks][8];
  float ss_local = 0.0f;
#pragma unroll
  for (int ci = 0; ci < kFinishChunks; ++ci) {
#pragma unroll
    for (int e = 0; e < 8; ++e) xv[ci][e] = 0.0f;
    if (threadIdx.x + ci * kFinishWorkers >= n_chunks) continue;
#pragma unroll
    for (int i = 0; i < kMaxHc; ++i) {
      if (i >= a.hc) break;
      const float p = s_pre[i];
      const uint32_t h[4] = {raw[ci][i].x, raw[ci][i].y, raw[ci][i].z, raw[ci][i].w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = bf16x2_to_f32x2(h[q]);
        xv[ci][2 * q] = __fadd_rn(xv[ci][2 * q], __fmul_rn(p, f.x));
        xv[ci][2 * q + 1] = __fadd_rn(xv[ci][2 * q + 1], __fmul_rn(p, f.y));
      }
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      xv[ci][e] = round_bf16_dev(xv[ci][e]);
      ss_local += xv[ci][e] * xv[ci][e];
    }
  }
  const float ss = worker_sum(ss_local, s_red);
  const float r = 1.0f / sqrtf(ss / float(a.D) + a.norm_eps);
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // this thread's norm weights (requested at the top)
#pragma unroll
  for (int ci = 0; ci < kFinishChunks; ++ci) {
    const int c = threadIdx.x + ci * kFinishWorkers;
    if (c >= n_chunks) continue;
    const float4 w0 = *reinterpret_cast<const float4*>(s_norm_w + 8 * c);
    const float4 w1 = *reinterpret_cast<const float4*>(s_norm_w + 8 * c + 4);
    const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
    float out[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = __fmul_rn(w[e], __fmul_rn(xv[ci][e], r));
    store_bf16x8(a.x + int64_t(t) * a.D + 8 * c, out);
  }
}

struct SinkhornArgs {
  float* mix;  // f32 [T, hc + hc*hc]: comb logits in, Sinkhorn comb out (in place)
  int T, hc, iters;
  float eps;
};

// grid ceil(T / 4), 4 warps; warp = token, lane = one comb element (sinkhorn_warp), so the result
// is the finish kernel's own bit for bit.
__global__ void __launch_bounds__(kSinkhornWarps * 32) sinkhorn_kernel(const SinkhornArgs a) {
  pdl_wait();  // the logits come from the finish kernel
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * kSinkhornWarps + (threadIdx.x >> 5);
  if (t >= a.T) return;  // whole warps
  const int hc = a.hc;
  float* comb = a.mix + int64_t(t) * (hc + hc * hc) + hc;
  const float logit = lane < hc * hc ? comb[lane] : 0.0f;
  const float m = sinkhorn_warp(logit, hc, a.iters, a.eps, lane);
  if (lane < hc * hc) comb[lane] = m;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// hc_post inputs of hc_post_pre_norm (null y: plain hc_pre_norm / hc_head_norm).
struct PostIn {
  const __nv_bfloat16* y = nullptr;  // bf16 [T, D]
  const float* mix = nullptr;        // f32 [T, hc + hc*hc]
  SplitSumView y_split;              // splits > 1: y as split-K partials instead
  PairSumView y_pairs;               // pairs_per_token > 0: y as the MoE's pair rows instead
};

// Shared validation and the two launches; `head` selects hc_head_norm's variant, post.y
// hc_post_pre_norm's (X is then written).
Status launch_hc_mix(const char* name, __nv_bfloat16* X, const int32_t* rows, int T, const HcParamsView& p,
                     const float* norm_w, const HcDims& d, bool head, const PostIn& post, __nv_bfloat16* x, float* mix,
                     HcComb comb, cudaStream_t stream) {
  if (X == nullptr || p.fn == nullptr || p.base == nullptr || p.scale == nullptr || norm_w == nullptr || x == nullptr ||
      (!head && mix == nullptr))
    return invalid_argument("{}: null pointer", name);
  const bool split_y = post.y_split.splits > 1;
  const bool pair_y = post.y_pairs.pairs_per_token > 0;
  const bool fused = post.y != nullptr || split_y || pair_y;
  if (fused) {
    if (post.mix == nullptr) return invalid_argument("{}: null pointer", name);
    if (split_y && pair_y) return invalid_argument("{}: y given as split-K partials and as pair rows", name);
    if (pair_y) {
      const PairSumView& v = post.y_pairs;
      if (v.rows == nullptr || v.token_pairs == nullptr || !aligned16(v.rows) || v.ld < d.D || v.ld % 8 != 0 ||
          v.pairs_per_token > kMaxYPairs)
        return invalid_argument("{}: y pair rows must be 16-byte aligned with ld >= D {} and ld % 8 == 0, at most {} "
                                "pairs per token (ld {}, {} pairs)",
                                name, d.D, kMaxYPairs, v.ld, v.pairs_per_token);
    } else if (split_y) {
      const SplitSumView& v = post.y_split;
      if (v.data == nullptr || !aligned16(v.data) || v.block_m < 1 || v.block_n < 4 || v.block_n % 4 != 0 ||
          v.tiles_n < 1 || int64_t(v.tiles_n) * v.block_n < d.D)
        return invalid_argument("{}: y partials must be 16-byte aligned tiles of block_n % 4 == 0 columns covering D {} "
                                "(splits {}, block {}x{}, {} column tiles)",
                                name, d.D, v.splits, v.block_m, v.block_n, v.tiles_n);
    } else {
      if (!aligned16(post.y)) return invalid_argument("{}: y must be 16-byte aligned", name);
      if (post.y == x) return invalid_argument("{}: y must not alias x (x holds the slice sums)", name);
    }
  }
  if (d.hc < 1 || d.hc > kMaxHc || d.D < 64 || d.D % 64 != 0 || d.D > 8 * kFinishWorkers * kFinishChunks)
    return invalid_argument("{}: hc {} must be in 1..{} and D {} a multiple of 64 up to {}", name, d.hc, kMaxHc, d.D,
                            8 * kFinishWorkers * kFinishChunks);
  const int n_mix = head ? d.hc : (2 + d.hc) * d.hc;
  if (p.n_mix != n_mix) return invalid_argument("{}: n_mix {} (expected {} for hc {})", name, p.n_mix, n_mix, d.hc);
  if (!head && d.sinkhorn_iters < 1) return invalid_argument("{}: sinkhorn_iters {} < 1", name, d.sinkhorn_iters);
  if (T < 0) return invalid_argument("{}: T {} < 0", name, T);
  if (!aligned16(X) || !aligned16(p.fn) || !aligned16(norm_w) || !aligned16(x))
    return invalid_argument("{}: X, fn, norm_w and x must be 16-byte aligned", name);
  MixPlan plan;
  if (!plan_mix(T, d.hc, d.D, n_mix, plan))
    return invalid_argument("{}: no mix plan for hc {}, D {} (D a multiple of 64, partials fit in a row)", name, d.hc,
                            d.D);
  if (T == 0) return Status::ok();

  float* partials = reinterpret_cast<float*>(x);
  const int64_t partial_row = d.D / 2;
  const bool logits = comb == HcComb::kLogits;
  if (logits && T > kHcLogitsMaxTokens)
    return invalid_argument("{}: HcComb::kLogits takes at most {} tokens (T {})", name, kHcLogitsMaxTokens, T);
  if ((split_y || pair_y) && T > kHcDeferredYMaxTokens)
    return invalid_argument("{}: a deferred y (split-K partials or pair rows) takes at most {} tokens (T {})", name,
                            kHcDeferredYMaxTokens, T);
  if ((split_y || pair_y) && plan.tokens_per_block > kMaxSplitYTokens)
    return internal_error("{}: {} tokens per partials block for T {} (the deferred y's buffer holds {})", name,
                          plan.tokens_per_block, T, kMaxSplitYTokens);
  const MixPartialsArgs pa{X,        rows,        p.fn,   post.y,  split_y ? post.y_split : SplitSumView{},
                           pair_y ? post.y_pairs : PairSumView{},
                           post.mix, d.hc,        d.D,    n_mix,   T,
                           plan.tokens_per_block, partials, partial_row, fused && logits,
                           d.sinkhorn_iters, d.hc_eps};
  const dim3 grid(plan.n_splits, plan.n_groups);
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  void (*partials_kernel)(MixPartialsArgs) = head    ? &mix_partials_kernel<kMaxHc, 8, false>
                                             : fused ? &mix_partials_kernel<(2 + kMaxHc) * kMaxHc, 32, true>
                                                     : &mix_partials_kernel<(2 + kMaxHc) * kMaxHc, 32, false>;
  DSV4_RETURN_IF_ERROR(launch_kernel(partials_kernel, grid, dim3(kMixThreads), 0, stream, pdl, pa, name));

  const MixFinishArgs fa{X,        rows,       p.base, p.scale, norm_w,      d.hc,        d.D,
                         n_mix,    plan.n_splits, d.sinkhorn_iters, d.hc_eps, d.norm_eps, head, logits,
                         partial_row, x, mix};
  return launch_kernel(&mix_finish_kernel, dim3(T), dim3(kFinishWorkers + 32), 0, stream, pdl, fa, name);
}

}  // namespace

Status hc_pre_norm(const __nv_bfloat16* X, int T, const HcParamsView& p, const float* norm_w, const HcDims& dims,
                   __nv_bfloat16* x, float* mix, cudaStream_t stream, HcComb comb) {
  // X is only read without a PostIn.
  return launch_hc_mix("hc_pre_norm", const_cast<__nv_bfloat16*>(X), nullptr, T, p, norm_w, dims, /*head=*/false,
                       PostIn{}, x, mix, comb, stream);
}

Status hc_post_pre_norm(__nv_bfloat16* X, const __nv_bfloat16* y, const float* post_mix, int T,
                        const HcParamsView& p, const float* norm_w, const HcDims& dims, __nv_bfloat16* x, float* mix,
                        cudaStream_t stream, HcComb comb, const SplitSumView* y_split, const PairSumView* y_pairs) {
  const bool split_y = y_split != nullptr && y_split->splits > 1;
  const bool pair_y = y_pairs != nullptr && y_pairs->pairs_per_token > 0;
  if ((y == nullptr && !split_y && !pair_y) || post_mix == nullptr)
    return invalid_argument("hc_post_pre_norm: null pointer");
  return launch_hc_mix("hc_post_pre_norm", X, nullptr, T, p, norm_w, dims, /*head=*/false,
                       PostIn{split_y || pair_y ? nullptr : y, post_mix, split_y ? *y_split : SplitSumView{},
                              pair_y ? *y_pairs : PairSumView{}},
                       x, mix, comb, stream);
}

Status hc_head_norm(const __nv_bfloat16* X, const int32_t* rows, int n, const HcParamsView& p, const float* norm_w,
                    const HcDims& dims, __nv_bfloat16* x, cudaStream_t stream) {
  return launch_hc_mix("hc_head_norm", const_cast<__nv_bfloat16*>(X), rows, n, p, norm_w, dims, /*head=*/true,
                       PostIn{}, x, nullptr, HcComb::kProjected, stream);
}

Status hc_sinkhorn(float* mix, int T, const HcDims& dims, cudaStream_t stream) {
  if (mix == nullptr) return invalid_argument("hc_sinkhorn: null mix");
  if (T < 0 || dims.hc < 1 || dims.hc > kMaxHc || dims.sinkhorn_iters < 1)
    return invalid_argument("hc_sinkhorn: T {} >= 0, hc {} in 1..{} and sinkhorn_iters {} >= 1 expected", T, dims.hc,
                            kMaxHc, dims.sinkhorn_iters);
  if (T == 0) return Status::ok();
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  const SinkhornArgs a{mix, T, dims.hc, dims.sinkhorn_iters, dims.hc_eps};
  return launch_kernel(&sinkhorn_kernel, dim3(unsigned((T + kSinkhornWarps - 1) / kSinkhornWarps)),
                       dim3(kSinkhornWarps * 32), 0, stream, pdl, a, "hc_sinkhorn");
}

}  // namespace dsv4::cuda
