// blas.cpp: cuda::dense_decode_gemm (decode batches, where switched on) or cublasGemmEx /
// cublasGemmStridedBatchedEx behind Blas (see blas.h). Row-major y[m, n] = x[m, k] . w[n, k]^T is
// the column-major y^T[n, m] = op_T(w as [k, n]) . (x as [k, m]).
#include "gpu/blas.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "base/check.h"
#include "cuda/common/arch.h"
#include "cuda/dense/dense.h"

namespace dsv4::gpu {
namespace {

// Routing of decode batches per shape class, switched by GpuModelOptions::dense_decode (`dsv4
// bench --dense-decode`): grouped wo_a (8 x 1024 x 4096, bf16 out) at 1..4 rows on the register
// GEMV (dense_gemv.cu; no other decode kernel), the fp32-out projections (2624 or 1024 x 4096)
// where the weight-streaming kernels take them (1..4 rows: cuda::dense_decode_streams); never the
// LM head. Measurement behind them (H200): tests/cuda/dense_test.cpp DenseDecode.VsCublas (kernel
// vs these very cuBLAS calls, weights from HBM) and the 20-layer step. The projections' 1..4-row calls go to the
// weight-streaming kernel (dense_stream.cu), which prefetches its weights before the PDL wait:
// B=1 at 4K 3.20 -> 3.17 ms (bench/results/forward_h200.md), so "proj" is the default; at 8 and
// 32 rows the mma kernel loses to cuBLAS (14.4 vs 12.0, 16.7 vs 13.4 us for proj_csa), so those
// stay on cuBLAS. wo_a alone is no faster on any decode kernel than on cuBLAS: all of them read its
// 67 MB as fast as a plain read of that size does (H100: 28.2-28.9 us against 27.4-28.7; a 1 GB
// read runs 25% faster, so the ramp and tail of one launch cost ~6 us), but the register GEMV
// requests its first weights before the PDL wait, during attention's tail: B = 1 at 4K 3.378 ->
// 3.358-3.361 ms on an H100 (bench/results/NOTES.md, thirty-sixth session), so "woa,proj" is the
// default. At 2..4 rows the GEMV loses to cuBLAS standalone (wo_a at 4 rows: 31.4 against 27.4 us)
// and still wins in the step, where its weights stream during attention's tail: 4K, 20 layers, H100,
// B = 2 4.199 -> 4.163-4.166 ms, B = 4 5.643-5.657 -> 5.586-5.593 (with the projections' 2..4-row
// calls on it too; bench/results/gemv4_h100_0c45dee/). At 5..32 rows wo_a stays on cuBLAS (the
// decode kernels lose there: 34 vs 28.5 us at 8 rows, H100).
constexpr int kDenseMaxRows = cuda::kDenseDecodeMaxRows;

Status blas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return internal_error("{}: {} ({})", what, cublasGetStatusString(s), cublasGetStatusName(s));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Whether a call goes to the decode kernels: switched on for its class, few rows, a weight that
// is not the LM head, a shape they take, and (streaming_only: the projections) a shape the
// weight-streaming kernel takes.
bool use_decode_kernel(bool enabled, bool streaming_only, const cuda::DenseDecodeShape& s, const void* x,
                       const void* w, const void* y) {
  const size_t weight_bytes = size_t(s.groups) * size_t(s.n) * size_t(s.k) * 2;
  return enabled && s.m <= kDenseMaxRows && weight_bytes <= Blas::kDecodeMaxWeightBytes &&
         cuda::dense_decode_supported(s, x, w, y) && (!streaming_only || cuda::dense_decode_streams(s));
}

cuda::DenseDecodeShape f32_out_shape(int m, int n, int k, int64_t ldx, int64_t ldy) {
  return {.m = m, .n = n, .k = k, .groups = 1, .ldx = ldx, .ldy = ldy};
}

// The grouped wo_a: o [m, groups * k] and u [m, groups * n], group g at columns g k and g n.
cuda::DenseDecodeShape grouped_shape(int m, int groups, int n, int k) {
  return {.m = m, .n = n, .k = k, .groups = groups, .ldx = int64_t(groups) * k, .x_group_stride = k,
          .ldy = int64_t(groups) * n, .y_group_stride = n};
}

// The nodes the next captured operation of `s` will depend on (the capture's leaves); false when
// `s` is not capturing. Only a query: it never changes or invalidates the capture.
bool capture_leaves(cudaStream_t s, std::vector<cudaGraphNode_t>* out) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t n = 0;
  if (cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, &edges, &n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (st != cudaStreamCaptureStatusActive) return false;
  out->assign(deps, deps + n);
  return true;
}

// Marks the kernel nodes captured since `before` (walked back from the current leaves; a cuBLAS
// call may add a reduction after its GEMM) as reading `base`..+bytes with streaming L2 priority.
// Best effort: an error leaves the nodes as they were (the graph computes the same either way).
// The CUDA runtime permits changing nodes of a graph while it is being captured.
void mark_streaming(cudaStream_t s, const std::vector<cudaGraphNode_t>& before, const void* base, size_t bytes) {
  std::vector<cudaGraphNode_t> todo;
  if (!capture_leaves(s, &todo)) return;
  cudaLaunchAttributeValue v{};
  v.accessPolicyWindow.base_ptr = const_cast<void*>(base);
  v.accessPolicyWindow.num_bytes = bytes;
  v.accessPolicyWindow.hitRatio = 1.0f;
  v.accessPolicyWindow.hitProp = cudaAccessPropertyStreaming;
  v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  std::vector<cudaGraphNode_t> seen;
  constexpr size_t kMaxNodes = 8;  // one call's kernels; a walk past that missed `before`
  while (!todo.empty() && seen.size() < kMaxNodes) {
    const cudaGraphNode_t node = todo.back();
    todo.pop_back();
    if (std::find(before.begin(), before.end(), node) != before.end() ||
        std::find(seen.begin(), seen.end(), node) != seen.end())
      continue;
    seen.push_back(node);
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel)
      cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributeAccessPolicyWindow, &v);
    size_t n_deps = 0;
    if (cudaGraphNodeGetDependencies(node, nullptr, nullptr, &n_deps) == cudaSuccess && n_deps > 0) {
      std::vector<cudaGraphNode_t> deps(n_deps);
      std::vector<cudaGraphEdgeData> edges(n_deps);
      if (cudaGraphNodeGetDependencies(node, deps.data(), edges.data(), &n_deps) == cudaSuccess)
        todo.insert(todo.end(), deps.begin(), deps.begin() + long(n_deps));
    }
  }
  cudaGetLastError();  // a refused attribute is not an error of the step
}

}  // namespace

