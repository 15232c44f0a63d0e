// gemm.cu: host side of the W4A16 GEMM: configuration cache, the heuristics (decode and tiled
// configurations, split-K, ring depth, PDL: in one place), argument validation and the dense
// launcher. No allocation, no synchronization.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>

#include "cuda/common/cuda_check.h"
#include "cuda/w4a16/gemm_internal.h"
#include "cuda/w4a16/w4a16.h"

namespace dsv4::cuda {
namespace w4a16_detail {

#if !DSV4_HAVE_SM90A
// Built without sm_90a: the wgmma configurations do not exist (wgmma_supported() is false).
Status query_gemm_wg128(GemmConfigInfo*) { return unimplemented("W4A16 config wg128: not built (no sm_90a)"); }
Status launch_gemm_wg128(const GemmKernelArgs&, dim3, size_t, cudaStream_t, bool) {
  return unimplemented("W4A16 config wg128: not built (no sm_90a)");
}
Status query_gemm_wg256(GemmConfigInfo*) { return unimplemented("W4A16 config wg256: not built (no sm_90a)"); }
Status launch_gemm_wg256(const GemmKernelArgs&, dim3, size_t, cudaStream_t, bool) {
  return unimplemented("W4A16 config wg256: not built (no sm_90a)");
}
#endif

namespace {
constexpr int kMaxDevices = 64;
std::mutex g_mu;
GemmConfigInfo g_info[kMaxDevices][kNumGemmConfigs];
bool g_have[kMaxDevices][kNumGemmConfigs] = {};

// d16n128 and d16n256 have fp16 twins for the MoE GEMMs (launch_gemm): the configuration's info
// is the bf16 kernel's (the twin has less static smem, the same register bound), and the twin's
// query raises its own shared-memory limit.
Status query_with_twin(Status (*query_bf16)(GemmConfigInfo*), Status (*query_f16)(GemmConfigInfo*),
                       GemmConfigInfo* info) {
  GemmConfigInfo twin;
  DSV4_RETURN_IF_ERROR(query_f16(&twin));
  DSV4_RETURN_IF_ERROR(query_bf16(info));
  if (twin.blocks_per_sm < info->blocks_per_sm || twin.static_smem > info->static_smem)
    return internal_error("W4A16 decode fp16 twin: {} blocks per SM and {} B static smem, the config {} and {}",
                          twin.blocks_per_sm, twin.static_smem, info->blocks_per_sm, info->static_smem);
  return Status::ok();
}

Status query(GemmConfig cfg, GemmConfigInfo* info) {
  switch (cfg) {
    case GemmConfig::kD16N64: return query_gemm_d16n64(info);
    case GemmConfig::kD16N128: return query_with_twin(query_gemm_d16n128, query_gemm_d16n128_f16, info);
    case GemmConfig::kD16N256: return query_with_twin(query_gemm_d16n256, query_gemm_d16n256_f16, info);
    case GemmConfig::kD32N128: return query_gemm_d32n128(info);
    case GemmConfig::kD32N256: return query_gemm_d32n256(info);
    case GemmConfig::kM64: return query_gemm_m64(info);
    case GemmConfig::kM128: return query_gemm_m128(info);
    case GemmConfig::kWg128: return query_gemm_wg128(info);
    case GemmConfig::kWg256: return query_gemm_wg256(info);
  }
  return internal_error("unknown GEMM config {}", int(cfg));
}
}  // namespace

Result<GemmConfigInfo> gemm_config_info(GemmConfig cfg) {
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  const int c = int(cfg);
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_have[dev->device][c]) {
    GemmConfigInfo info;
    DSV4_RETURN_IF_ERROR(query(cfg, &info));
    if (info.blocks_per_sm < 1)
      return unimplemented("W4A16 config {} ({} B smem) does not fit on {}", w4a16_config_name(c),
                           info.smem_bytes, dev->name);
    g_info[dev->device][c] = info;
    g_have[dev->device][c] = true;
  }
  return g_info[dev->device][c];
}

GemmConfig choose_tiled_config(int rows_hint) { return rows_hint <= 64 ? GemmConfig::kM64 : GemmConfig::kM128; }

std::optional<GemmConfig> choose_wgmma_config(int m, int n, int n_sms) {
  // More than 64 rows, unless the grid is tiny. H200 prefill lab with the TMA producer
  // (bench/results/w4a16_h200_prefill_lab_tma_256_1024_4096.log): a lone wg128 block streams
  // K = 4096 in ~28 us (38-50 before), so the portable kernels' split-K wins only below ~n_sms / 8
  // blocks (wq_a M = 256, 16 blocks: 28 us either way, the portable 29 measured earlier in
  // w4a16_h200_prefill_lab.json); wkv at M = 1024 (32 blocks) now takes wgmma: 28 vs 36 us.
  // Between the two widths, the one with fewer full-GPU waves, a wave of wg256 blocks costing
  // ~1.9 waves of wg128 blocks since the producer copies by TMA (same log, M = 4096: wq_b 572 vs
  // 637 us in 32 vs 63 waves, wo_b 483 vs 493 in 4 vs 8, wq_a+wkv 115 vs 88 in 2 vs 3, wkv 56 vs
  // 34 in one wave each; M = 1024: wo_b 108 vs 109 in 1 vs 2, idx_wq_b 36 vs 41 in 2 vs 4).
  const int64_t row_blocks = (int64_t(m) + 127) / 128;
  const int64_t blocks128 = row_blocks * ((n + 127) / 128), blocks256 = row_blocks * ((n + 255) / 256);
  if (m <= 64 || 8 * blocks128 < n_sms) return std::nullopt;
  auto waves = [&](int64_t blocks) { return double((blocks + n_sms - 1) / n_sms); };
  return 1.9 * waves(blocks256) < waves(blocks128) ? GemmConfig::kWg256 : GemmConfig::kWg128;
}

size_t decode_smem_bytes(const GemmConfigInfo& ci, int stages, int a_rows, int a_groups) {
  return size_t(ci.threads / 32) * size_t(stages) * kDecodeSlotBytes + size_t(a_rows) * size_t(a_groups) * 256;
}

int decode_blocks_per_sm(const GemmConfigInfo& ci, size_t smem, const DeviceInfo& dev) {
  const size_t per_block = smem + size_t(ci.static_smem) + dev.smem_reserved_per_block;
  return std::min<int>(ci.blocks_per_sm, int(dev.smem_per_sm_bytes / per_block));
}

bool cluster_splits_ok(const GemmLaunch& l, const DeviceInfo& dev) {
  return clusters_supported(dev) && l.splits > 1 && l.splits <= kMaxClusterSplits;
}

bool complete_launch(GemmLaunch* l, const GemmConfigInfo& ci, int row_blocks, int tile_rows, int n, int k,
                     const DeviceInfo& dev) {
  const int kg = k / 128;
  if (l->splits < 1 || l->splits > kg || row_blocks < 1 || row_blocks > 65535 || tile_rows < 1) return false;
  l->grid = dim3(unsigned((n + ci.block_n - 1) / ci.block_n), unsigned(l->splits), unsigned(row_blocks));
  if (!ci.decode) {
    if (l->splits > 1 && !ci.split_k) return false;
    l->smem = size_t(ci.smem_bytes);
    return true;
  }
  l->a_rows = std::min(tile_rows, ci.block_m);
  l->a_groups = (kg + l->splits - 1) / l->splits;  // the largest split's groups
  const int items = (l->a_groups + ci.warps_k - 1) / ci.warps_k;
  if (l->stages == 0) l->stages = std::clamp(items, 2, kDecodeMaxStages);  // as deep as the warp has items
  if (l->stages < 1 || l->stages > kDecodeMaxStages) return false;
  // The epilogue reuses the ring for the cross-warp sums and the split-K tile (two stages' worth).
  const size_t ring_min = size_t(ci.threads / 32) * 2 * kDecodeSlotBytes;
  l->smem = std::max(decode_smem_bytes(ci, l->stages, l->a_rows, l->a_groups), ring_min);
  l->cluster = false;  // the measured table (or a caller) turns it on: cluster_splits_ok()
  return l->smem + size_t(ci.static_smem) <= dev.smem_optin_bytes;
}

namespace {
// Decode cost model (microseconds), fitted to the H200 lab sweep of the decode configurations
// (bench/results/NOTES.md): a fixed part, the weight stream (spread over the GPU, or limited by
// what one SM pulls when there are few blocks), a split's partial-tile round trip plus the last
// block's serial sum of the partials, the serial items of one warp, extra waves, and A rows
// staged from L2. Used for shapes the measured table below does not cover.
double decode_cost_us(const GemmLaunch& l, const GemmConfigInfo& ci, double weight_bytes, const DeviceInfo& dev) {
  constexpr double kStreamBytesPerUs = 3.0e6, kSmBytesPerUs = 60e3, kSplitUs = 1.0, kItemUs = 0.5, kWaveUs = 3.0;
  constexpr double kAUsPerByte = 8e-7, kFixupUsPerByte = 2e-5;
  const double blocks = double(l.grid.x) * l.grid.y * l.grid.z;
  const int bps = std::max(1, decode_blocks_per_sm(ci, l.smem, dev));
  const double waves = std::ceil(blocks / (double(dev.n_sms) * bps));
  const double per_sm = std::ceil(blocks / dev.n_sms) * weight_bytes / blocks;
  const int items = (l.a_groups + ci.warps_k - 1) / ci.warps_k;
  const double a_bytes = blocks * double(l.a_rows) * l.a_groups * 256;
  const double fixup = l.splits > 1 ? double(l.splits) * l.a_rows * ci.block_n * 4 : 0.0;
  return std::max(weight_bytes / kStreamBytesPerUs, per_sm / kSmBytesPerUs) + (l.splits > 1 ? kSplitUs : 0.0) +
         kItemUs * items + kWaveUs * (waves - 1) + kAUsPerByte * a_bytes + kFixupUsPerByte * fixup;
}

bool fits_workspace(const GemmLaunch& l, const GemmConfigInfo& ci, size_t partial_floats, int n_counters) {
  const size_t tiles = size_t(l.grid.x) * l.grid.z;
  return l.splits == 1 || (tiles <= size_t(n_counters) && tiles * l.splits * ci.block_m * ci.block_n <= partial_floats);
}

// The fastest launch of the H200 lab sweeps (bench/results) for the Flash shapes, by batch size:
// rows up to m_max use it. GPUs with fewer SMs than that sweep (RTX 3090) use the model. Since
// the PDL trigger moved into pdl_wait() (the next kernel launches only once this one is past its
// wait), the winners are grids of at most one block per SM that leave room for a second: the
// next GEMM's blocks then sit beside this one's and fill their rings while it streams (wq_b at
// M = 1: 7.9 us with 128 blocks of 3 stages, 9.2 with the one-per-SM 4-stage blocks that won
// before; w4a16_h200_lab_pdl_wait.json).
struct MeasuredDecode {
  int n, k, m_max;
  GemmConfig cfg;
  int splits, stages;
  bool cluster;        // SM90: split-K through a cluster (where the lab found it faster)
  int tile_rows = 16;  // rows per row tile: 8 runs 9..16 rows as two swapped-operand tiles
};
constexpr MeasuredDecode kMeasured[] = {
    {32768, 1024, 4, GemmConfig::kD16N256, 1, 3, false},   // wq_b
    {32768, 1024, 8, GemmConfig::kD16N256, 1, 2, false},
    {32768, 1024, 16, GemmConfig::kD16N256, 1, 2, false},
    {32768, 1024, 32, GemmConfig::kD16N256, 1, 2, false},
    {4096, 8192, 4, GemmConfig::kD16N256, 8, 3, false},    // wo_b
    {4096, 8192, 8, GemmConfig::kD16N128, 4, 2, false},
    {4096, 8192, 16, GemmConfig::kD16N256, 8, 2, false},
    {4096, 8192, 32, GemmConfig::kD16N256, 4, 2, false},
    {1536, 4096, 4, GemmConfig::kD16N128, 8, 3, true},    // wq_a + wkv (the model's fused wqkv)
    {1536, 4096, 16, GemmConfig::kD16N128, 8, 2, true},
    {1024, 4096, 16, GemmConfig::kD16N128, 8, 2, true},    // wq_a
    {1024, 4096, 32, GemmConfig::kD16N64, 8, 2, false},
    {512, 4096, 8, GemmConfig::kD16N128, 16, 2, false},    // wkv: as wq_a, 64 blocks of 2 groups
    {4096, 2048, 1, GemmConfig::kD16N64, 1, 2, false},     // w2, shared expert down
    {4096, 2048, 16, GemmConfig::kD16N128, 4, 2, false},
    {4096, 2048, 32, GemmConfig::kD16N128, 4, 2, false},
    {4096, 4096, 1, GemmConfig::kD16N64, 2, 2, true},      // w13 gate/up
    {4096, 4096, 16, GemmConfig::kD16N128, 4, 2, false},
    {4096, 4096, 32, GemmConfig::kD16N128, 4, 2, false},
};
constexpr int kMeasuredMinSms = 120;
}  // namespace

Result<GemmLaunch> choose_decode_launch(int m, int n, int k, double weight_bytes, const DeviceInfo& dev,
                                        size_t partial_floats, int n_counters) {
  // 17..32 rows run as two 16-row tiles, each streaming the weights (the second stream mostly
  // hits L2): the H200 lab measured that faster than the 32-row configurations on every Flash
  // shape (M = 32: wq_a 7.3 vs 13.1 us, w2 8.9 vs 13.6, w13 12.7 vs 19.8, wo_b 19.5 vs 21.8,
  // wq_b 14.4 vs 14.5), whose doubled accumulators halve the blocks per SM.
  const int row_blocks = (m + 15) / 16, tile_rows = std::min(m, 16);
  if (dev.n_sms >= kMeasuredMinSms) {
    for (const MeasuredDecode& t : kMeasured) {
      if (t.n != n || t.k != k || m > t.m_max) continue;
      DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(t.cfg));
      GemmLaunch l;
      l.cfg = t.cfg;
      l.splits = t.splits;
      l.stages = t.stages;
      const int t_rows = std::min(tile_rows, t.tile_rows), t_blocks = (m + t_rows - 1) / t_rows;
      if (complete_launch(&l, ci, t_blocks, t_rows, n, k, dev) && fits_workspace(l, ci, partial_floats, n_counters)) {
        l.pdl = pdl_supported(dev);
        l.cluster = t.cluster && cluster_splits_ok(l, dev);
        return l;
      }
      break;
    }
  }
  // Wider tiles first: at equal cost they re-read A (from L2) fewer times.
  static constexpr GemmConfig kCands[] = {GemmConfig::kD16N256, GemmConfig::kD16N128, GemmConfig::kD16N64};
  const int kg = k / 128;
  GemmLaunch best;
  double best_cost = 0;
  bool have = false;
  for (const GemmConfig cfg : kCands) {
    DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(cfg));
    for (int s = 1; s <= std::min(kg, 32); ++s) {
      GemmLaunch l;
      l.cfg = cfg;
      l.splits = s;
      if (!complete_launch(&l, ci, row_blocks, tile_rows, n, k, dev) || !fits_workspace(l, ci, partial_floats, n_counters))
        continue;
      const double cost = decode_cost_us(l, ci, weight_bytes, dev);
      if (!have || cost < best_cost * 0.999) {
        best = l;
        best_cost = cost;
        have = true;
      }
    }
  }
  if (!have) return unimplemented("w4a16 decode GEMM: no configuration fits N={} K={} rows={}", n, k, m);
  best.pdl = pdl_supported(dev);
  return best;
}

