// stats.cu: the first sampling launch. Block (slice s, row b) finds the K largest raw logits of
// its slice, K = max(1, logprobs) <= 20, ordered by (logit desc, id asc): entry 0 is the slice's
// max and lowest-id argmax, the rest are the candidates of the logprobs top list. Each warp keeps
// a sorted list in its lanes (device.cuh) over strided batches of 32 logits; warp 0 then merges
// the 8 warp lists. Reads the logits once; writes 20 u64 per slice.
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/sampling/device.cuh"
#include "cuda/sampling/sampling.h"

namespace dsv4::cuda::sampling_detail {
namespace {

constexpr int kWarps = kStatsThreads / 32;
constexpr int kUnroll = 4;  // batches of 32 logits loaded before they are inserted (loads in flight)

__global__ void __launch_bounds__(kStatsThreads) sample_stats_kernel(const SampleArgs a) {
  __shared__ u64 s_lists[kWarps][kTopSlots];
  pdl_wait();  // params: the step's host copy; logits: the LM head before
  const int slice = blockIdx.x, row = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int K = top_count(a.params[row].logprobs);
  const int64_t lo = int64_t(slice) * a.split.chunks_per_slice * kChunk;
  const int64_t hi = min(lo + int64_t(a.split.chunks_per_slice) * kChunk, int64_t(a.V));
  const float* logits = a.logits + int64_t(row) * a.ld;

  // wbase is uniform within a warp (the insert's shuffles need every lane); lanes past hi insert
  // nothing.
  u64 list = 0;
  for (int64_t wbase = lo + warp * 32; wbase < hi; wbase += int64_t(kUnroll) * kStatsThreads) {
    float l[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = wbase + int64_t(u) * kStatsThreads + lane;
      l[u] = i < hi ? logits[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = wbase + int64_t(u) * kStatsThreads + lane;
      warp_topk_insert(list, i < hi ? logit_key(l[u], int32_t(i)) : 0ull, i < hi, K, lane);
    }
  }
  if (lane < K) s_lists[warp][lane] = list;
  __syncthreads();
  if (warp != 0) return;
  list = 0;
  for (int i0 = 0; i0 < kWarps * K; i0 += 32) {
    const int i = i0 + lane;
    const bool valid = i < kWarps * K;
    warp_topk_insert(list, valid ? s_lists[i / K][i % K] : 0ull, valid, K, lane);
  }
  if (lane < kTopSlots)
    a.tops[(int64_t(row) * a.max_slices + slice) * kTopSlots + lane] = lane < K ? list : 0ull;
}

}  // namespace

Status launch_sample_stats(const SampleArgs& a, cudaStream_t stream, bool pdl) {
  const dim3 grid(unsigned(a.split.n_slices), unsigned(a.B));
  return launch_kernel(&sample_stats_kernel, grid, dim3(kStatsThreads), 0, stream, pdl, a, "sample_stats_kernel");
}

}  // namespace dsv4::cuda::sampling_detail
