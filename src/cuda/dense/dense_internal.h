// dense_internal.h: the kernels behind dense_decode_gemm (dense.h): the mma kernel of dense.cu
// for up to 32 rows of x, the weight-streaming kernel of dense_stream.cu for 1..4 rows, which
// dense_decode_gemm takes where it fits, and for fp8-form weights at 1..8 rows the fp16
// tensor-core kernel of dense_fp8_tc.cu.
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

// Whether dense_fp8_tc_gemm takes the shape and weight on `dev`: 1..8 rows, n a multiple of 32
// (a block's rows lie in one group), k a multiple of 128, codes and exponents 16-byte aligned,
// its shared memory. dense_decode_supported must hold.
bool dense_fp8_tc_supported(const DenseDecodeShape& s, Fp8WeightView w8, const DeviceInfo& dev);

// y bf16 = x . W^T on the fp8 form of W on fp16 tensor cores: the exact products, summed in
// fp32 in another order than the bf16 kernels (close to their result, not its bits).
Status dense_fp8_tc_gemm(const __nv_bfloat16* x, Fp8WeightView w8, __nv_bfloat16* y, const DenseDecodeShape& s,
                         cudaStream_t stream);

}  // namespace dsv4::cuda
