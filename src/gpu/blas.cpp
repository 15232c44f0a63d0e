// blas.cpp: cublasGemmEx / cublasGemmStridedBatchedEx behind Blas (see blas.h). Row-major
// y[m, n] = x[m, k] . w[n, k]^T is the column-major y^T[n, m] = op_T(w as [k, n]) . (x as [k, m]).
#include "gpu/blas.h"

#include "base/check.h"

namespace dsv4::gpu {
namespace {

Status blas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return internal_error("{}: {} ({})", what, cublasGetStatusString(s), cublasGetStatusName(s));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

Status Blas::init(cudaStream_t stream, void* workspace, size_t workspace_bytes) {
  DSV4_CHECK(handle_ == nullptr, "Blas::init called twice");
  DSV4_RETURN_IF_ERROR(blas_status(cublasCreate(&handle_), "cublasCreate"));
  DSV4_RETURN_IF_ERROR(blas_status(cublasSetStream(handle_, stream), "cublasSetStream"));
  // NOTE: with its own workspace cuBLAS never allocates inside a call, which graph capture needs.
  DSV4_RETURN_IF_ERROR(blas_status(cublasSetWorkspace(handle_, workspace, workspace_bytes), "cublasSetWorkspace"));
  // Split-K reductions stay in fp32 even when the output is bf16 (the reference rounds once).
  DSV4_RETURN_IF_ERROR(blas_status(
      cublasSetMathMode(handle_, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
      "cublasSetMathMode"));
  return blas_status(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
}

Status Blas::gemm_f32_out(const __nv_bfloat16* x, int64_t ldx, int m, const __nv_bfloat16* w, int n, int k, float* y,
                          int64_t ldy) const {
  if (m < 1 || n < 1 || k < 1 || ldx < k || ldy < n || ldx > INT32_MAX || ldy > INT32_MAX)
    return invalid_argument("gemm_f32_out: bad shape m {} n {} k {} ldx {} ldy {}", m, n, k, ldx, ldy);
  if (x == nullptr || w == nullptr || y == nullptr || !aligned16(x) || !aligned16(w) || !aligned16(y))
    return invalid_argument("gemm_f32_out: null or unaligned operand");
  const float one = 1.0f, zero = 0.0f;
  return blas_status(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k, x, CUDA_R_16BF,
                                  int(ldx), &zero, y, CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx (bf16 -> f32)");
}

Status Blas::grouped_bf16_out(const __nv_bfloat16* o, int m, int groups, const __nv_bfloat16* w, int n, int k,
                              __nv_bfloat16* u) const {
  if (m < 1 || n < 1 || k < 1 || groups < 1 || int64_t(groups) * k > INT32_MAX)
    return invalid_argument("grouped_bf16_out: bad shape m {} groups {} n {} k {}", m, groups, n, k);
  if (o == nullptr || w == nullptr || u == nullptr || !aligned16(o) || !aligned16(w) || !aligned16(u))
    return invalid_argument("grouped_bf16_out: null or unaligned operand");
  const float one = 1.0f, zero = 0.0f;
  // Batch g: A = rows [g*n, (g+1)*n) of w, B = columns [g*k, (g+1)*k) of o, C = columns [g*n, (g+1)*n) of u.
  return blas_status(cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k,
                                                int64_t(n) * k, o, CUDA_R_16BF, groups * k, k, &zero, u, CUDA_R_16BF,
                                                groups * n, n, groups, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmStridedBatchedEx (grouped wo_a)");
}

}  // namespace dsv4::gpu
