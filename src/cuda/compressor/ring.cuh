// ring.cuh: the compressor ring update of one token row (compressor_forward's save), shared by the
// save kernel (save.cu) and the emit kernel of decode steps (emit.cu), which saves in the same
// launch. The row's (a, z + ape) go to its slot's ring at row pos % (coff * ratio): a as is, z
// with ape added (the same fp32 sum the emit uses).
#pragma once

#include <cstdint>

#include "cuda/compressor/compressor_internal.h"

namespace dsv4::cuda::compressor_detail {

// Token row t of sequence seq (slot >= 0); threads 0 .. threads - 1 stride the row's width.
__device__ __forceinline__ void save_ring_row(const CompressorLaunch& g, int t, int slot, int threads) {
  const int m = g.ratio, ring_rows = g.coff * m, width = g.coff * g.dim;
  const int64_t q = g.b.token_pos[t];
  float* ring_a = g.state + (int64_t(slot) * 2 * ring_rows + q % ring_rows) * width;
  float* ring_z = ring_a + int64_t(ring_rows) * width;
  const float* a = g.a + int64_t(t) * g.ld;
  const float* z = g.z + int64_t(t) * g.ld;
  const float* ape = g.ape + (q % m) * width;
  for (int c = threadIdx.x; c < width; c += threads) {
    ring_a[c] = a[c];
    ring_z[c] = __fadd_rn(z[c], ape[c]);
  }
}

}  // namespace dsv4::cuda::compressor_detail