bool Blas::f32_out_on_cublas(const __nv_bfloat16* x, int64_t ldx, int m, const __nv_bfloat16* w, int n, int k,
                             const float* y, int64_t ldy) const {
  return !use_decode_kernel(dense_proj_, /*streaming_only=*/true, f32_out_shape(m, n, k, ldx, ldy), x, w, y);
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

Status Blas::init(cudaStream_t stream, void* workspace, size_t workspace_bytes, bool dense_woa, bool dense_proj) {
  DSV4_CHECK(handle_ == nullptr, "Blas::init called twice");
  DSV4_RETURN_IF_ERROR(blas_status(cublasCreate(&handle_), "cublasCreate"));
  DSV4_RETURN_IF_ERROR(blas_status(cublasSetStream(handle_, stream), "cublasSetStream"));
  stream_ = stream;
  dense_woa_ = dense_woa;
  dense_proj_ = dense_proj;
  // The largest access-policy window (0 where the query fails: no windows, nothing else lost).
  int device = 0, max_window = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, device) == cudaSuccess)
    max_window_bytes_ = size_t(std::max(max_window, 0));
  else
    cudaGetLastError();
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
  const cuda::DenseDecodeShape ds = f32_out_shape(m, n, k, ldx, ldy);
  if (use_decode_kernel(dense_proj_, /*streaming_only=*/true, ds, x, w, y))
    return cuda::dense_decode_gemm(x, w, y, cuda::DenseOut::kF32, ds, stream_);
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
  const cuda::DenseDecodeShape ds = grouped_shape(m, groups, n, k);
  // The GEMV alone (a shape it refuses stays on cuBLAS); it implies the streaming check.
  if (use_decode_kernel(dense_woa_, /*streaming_only=*/false, ds, o, w, u) && cuda::dense_decode_runs_gemv(ds))
    return cuda::dense_decode_gemm(o, w, u, cuda::DenseOut::kBf16, ds, stream_);
  const float one = 1.0f, zero = 0.0f;
  // Captured decode batches with evict-first weights: the nodes this call adds get the window.
  std::vector<cudaGraphNode_t> before;  // stays empty (no allocation) unless capturing
  const bool mark = cuda::weights_evict_first() && m <= kStreamingMaxRows && max_window_bytes_ > 0 &&
                    capture_leaves(stream_, &before);
  // Batch g: A = rows [g*n, (g+1)*n) of w, B = columns [g*k, (g+1)*k) of o, C = columns [g*n, (g+1)*n) of u.
  DSV4_RETURN_IF_ERROR(blas_status(
      cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k, int64_t(n) * k, o,
                                 CUDA_R_16BF, groups * k, k, &zero, u, CUDA_R_16BF, groups * n, n, groups,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx (grouped wo_a)"));
  if (mark) mark_streaming(stream_, before, w, std::min(size_t(groups) * n * k * 2, max_window_bytes_));
  return Status::ok();
}

Status Blas::grouped_fp8_bf16_out(const __nv_bfloat16* o, int m, int groups, cuda::Fp8WeightView w, int n, int k,
                                  __nv_bfloat16* u, __nv_bfloat16* scratch) const {
  if (m < 1 || n < 1 || k < 1 || groups < 1 || int64_t(groups) * k > INT32_MAX)
    return invalid_argument("grouped_fp8_bf16_out: bad shape m {} groups {} n {} k {}", m, groups, n, k);
  if (m <= kDecodeMaxRows)
    return cuda::dense_decode_gemm_fp8(o, w, u, cuda::DenseOut::kBf16, grouped_shape(m, groups, n, k), stream_);
  if (scratch == nullptr)
    return invalid_argument("grouped_fp8_bf16_out: {} rows need the bf16 scratch for the fp8 weight (none given)", m);
  DSV4_RETURN_IF_ERROR(cuda::fp8_groups_to_bf16(w, int64_t(groups) * n, k, scratch, stream_));
  return grouped_bf16_out(o, m, groups, scratch, n, k, u);
}

}  // namespace dsv4::gpu
