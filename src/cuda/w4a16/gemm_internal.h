// gemm_internal.h: the W4A16 GEMM kernel family as seen by its launchers (w4a16/gemm.cu, the MoE):
// the device argument block, the kernel configurations and the per-configuration entry points
// defined in gemm_cfg_*.cu (one template instantiation per file). Not a public header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "cuda/common/arch.h"

namespace dsv4::cuda::w4a16_detail {

// What the rows of a block tile are and what the epilogue does with the finished tile.
enum class GemmMode : int {
  kDense = 0,    // A rows = x rows; y = bf16(acc)
  kMoeUp = 1,    // A rows gathered by sorted_token; act = bf16(silu(min(g,L)) * clamp(u,-L,L) * w)
  kMoeDown = 2,  // A rows = act rows; down_out = bf16(acc); the last of a token's pairs combines
};

// Kernel argument block (by value). Pointers are device pointers.
struct GemmKernelArgs {
  GemmMode mode = GemmMode::kDense;
  const __nv_bfloat16* a = nullptr;  // bf16 [rows, K], row stride lda
  int64_t lda = 0;
  int m = 0;                         // kDense: number of rows of A and C
  const uint4* w = nullptr;          // packed qweight of expert 0 (kDense: the weight)
  const __half* s = nullptr;         // packed scales of expert 0
  int64_t w_expert_stride = 0;       // uint4 units between experts
  int64_t s_expert_stride = 0;       // halves between experts
  const uint4* w_shared = nullptr;   // the expert with id == shared_expert uses these instead
  const __half* s_shared = nullptr;
  int shared_expert = -1;
  int n = 0, k = 0;                  // packed N (multiple of 64), K (multiple of 128)
  int splits = 1;                    // split-K factor (grid.y)
  __nv_bfloat16* c = nullptr;        // kDense: y; kMoeUp: act [pairs, N/2]; kMoeDown: down_out [pairs, N]
  int64_t ldc = 0;
  float* partials = nullptr;         // f32 [tiles][splits][BM][BN] when splits > 1
  int* counters = nullptr;           // i32 [tiles], zero between launches
  // MoE (null for kDense)
  const int4* tiles = nullptr;       // i32x4 [max_tiles]: expert, first sorted row, rows, unused
  const int* n_tiles = nullptr;      // i32 [1]: valid entries of tiles (blocks past it exit)
  const int* sorted_token = nullptr; // i32 [pairs]: token of each sorted row
  const float* sorted_weight = nullptr;  // f32 [pairs]: routing weight of each sorted row
  const int* token_pairs = nullptr;  // i32 [M, pairs_per_token]: sorted rows of a token, routed
                                     // experts by increasing id, then the shared expert
  int pairs_per_token = 0;
  int* combine_counters = nullptr;   // i32 [M, grid.x], zero between launches
  __nv_bfloat16* y = nullptr;        // kMoeDown: bf16 [M, N] final output, row stride ldy
  int64_t ldy = 0;
  float swiglu_limit = 10.0f;
};

// Kernel configurations, smallest block rows first. A configuration is a block tile of
// BM x BN (BN = 64 * warps along N) with warps along M, N and K and a cp.async pipeline.
enum class GemmConfig : int {
  kM16 = 0,   // decode: BM 16, BN 128, 2 warps (along N), BK 128, 3 stages
  kM32 = 1,   // BM 32, otherwise as kM16
  kM64 = 2,   // BM 64, BN 256, 8 warps (2 x 4), BK 64, 4 stages
  kM128 = 3,  // prefill: BM 128, BN 256, 8 warps (2 x 4), warp tile 64 x 64, BK 64, 4 stages
};
inline constexpr int kNumGemmConfigs = 4;

struct GemmConfigInfo {
  int block_m = 0, block_n = 0, threads = 0;
  int smem_bytes = 0;     // dynamic shared memory per block
  int blocks_per_sm = 0;  // occupancy on the current device (0: does not fit)
  bool split_k = false;   // the fp32 tile fits in smem, so split-K is available
};

// Per-configuration entry points (gemm_cfg_*.cu). query() sets the shared-memory attribute and
// reads the occupancy: call it once per device before launch().
#define DSV4_DECLARE_GEMM_CONFIG(name)                                         \
  Status query_gemm_##name(GemmConfigInfo* info);                              \
  Status launch_gemm_##name(const GemmKernelArgs& args, dim3 grid, cudaStream_t stream, bool pdl);
DSV4_DECLARE_GEMM_CONFIG(m16)
DSV4_DECLARE_GEMM_CONFIG(m32)
DSV4_DECLARE_GEMM_CONFIG(m64)
DSV4_DECLARE_GEMM_CONFIG(m128)
#undef DSV4_DECLARE_GEMM_CONFIG

// Cached GemmConfigInfo of `cfg` on the current device.
Result<GemmConfigInfo> gemm_config_info(GemmConfig cfg);

// The heuristics, in one place. rows_hint: rows per block tile the problem offers (dense: M;
// MoE: average rows per expert).
GemmConfig choose_gemm_config(int rows_hint);
// Split-K factor for `base_blocks` output tiles of a GEMM with K/128 = kg groups, `rows` rows of
// output in all (dense: M; MoE: pairs), n columns and weight_bytes of weights to stream;
// limited by the workspace.
int choose_splits(int base_blocks, int kg, int64_t rows, int n, double weight_bytes, const GemmConfigInfo& ci,
                  const DeviceInfo& dev, size_t partial_floats, int n_counters);
// Whether a grid of `blocks` is launched as a programmatic dependent (PDL, SM90). Not for an
// unsplit grid smaller than the GPU: its long-running blocks would share the SMs with the next
// kernels' early blocks (H200: wq_b M = 16 unsplit, 11.3 us without PDL, 15.4 us with).
bool use_pdl(int64_t blocks, int splits, const GemmConfigInfo& ci, const DeviceInfo& dev);

// pdl: programmatic dependent launch (common/pdl.cuh); callers pass use_pdl(...).
Status launch_gemm(GemmConfig cfg, const GemmKernelArgs& args, dim3 grid, cudaStream_t stream, bool pdl);

}  // namespace dsv4::cuda::w4a16_detail