Result<GemmLaunch> choose_moe_decode_launch(int block_m, int max_tiles, int tile_rows, int n, int k, bool gate_up,
                                            const DeviceInfo& dev, size_t partial_floats, int n_counters) {
  (void)gate_up;
  // H200 MoE sweeps (bench/results): a ring of 2 groups per warp, no split while the A block
  // fits; 128-column tiles for the 7 tiles of one token (M = 1: 224 blocks of 2 tiles), 256-column
  // tiles once there are more expert tiles (M = 4: 120 us against 151 with 128 columns).
  const GemmConfig cfg = block_m <= 16 ? (max_tiles <= 8 ? GemmConfig::kD16N128 : GemmConfig::kD16N256)
                                       : GemmConfig::kD32N256;
  DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(cfg));
  // A long K with many rows may not fit smem unsplit (16 rows x 4096: 128 KB of A).
  for (int splits = 1; splits <= 8; splits *= 2) {
    GemmLaunch l;
    l.cfg = cfg;
    l.splits = splits;
    l.stages = 2;
    if (complete_launch(&l, ci, max_tiles, tile_rows, n, k, dev) && fits_workspace(l, ci, partial_floats, n_counters)) {
      l.pdl = pdl_supported(dev);
      return l;
    }
  }
  return internal_error("moe decode GEMM: no launch for N={} K={} tiles={} fits", n, k, max_tiles);
}

