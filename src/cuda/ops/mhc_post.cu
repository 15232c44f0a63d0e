// mhc_post.cu: hc_post (ops.h), the mHC write-back of a sublayer output into the hc residual
// streams (cpu::hc_post, MODEL_SPEC.md §4.2), in place. Elementwise: every output element is
// bf16(post_k y + sum_j comb[j][k] X_j) with the reference's order and rounding points, so it is
// bit-exact with cpu::hc_post given the same mix.
#include <cstdint>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/ops/ops.h"
#include "cuda/ops/ops_util.cuh"

namespace dsv4::cuda {

namespace {

using namespace ops_detail;

constexpr int kPostThreads = 128;
constexpr int kMaxHc = 4;

struct HcPostArgs {
  __nv_bfloat16* X;         // bf16 [T, hc, D], in place
  const __nv_bfloat16* y;   // bf16 [T, D]
  const float* mix;         // f32 [T, hc + hc*hc]
  int hc, D;
};

// grid (ceil(D / 8 / 128), T): thread = 8 columns of one token in every stream. It reads all hc
// streams before writing any, and no other thread touches them, so in place is safe.
__global__ void __launch_bounds__(kPostThreads) hc_post_kernel(const HcPostArgs a) {
  pdl_wait();  // X, y and mix all come from earlier kernels of the step
  const int hc = a.hc, D = a.D;
  const int t = blockIdx.y;
  const int c = blockIdx.x * kPostThreads + threadIdx.x;
  if (c >= D / 8) return;
  const float* m = a.mix + int64_t(t) * (hc + hc * hc);  // [post (hc), comb (hc x hc)]
  float yv[8];
  load_bf16x8(a.y + int64_t(t) * D + 8 * c, yv);
  float xs[kMaxHc][8];
#pragma unroll
  for (int j = 0; j < kMaxHc; ++j)
    if (j < hc) load_bf16x8(a.X + (int64_t(t) * hc + j) * D + 8 * c, xs[j]);
#pragma unroll
  for (int k = 0; k < kMaxHc; ++k) {
    if (k >= hc) break;
    const float post = m[k];
    float out[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = __fmul_rn(post, yv[e]);
#pragma unroll
    for (int j = 0; j < kMaxHc; ++j) {
      if (j >= hc) break;
      const float comb = m[hc + j * hc + k];
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] = __fadd_rn(out[e], __fmul_rn(comb, xs[j][e]));
    }
    store_bf16x8(a.X + (int64_t(t) * hc + k) * D + 8 * c, out);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

Status hc_post(__nv_bfloat16* X, const __nv_bfloat16* y, const float* mix, int T, const HcDims& dims,
               cudaStream_t stream) {
  if (X == nullptr || y == nullptr || mix == nullptr) return invalid_argument("hc_post: null pointer");
  if (dims.hc < 1 || dims.hc > kMaxHc || dims.D < 8 || dims.D % 8 != 0 || T < 0 || T > 65535)
    return invalid_argument("hc_post: hc {} must be in 1..{}, D {} a multiple of 8, T {} in 0..65535", dims.hc, kMaxHc,
                            dims.D, T);
  if (!aligned16(X) || !aligned16(y)) return invalid_argument("hc_post: X and y must be 16-byte aligned");
  if (T == 0) return Status::ok();
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  const dim3 grid((dims.D / 8 + kPostThreads - 1) / kPostThreads, T);
  const HcPostArgs a{X, y, mix, dims.hc, dims.D};
  return launch_kernel(&hc_post_kernel, grid, dim3(kPostThreads), 0, stream, pdl, a, "hc_post");
}

}  // namespace dsv4::cuda
