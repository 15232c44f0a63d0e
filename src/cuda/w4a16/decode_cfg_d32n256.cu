// decode_cfg_d32n256.cu: the W4A16 decode configuration d32n256: 32 rows, 256 columns, 8 warps
// (4 along N x 2 along K). One instantiation per file keeps the build parallel.
#include "cuda/w4a16/decode_kernel.cuh"

namespace dsv4::cuda::w4a16_detail {
DSV4_DEFINE_DECODE_CONFIG(d32n256, 2, 4, 2, false)
}  // namespace dsv4::cuda::w4a16_detail
