// tensor_map.cpp: the driver's tensor-map encoder through the runtime, and the 1-byte maps.
#include "cuda/common/tensor_map.h"

#include <cuda_runtime_api.h>

#include <mutex>

#include "cuda/common/cuda_check.h"

namespace dsv4::cuda {

Result<PFN_cuTensorMapEncodeTiled_v12000> tensor_map_encoder() {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static cudaError_t err = cudaSuccess;
  std::call_once(once, [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
    if (err == cudaSuccess && q != cudaDriverEntryPointSuccess) err = cudaErrorSymbolNotFound;
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  });
  if (err != cudaSuccess) return cuda_status(err, "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
  return fn;
}

Status encode_u8_map_sw128(const void* base, int64_t rows, int64_t cols, int64_t row_bytes, int box_cols,
                           int box_rows, CUtensorMap* map) {
  if (box_cols != 128 || box_rows < 1 || box_rows > 256 || row_bytes % 16 != 0 ||
      (reinterpret_cast<uintptr_t>(base) & 15) != 0 || cols < box_cols || rows < box_rows)
    return invalid_argument("tensor map: [{}, {}] stride {} box {} x {} (128-byte boxes, 16-byte aligned rows)", rows,
                            cols, row_bytes, box_cols, box_rows);
  DSV4_ASSIGN_OR_RETURN(const PFN_cuTensorMapEncodeTiled_v12000 encode, tensor_map_encoder());
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return internal_error("cuTensorMapEncodeTiled(u8 [{}, {}], stride {}) failed: CUresult {}", rows, cols, row_bytes,
                          int(r));
  return Status::ok();
}

}  // namespace dsv4::cuda
