// device_buffer.h: DeviceBuffer, the single owner type for device allocations made outside the
// decode path (weights, workspaces, test data). Move-only; frees on destruction. Nothing in a
// kernel launcher allocates: launchers take views into buffers created up front.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "base/status.h"

namespace dsv4::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Allocates `bytes` (cudaMalloc: 256-byte aligned). With zero = true the memory is cleared
  // (counters and flags must start at zero; data buffers need not) by cudaMemset on the legacy
  // default stream, which non-blocking streams do not wait for: synchronize the device before
  // such a stream first reads it (GpuModel::load does).
  static Result<DeviceBuffer> create(size_t bytes, bool zero = false);

  void reset();
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dsv4::cuda
