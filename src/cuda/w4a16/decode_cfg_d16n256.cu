// decode_cfg_d16n256.cu: the W4A16 decode configuration d16n256: 16 rows, 256 columns, 8 warps
// (4 along N x 2 along K). One instantiation per file keeps the build parallel.
#include "cuda/w4a16/decode_kernel.cuh"

namespace dsv4::cuda::w4a16_detail {
DSV4_DEFINE_DECODE_CONFIG(d16n256, 1, 4, 2, false)
}  // namespace dsv4::cuda::w4a16_detail