// Memory-bound shapes want every SM streaming weights: when the output tiles alone give fewer
// blocks than fit on the GPU at once, split K so that one full wave is resident. Each split adds
// an fp32 partial tile, written and read once (rows x n x 8 bytes); when the tiles alone already
// give every SM a block, that traffic is capped at 0.4 of the weight bytes. (H200 sweeps in
// bench/results: wq_b at M = 16 is fastest unsplit, wo_b at M = 16 with 16 splits, small shapes
// with as many splits as fill the GPU.)
int choose_splits(int base_blocks, int kg, int64_t rows, int n, double weight_bytes, const GemmConfigInfo& ci,
                  const DeviceInfo& dev, size_t partial_floats, int n_counters) {
  const int resident = dev.n_sms * ci.blocks_per_sm;
  if (!ci.split_k || base_blocks <= 0 || base_blocks > n_counters) return 1;
  // At least two groups per split: a one-group block is all prologue and epilogue.
  int s = std::min(resident / base_blocks, std::max(kg / 2, 1));
  if (base_blocks >= dev.n_sms) {
    const double per_split = double(rows) * n * 8.0;
    s = int(std::min<int64_t>(s, std::max<int64_t>(1, int64_t(0.4 * weight_bytes / per_split))));
  }
  const size_t tile_floats = size_t(ci.block_m) * ci.block_n;
  const size_t fit = partial_floats / (size_t(base_blocks) * tile_floats);
  s = int(std::min<size_t>(size_t(std::max(s, 1)), fit));
  return std::max(s, 1);
}

