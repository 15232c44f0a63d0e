// dense_internal.h: the kernels behind dense_decode_gemm (dense.h): the mma kernel of dense.cu
// for up to 32 rows of x, the weight-streaming kernel of dense_stream.cu for 1..4 rows, which
// dense_decode_gemm takes where it fits, and the tensor-core kernel of dense_tc.cu for 1..8 rows
// (fp8-form weights, and bf16 weights where dense.cu's dispatch says), and the register-streaming
// GEMV of dense_gemv.cu for 1..4 rows of x on bf16 weights.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "base/status.h"
#include "cuda/common/arch.h"
#include "cuda/dense/dense.h"

namespace dsv4::cuda {

inline constexpr int kDenseStreamMaxRows = 4;

// Whether dense_stream_gemm takes the shape on `dev` with bf16 or (fp8) fp8-form weights (rows,
// k % 32 (fp8: % 128), its shared memory: the rings plus the x rows of the groups a block spans).
// dense_decode_supported must hold as well.
bool dense_stream_supported(const DenseDecodeShape& s, const DeviceInfo& dev, bool fp8);

// Exactly one of w (bf16) and w8.codes (fp8 form; bf16 out only) is set.
Status dense_stream_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, Fp8WeightView w8, void* y, DenseOut out,
                         const DenseDecodeShape& s, cudaStream_t stream);

// Whether dense_tc_gemm takes the shape and weight (bf16 w, or the fp8 form w8 when w is null)
// on `dev`: 1..kDenseTcMaxRows rows, n a multiple of 32 (a block's rows lie in one group), k a
// multiple of 128 (fp8) or 64 (bf16), weights (and exponents) 16-byte aligned, its shared memory.
// dense_decode_supported must hold as well.
bool dense_tc_supported(const DenseDecodeShape& s, const void* w, Fp8WeightView w8, const DeviceInfo& dev);

// Whether the kernel runs `s` in blocks of 32 rows (enough of them for half the SMs); smaller
// grids run 16-row blocks, which lose to the streaming kernel on bf16 weights (H100, M = 1: the
// HCA projection 10.1 against 9.3 us).
bool dense_tc_fills_gpu(const DenseDecodeShape& s, const DeviceInfo& dev);

// Ring slots a warp of the kernel streams through for `s` (fp8 or bf16 weights) on `dev`: enough
// for the grid to keep 4.5 us of the device's peak bandwidth requested (16 MB where it reports
// none), within two blocks' shared memory an SM; 0 where the kernel does not fit.
int dense_tc_ring_slots(const DenseDecodeShape& s, bool fp8, const DeviceInfo& dev);

// Diagnostics of dense_tc_gemm for tests and benchmarks (production passes none).
struct DenseTcDiagnostics {
  // kTracePoints stamps a block (cuda/common/trace.cuh: entry, x staged, main loop done, exit),
  // groups * n / (dense_tc_fills_gpu ? 32 : 16) blocks.
  unsigned long long* trace = nullptr;
  bool cp_async_slots = false;  // the slots by cp.async where TMA would bring them (SM90)
};

// y = x . W^T on tensor cores: the exact products summed in fp32 in another order than the other
// kernels (close to their result, not its bits). Exactly one of w (bf16) and w8.codes (fp8 form;
// bf16 out only) is set.
Status dense_tc_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, Fp8WeightView w8, void* y, DenseOut out,
                     const DenseDecodeShape& s, cudaStream_t stream, const DenseTcDiagnostics& diag = {});

// Whether dense_gemv takes the shape on `dev`: 1..kDenseGemvMaxRows rows of x, k a multiple of
// 2048, one group's x rows (the kernel's 1, 2 or 4) within 48 KB of shared memory.
// dense_decode_supported must hold as well.
bool dense_gemv_supported(const DenseDecodeShape& s, const DeviceInfo& dev);

// y = x . W^T for 1..kDenseGemvMaxRows rows of x, bf16 weights streamed through registers
// (dense_gemv.cu): fp32 sums in its own order (close to the other kernels' result, not their
// bits), the same for a row whatever m and the grid.
Status dense_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, DenseOut out, const DenseDecodeShape& s,
                  cudaStream_t stream);

}  // namespace dsv4::cuda
