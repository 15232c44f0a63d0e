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

}  // namespace dsv4::cuda
