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
#include "cuda/compressor/ring.cuh"

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
  if (t - g.b.seq_tok0[seq] < g.b.seq_ntok[seq] - g.coff * g.ratio) return;  // not among the last ring rows
  save_ring_row(g, t, slot, kSaveThreads);
}

}  // namespace

Status launch_compressor_save(const CompressorLaunch& g, cudaStream_t stream, bool pdl) {
  return launch_kernel(&compressor_save_kernel, dim3(g.b.n_tokens), dim3(kSaveThreads), 0, stream, pdl, g,
                       "compressor_save_kernel");
}

}  // namespace dsv4::cuda::compressor_detail
