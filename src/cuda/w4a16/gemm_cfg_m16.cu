// gemm_cfg_m16.cu: the W4A16 GEMM configuration m16 (decode batches up to 16 rows): FM=1, warps 1 x 2 x 1
// (M x N x K), BK=128, 3 stages. One instantiation per file keeps the build parallel.
#include "cuda/w4a16/gemm_kernel.cuh"

namespace dsv4::cuda::w4a16_detail {
DSV4_DEFINE_GEMM_CONFIG(m16, 1, 1, 2, 1, 128, 3)
}  // namespace dsv4::cuda::w4a16_detail
