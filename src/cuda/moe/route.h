// route.h: the MoE router kernel's launcher (internal to moe/). One launch computes the router
// logits, the top-k selection and weights per token, and the grouping of pairs by expert; the
// last blocks to finish do the later steps (arrival counters), so no host round trip is needed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"

namespace dsv4::cuda::moe_detail {

inline constexpr int kRouterExperts = 256;  // 8 experts per lane in the top-k warp
inline constexpr int kRouterHidden = 4096;  // the router loops are unrolled for Flash's hidden size
inline constexpr int kRouterDecodeMaxTokens = 32;  // batches up to this use the one-token-per-block variant

struct RouteKernelArgs {
  const __nv_bfloat16* x = nullptr;  // bf16 [M, hidden]
  int64_t ldx = 0;
  int m = 0, hidden = 0;
  const __nv_bfloat16* gate_w = nullptr;  // bf16 [256, hidden]
  const float* bias = nullptr;            // f32 [256] or null
  const int32_t* tid2eid = nullptr;       // i32 [vocab, top_k] or null (score layer)
  const int32_t* token_ids = nullptr;     // i32 [M] (hash layer)
  int top_k = 0;
  float route_scale = 1.0f;
  int block_m = 0;                        // GEMM block rows: tiles hold at most this many rows
  float* logits = nullptr;                // f32 [M, 256]
  uint2* keyed = nullptr;                 // decode (M <= kRouterDecodeMaxTokens): [M, 256] per expert
                                          // (ordered key of s + bias, s as f32 bits), for the selection
  int* topk_ids = nullptr;                // i32 [M, top_k], increasing expert id
  float* topk_w = nullptr;                // f32 [M, top_k]
  int* tile_counters = nullptr;           // i32 [M] zero
  int* done_counter = nullptr;            // i32 [1] zero
  int4* tiles = nullptr;                  // out: (expert, first sorted row, rows, 0) of routed experts
  int* n_tiles = nullptr;                 // out: i32 [1], routed tiles (the shared expert's are static)
  int* sorted_token = nullptr;            // out: i32 [M (top_k + 1)]
  float* sorted_weight = nullptr;         // out: f32 [M (top_k + 1)]
  int* token_pairs = nullptr;             // out: i32 [M, top_k + 1]
  unsigned long long* trace = nullptr;    // diagnostics: u64 [grid blocks][4] stamps (common/trace.cuh)
};

// Trace slots of the router for a batch of m tokens: its blocks (decode: and the last block's tail).
int moe_route_blocks(int m);

// pdl: launch as a programmatic dependent of the previous kernel in the stream (SM90; see
// common/pdl.cuh). The kernel waits for that kernel before reading x.
Status launch_moe_route(const RouteKernelArgs& args, cudaStream_t stream, bool pdl);

}  // namespace dsv4::cuda::moe_detail
