// device_buffer.cpp: cudaMalloc/cudaFree behind DeviceBuffer.
#include "cuda/common/device_buffer.h"

#include "cuda/common/cuda_check.h"

namespace dsv4::cuda {

Result<DeviceBuffer> DeviceBuffer::create(size_t bytes, bool zero) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  void* p = nullptr;
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMalloc(&p, bytes), "cudaMalloc").with_context(fmt::format("{} bytes", bytes)));
  b.ptr_ = p;
  b.bytes_ = bytes;
  if (zero) DSV4_RETURN_IF_ERROR(cuda_status(cudaMemset(p, 0, bytes), "cudaMemset"));
  return b;
}

void DeviceBuffer::reset() {
  if (ptr_ != nullptr) check_free(cudaFree(ptr_), "cudaFree");
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace dsv4::cuda
