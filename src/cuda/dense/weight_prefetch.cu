// weight_prefetch.cu: l2_prefetch_rows (weight_prefetch.h). One thread per row issues the bulk
// L2 prefetches of the row's prefix, in pieces of at most 64 KB; 64-thread blocks, so a
// weight of a few thousand rows spreads its requests over most SMs' copy engines.
#include "cuda/dense/weight_prefetch.h"

#include <algorithm>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 64;

__global__ void __launch_bounds__(kThreads) l2_prefetch_rows_kernel(const RowPrefixes p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int64_t kPiece = 64 * 1024;  // bytes per request (the size operand is 32-bit)
  const int64_t r = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (r >= p.rows) return;
  const char* row = static_cast<const char*>(p.base) + r * p.row_stride;
  for (int64_t at = 0; at < p.prefix_bytes; at += kPiece) {
    const int64_t left = p.prefix_bytes - at;
    const uint32_t bytes = uint32_t(left < kPiece ? left : kPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(row + at), "r"(bytes) : "memory");
  }
#endif
}

bool aligned16(int64_t v) { return (v & 15) == 0; }

}  // namespace

int64_t prefix_for_budget(int64_t rows, int64_t row_bytes, int64_t budget_bytes) {
  if (rows < 1 || row_bytes < 16 || budget_bytes < 16) return 0;
  return std::min(budget_bytes / rows, row_bytes) / 16 * 16;
}

Status l2_prefetch_rows(const RowPrefixes& p, cudaStream_t stream) {
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  if (!l2_prefetch_supported(*dev))
    return invalid_argument("l2_prefetch_rows: the bulk L2 prefetch needs SM90, found {} ({})", dev->name,
                            gpu_arch_name(dev->arch));
  if (p.rows < 0 || p.prefix_bytes < 0 || p.row_stride < 0)
    return invalid_argument("l2_prefetch_rows: negative rows {}, row_stride {} or prefix_bytes {}", p.rows,
                            p.row_stride, p.prefix_bytes);
  if (p.rows == 0 || p.prefix_bytes == 0) return Status::ok();
  if (p.base == nullptr) return invalid_argument("l2_prefetch_rows: null base");
  if (!aligned16(int64_t(reinterpret_cast<uintptr_t>(p.base))) || !aligned16(p.row_stride) ||
      !aligned16(p.prefix_bytes) || p.prefix_bytes > p.row_stride)
    return invalid_argument("l2_prefetch_rows: base, row_stride {} and prefix_bytes {} must be multiples of 16, the "
                            "prefix at most the stride",
                            p.row_stride, p.prefix_bytes);
  const int64_t blocks = (p.rows + kThreads - 1) / kThreads;
  if (blocks > INT32_MAX) return invalid_argument("l2_prefetch_rows: {} rows is too many", p.rows);
  l2_prefetch_rows_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(p);
  return last_launch_status("l2_prefetch_rows");
}

}  // namespace dsv4::cuda
