// mhc_plan.h: launch plan of the mHC mix logits (hc_pre_norm, hc_post_pre_norm and hc_head_norm
// in mhc.cu), kept apart from the kernels so it is plain host code that the tests check without a GPU.
//
// The mix logits mu = (fn . v) * rho are a skinny GEMM: n_mix (24) rows of hc*D (16384) fp32 per
// token, 1.5 MB of fn per call. The partials kernel splits D into 64-column slices, each block
// taking its slice in every stream (64 blocks at T = 1 for Flash; thread = 4 columns of one
// stream, holding those columns of every fn row in registers), so that a block holds all hc
// streams of its columns: hc_post_pre_norm updates them in place (HCPost) before the dot products.
// A block walks a group of tokens, so fn is read once per token group rather than once per
// token. The slice sums [n_splits][n_mix + 1] (the last one is sum v^2, for rho) of token t are
// parked in t's own output row x[t] (D bf16 = D / 2 floats), which the finish kernel reads before
// it overwrites the row: the launchers need no workspace, and the finish kernel sums the slices in
// a fixed order (deterministic). That needs n_splits * (n_mix + 1) <= D / 2, i.e. n_mix + 1 <= 32:
// hc = 4 gives 25 for blocks (n_mix 24) and 5 for the head (n_mix 4).
#pragma once

#include <algorithm>
#include <cstdint>

namespace dsv4::cuda::mhc_detail {

inline constexpr int kMixSplitDims = 64;           // columns of D per partials block (in every stream)
inline constexpr int kMixMaxHc = 4;                // streams a partials block covers
inline constexpr int kMixThreads = kMixMaxHc * kMixSplitDims / 4;  // 4 columns of one stream per thread
inline constexpr int kMixMaxGroups = 32;           // token groups at most (fn reads from L2)
inline constexpr int kMixMinTokensPerBlock = 8;    // below this fn re-reads cost more than they give

struct MixPlan {
  int n_splits = 0;          // partials blocks along D (64 columns of every stream each)
  int tokens_per_block = 0;  // tokens one partials block walks
  int n_groups = 0;          // partials blocks along the tokens
  int partial_stride = 0;    // floats of one slice of one token: n_mix + 1
};

// Plan for T tokens (T >= 0). False when hc is outside 1..4, D is not a multiple of 64 or the
// slice sums of a token do not fit in its output row.
inline bool plan_mix(int T, int hc, int D, int n_mix, MixPlan& p) {
  if (hc < 1 || hc > kMixMaxHc || D < 1 || n_mix < 1 || T < 0 || D % kMixSplitDims != 0) return false;
  p.n_splits = D / kMixSplitDims;
  p.partial_stride = n_mix + 1;
  // Decode (T <= 8): one group, every block walks all tokens. Prefill: at most 32 groups.
  const int by_groups = (T + kMixMaxGroups - 1) / kMixMaxGroups;
  p.tokens_per_block = std::max({by_groups, std::min(T, kMixMinTokensPerBlock), 1});
  p.n_groups = (T + p.tokens_per_block - 1) / p.tokens_per_block;
  return int64_t(p.n_splits) * p.partial_stride <= D / 2;
}

}  // namespace dsv4::cuda::mhc_detail
