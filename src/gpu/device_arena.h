// device_arena.h: the single owner of every device and pinned-host allocation GpuModel makes.
// Each allocation is a named DeviceBuffer in one of a few categories (weights, KV state,
// activations, workspaces), so the manifest can say where the memory went and a failed
// allocation can say what it was for. seal() marks the end of load(): any allocation after it is
// counted (GpuModel::allocations_after_load, which tests keep at 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "cuda/common/device_buffer.h"

namespace dsv4::gpu {

enum class MemCategory { kWeights, kKvState, kActivations, kWorkspaces, kCount };
const char* mem_category_name(MemCategory c);

// Page-locked host memory (cudaMallocHost) for the step inputs, so their copy is asynchronous.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  static Result<PinnedBuffer> create(size_t bytes);
  void reset();
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class DeviceArena {
 public:
  // Allocates `bytes` (256-byte aligned; cleared when `zero`). Errors say what the buffer was for,
  // how much was asked and how much this model already holds.
  Result<void*> alloc(size_t bytes, MemCategory cat, const std::string& what, bool zero = false);
  template <typename T>
  Result<T*> alloc_n(int64_t count, MemCategory cat, const std::string& what, bool zero = false) {
    Result<void*> r = alloc(size_t(count) * sizeof(T), cat, what, zero);
    if (!r.is_ok()) return r.status();
    return static_cast<T*>(r.value());
  }
  // Memory owned elsewhere (kernel-family workspaces that allocate in their own create()) that
  // still counts towards this model's footprint.
  void account(size_t bytes, MemCategory cat);

  void seal() { sealed_ = true; }
  int64_t allocations_after_seal() const { return after_seal_; }
  int64_t n_allocations() const { return int64_t(buffers_.size()); }
  size_t bytes() const;
  size_t bytes(MemCategory c) const { return bytes_[size_t(c)]; }

 private:
  std::vector<cuda::DeviceBuffer> buffers_;
  size_t bytes_[size_t(MemCategory::kCount)] = {};
  bool sealed_ = false;
  int64_t after_seal_ = 0;
};

}  // namespace dsv4::gpu
