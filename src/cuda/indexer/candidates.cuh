// candidates.cuh: a block's running top-k of 64-bit candidate keys (topk_plan.h) in shared
// memory, DeepSelect style: keys above the current threshold are appended in any order; when the
// buffer is nearly full it is sorted (bitonic, descending) and cut to the best `keep`, whose last
// key becomes the threshold. Keys are unique (they carry the index), so the kept set and its
// order never depend on the append order: the result is deterministic.
#pragma once

#include <cstdint>

namespace dsv4::cuda::indexer_detail {

// Shared state of one buffer.
struct CandidateBuffer {
  uint64_t* keys;   // u64 [capacity] in shared memory
  int* count;       // shared: keys held
  uint64_t* thr;    // shared: a key must be > thr to enter (0 until `keep` keys were held)
};

// Descending bitonic sort of s[0, n), n a power of two, by the whole block. The caller has
// synchronized after writing s; returns synchronized.
__device__ __forceinline__ void bitonic_sort_desc(uint64_t* s, int n) {
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int p = threadIdx.x; p < n / 2; p += blockDim.x) {
        const int i = (p / j) * 2 * j + p % j;  // lower element of the pair (i, i + j)
        const uint64_t a = s[i], b = s[i + j];
        const bool desc = (i & k) == 0;
        if (desc ? a < b : a > b) {
          s[i] = b;
          s[i + j] = a;
        }
      }
      __syncthreads();
    }
  }
}

// Appends `key` if it beats the threshold (any thread, any order; the caller guarantees room).
__device__ __forceinline__ void offer(const CandidateBuffer& c, uint64_t key) {
  if (key > *c.thr) c.keys[atomicAdd(c.count, 1)] = key;
}

// Sorts the buffer descending; entries past the count become 0. Called by the whole block
// after a __syncthreads; returns synchronized, with the count unchanged.
__device__ __forceinline__ int sort_candidates(const CandidateBuffer& c) {
  const int n_held = *c.count;
  int n = 1;
  while (n < n_held) n <<= 1;
  for (int i = n_held + threadIdx.x; i < n; i += blockDim.x) c.keys[i] = 0;
  __syncthreads();
  bitonic_sort_desc(c.keys, n);
  return n_held;
}

// Sorts and keeps the best `keep` (raising the threshold once `keep` are held). Same calling
// rules as sort_candidates.
__device__ __forceinline__ void compact_candidates(const CandidateBuffer& c, int keep) {
  const int n_held = sort_candidates(c);
  if (n_held >= keep && threadIdx.x == 0) {
    *c.count = keep;
    *c.thr = c.keys[keep - 1];
  }
  __syncthreads();
}

}  // namespace dsv4::cuda::indexer_detail