bool use_pdl(int64_t blocks, int splits, const GemmConfigInfo& ci, const DeviceInfo& dev) {
  return pdl_supported(dev) && !(splits == 1 && blocks < int64_t(dev.n_sms) * ci.blocks_per_sm);
}

Status launch_gemm(GemmConfig cfg, const GemmKernelArgs& args_in, dim3 grid, size_t smem, cudaStream_t stream,
                   bool pdl) {
  GemmKernelArgs args = args_in;
  switch (cfg) {
    case GemmConfig::kD16N64: return launch_gemm_d16n64(args, grid, smem, stream, pdl);
    // The MoE GEMMs' tiles of at most 8 rows run in fp16 (decode_kernel.cuh); dense ones in bf16.
    case GemmConfig::kD16N128:
      return args.mode == GemmMode::kDense ? launch_gemm_d16n128(args, grid, smem, stream, pdl)
                                           : launch_gemm_d16n128_f16(args, grid, smem, stream, pdl);
    case GemmConfig::kD16N256:
      return args.mode == GemmMode::kDense ? launch_gemm_d16n256(args, grid, smem, stream, pdl)
                                           : launch_gemm_d16n256_f16(args, grid, smem, stream, pdl);
    case GemmConfig::kD32N128: return launch_gemm_d32n128(args, grid, smem, stream, pdl);
    case GemmConfig::kD32N256: return launch_gemm_d32n256(args, grid, smem, stream, pdl);
    case GemmConfig::kM64: return launch_gemm_m64(args, grid, smem, stream, pdl);
    case GemmConfig::kM128: return launch_gemm_m128(args, grid, smem, stream, pdl);
    case GemmConfig::kWg128: return launch_gemm_wg128(args, grid, smem, stream, pdl);
    case GemmConfig::kWg256: return launch_gemm_wg256(args, grid, smem, stream, pdl);
  }
  return internal_error("unknown GEMM config {}", int(cfg));
}

}  // namespace w4a16_detail

