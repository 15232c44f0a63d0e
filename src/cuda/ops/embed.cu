// embed.cu: embed_streams (ops.h), the token embedding gather that starts the forward pass,
// replicated into the hc residual streams (CpuModel::forward copies stream 0 to the others).
// Pure copy: bf16 in, bf16 out, no rounding.
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/ops/ops.h"

namespace dsv4::cuda {

namespace {

constexpr int kEmbedThreads = 128;

// grid (ceil(D / 8 / 128), T): thread = 8 columns of one token, written to all hc streams.
// An id outside [0, vocab) (never produced by the engine, which validates on the host) gives
// zeros rather than an out-of-bounds read.
__global__ void __launch_bounds__(kEmbedThreads)
    embed_streams_kernel(const __nv_bfloat16* __restrict__ embed, int vocab, int D, const int32_t* __restrict__ ids,
                         int hc, __nv_bfloat16* __restrict__ X) {
  const int t = blockIdx.y;
  const int c = blockIdx.x * kEmbedThreads + threadIdx.x;  // chunk of 8 columns
  if (c >= D / 8) return;
  const int id = ids[t];
  uint4 v = make_uint4(0, 0, 0, 0);
  if (id >= 0 && id < vocab) v = *reinterpret_cast<const uint4*>(embed + int64_t(id) * D + 8 * c);
  for (int i = 0; i < hc; ++i) *reinterpret_cast<uint4*>(X + (int64_t(t) * hc + i) * D + 8 * c) = v;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

Status embed_streams(const __nv_bfloat16* embed, int vocab, int D, const int32_t* ids, int T, int hc,
                     __nv_bfloat16* X, cudaStream_t stream) {
  if (embed == nullptr || ids == nullptr || X == nullptr) return invalid_argument("embed_streams: null pointer");
  if (vocab < 1 || D < 8 || D % 8 != 0 || hc < 1 || T < 0 || T > 65535)
    return invalid_argument("embed_streams: bad sizes (vocab {}, D {} (a multiple of 8), hc {}, T {})", vocab, D, hc, T);
  if (!aligned16(embed) || !aligned16(X)) return invalid_argument("embed_streams: embed and X must be 16-byte aligned");
  if (T == 0) return Status::ok();
  const dim3 grid((D / 8 + kEmbedThreads - 1) / kEmbedThreads, T);
  embed_streams_kernel<<<grid, kEmbedThreads, 0, stream>>>(embed, vocab, D, ids, hc, X);
  return last_launch_status("embed_streams");
}

}  // namespace dsv4::cuda
