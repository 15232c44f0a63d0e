// decode_cfg_d16n64.cu: the W4A16 decode configuration d16n64: 16 rows, 64 columns, 8 warps
// (1 along N x 8 along K). One instantiation per file keeps the build parallel.
#include "cuda/w4a16/decode_kernel.cuh"

namespace dsv4::cuda::w4a16_detail {
DSV4_DEFINE_DECODE_CONFIG(d16n64, 1, 1, 8, false)
}  // namespace dsv4::cuda::w4a16_detail
