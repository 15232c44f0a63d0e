// gemm_internal.h: the W4A16 GEMM kernel family as seen by its launchers (w4a16/gemm.cu, the MoE):
// the device argument block, the kernel configurations and the per-configuration entry points
// defined in gemm_cfg_*.cu (one template instantiation per file). Not a public header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

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
  int m = 0;                         // rows of A and C (kDense); tokens (MoE)
  const uint4* w = nullptr;          // packed qweight of expert 0 (kDense: the weight)
  const __half* s = nullptr;         // packed scales of expert 0
  int64_t w_expert_stride = 0;       // uint4 units between experts
  int64_t s_expert_stride = 0;       // halves between experts
  const uint4* w_shared = nullptr;   // the expert with id == shared_expert uses these instead
  const __half* s_shared = nullptr;
  int shared_expert = -1;
  int n = 0, k = 0;                  // packed N (multiple of 64), K (multiple of 128)
  int splits = 1;                    // split-K factor (grid.y)
  // Decode configurations only (decode_kernel.cuh): ring slots per warp, and the A block staged
  // in smem: a_rows rows (>= the rows of any tile) x a_groups 128-k groups (>= any split's).
  // kDense: row tile z is rows [z a_rows, (z + 1) a_rows) (a_rows <= BM; 8 lets 9..16 rows run as
  // two swapped-operand tiles).
  int stages = 0, a_rows = 0, a_groups = 0;
  int cluster_splits = 0;            // decode, SM90: splits > 1 launched as (1, splits, 1) clusters
                                     // that add their partials through DSMEM; 0: global partials
  __nv_bfloat16* c = nullptr;        // kDense: y; kMoeUp: act [pairs, N/2]; kMoeDown: down_out [pairs, N]
  int64_t ldc = 0;
  float* partials = nullptr;         // f32 [tiles][splits][BM][BN] when splits > 1
  int* counters = nullptr;           // i32 [tiles], zero between launches
  bool defer_sum = false;            // decode, splits > 1, not a cluster: stop after the partials
                                     // (the consumer adds them: common/deferred_sum.h); c untouched
  // MoE (null for kDense). grid.z = n_shared_tiles static tiles of the shared expert (rows
  // shared_row0 + BM z .., token = row - shared_row0, weight 1: known before routing), then the
  // router's tiles of routed experts.
  int n_shared_tiles = 0;
  int shared_row0 = 0;               // first sorted row of the shared expert: M top_k
  int shared_tile_rows = 0;          // decode kernels: rows per shared tile (the router's block
                                     // rows, <= BM); the tiled kernels use BM (block rows == BM)
  const int4* tiles = nullptr;       // i32x4 [max_tiles]: expert, first sorted row, rows, unused
  const int* n_tiles = nullptr;      // i32 [1]: valid entries of tiles (blocks past it exit)
  const int* sorted_token = nullptr; // i32 [pairs]: token of each sorted row
  const float* sorted_weight = nullptr;  // f32 [pairs]: routing weight of each sorted row
  const int* token_pairs = nullptr;  // i32 [M, pairs_per_token]: sorted rows of a token, routed
                                     // experts by increasing id, then the shared expert
  int pairs_per_token = 0;
  int* combine_counters = nullptr;   // i32 [M, grid.x], zero between launches
  bool defer_combine = false;        // kMoeDown, decode kernel: no combine, y untouched (the
                                     // consumer adds the pair rows: common/deferred_sum.h)
  __nv_bfloat16* y = nullptr;        // kMoeDown: bf16 [M, N] final output, row stride ldy
  int64_t ldy = 0;
  float swiglu_limit = 10.0f;
  unsigned long long* trace = nullptr;  // diagnostics (decode kernels): u64 [grid blocks][4] stamps
                                        // (common/trace.cuh); null in production launches
};

