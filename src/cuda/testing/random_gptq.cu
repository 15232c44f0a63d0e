// random_gptq.cu: device fills for random_gptq.h.
#include "cuda/common/cuda_check.h"
#include "cuda/testing/random_gptq.h"

namespace dsv4::cuda::testing {

namespace {
__global__ void fill_gptq_kernel(int32_t* qw, __half* sc, int n, int k, uint64_t seed, ScaleSpec sp) {
  const int64_t n_words = int64_t(k / 8) * n, n_scales = int64_t(k / 128) * n;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_words; i += int64_t(gridDim.x) * blockDim.x) {
    qw[i] = int32_t(gptq_qword(seed, i));
    if (i < n_scales) sc[i] = __ushort_as_half(gptq_scale_bits(seed, i, sp));
  }
}
__global__ void fill_bf16_kernel(__nv_bfloat16* out, int64_t count, uint64_t seed, float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(random_uniform_pm2(seed, i) * scale);
}
}  // namespace

Status fill_random_gptq(int32_t* qweight, __half* scales, int n, int k, uint64_t seed, ScaleSpec spec,
                        cudaStream_t stream) {
  if (n <= 0 || k <= 0 || k % 128 != 0) return invalid_argument("fill_random_gptq: bad shape N={} K={}", n, k);
  fill_gptq_kernel<<<1024, 256, 0, stream>>>(qweight, scales, n, k, seed, spec);
  return last_launch_status("fill_gptq_kernel");
}

Status fill_random_bf16(__nv_bfloat16* out, int64_t count, uint64_t seed, float scale, cudaStream_t stream) {
  fill_bf16_kernel<<<1024, 256, 0, stream>>>(out, count, seed, scale);
  return last_launch_status("fill_bf16_kernel");
}

}  // namespace dsv4::cuda::testing
