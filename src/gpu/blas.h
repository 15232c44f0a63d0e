// blas.h: the three dense GEMMs of the forward pass, with bf16 inputs and fp32 accumulation:
// the dense projections that stay fp32 (compressors, indexer head weights), the grouped wo_a
// (bf16 out) and the LM head (fp32 logits), on cuBLAS. Decode batches of the projections (1..4
// rows, by default) and of wo_a (up to cuda::kDenseDecodeMaxRows rows, for A/B runs) can run on
// the decode kernels of cuda/dense/dense.h instead, per shape class, as blas.cpp's switches say
// (never weights larger than kDecodeMaxWeightBytes: the LM head). The handle is bound to the model's
// stream and to a workspace allocated at load, so no call allocates and every call can be
// captured in a graph. With cuda::weights_evict_first() (arch.h), a decode-sized wo_a captured
// into a graph gets an L2 access-policy window over its weights with streaming priority on the
// kernel nodes cuBLAS added: the counterpart of the decode kernels' evict-first reads for the one
// weight stream (67 MB a layer) that runs on cuBLAS.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "cuda/dense/dense.h"

namespace dsv4::gpu {

class Blas {
 public:
  // Weights above this size stay on cuBLAS even for decode batches (see the file comment).
  static constexpr size_t kDecodeMaxWeightBytes = size_t(256) << 20;

  Blas() = default;
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // Creates the handle on `stream` with `workspace` (device, workspace_bytes) as its only scratch.
  // dense_woa / dense_proj: decode batches of wo_a / the projections on the dense decode kernel.
  Status init(cudaStream_t stream, void* workspace, size_t workspace_bytes, bool dense_woa = false,
              bool dense_proj = false);

  // y f32 [m, n] (row stride ldy) = x bf16 [m, k] (row stride ldx) . w bf16 [n, k]^T.
  Status gemm_f32_out(const __nv_bfloat16* x, int64_t ldx, int m, const __nv_bfloat16* w, int n, int k, float* y,
                      int64_t ldy) const;

  // Whether gemm_f32_out with these arguments runs on cuBLAS (launched plainly, not as a
  // programmatic dependent: the launch after it cannot start early) rather than the weight-streaming
  // kernel.
  bool f32_out_on_cublas(const __nv_bfloat16* x, int64_t ldx, int m, const __nv_bfloat16* w, int n, int k,
                         const float* y, int64_t ldy) const;

  // Grouped projection (wo_a): for g < groups, u[:, g*n : (g+1)*n] = bf16(o[:, g*k : (g+1)*k] .
  // w[g*n : (g+1)*n, :]^T). o: bf16 [m, groups * k]; w: bf16 [groups * n, k]; u: bf16 [m, groups * n].
  Status grouped_bf16_out(const __nv_bfloat16* o, int m, int groups, const __nv_bfloat16* w, int n, int k,
                          __nv_bfloat16* u) const;

  // grouped_bf16_out with w in the fp8 form (cuda::Fp8WeightView): up to kDecodeMaxRows rows on
  // the dense decode kernels (1..8 rows: the tensor-core kernel; 9..32: fp8 blocks of 32 rows;
  // their own summation orders, close to the bf16 result); more rows: w as bf16 into
  // `scratch` (bf16 [groups * n, k]), then grouped_bf16_out on it (cuBLAS: its bits).
  Status grouped_fp8_bf16_out(const __nv_bfloat16* o, int m, int groups, cuda::Fp8WeightView w, int n, int k,
                              __nv_bfloat16* u, __nv_bfloat16* scratch) const;
  static constexpr int kDecodeMaxRows = cuda::kDenseDecodeMaxRows;

  // Rows up to which a captured wo_a gets the streaming window (decode batches: every row tile of
  // a larger GEMM re-reads the weights, which must then stay in L2).
  static constexpr int kStreamingMaxRows = 32;

 private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  size_t max_window_bytes_ = 0;  // cudaDevAttrMaxAccessPolicyWindowSize (0: no windows)
  bool dense_woa_ = false, dense_proj_ = false;  // set by init (GpuModelOptions::dense_decode)
};

}  // namespace dsv4::gpu
