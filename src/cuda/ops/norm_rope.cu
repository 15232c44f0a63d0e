// norm_rope.cu: rmsnorm_rows and q_norm_rope (ops.h), the row norms of the query path
// (cpu::attention_forward: q_norm of qa; per-head unweighted norm of q, bf16, RoPE, bf16).
// Rows are short (1024, 512), so a row lives in registers: one block per rmsnorm row, one warp
// per query head. The sum of squares differs from the reference's dot only by fp32 order; the
// products, the rotation and the bf16 roundings follow the reference exactly. Both launch as
// programmatic dependents (common/pdl.cuh); rmsnorm_rows loads its weights before the wait.
#include <cstdint>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/ops/ops.h"
#include "cuda/ops/ops_util.cuh"
#include "cuda/ops/q_head.cuh"

namespace dsv4::cuda {

namespace {

using namespace ops_detail;

constexpr int kNormThreads = 128;
constexpr int kNormChunks = 4;  // n <= 128 * 8 * 4 = 4096
constexpr int kHeadWarps = 4;   // query heads per block

struct RmsnormArgs {
  __nv_bfloat16* x;  // bf16 [T] rows of n values, row stride ld; in place
  int64_t ld;
  int n;
  const float* w;    // f32 [n]
  float eps;
};

struct QNormRopeArgs {
  __nv_bfloat16* q;          // bf16 [T, H, d], in place
  int T, H, d, rope_dim;
  const int32_t* token_pos;  // i32 [T]
  const float* inv_freq;     // f32 [rope_dim / 2]
  float eps;
};

// grid T, 128 threads; thread = chunks of 8 values c = tid + 128 i (ops_util.cuh).
__global__ void __launch_bounds__(kNormThreads) rmsnorm_rows_kernel(const RmsnormArgs a) {
  __shared__ float s_red[32];
  RowNormWeights<kNormChunks> w;
  load_row_norm_weights(a.w, a.n, w);  // constant: before the wait
  pdl_wait();                          // the rows come from the previous kernel
  rmsnorm_row_block(a.x + int64_t(blockIdx.x) * a.ld, a.n, w, a.eps, s_red);
}

// grid ceil(T * H / 4), 4 warps; warp = one head (t, h), lane = chunks c = lane + 32 i.
__global__ void __launch_bounds__(kHeadWarps * 32) q_norm_rope_kernel(const QNormRopeArgs a) {
  const int d = a.d, H = a.H;
  const int lane = threadIdx.x & 31;
  const int64_t head = int64_t(blockIdx.x) * kHeadWarps + (threadIdx.x >> 5);
  const bool real = head < int64_t(a.T) * H;
  const float pos = real ? float(a.token_pos[head / H]) : 0.0f;  // the step's host copy (pdl.cuh)
  pdl_wait();  // q comes from the previous kernel
  if (!real) return;  // whole warps leave together
  q_head_norm_rope(a.q + head * d, d, a.rope_dim, pos, a.inv_freq, a.eps, lane);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

Status rmsnorm_rows(__nv_bfloat16* x, int64_t ld, int T, int n, const float* w, float eps, cudaStream_t stream) {
  if (x == nullptr || w == nullptr) return invalid_argument("rmsnorm_rows: null pointer");
  if (n < 8 || n % 8 != 0 || n > 8 * kNormThreads * kNormChunks || ld < n || ld % 8 != 0 || T < 0)
    return invalid_argument("rmsnorm_rows: n {} must be a multiple of 8 up to {}, ld {} >= n and a multiple of 8, T {}",
                            n, 8 * kNormThreads * kNormChunks, ld, T);
  if (!aligned16(x) || !aligned16(w)) return invalid_argument("rmsnorm_rows: x and w must be 16-byte aligned");
  if (T == 0) return Status::ok();
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  const RmsnormArgs a{x, ld, n, w, eps};
  return launch_kernel(&rmsnorm_rows_kernel, dim3(T), dim3(kNormThreads), 0, stream, pdl, a, "rmsnorm_rows");
}

Status q_norm_rope(__nv_bfloat16* q, int T, int H, int d, int rope_dim, const int32_t* token_pos,
                   const float* inv_freq, float eps, cudaStream_t stream) {
  if (q == nullptr || token_pos == nullptr || (rope_dim > 0 && inv_freq == nullptr))
    return invalid_argument("q_norm_rope: null pointer");
  if (T < 0 || H < 1 || d < 8 || d % 8 != 0 || d > 8 * 32 * kQHeadChunks || rope_dim < 0 || rope_dim % 8 != 0 ||
      rope_dim > d)
    return invalid_argument("q_norm_rope: bad sizes (T {}, H {}, d {} a multiple of 8 up to {}, rope_dim {} a multiple "
                            "of 8 up to d)",
                            T, H, d, 8 * 32 * kQHeadChunks, rope_dim);
  if (!aligned16(q)) return invalid_argument("q_norm_rope: q must be 16-byte aligned");
  if (T == 0) return Status::ok();
  const int64_t heads = int64_t(T) * H;
  const int64_t blocks = (heads + kHeadWarps - 1) / kHeadWarps;
  if (blocks > 0x7fffffff) return invalid_argument("q_norm_rope: T * H = {} is too large", heads);
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  const QNormRopeArgs a{q, T, H, d, rope_dim, token_pos, inv_freq, eps};
  return launch_kernel(&q_norm_rope_kernel, dim3(unsigned(blocks)), dim3(kHeadWarps * 32), 0, stream, pdl, a,
                       "q_norm_rope");
}

}  // namespace dsv4::cuda
