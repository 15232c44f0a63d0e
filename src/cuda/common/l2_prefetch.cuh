// l2_prefetch.cuh: warming L2 with bytes a kernel will read soon. A prefetch changes no value (L2
// is the GPU's point of coherence, so a line fetched before another kernel rewrites it is
// updated there), so a programmatic launch may issue it before pdl_wait() for data that earlier
// kernels of the step might still write: the KV records of a row's keys, most of them written
// steps ago and long evicted by the weight streams.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

// The 128-byte line holding p, into L2 (sm_80 and later: prefetch.global.L2).
__device__ __forceinline__ void prefetch_l2_line(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Every line of the `bytes` bytes at p (bytes >= 1): threads `lane` of `lanes` share the work.
__device__ __forceinline__ void prefetch_l2_bytes(const void* p, int bytes, int lane, int lanes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(127);
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes) - 1) & ~uintptr_t(127);
  for (uintptr_t line = first + uintptr_t(lane) * 128; line <= last; line += uintptr_t(lanes) * 128)
    prefetch_l2_line(reinterpret_cast<const void*>(line));
}

}  // namespace dsv4::cuda
