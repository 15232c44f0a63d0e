// gemm_cfg_m128.cu: the W4A16 GEMM configuration m128 (prefill (more than 64 rows)): FM=4, warps 2 x 4 x 1
// (M x N x K), BK=64, 4 stages. One instantiation per file keeps the build parallel.
#include "cuda/w4a16/gemm_kernel.cuh"

namespace dsv4::cuda::w4a16_detail {
DSV4_DEFINE_GEMM_CONFIG(m128, 4, 2, 4, 1, 64, 4)
}  // namespace dsv4::cuda::w4a16_detail
