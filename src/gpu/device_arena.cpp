// device_arena.cpp: DeviceArena and PinnedBuffer (see device_arena.h).
#include "gpu/device_arena.h"

#include <utility>

#include "cuda/common/cuda_check.h"

namespace dsv4::gpu {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kWeights: return "weights";
    case MemCategory::kKvState: return "KV state";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kWorkspaces: return "workspaces";
    case MemCategory::kCount: break;
  }
  return "?";
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Result<PinnedBuffer> PinnedBuffer::create(size_t bytes) {
  PinnedBuffer b;
  if (bytes == 0) return b;
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(cudaMallocHost(&b.ptr_, bytes), "cudaMallocHost")
                           .with_context(fmt::format("{} bytes of pinned host memory", bytes)));
  b.bytes_ = bytes;
  return b;
}

void PinnedBuffer::reset() {
  if (ptr_ != nullptr) cuda::check_free(cudaFreeHost(ptr_), "cudaFreeHost");
  ptr_ = nullptr;
  bytes_ = 0;
}

Result<void*> DeviceArena::alloc(size_t bytes, MemCategory cat, const std::string& what, bool zero) {
  if (sealed_) ++after_seal_;
  Result<cuda::DeviceBuffer> b = cuda::DeviceBuffer::create(bytes, zero);
  if (!b.is_ok())
    return b.status().with_context(fmt::format("allocating {} ({:.3f} GiB; this model already holds {:.3f} GiB)", what,
                                               double(bytes) / double(1 << 30), double(this->bytes()) / double(1 << 30)));
  void* p = b.value().get();
  buffers_.push_back(std::move(b).value());
  bytes_[size_t(cat)] += bytes;
  return p;
}

void DeviceArena::account(size_t bytes, MemCategory cat) { bytes_[size_t(cat)] += bytes; }

size_t DeviceArena::bytes() const {
  size_t s = 0;
  for (size_t b : bytes_) s += b;
  return s;
}

}  // namespace dsv4::gpu
