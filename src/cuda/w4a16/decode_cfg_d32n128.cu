// decode_cfg_d32n128.cu: the W4A16 decode configuration d32n128: 32 rows, 128 columns, 8 warps
// (2 along N x 4 along K). One instantiation per file keeps the build parallel.
#include "cuda/w4a16/decode_kernel.cuh"

namespace dsv4::cuda::w4a16_detail {
DSV4_DEFINE_DECODE_CONFIG(d32n128, 2, 2, 4, false)
}  // namespace dsv4::cuda::w4a16_detail
