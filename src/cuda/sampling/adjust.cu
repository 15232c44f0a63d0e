// adjust.cu: adjust_logits (sampling.h), logit_bias and the penalties applied to a step's logits
// before sampling: one thread per entry, base/logit_adjust.h's arithmetic (the host runner's).
#include "base/logit_adjust.h"
#include "cuda/common/cuda_check.h"
#include "cuda/sampling/sampling.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    adjust_logits_kernel(float* logits, int64_t ld, int B, int V, const LogitAdjust* adj, const int32_t* rows, int n) {
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= n) return;
  const LogitAdjust a = adj[i];
  const int row = rows[i];
  // The host builds the entries from validated requests; an entry outside the logits is skipped
  // rather than written past them.
  if (row < 0 || row >= B || a.token < 0 || a.token >= V) return;
  float* l = logits + int64_t(row) * ld + a.token;
  *l = adjust_logit(*l, a);
}

}  // namespace

Status adjust_logits(float* logits, int64_t ld, int B, int V, const LogitAdjust* adj, const int32_t* rows, int n,
                     cudaStream_t stream) {
  if (n < 0 || B < 0 || V < 1 || ld < V)
    return invalid_argument("adjust_logits: need n >= 0, B >= 0, 1 <= V <= ld (got n {}, B {}, V {}, ld {})", n, B, V,
                            ld);
  if (n == 0) return Status::ok();
  if (logits == nullptr || adj == nullptr || rows == nullptr)
    return invalid_argument("adjust_logits: null pointer (logits {}, adj {}, rows {})", fmt::ptr(logits),
                            fmt::ptr(adj), fmt::ptr(rows));
  const unsigned blocks = unsigned((n + kThreads - 1) / kThreads);
  adjust_logits_kernel<<<blocks, kThreads, 0, stream>>>(logits, ld, B, V, adj, rows, n);
  return cuda_status(cudaGetLastError(), "adjust_logits_kernel");
}

}  // namespace dsv4::cuda
