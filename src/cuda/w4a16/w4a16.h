// w4a16.h: W4A16 linear layers on the GPU: the load-time repack of auto_gptq INT4 weights into the
// kernels' layout, and the dense GEMM y[M, N] = x[M, K] . W[N, K]^T (bf16 activations, int4
// weights with fp16 group-128 scales, fp32 accumulation, bf16 output) for M = 1..8192.
// The fused MoE (moe/moe.h) runs the same GEMM kernels. Launchers validate, never allocate and
// never synchronize, so every call here can be captured in a CUDA graph.
//
// Packed layout ("W4A16 packed", this project's own; the idea is Marlin's, the details differ):
//   qweight u32 [N/64][K/16][32 lanes][4 words]  one 16(k) x 64(n) tile = 512 contiguous bytes,
//            tiles of one 64-column block are contiguous along K (a 128-k group is 4 KB).
//            Word j of lane t holds the 8 codes that lane needs as mma.m16n8k16 B fragments of the
//            n8 sub-tiles 2j and 2j+1: with r = 2 (t % 4), n0 = 16 j + t / 4, n1 = n0 + 8,
//            nibbles 0..7 (LSB first) = (r,n0) (r+8,n0) (r,n1) (r+8,n1) (r+1,n0) (r+9,n0) (r+1,n1)
//            (r+9,n1). Codes stay unsigned 0..15 (value q - 8), so (q - 8) is exact in bf16.
//   scales   f16 [N/64][K/128][64], entry q*16 + s*2 + e holding column 8 s + 2 q + e of the
//            64-column block: a lane's 16 scales are 32 contiguous bytes. Kept exactly as in the
//            checkpoint (negative allowed) except that a zero scale becomes 1 with all its codes 8
//            (the same zero weights; the kernels may divide by scales).
// Columns of several checkpoint tensors can share one packed weight (RepackPlacement): plain
// concatenation (wq_a | wkv) or 16-column interleaving (MoE w1 | w3, so that a thread holds the
// gate and up value of one column in the same registers).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "cuda/common/device_buffer.h"
#include "cuda/common/deferred_sum.h"

namespace dsv4::cuda {

inline constexpr int kW4Group = 128;  // k elements per scale

inline constexpr size_t w4a16_qweight_bytes(int n, int k) { return size_t(n) * size_t(k) / 2; }
inline constexpr size_t w4a16_scales_bytes(int n, int k) { return size_t(n) * size_t(k / kW4Group) * 2; }

// A packed weight on the device (non-owning). n % 64 == 0, k % 128 == 0.
struct W4A16Weight {
  const uint32_t* qweight = nullptr;  // u32 [N/64][K/16][32][4], 16-byte aligned
  const __half* scales = nullptr;     // f16 [N/64][K/128][64], 16-byte aligned
  int n = 0;                          // out features
  int k = 0;                          // in features
};

// One auto_gptq (GPTQ v1, symmetric, group 128, no g_idx) linear as stored in the checkpoint,
// already copied to the device. The loader checks qzeros == 0x77777777 and drops them.
struct GptqInt4Tensor {
  const int32_t* qweight = nullptr;  // i32 [K/8, N]: bits 4j..4j+3 of [i, n] = code of k = 8 i + j
  const __half* scales = nullptr;    // f16 [K/128, N]
  int n = 0;
  int k = 0;
};

// Where source column c lands in the packed weight:
//   dst = ((c / 16) * interleave + slot) * 16 + c % 16 + n_base.
struct RepackPlacement {
  int n_base = 0;      // multiple of 16
  int interleave = 1;  // 1: concatenation; 2: two tensors interleaved in 16-column blocks
  int slot = 0;        // 0 .. interleave-1