// Kernel configurations. The decode family (decode_kernel.cuh, up to 32 rows) gives every warp
// its own ring (cp.async; SM90: bulk copies) of whole 128-k groups of one 64-column tile, warps
// WN along N and WK along K; the tiled family (gemm_kernel.cuh) is the prefill GEMM.
enum class GemmConfig : int {
  kD16N64 = 0,   // decode: BM 16, BN 64, 8 warps (1 x 8 along K)
  kD16N128 = 1,  // decode: BM 16, BN 128, 8 warps (2 x 4)
  kD16N256 = 2,  // decode: BM 16, BN 256, 8 warps (4 x 2)
  kD32N128 = 3,  // decode: BM 32, BN 128, 8 warps (2 x 4)
  kD32N256 = 4,  // decode: BM 32, BN 256, 8 warps (4 x 2)
  kM64 = 5,      // BM 64, BN 256, 8 warps (2 x 4), BK 64, 4 stages
  kM128 = 6,     // prefill: BM 128, BN 256, 8 warps (2 x 4), warp tile 64 x 64, BK 64, 4 stages
  kWg128 = 7,    // SM90a prefill (wgmma_kernel.cu): 128 rows x 128 columns, 2 consumer warpgroups
                 // and a producer warpgroup, no split-K; exists where wgmma_supported() (common/arch.h)
  kWg256 = 8,    // SM90a prefill: 128 rows x 256 columns (2 tiles per warpgroup), as kWg128
};
inline constexpr int kNumGemmConfigs = 9;
inline constexpr int kNumDecodeConfigs = 5;  // configs 0 .. 4
inline bool is_decode_config(GemmConfig c) { return int(c) < kNumDecodeConfigs; }

// Bytes of one decode ring slot: the 4 KB of packed weights of a 64 x 128 tile and its 64 scales.
inline constexpr int kDecodeSlotBytes = 4096 + 128;
inline constexpr int kDecodeMaxStages = 4;
// Decode tiles of at most 8 rows swap the mma operands (decode_kernel.cuh) when the block's K
// range has at most this many groups (the per-group row sums live in static smem); the
// accumulators are turned around through a [8][kSwapPitch] fp32 scratch (pitch: fewer conflicts).
inline constexpr int kSwapMaxGroups = 64;
inline constexpr int kSwapPitch = 68;

struct GemmConfigInfo {
  int block_m = 0, block_n = 0, threads = 0;
  int warps_k = 1;        // decode: warps along K
  int smem_bytes = 0;     // tiled: dynamic shared memory per block; decode: 0 (depends on the launch)
  int static_smem = 0;    // static shared memory per block
  int blocks_per_sm = 0;  // occupancy on the current device (decode: without dynamic smem)
  bool split_k = false;   // the fp32 tile fits in smem, so split-K is available
  bool decode = false;
};

// Per-configuration entry points (gemm_cfg_*.cu, decode_cfg_*.cu). query() sets the shared-memory
// attribute and reads the occupancy: call it once per device before launch().
#define DSV4_DECLARE_GEMM_CONFIG(name)                                         \
  Status query_gemm_##name(GemmConfigInfo* info);                              \
  Status launch_gemm_##name(const GemmKernelArgs& args, dim3 grid, size_t smem, cudaStream_t stream, bool pdl);
DSV4_DECLARE_GEMM_CONFIG(d16n64)
DSV4_DECLARE_GEMM_CONFIG(d16n128)
DSV4_DECLARE_GEMM_CONFIG(d16n256)
DSV4_DECLARE_GEMM_CONFIG(d32n128)
DSV4_DECLARE_GEMM_CONFIG(d32n256)
DSV4_DECLARE_GEMM_CONFIG(d16n128_f16)  // the MoE GEMMs' fp16 twins of d16n128 and d16n256
DSV4_DECLARE_GEMM_CONFIG(d16n256_f16)  // (decode_kernel.cuh, kF16); launch_gemm picks them
DSV4_DECLARE_GEMM_CONFIG(m64)
DSV4_DECLARE_GEMM_CONFIG(m128)
DSV4_DECLARE_GEMM_CONFIG(wg128)  // wg128, wg256: defined in wgmma_kernel.cu, or as stubs
DSV4_DECLARE_GEMM_CONFIG(wg256)  // (gemm.cu) when sm_90a is not built
#undef DSV4_DECLARE_GEMM_CONFIG

// Cached GemmConfigInfo of `cfg` on the current device.
Result<GemmConfigInfo> gemm_config_info(GemmConfig cfg);

// Dynamic shared memory of a decode launch, and how many such blocks fit on one SM.
size_t decode_smem_bytes(const GemmConfigInfo& ci, int stages, int a_rows, int a_groups);
int decode_blocks_per_sm(const GemmConfigInfo& ci, size_t smem, const DeviceInfo& dev);

