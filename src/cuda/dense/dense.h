// dense.h: the BF16 decode GEMM, y[M, N] = x[M, K] . W[N, K]^T for M <= 32 rows, with W bf16
// row-major, fp32 accumulation and one rounding to the output type (bf16 or fp32). At decode
// sizes this is a weight stream: every byte of W is read once with 16-byte loads, x is read
// through L1, and the warps of a block split K and add their sums in a fixed order (no atomics,
// deterministic). An optional group count runs several independent GEMMs of one shape in one
// launch (the grouped wo_a): group g reads x columns [g * x_group_stride, + K), W rows
// [g * N, (g + 1) * N) and writes y columns [g * y_group_stride, + N).
// Launch shapes depend only on the problem shape (graph-safe); nothing is allocated.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"

namespace dsv4::cuda {

inline constexpr int kDenseDecodeMaxRows = 32;

enum class DenseOut { kF32, kBf16 };

struct DenseDecodeShape {
  int m = 0;       // rows of x and y, 1..kDenseDecodeMaxRows
  int n = 0;       // output columns per group (rows of W per group)
  int k = 0;       // reduction length, a multiple of 32
  int groups = 1;  // 1..65535
  int64_t ldx = 0, x_group_stride = 0;  // in elements; multiples of 8 (16-byte rows)
  int64_t ldy = 0, y_group_stride = 0;  // in elements
};

// Whether dense_decode_gemm accepts the shape and pointers (x and w 16-byte aligned, y aligned
// to its element). Callers with another shape use a general GEMM.
bool dense_decode_supported(const DenseDecodeShape& s, const void* x, const void* w, const void* y);

// Whether dense_decode_gemm (rows_per_block 0) runs `s` on a weight-streaming kernel (1..4 rows:
// dense_gemv.cu, dense_tc.cu or dense_stream.cu, where the latter's shared memory fits) on the
// current device.
bool dense_decode_streams(const DenseDecodeShape& s);

// Rows of x up to which the register-streaming GEMV (dense_gemv.cu) runs bf16 weights.
inline constexpr int kDenseGemvMaxRows = 4;

// Whether dense_decode_gemm (rows_per_block 0) runs `s` with bf16 weights on the register-
// streaming GEMV on the current device (1..kDenseGemvMaxRows rows, k a multiple of 2048, one
// group's x rows within 48 KB).
bool dense_decode_runs_gemv(const DenseDecodeShape& s);

// rows_per_block values that force the weight-streaming kernel (1..4 rows) or the tensor-core
// kernel (1..kDenseTcMaxRows rows, n a multiple of 32, k of 64 (bf16) or 128 (fp8)); refused where
// the kernel does not take the shape. For tests and benchmarks that compare kernels.
inline constexpr int kDenseForceStream = 1;
inline constexpr int kDenseForceTc = 2;
// Forces the register-streaming GEMV (dense_gemv.cu: 1..kDenseGemvMaxRows rows, bf16 weights,
// k % 2048 == 0).
inline constexpr int kDenseForceGemv = 3;
// Rows of x up to which the tensor-core kernel runs (what 0 picks for fp8-form weights).
inline constexpr int kDenseTcMaxRows = 8;

// y (bf16 or f32, per `out`)[m, g * y_group_stride + j] = sum_kk x[m, g * x_group_stride + kk] .
// w[(g * n + j) * k + kk], for m < s.m, g < s.groups, j < s.n; nothing else of y is written.
// rows_per_block: 0 picks the kernel and tile by shape (bf16 weights at 1..4 rows: the register-
// streaming GEMV of dense_gemv.cu where it fits; else at 1..4 rows the tensor-core kernel of
// dense_tc.cu where it fits, else the weight-streaming kernel of dense_stream.cu; all stream their
// weights from before the PDL wait); kDenseForceStream, kDenseForceTc and kDenseForceGemv force those
// kernels; 8 or 16 force the mma kernel with that tile height (tests).
Status dense_decode_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, DenseOut out,
                         const DenseDecodeShape& s, cudaStream_t stream, int rows_per_block = 0);

// A weight in the lossless fp8 form of model/fp8_groups.h: e4m3fn codes u8 [rows, k] and one
// power-of-two exponent per (row, 128-column group), i8 [rows, k / 128]; W = e4m3(code) * 2^exp.
// Rows as for the bf16 weight (group g of a grouped GEMM: rows [g * n, (g + 1) * n)).
struct Fp8WeightView {
  const uint8_t* codes = nullptr;
  const int8_t* exps = nullptr;
};

// dense_decode_gemm on the fp8 form of W, bf16 out (the one such weight is wo_a; DenseOut::kF32
// is refused), k a multiple of 128. Half the weight bytes of the bf16 GEMM. rows_per_block 0 at
// 1..8 rows (n a multiple of 32) runs the fp16 tensor-core kernel (dense_tc.cu): the exact
// products summed in fp32 in its own order, close to the bf16 result, not its bits. The streaming
// kernel (kDenseForceStream) and the mma kernel (8, 16) turn each code back into the exact weight
// (fp32: the code's bits times 2^(exp + 120), one exact multiply; the mma kernel then packs it
// to bf16 exactly) and run the bf16 kernels' arithmetic in the same order, so y has the same bits
// as dense_decode_gemm on the decoded bf16 weight with the same rows_per_block. Blocks of 32 W
// rows (rows_per_block 32, fp8 only; what 0 picks at 9..32 rows, or 5..8 where the tensor-core
// kernel does not fit) halve the x reads per weight byte and sum in another order (close to the
// bf16 result, not its bits).
Status dense_decode_gemm_fp8(const __nv_bfloat16* x, Fp8WeightView w, void* y, DenseOut out,
                             const DenseDecodeShape& s, cudaStream_t stream, int rows_per_block = 0);

// out bf16 [rows, k] = the exact values of an fp8-form weight (prefill and batches past the decode
// kernels run the bf16 GEMM on this copy). k a multiple of 128.
Status fp8_groups_to_bf16(Fp8WeightView w, int64_t rows, int k, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace dsv4::cuda
