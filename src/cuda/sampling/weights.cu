// weights.cu: the second sampling launch. Block (slice s, row b), with the row max from the stats
// launch, computes in double, as runtime::Sampler does:
//   - per 2048-logit chunk, sum exp(l - max) (the log-softmax normalizer, summed by the select
//     launch in chunk order: the same bits whatever the slicing);
//   - unless the row is greedy, per logit w = exp((l - max) / T), the candidate test of min-p
//     (w > 0 and w >= min_p), and the key = bits of float(w) (what the host sampler ranks and sums)
//     or kNotCandidate, stored for the select launch;
//   - a histogram of the candidates by the exponent of float(w): counts and exact mantissa sums.
// Double exp dominates (two per logit when T != 1); the slices spread it over the GPU at small B.
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/sampling/device.cuh"
#include "cuda/sampling/sampling.h"

namespace dsv4::cuda::sampling_detail {
namespace {

constexpr int kWarps = kStatsThreads / 32;
constexpr float kGreedyTemperature = 1e-5f;  // = runtime::kGreedyTemperature

__global__ void __launch_bounds__(kStatsThreads) sample_weights_kernel(const SampleArgs a) {
  __shared__ uint32_t s_cnt[kExpBuckets];
  __shared__ u64 s_sum[kExpBuckets];
  __shared__ double s_red[kWarps];
  __shared__ float s_max;
  pdl_wait();  // params (a host copy) and the stats launch's lists
  const int slice = blockIdx.x, row = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const SampleParams p = a.params[row];
  const bool greedy = !(p.temperature > kGreedyTemperature);  // NaN temperature: greedy, as on the host

  if (warp == 0) {
    // Row max: the largest of the slices' first entries (stats launch).
    const u64 k = lane < a.split.n_slices ? a.tops[(int64_t(row) * a.max_slices + lane) * kTopSlots] : 0ull;
    const u64 m = warp_max_u64(k);
    if (lane == 0) s_max = key_logit(m);
  }
  for (int e = tid; e < kExpBuckets; e += kStatsThreads) {
    s_cnt[e] = 0;
    s_sum[e] = 0;
  }
  __syncthreads();

  const double max_logit = double(s_max);
  const double inv_t = 1.0 / double(p.temperature);
  const double min_w = p.min_p > 0.0f ? double(p.min_p) : 0.0;
  const float* logits = a.logits + int64_t(row) * a.ld;
  uint32_t* keys = a.keys + int64_t(row) * a.key_stride;
  const int c_end = min((slice + 1) * a.split.chunks_per_slice, a.split.n_chunks);
  for (int c = slice * a.split.chunks_per_slice; c < c_end; ++c) {
    double part = 0.0;
#pragma unroll 2
    for (int j = 0; j < kChunk / kStatsThreads; ++j) {
      const int64_t i = int64_t(c) * kChunk + j * kStatsThreads + tid;
      if (i >= a.V) break;
      const double d = double(logits[i]) - max_logit;
      const double e1 = exp(d);
      part += e1;
      if (!greedy) {
        // T == 1 gives inv_t == 1.0 exactly, so the host's exp(d * inv_t) is exp(d).
        const double w = inv_t == 1.0 ? e1 : exp(d * inv_t);
        uint32_t key = kNotCandidate;
        if (w > 0.0 && w >= min_w) {
          key = __float_as_uint(__double2float_rn(w));
          atomicAdd(&s_cnt[wkey_exp(key)], 1u);
          atomicAdd(&s_sum[wkey_exp(key)], u64(wkey_mant(key)));
        }
        keys[i] = key;
      }
    }
    // Fixed-order reduction: the chunk's partial does not depend on the slicing.
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) part += __shfl_xor_sync(kFullMask, part, off);
    if (lane == 0) s_red[warp] = part;
    __syncthreads();
    if (tid == 0) {
      double sum = 0.0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += s_red[w];
      a.lse_part[int64_t(row) * a.max_chunks + c] = sum;
    }
    __syncthreads();
  }
  // The select launch reads keys 8 at a time up to V rounded up to 8.
  if (!greedy && slice == a.split.n_slices - 1) {
    const int64_t v8 = ceil_div(a.V, 8) * 8;
    if (a.V + tid < v8) keys[a.V + tid] = kNotCandidate;
  }
  __syncthreads();
  for (int e = tid; e < kExpBuckets; e += kStatsThreads) {
    const int64_t o = (int64_t(row) * a.max_slices + slice) * kExpBuckets + e;
    a.hist_cnt[o] = s_cnt[e];
    a.hist_sum[o] = s_sum[e];
  }
}

}  // namespace

Status launch_sample_weights(const SampleArgs& a, cudaStream_t stream, bool pdl) {
  const dim3 grid(unsigned(a.split.n_slices), unsigned(a.B));
  return launch_kernel(&sample_weights_kernel, grid, dim3(kStatsThreads), 0, stream, pdl, a,
                       "sample_weights_kernel");
}

}  // namespace dsv4::cuda::sampling_detail
