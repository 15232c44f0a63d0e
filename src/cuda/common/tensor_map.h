// tensor_map.h: 2-D TMA tensor maps (SM90) for kernels that fetch tiles with
// cp.async.bulk.tensor: the driver's encoder, looked up once through the runtime (no libcuda
// link), and the device-side copy of one box.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums
#include <cudaTypedefs.h>

#include <cstdint>

#include "base/status.h"

namespace dsv4::cuda {

// cuTensorMapEncodeTiled (a pure host-side encoder), looked up once per process.
Result<PFN_cuTensorMapEncodeTiled_v12000> tensor_map_encoder();

// A 2-D map of a row-major [rows, cols] array of 1-byte elements (row stride row_bytes, a
// multiple of 16; base 16-byte aligned), boxes of box_cols x box_rows, 128-byte swizzle (the 16-byte
// chunk c of box row r lands at r * box_cols + ((c ^ (r & 7)) << 4) from a 1024-byte aligned
// destination; box_cols must be 128).
Status encode_u8_map_sw128(const void* base, int64_t rows, int64_t cols, int64_t row_bytes, int box_cols,
                           int box_rows, CUtensorMap* map);

#if defined(__CUDACC__)
// One box at (c0 = column, c1 = row), completing on the mbarrier `bar`; policy: an L2 cache hint
// (createpolicy), or none when has_policy is false.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar,
                                            bool has_policy, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (has_policy)
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar), "l"(policy)
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
            "r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
#endif
}
#endif

}  // namespace dsv4::cuda