using namespace w4a16_detail;

const char* w4a16_config_name(int config) {
  switch (GemmConfig(config)) {
    case GemmConfig::kD16N64: return "d16n64";
    case GemmConfig::kD16N128: return "d16n128";
    case GemmConfig::kD16N256: return "d16n256";
    case GemmConfig::kD32N128: return "d32n128";
    case GemmConfig::kD32N256: return "d32n256";
    case GemmConfig::kM64: return "m64";
    case GemmConfig::kM128: return "m128";
    case GemmConfig::kWg128: return "wg128";
    case GemmConfig::kWg256: return "wg256";
  }
  return "?";
}

Result<W4A16Workspace> W4A16Workspace::create(size_t partial_bytes, int n_counters) {
  W4A16Workspace ws;
  DSV4_ASSIGN_OR_RETURN(ws.partials_, DeviceBuffer::create(partial_bytes));
  DSV4_ASSIGN_OR_RETURN(ws.counters_, DeviceBuffer::create(size_t(n_counters) * sizeof(int), /*zero=*/true));
  return Result<W4A16Workspace>(std::move(ws));
}

namespace w4a16_detail {

Result<GemmLaunch> plan_dense_launch(int m, int n, int k, const W4A16WorkspaceView& ws) {
  if (m < 1 || n < 64 || n % 64 != 0 || k < 128 || k % 128 != 0)
    return invalid_argument("w4a16 GEMM: need M >= 1, N % 64 == 0, K % 128 == 0; got M={} N={} K={}", m, n, k);
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  const double weight_bytes = double(w4a16_qweight_bytes(n, k) + w4a16_scales_bytes(n, k));
  if (m <= 32) return choose_decode_launch(m, n, k, weight_bytes, *dev, ws.partial_floats, ws.n_counters);
  const std::optional<GemmConfig> wg = wgmma_supported(*dev) ? choose_wgmma_config(m, n, dev->n_sms) : std::nullopt;
  if (wg) {
    DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(*wg));
    GemmLaunch l;
    l.cfg = *wg;
    if (!complete_launch(&l, ci, (m + ci.block_m - 1) / ci.block_m, std::min(m, ci.block_m), n, k, *dev))
      return internal_error("w4a16 GEMM: wgmma launch M={} N={} K={} does not fit", m, n, k);
    l.pdl = use_pdl(int64_t(l.grid.x) * l.grid.y * l.grid.z, 1, ci, *dev);
    return l;
  }
  GemmConfig cfg = choose_tiled_config(m);
  // 128-row tiles of a narrow N give too few blocks (wo_b at M = 256: 32); below half the SMs,
  // 64-row tiles, which can also split K, are faster (H200: 168 vs 232 us there; at 128 blocks,
  // wo_b M = 1024, 128-row tiles win).
  if (cfg == GemmConfig::kM128 && 2 * int64_t((m + 127) / 128) * ((n + 255) / 256) < dev->n_sms) cfg = GemmConfig::kM64;
  DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(cfg));
  const int row_blocks = (m + ci.block_m - 1) / ci.block_m;
  if (row_blocks > 65535) return invalid_argument("w4a16 GEMM: M={} needs more than 65535 row blocks", m);
  GemmLaunch l;
  l.cfg = cfg;
  l.splits = choose_splits(((n + ci.block_n - 1) / ci.block_n) * row_blocks, k / 128, m, n, weight_bytes, ci, *dev,
                           ws.partial_floats, ws.n_counters);
  if (!complete_launch(&l, ci, row_blocks, std::min(m, ci.block_m), n, k, *dev))
    return internal_error("w4a16 GEMM: tiled launch M={} N={} K={} does not fit", m, n, k);
  l.pdl = use_pdl(int64_t(l.grid.x) * l.grid.y * l.grid.z, l.splits, ci, *dev);
  return l;
}