// A complete launch description: what the heuristics pick, what the lab and tests may force.
struct GemmLaunch {
  GemmConfig cfg = GemmConfig::kD16N64;
  int splits = 1;
  int stages = 0, a_rows = 0, a_groups = 0;  // decode configurations
  dim3 grid;
  size_t smem = 0;
  bool pdl = false;
  // SM90 decode split-K through (1, splits, 1) clusters that add the partials in distributed
  // shared memory. The H200 lab (w4a16_h200_lab_pdl_wait.json, run 3): faster for small grids
  // (wq_a M = 1: 4.5 vs 4.9 us; w13 M = 1: 6.3 vs 6.5), slower for 128 blocks in clusters of
  // 4 or 8 (wo_b M = 1, 8 splits: 11.5 vs 9.8): clusters must fit a GPC whole beside the
  // previous kernel's blocks. So only the measured table turns it on.
  bool cluster = false;
  // Decode split-K through global memory: leave the partial tiles to the consumer
  // (w4a16_gemm_deferred); launch_dense refuses it for any other launch.
  bool defer_sum = false;
  // Diagnostics (decode configurations; the benchmark's dense timeline): u64 [grid blocks][4]
  // stamps of this launch's blocks (common/trace.cuh). Null in every production launch.
  unsigned long long* trace = nullptr;
};
inline constexpr int kMaxClusterSplits = 8;  // the portable cluster size
// Whether `l` may run its split-K through a cluster on `dev` (SM90, 2..kMaxClusterSplits splits).
bool cluster_splits_ok(const GemmLaunch& l, const DeviceInfo& dev);

// Fills grid, smem, a_rows and a_groups of a launch of `cfg` with the given splits (and, for a
// decode configuration, ring stages (0: as many as a warp has items, at most 4)) over
// `row_blocks` x (n / block_n) tiles of at most `tile_rows` rows; false if it cannot run (smem,
// grid, splits beyond the K groups).
bool complete_launch(GemmLaunch* l, const GemmConfigInfo& ci, int row_blocks, int tile_rows, int n, int k,
                     const DeviceInfo& dev);

// The heuristics, in one place. Decode (dense, m <= 32 rows): pick configuration, split-K and
// ring depth for 16-row tiles (one tile up to 16 rows, two up to 32), n columns, k;
// weight_bytes are the bytes to stream. Tiled: config from rows, then choose_splits.
Result<GemmLaunch> choose_decode_launch(int m, int n, int k, double weight_bytes, const DeviceInfo& dev,
                                        size_t partial_floats, int n_counters);
// The MoE GEMMs' decode launch (block_m 16 or 32, grid.z = max_tiles tiles).
Result<GemmLaunch> choose_moe_decode_launch(int block_m, int max_tiles, int tile_rows, int n, int k, bool gate_up,
                                            const DeviceInfo& dev, size_t partial_floats, int n_counters);
GemmConfig choose_tiled_config(int rows_hint);
// SM90 (the caller checks wgmma_supported()): the wgmma configuration for an M x N dense GEMM,
// or none where the portable kernels are faster (at most 64 rows, or a grid of 128 x 128 tiles
// under a third of the n_sms SMs: those need split-K).
std::optional<GemmConfig> choose_wgmma_config(int m, int n, int n_sms);
// Split-K factor for `base_blocks` output tiles of a tiled GEMM with K/128 = kg groups, `rows`
// rows of output in all, n columns and weight_bytes of weights to stream; limited by the workspace.
int choose_splits(int base_blocks, int kg, int64_t rows, int n, double weight_bytes, const GemmConfigInfo& ci,
                  const DeviceInfo& dev, size_t partial_floats, int n_counters);
// Whether a tiled grid of `blocks` is launched as a programmatic dependent (PDL, SM90). Not for an
// unsplit grid smaller than the GPU: its long-running blocks would share the SMs with the next
// kernels' early blocks (H200: wq_b M = 16 unsplit, 11.3 us without PDL, 15.4 us with).
bool use_pdl(int64_t blocks, int splits, const GemmConfigInfo& ci, const DeviceInfo& dev);

// Dense GEMM: the heuristics' launch for an M x N x K problem, and a launch of a given plan (the
// public w4a16_gemm is the two; tests and the benchmark lab force plans through the second).
}  // namespace dsv4::cuda::w4a16_detail
namespace dsv4::cuda {
struct W4A16WorkspaceView;
struct W4A16GemmArgs;
}  // namespace dsv4::cuda
namespace dsv4::cuda::w4a16_detail {
Result<GemmLaunch> plan_dense_launch(int m, int n, int k, const W4A16WorkspaceView& ws);
Status launch_dense(const W4A16GemmArgs& a, const GemmLaunch& l, const W4A16WorkspaceView& ws, cudaStream_t stream);

// Launches one configuration (smem: the decode launch's dynamic shared memory; ignored by the
// tiled configurations, whose smem is fixed).
Status launch_gemm(GemmConfig cfg, const GemmKernelArgs& args, dim3 grid, size_t smem, cudaStream_t stream, bool pdl);

}  // namespace dsv4::cuda::w4a16_detail
