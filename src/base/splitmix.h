// splitmix.h: the one definition of splitmix64 and of the counter-based uniform draw built on it,
// usable from host code and CUDA kernels alike. The host sampler (runtime/sampler.cpp) and the GPU
// sampler (cuda/sampling) draw with counter_uniform_draw, so their tokens agree bit for bit; test
// data (cuda/testing/random_gptq.h) and synthetic weights (model/weights_synthetic.cpp) hash with
// splitmix64.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSV4_SPLITMIX_HD __host__ __device__ __forceinline__
#else
#define DSV4_SPLITMIX_HD inline
#endif

namespace dsv4 {

DSV4_SPLITMIX_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from (seed, index): splitmix64 of both, mixed twice; 53 random bits.
DSV4_SPLITMIX_HD double counter_uniform_draw(uint64_t seed, int64_t index) {
  const uint64_t h = splitmix64(splitmix64(seed) ^ splitmix64(uint64_t(index) + 0x632BE59BD9B4E019ull));
  return double(h >> 11) * 0x1.0p-53;
}

}  // namespace dsv4
