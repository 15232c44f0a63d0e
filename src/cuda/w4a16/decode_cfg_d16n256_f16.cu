// decode_cfg_d16n256_f16.cu: the fp16 twin of d16n256 (decode_kernel.cuh, kF16) that the MoE GEMMs
// launch: tiles of at most 8 rows run in fp16. One instantiation per file keeps the build parallel.
#include "cuda/w4a16/decode_kernel.cuh"

namespace dsv4::cuda::w4a16_detail {
DSV4_DEFINE_DECODE_CONFIG(d16n256_f16, 1, 4, 2, true)
}  // namespace dsv4::cuda::w4a16_detail