  static RepackPlacement concat(int n_base) { return {n_base, 1, 0}; }
  // MoE gate/up: w1 -> slot 0, w3 -> slot 1 of a packed weight with N = 2 * I.
  static RepackPlacement gate_up(int slot) { return {0, 2, slot}; }
};

// Repacks one checkpoint tensor into its columns of a packed weight [dst_n, src.k] whose storage
// is dst_qweight / dst_scales (the caller owns it; it may be one expert of a stacked array).
// Runs on `stream`; the source may be freed or reused once the stream passed this point.
// Loading tensor by tensor through one staging buffer never needs twice the weight memory.
Status repack_gptq_int4(const GptqInt4Tensor& src, uint32_t* dst_qweight, __half* dst_scales, int dst_n,
                        const RepackPlacement& place, cudaStream_t stream);

// Writes bf16(W[n, k]) = bf16(scale * (q - 8)), row-major [N, K] (ld = K). For peers that need
// dense weights (cuBLAS in the benchmark) and for checking the repack; not on the serving path.
Status dequant_w4a16(const W4A16Weight& w, __nv_bfloat16* out, cudaStream_t stream);

// ---- dense GEMM ---------------------------------------------------------------------------------

// Split-K scratch: fp32 partial tiles and one arrival counter per output tile. Counters start at
// zero and every GEMM leaves them at zero, so a workspace can be reused by any later GEMM on the
// same stream (graph replays included), but never by two GEMMs running concurrently.
struct W4A16WorkspaceView {
  float* partials = nullptr;
  size_t partial_floats = 0;
  int* counters = nullptr;
  int n_counters = 0;
};

class W4A16Workspace {
 public:
  static constexpr size_t kDefaultPartialBytes = size_t(32) << 20;
  static constexpr int kDefaultCounters = 1 << 16;
  static Result<W4A16Workspace> create(size_t partial_bytes = kDefaultPartialBytes,
                                       int n_counters = kDefaultCounters);
  W4A16WorkspaceView view() const {
    return {partials_.as<float>(), partials_.bytes() / sizeof(float), counters_.as<int>(),
            int(counters_.bytes() / sizeof(int))};
  }

 private:
  DeviceBuffer partials_, counters_;
};

struct W4A16GemmArgs {
  const __nv_bfloat16* x = nullptr;  // bf16 [M, K], row stride ldx (multiple of 8, 16-byte aligned)
  int64_t ldx = 0;
  int m = 0;                         // 1 .. 65535 * block rows
  W4A16Weight w;
  __nv_bfloat16* y = nullptr;        // bf16 [M, N], row stride ldy (even); columns >= N untouched
  int64_t ldy = 0;
};

// What the heuristic picked (exposed for tests and the benchmark).
struct W4A16GemmPlan {
  int config = 0;  // index into the kernel configurations (w4a16_config_name)
  int block_m = 0, block_n = 0;
  int splits = 1;  // split-K factor
  int stages = 0;  // decode configurations: ring slots per warp (one 128-k group each)
  int grid_x = 0, grid_y = 0, grid_z = 0;
  int smem_bytes = 0;  // dynamic shared memory per block
  bool pdl = false;    // launched as a programmatic dependent (SM90)
};
const char* w4a16_config_name(int config);

Result<W4A16GemmPlan> plan_w4a16_gemm(int m, int n, int k, const W4A16WorkspaceView& ws);

// y = x . W^T. Validates every pointer, alignment and shape, then launches one kernel.
Status w4a16_gemm(const W4A16GemmArgs& args, const W4A16WorkspaceView& ws, cudaStream_t stream);

// As w4a16_gemm, but where the launch splits K over blocks that add through global memory (the
// decode configurations, up to 32 rows), the splits' fp32 partial tiles are left in the
// workspace for the consumer to add (common/deferred_sum.h) and y is not written: *out describes
// them (out->splits > 1). Otherwise y is written as by w4a16_gemm and out->splits is 0. The
// partials stay valid until the next split-K GEMM on the same workspace.
Status w4a16_gemm_deferred(const W4A16GemmArgs& args, const W4A16WorkspaceView& ws, cudaStream_t stream,
                           SplitSumView* out);

}  // namespace dsv4::cuda
