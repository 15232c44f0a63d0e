// save.cu: the compressor's ring update after the emit (same stream): each sequence's last
// min(ntok, coff * ratio) rows of the step go to its slot's ring at row pos % (coff * ratio), a as
// is and z with ape added (the same fp32 sum the emit used). One block per token row; padding
// rows and sequences without a slot return. Earlier rows of a long chunk are never read again:
// every later window needs at most the last coff * ratio positions. Launched as a programmatic
// dependent (pdl.cuh) of the emit, which reads the ring this kernel overwrites: nothing before the
// wait.
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/compressor/compressor_internal.h"

namespace dsv4::cuda::compressor_detail {

namespace {

constexpr int kSaveThreads = 256;

__global__ void __launch_bounds__(kSaveThreads) compressor_save_kernel(const CompressorLaunch g) {
  pdl_wait();
  const int t = blockIdx.x;
  const int seq = g.b.token_seq[t];
  if (seq < 0) return;
  const int slot = g.b.seq_slot[seq];
  if (slot < 0) return;
  const int m = g.ratio, ring_rows = g.coff * m, width = g.coff * g.dim;
  if (t - g.b.seq_tok0[seq] < g.b.seq_ntok[seq] - ring_rows) return;  // not among the last ring_rows
  const int64_t q = g.b.token_pos[t];
  float* ring_a = g.state + (int64_t(slot) * 2 * ring_rows + q % ring_rows) * width;
  float* ring_z = ring_a + int64_t(ring_rows) * width;
  const float* a = g.a + int64_t(t) * g.ld;
  const float* z = g.z + int64_t(t) * g.ld;
  const float* ape = g.ape + (q % m) * width;
  for (int c = threadIdx.x; c < width; c += kSaveThreads) {
    ring_a[c] = a[c];
    ring_z[c] = __fadd_rn(z[c], ape[c]);
  }
}

}  // namespace

Status launch_compressor_save(const CompressorLaunch& g, cudaStream_t stream, bool pdl) {
  return launch_kernel(&compressor_save_kernel, dim3(g.b.n_tokens), dim3(kSaveThreads), 0, stream, pdl, g,
                       "compressor_save_kernel");
}

}  // namespace dsv4::cuda::compressor_detail