Status launch_dense(const W4A16GemmArgs& a, const GemmLaunch& l, const W4A16WorkspaceView& ws, cudaStream_t stream) {
  const int n = a.w.n, k = a.w.k;
  auto aligned16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (a.x == nullptr || a.y == nullptr || a.w.qweight == nullptr || a.w.scales == nullptr)
    return invalid_argument("w4a16 GEMM: null pointer (x {}, y {}, qweight {}, scales {})", fmt::ptr(a.x),
                            fmt::ptr(a.y), fmt::ptr(a.w.qweight), fmt::ptr(a.w.scales));
  if (!aligned16(a.x) || a.ldx < k || a.ldx % 8 != 0)
    return invalid_argument("w4a16 GEMM: x must be 16-byte aligned with ldx >= K and ldx % 8 == 0 (ldx={}, K={})",
                            a.ldx, k);
  if (!aligned16(a.w.qweight) || !aligned16(a.w.scales))
    return invalid_argument("w4a16 GEMM: packed weight and scales must be 16-byte aligned");
  if ((reinterpret_cast<uintptr_t>(a.y) & 3) != 0 || a.ldy < n || a.ldy % 2 != 0)
    return invalid_argument("w4a16 GEMM: y must be 4-byte aligned with ldy >= N and even (ldy={}, N={})", a.ldy, n);
  if (a.m < 1 || n < 64 || n % 64 != 0 || k < 128 || k % 128 != 0)
    return invalid_argument("w4a16 GEMM: need M >= 1, N % 64 == 0, K % 128 == 0; got M={} N={} K={}", a.m, n, k);
  DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(l.cfg));
  // Decode tiles hold a_rows rows each (the kernel's dense row tiling), tiled ones block_m.
  const int tile_rows = ci.decode ? l.a_rows : ci.block_m;
  if (int64_t(l.grid.z) * tile_rows < a.m || int(l.grid.x) * ci.block_n < n || int(l.grid.y) != l.splits ||
      (ci.decode && (l.a_rows < 1 || l.a_rows > ci.block_m || int64_t(l.a_groups) * l.splits < k / 128)))
    return invalid_argument("w4a16 GEMM: launch ({}, grid {}x{}x{}) does not cover M={} N={} K={}",
                            w4a16_config_name(int(l.cfg)), l.grid.x, l.grid.y, l.grid.z, a.m, n, k);
  if (l.splits > 1) {
    const size_t tiles = size_t(l.grid.x) * l.grid.z;
    if (ws.partials == nullptr || ws.counters == nullptr || tiles > size_t(ws.n_counters) ||
        tiles * l.splits * ci.block_m * ci.block_n > ws.partial_floats)
      return invalid_argument("w4a16 GEMM: split-K ({} splits) needs a larger workspace", l.splits);
  }

  // SplitSumView maps row r to tile r / block_m: tiles of fewer rows cannot be deferred.
  if (l.defer_sum && (!ci.decode || l.splits < 2 || l.cluster || (l.grid.z > 1 && l.a_rows != ci.block_m)))
    return invalid_argument("w4a16 GEMM: a deferred split-K sum needs a decode launch split through global memory "
                            "({}, {} splits{})", w4a16_config_name(int(l.cfg)), l.splits, l.cluster ? ", cluster" : "");

  GemmKernelArgs p;
  p.mode = GemmMode::kDense;
  p.a = a.x;
  p.lda = a.ldx;
  p.m = a.m;
  p.w = reinterpret_cast<const uint4*>(a.w.qweight);
  p.s = a.w.scales;
  p.n = n;
  p.k = k;
  p.splits = l.splits;
  p.cluster_splits = l.cluster ? l.splits : 0;
  p.trace = ci.decode ? l.trace : nullptr;  // only the decode kernel stamps
  p.stages = l.stages;
  p.a_rows = l.a_rows;
  p.a_groups = l.a_groups;
  p.c = a.y;
  p.ldc = a.ldy;
  p.partials = ws.partials;
  p.counters = ws.counters;
  p.defer_sum = l.defer_sum;
  return launch_gemm(l.cfg, p, l.grid, l.smem, stream, l.pdl);
}

}  // namespace w4a16_detail

