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
__global__ void fill_fp8_kernel(uint8_t* codes, int8_t* exps, int64_t n_codes, int64_t n_exps, uint64_t seed, int lo,
                                int hi) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_codes; i += int64_t(gridDim.x) * blockDim.x) {
    codes[i] = fp8_code(seed, i);
    if (i < n_exps) exps[i] = fp8_group_exp(seed, i, lo, hi);
  }
}
}  // namespace

Status fill_random_fp8_groups(uint8_t* codes, int8_t* exps, int64_t rows, int k, uint64_t seed, int exp_lo,
                              int exp_hi, cudaStream_t stream) {
  if (rows <= 0 || k <= 0 || k % 128 != 0 || exp_lo < -128 || exp_hi > 7 || exp_lo > exp_hi)
    return invalid_argument("fill_random_fp8_groups: bad shape rows={} k={} or exponents [{}, {}]", rows, k, exp_lo,
                            exp_hi);
  fill_fp8_kernel<<<1024, 256, 0, stream>>>(codes, exps, rows * k, rows * (k / 128), seed, exp_lo, exp_hi);
  return last_launch_status("fill_fp8_kernel");
}

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
