// embed.cu: embed_streams (ops.h), the token embedding gather that starts the forward pass,
// replicated into the hc residual streams (CpuModel::forward copies stream 0 to the others).
// Pure copy: bf16 in, bf16 out, no rounding.
#include <cstdint>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/ops/ops.h"

namespace dsv4::cuda {

namespace {

constexpr int kEmbedThreads = 128;

struct EmbedArgs {
  const __nv_bfloat16* embed;  // bf16 [vocab, D]
  int vocab, D;
  const int32_t* ids;          // i32 [T]
  int hc;
  __nv_bfloat16* X;            // bf16 [T, hc, D]
};

// grid (ceil(D / 8 / 128), T): thread = 8 columns of one token, written to all hc streams.
// An id outside [0, vocab) (never produced by the engine, which validates on the host) gives
// zeros rather than an out-of-bounds read.
__global__ void __launch_bounds__(kEmbedThreads) embed_streams_kernel(const EmbedArgs a) {
  // The ids are this step's host copy and X may still be read by the kernel before: nothing
  // before the wait (the table row is known only from the id).
  pdl_wait();
  const int t = blockIdx.y;
  const int c = blockIdx.x * kEmbedThreads + threadIdx.x;  // chunk of 8 columns
  if (c >= a.D / 8) return;
  const int id = a.ids[t];
  uint4 v = make_uint4(0, 0, 0, 0);
  if (id >= 0 && id < a.vocab) v = *reinterpret_cast<const uint4*>(a.embed + int64_t(id) * a.D + 8 * c);
  for (int i = 0; i < a.hc; ++i) *reinterpret_cast<uint4*>(a.X + (int64_t(t) * a.hc + i) * a.D + 8 * c) = v;
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
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  const dim3 grid((D / 8 + kEmbedThreads - 1) / kEmbedThreads, T);
  const EmbedArgs a{embed, vocab, D, ids, hc, X};
  return launch_kernel(&embed_streams_kernel, grid, dim3(kEmbedThreads), 0, stream, pdl, a, "embed_streams");
}

}  // namespace dsv4::cuda