Result<W4A16GemmPlan> plan_w4a16_gemm(int m, int n, int k, const W4A16WorkspaceView& ws) {
  DSV4_ASSIGN_OR_RETURN(const GemmLaunch l, plan_dense_launch(m, n, k, ws));
  DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(l.cfg));
  W4A16GemmPlan plan;
  plan.config = int(l.cfg);
  plan.block_m = ci.block_m;
  plan.block_n = ci.block_n;
  plan.splits = l.splits;
  plan.stages = l.stages;
  plan.grid_x = int(l.grid.x);
  plan.grid_y = int(l.grid.y);
  plan.grid_z = int(l.grid.z);
  plan.smem_bytes = int(l.smem);
  plan.pdl = l.pdl;
  return plan;
}

Status w4a16_gemm(const W4A16GemmArgs& a, const W4A16WorkspaceView& ws, cudaStream_t stream) {
  if (a.m < 1) return invalid_argument("w4a16 GEMM: M={} must be >= 1", a.m);
  DSV4_ASSIGN_OR_RETURN(const GemmLaunch l, plan_dense_launch(a.m, a.w.n, a.w.k, ws));
  return launch_dense(a, l, ws, stream);
}

Status w4a16_gemm_deferred(const W4A16GemmArgs& a, const W4A16WorkspaceView& ws, cudaStream_t stream,
                           SplitSumView* out) {
  if (out == nullptr) return invalid_argument("w4a16 GEMM (deferred): null output view");
  *out = SplitSumView{};
  if (a.m < 1) return invalid_argument("w4a16 GEMM: M={} must be >= 1", a.m);
  DSV4_ASSIGN_OR_RETURN(GemmLaunch l, plan_dense_launch(a.m, a.w.n, a.w.k, ws));
  DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(l.cfg));
  l.defer_sum = ci.decode && l.splits > 1 && !l.cluster && (l.grid.z == 1 || l.a_rows == ci.block_m);
  DSV4_RETURN_IF_ERROR(launch_dense(a, l, ws, stream));
  if (l.defer_sum) *out = SplitSumView{ws.partials, l.splits, ci.block_m, ci.block_n, int(l.grid.x)};
  return Status::ok();
}

}  // namespace dsv4::cuda
