// gemm.cu: host side of the W4A16 GEMM: configuration cache, the heuristics (config and split-K,
// in one place), argument validation and the dense launcher. No allocation, no synchronization.
#include <algorithm>
#include <mutex>

#include "cuda/common/cuda_check.h"
#include "cuda/w4a16/gemm_internal.h"
#include "cuda/w4a16/w4a16.h"

namespace dsv4::cuda {
namespace w4a16_detail {

namespace {
constexpr int kMaxDevices = 64;
std::mutex g_mu;
GemmConfigInfo g_info[kMaxDevices][kNumGemmConfigs];
bool g_have[kMaxDevices][kNumGemmConfigs] = {};

Status query(GemmConfig cfg, GemmConfigInfo* info) {
  switch (cfg) {
    case GemmConfig::kM16: return query_gemm_m16(info);
    case GemmConfig::kM32: return query_gemm_m32(info);
    case GemmConfig::kM64: return query_gemm_m64(info);
    case GemmConfig::kM128: return query_gemm_m128(info);
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

GemmConfig choose_gemm_config(int rows_hint) {
  if (rows_hint <= 16) return GemmConfig::kM16;
  if (rows_hint <= 32) return GemmConfig::kM32;
  if (rows_hint <= 64) return GemmConfig::kM64;
  return GemmConfig::kM128;
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

Status launch_gemm(GemmConfig cfg, const GemmKernelArgs& args, dim3 grid, cudaStream_t stream, bool pdl) {
  switch (cfg) {
    case GemmConfig::kM16: return launch_gemm_m16(args, grid, stream, pdl);
    case GemmConfig::kM32: return launch_gemm_m32(args, grid, stream, pdl);
    case GemmConfig::kM64: return launch_gemm_m64(args, grid, stream, pdl);
    case GemmConfig::kM128: return launch_gemm_m128(args, grid, stream, pdl);
  }
  return internal_error("unknown GEMM config {}", int(cfg));
}

}  // namespace w4a16_detail

using namespace w4a16_detail;

const char* w4a16_config_name(int config) {
  switch (GemmConfig(config)) {
    case GemmConfig::kM16: return "m16";
    case GemmConfig::kM32: return "m32";
    case GemmConfig::kM64: return "m64";
    case GemmConfig::kM128: return "m128";
  }
  return "?";
}

Result<W4A16Workspace> W4A16Workspace::create(size_t partial_bytes, int n_counters) {
  W4A16Workspace ws;
  DSV4_ASSIGN_OR_RETURN(ws.partials_, DeviceBuffer::create(partial_bytes));
  DSV4_ASSIGN_OR_RETURN(ws.counters_, DeviceBuffer::create(size_t(n_counters) * sizeof(int), /*zero=*/true));
  return Result<W4A16Workspace>(std::move(ws));
}

Result<W4A16GemmPlan> plan_w4a16_gemm(int m, int n, int k, const W4A16WorkspaceView& ws) {
  if (m < 1 || n < 64 || n % 64 != 0 || k < 128 || k % 128 != 0)
    return invalid_argument("w4a16 GEMM: need M >= 1, N % 64 == 0, K % 128 == 0; got M={} N={} K={}", m, n, k);
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  GemmConfig cfg = choose_gemm_config(m);
  // 128-row tiles of a narrow N give too few blocks (wo_b at M = 256: 32); below half the SMs,
  // 64-row tiles, which can also split K, are faster (H200: 168 vs 232 us there; at 128 blocks,
  // wo_b M = 1024, 128-row tiles win).
  if (cfg == GemmConfig::kM128 && 2 * int64_t((m + 127) / 128) * ((n + 255) / 256) < dev->n_sms) cfg = GemmConfig::kM64;
  DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(cfg));
  W4A16GemmPlan plan;
  plan.config = int(cfg);
  plan.block_m = ci.block_m;
  plan.block_n = ci.block_n;
  plan.grid_x = (n + ci.block_n - 1) / ci.block_n;
  plan.grid_z = (m + ci.block_m - 1) / ci.block_m;
  if (plan.grid_z > 65535) return invalid_argument("w4a16 GEMM: M={} needs more than 65535 row blocks", m);
  plan.splits = choose_splits(plan.grid_x * plan.grid_z, k / 128, m, n,
                              double(w4a16_qweight_bytes(n, k) + w4a16_scales_bytes(n, k)), ci, *dev,
                              ws.partial_floats, ws.n_counters);
  plan.grid_y = plan.splits;
  return plan;
}

Status w4a16_gemm(const W4A16GemmArgs& a, const W4A16WorkspaceView& ws, cudaStream_t stream) {
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
  DSV4_ASSIGN_OR_RETURN(const W4A16GemmPlan plan, plan_w4a16_gemm(a.m, n, k, ws));
  if (plan.splits > 1 && (ws.partials == nullptr || ws.counters == nullptr))
    return invalid_argument("w4a16 GEMM: split-K needs a workspace");

  GemmKernelArgs p;
  p.mode = GemmMode::kDense;
  p.a = a.x;
  p.lda = a.ldx;
  p.m = a.m;
  p.w = reinterpret_cast<const uint4*>(a.w.qweight);
  p.s = a.w.scales;
  p.n = n;
  p.k = k;
  p.splits = plan.splits;
  p.c = a.y;
  p.ldc = a.ldy;
  p.partials = ws.partials;
  p.counters = ws.counters;
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(GemmConfig(plan.config)));
  const int64_t blocks = int64_t(plan.grid_x) * plan.grid_y * plan.grid_z;
  return launch_gemm(GemmConfig(plan.config), p, dim3(plan.grid_x, plan.grid_y, plan.grid_z), stream,
                     use_pdl(blocks, plan.splits, ci, *dev));
}

}  // namespace dsv4::cuda
