// moe.cu: MoE layer orchestration: workspace sizing and the three launches of moe_forward
// (router + grouping, gate/up GEMM with SwiGLU, down GEMM with the combine). Validation happens
// here; the launch shapes depend only on the batch size, so a captured graph stays valid.
#include <algorithm>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/trace.cuh"
#include "cuda/moe/moe.h"
#include "cuda/moe/route.h"
#include "cuda/w4a16/gemm_internal.h"

namespace dsv4::cuda {

using namespace w4a16_detail;
using namespace moe_detail;

static_assert(kMoeTracePoints == kTracePoints, "moe.h states the stamps per block");

namespace {
constexpr size_t kPartialBytes = size_t(16) << 20;
constexpr int kBlockRows[] = {4, 16, 32, 64, 128};  // block rows moe_forward may pick
size_t align256(size_t b) { return (b + 255) / 256 * 256; }
}  // namespace

int moe_max_tiles(int m, int top_k, int n_experts, int block_m) {
  // Routed: sum over active experts of ceil(n_e / c) <= (pairs + active (c - 1)) / c, with at
  // most min(pairs, n_experts) experts active and tiles of at most c = min(bm, m) rows (the
  // router's cap; for distinct experts per token n_e <= m, and this is the bound with bm);
  // shared: ceil(m / bm).
  const int64_t pairs = int64_t(m) * top_k;
  const int64_t active = std::min<int64_t>(pairs, n_experts);
  const int64_t cap = std::max(1, std::min(block_m, m));
  return int((pairs + active * (cap - 1)) / cap + (m + block_m - 1) / block_m);
}

int moe_block_rows(int m, int top_k, int n_experts) {
  const int rows_per_expert = int((int64_t(m) * top_k + n_experts - 1) / n_experts);
  return rows_per_expert <= 1 ? 4 : rows_per_expert <= 16 ? 16 : rows_per_expert <= 32 ? 32 : rows_per_expert <= 64 ? 64 : 128;
}

size_t MoeWorkspace::bytes() const {
  return logits_.bytes() + keyed_.bytes() + topk_ids_.bytes() + topk_w_.bytes() + token_pairs_.bytes() +
         sorted_token_.bytes() + sorted_weight_.bytes() + tiles_.bytes() + act_.bytes() + down_.bytes() +
         partials_.bytes() + counters_.bytes();
}

Result<MoeWorkspace> MoeWorkspace::create(int max_tokens, int hidden, int inter, int n_experts, int top_k) {
  if (max_tokens < 1 || hidden % 256 != 0 || inter % 128 != 0 || n_experts != kRouterExperts || top_k < 1 || top_k > 8)
    return invalid_argument("MoeWorkspace: bad sizes (tokens {}, hidden {}, inter {}, experts {}, top_k {})",
                            max_tokens, hidden, inter, n_experts, top_k);
  // The router's loops are unrolled for one hidden size: refused here, not at the first forward.
  if (hidden != kRouterHidden)
    return invalid_argument("MoeWorkspace: the router takes hidden size {}, found {}", kRouterHidden, hidden);
  MoeWorkspace ws;
  ws.max_tokens_ = max_tokens;
  ws.hidden_ = hidden;
  ws.inter_ = inter;
  ws.n_experts_ = n_experts;
  ws.top_k_ = top_k;
  // Any block rows a batch of up to max_tokens may use (the heuristic's, a diagnostic's, the
  // fallback to 64), each at the largest batch that may use it: 4-row tiles only while an
  // expert expects at most one row (the diagnostics force them no further).
  for (int bm : kBlockRows) {
    const int m_max = bm == 4 ? std::min(max_tokens, std::max(1, n_experts / top_k)) : max_tokens;
    ws.max_tiles_ = std::max(ws.max_tiles_, moe_max_tiles(m_max, top_k, n_experts, bm));
  }
  const size_t m = size_t(max_tokens), pairs = m * (top_k + 1);
  DSV4_ASSIGN_OR_RETURN(ws.logits_, DeviceBuffer::create(m * n_experts * 4));
  DSV4_ASSIGN_OR_RETURN(ws.keyed_, DeviceBuffer::create(std::min<size_t>(m, kRouterDecodeMaxTokens) * n_experts * 8));
  DSV4_ASSIGN_OR_RETURN(ws.topk_ids_, DeviceBuffer::create(m * top_k * 4));
  DSV4_ASSIGN_OR_RETURN(ws.topk_w_, DeviceBuffer::create(m * top_k * 4));
  DSV4_ASSIGN_OR_RETURN(ws.token_pairs_, DeviceBuffer::create(pairs * 4));
  DSV4_ASSIGN_OR_RETURN(ws.sorted_token_, DeviceBuffer::create(pairs * 4));
  DSV4_ASSIGN_OR_RETURN(ws.sorted_weight_, DeviceBuffer::create(pairs * 4));
  DSV4_ASSIGN_OR_RETURN(ws.tiles_, DeviceBuffer::create(size_t(ws.max_tiles_) * 16));
  DSV4_ASSIGN_OR_RETURN(ws.act_, DeviceBuffer::create(pairs * inter * 2));
  DSV4_ASSIGN_OR_RETURN(ws.down_, DeviceBuffer::create(pairs * hidden * 2));
  DSV4_ASSIGN_OR_RETURN(ws.partials_, DeviceBuffer::create(kPartialBytes));
  // One zeroed allocation for every counter: n_tiles, route done, route tile counters [m],
  // combine counters [m, hidden / 64], split-K tile counters [max_tiles, max(2 inter, hidden) / 64].
  const size_t n_combine = m * (hidden / 64);
  ws.n_gemm_counters_ = ws.max_tiles_ * (std::max(2 * inter, hidden) / 64);
  const size_t off_tile = 256, off_combine = align256(off_tile + m * 4);
  const size_t off_gemm = align256(off_combine + n_combine * 4);
  const size_t total = align256(off_gemm + size_t(ws.n_gemm_counters_) * 4);
  DSV4_ASSIGN_OR_RETURN(ws.counters_, DeviceBuffer::create(total, /*zero=*/true));
  char* base = ws.counters_.as<char>();
  ws.n_tiles_ = reinterpret_cast<int*>(base);
  ws.route_done_ = reinterpret_cast<int*>(base) + 1;
  ws.route_tile_counters_ = reinterpret_cast<int*>(base + off_tile);
  ws.combine_counters_ = reinterpret_cast<int*>(base + off_combine);
  ws.gemm_counters_ = reinterpret_cast<int*>(base + off_gemm);
  return Result<MoeWorkspace>(std::move(ws));
}

Status moe_forward(const MoeLayerWeights& w, const MoeArgs& a, MoeWorkspace& ws, cudaStream_t stream,
                   const MoeDiagnosticLaunches* diag) {
  const int m = a.m, hidden = w.hidden, inter = w.inter, top_k = w.top_k;
  auto aligned16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (m < 1 || m > ws.max_tokens_)
    return invalid_argument("moe_forward: M={} outside 1..{} (workspace size)", m, ws.max_tokens_);
  if (hidden != ws.hidden_ || inter != ws.inter_ || top_k != ws.top_k_ || w.n_experts != ws.n_experts_)
    return invalid_argument("moe_forward: weights (hidden {}, inter {}, top_k {}, experts {}) do not match the workspace",
                            hidden, inter, top_k, w.n_experts);
  if (a.deferred != nullptr) *a.deferred = PairSumView{};  // until the down launch says otherwise
  if (a.x == nullptr || a.y == nullptr || w.gate_w == nullptr) return invalid_argument("moe_forward: null x, y or gate_w");
  if (!aligned16(a.x) || a.ldx < hidden || a.ldx % 8 != 0 || !aligned16(a.y) || a.ldy < hidden || a.ldy % 8 != 0)
    return invalid_argument("moe_forward: x and y must be 16-byte aligned with ld >= hidden, ld % 8 == 0");
  if (!aligned16(w.gate_w)) return invalid_argument("moe_forward: gate_w must be 16-byte aligned");
  if (w.tid2eid != nullptr && a.token_ids == nullptr) return invalid_argument("moe_forward: hash layer without token ids");
  auto check_stack = [&](const W4A16ExpertStack& s, int n, int k, const char* name) -> Status {
    if (s.qweight == nullptr || s.scales == nullptr || s.n != n || s.k != k || s.n_experts != w.n_experts ||
        !aligned16(s.qweight) || !aligned16(s.scales))
      return invalid_argument("moe_forward: {} must be {} aligned experts of [{}, {}], got {} of [{}, {}]", name,
                              w.n_experts, n, k, s.n_experts, s.n, s.k);
    return Status::ok();
  };
  auto check_weight = [&](const W4A16Weight& s, int n, int k, const char* name) -> Status {
    if (s.qweight == nullptr || s.scales == nullptr || s.n != n || s.k != k || !aligned16(s.qweight) ||
        !aligned16(s.scales))
      return invalid_argument("moe_forward: {} must be aligned [{}, {}], got [{}, {}]", name, n, k, s.n, s.k);
    return Status::ok();
  };
  DSV4_RETURN_IF_ERROR(check_stack(w.w13, 2 * inter, hidden, "w13"));
  DSV4_RETURN_IF_ERROR(check_stack(w.w2, hidden, inter, "w2"));
  DSV4_RETURN_IF_ERROR(check_weight(w.shared_w13, 2 * inter, hidden, "shared_w13"));
  DSV4_RETURN_IF_ERROR(check_weight(w.shared_w2, hidden, inter, "shared_w2"));

  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  // Block rows follow the expected rows per expert (decode: 4 or 16 rows of the 16-row decode
  // tiles; up to 32 rows, 32-row decode tiles; beyond, the tiled kernels).
  int block_m = moe_block_rows(m, top_k, w.n_experts);
  if (diag != nullptr && diag->block_rows != 0) {
    const int br = diag->block_rows;
    if (br != 4 && br != 16 && br != 32 && br != 64 && br != 128)
      return invalid_argument("moe_forward: diagnostic block rows {} not in 4, 16, 32, 64, 128", br);
    if (br == 4 && int64_t(m) * top_k > w.n_experts)
      return invalid_argument("moe_forward: diagnostic 4-row tiles need M top_k <= {} (the workspace's tile bound), got M={}",
                              w.n_experts, m);
    block_m = br;
  }
  const bool forced = diag != nullptr && diag->force_configs;
  if (block_m <= 32 && !forced) {
    // Prefill chunks of a few hundred rows have hundreds of decode tiles; when the decode kernels'
    // A block plus split-K partials do not fit, the tiled kernels (64-row tiles) take the batch.
    const int tiles = moe_max_tiles(m, top_k, w.n_experts, block_m);
    const int tile_rows = std::min(m, block_m);
    const size_t pf = ws.partials_.bytes() / 4;
    if (!choose_moe_decode_launch(block_m, tiles, tile_rows, 2 * inter, hidden, true, *dev, pf, ws.n_gemm_counters_)
             .is_ok() ||
        !choose_moe_decode_launch(block_m, tiles, tile_rows, hidden, inter, false, *dev, pf, ws.n_gemm_counters_)
             .is_ok())
      block_m = 64;
  }
  const bool decode = block_m <= 32;
  const int max_tiles = moe_max_tiles(m, top_k, w.n_experts, block_m);
  const int n_shared_tiles = (m + block_m - 1) / block_m;
  const size_t partial_floats = ws.partials_.bytes() / 4;
  // For the heuristics: pairs (rows of both GEMMs) and the expected weight bytes streamed
  // (distinct experts: at most the pairs, at most all experts, plus the shared one).
  const int64_t pairs = int64_t(m) * (top_k + 1);
  const double routed_experts = double(std::min<int64_t>(int64_t(m) * top_k, w.n_experts) + 1);
  const double up_bytes = double(w4a16_qweight_bytes(2 * inter, hidden) + w4a16_scales_bytes(2 * inter, hidden));
  const double down_bytes = double(w4a16_qweight_bytes(hidden, inter) + w4a16_scales_bytes(hidden, inter));
  // One launch per GEMM: decode (heuristic or forced) or tiled (config from the block rows).
  auto plan = [&](int n, int k, double bytes, bool gate_up, bool forced, int f_cfg, int f_splits,
                  int f_stages) -> Result<GemmLaunch> {
    const int tile_rows = std::min(m, block_m);
    if (forced) {
      if (f_cfg < 0 || f_cfg >= kNumGemmConfigs) return invalid_argument("moe_forward: diagnostic config {}", f_cfg);
      DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(GemmConfig(f_cfg)));
      GemmLaunch l;
      l.cfg = GemmConfig(f_cfg);
      l.splits = f_splits;
      l.stages = f_stages;
      // Decode configurations take any tile up to their rows; the tiled ones exactly theirs.
      const bool rows_fit = ci.decode ? block_m <= ci.block_m : ci.block_m == block_m;
      if (!rows_fit || !complete_launch(&l, ci, max_tiles, tile_rows, n, k, *dev))
        return invalid_argument("moe_forward: diagnostic launch {} splits {} stages {} does not fit (block rows {})",
                                w4a16_config_name(f_cfg), f_splits, f_stages, block_m);
      l.pdl = pdl_supported(*dev);
      return l;
    }
    if (decode)
      return choose_moe_decode_launch(block_m, max_tiles, tile_rows, n, k, gate_up, *dev, partial_floats,
                                      ws.n_gemm_counters_);
    // 128-row tiles: on SM90 the wgmma kernel, 256 columns wide (both GEMMs have N = 4096 and
    // hundreds of tiles, so its grid fills the GPU many times over).
    const GemmConfig cfg = block_m <= 64          ? GemmConfig::kM64
                           : wgmma_supported(*dev) ? GemmConfig::kWg256
                                                   : GemmConfig::kM128;
    DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(cfg));
    GemmLaunch l;
    l.cfg = cfg;
    const int gx = (n + ci.block_n - 1) / ci.block_n;
    l.splits = choose_splits(gx * max_tiles, k / 128, pairs, n, bytes, ci, *dev, partial_floats, ws.n_gemm_counters_);
    if (!complete_launch(&l, ci, max_tiles, tile_rows, n, k, *dev))
      return internal_error("moe_forward: tiled launch does not fit");
    l.pdl = use_pdl(int64_t(gx) * l.splits * max_tiles, l.splits, ci, *dev);
    return l;
  };
  const MoeDiagnosticLaunches d = diag != nullptr ? *diag : MoeDiagnosticLaunches{};
  DSV4_ASSIGN_OR_RETURN(const GemmLaunch up, plan(2 * inter, hidden, routed_experts * up_bytes, true, forced,
                                                  d.up_config, d.up_splits, d.up_stages));
  DSV4_ASSIGN_OR_RETURN(const GemmLaunch down, plan(hidden, inter, routed_experts * down_bytes, false, forced,
                                                    d.down_config, d.down_splits, d.down_stages));
  for (const GemmLaunch* l : {&up, &down}) {
    DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo ci, gemm_config_info(l->cfg));
    const size_t tiles = size_t(l->grid.x) * l->grid.z;
    if (l->splits > 1 && (tiles > size_t(ws.n_gemm_counters_) || tiles * l->splits * ci.block_m * ci.block_n > partial_floats))
      return invalid_argument("moe_forward: split-K ({} splits) exceeds the workspace", l->splits);
  }

  RouteKernelArgs r;
  r.x = a.x;
  r.ldx = a.ldx;
  r.m = m;
  r.hidden = hidden;
  r.gate_w = w.gate_w;
  r.bias = w.tid2eid != nullptr ? nullptr : w.gate_bias;
  r.tid2eid = w.tid2eid;
  r.token_ids = a.token_ids;
  r.top_k = top_k;
  r.route_scale = w.route_scale;
  r.block_m = block_m;
  r.logits = ws.logits_.as<float>();
  r.keyed = ws.keyed_.as<uint2>();
  r.topk_ids = ws.topk_ids_.as<int>();
  r.topk_w = ws.topk_w_.as<float>();
  r.tile_counters = ws.route_tile_counters_;
  r.done_counter = ws.route_done_;
  r.tiles = ws.tiles_.as<int4>();
  r.n_tiles = ws.n_tiles_;
  r.sorted_token = ws.sorted_token_.as<int>();
  r.sorted_weight = ws.sorted_weight_.as<float>();
  r.token_pairs = ws.token_pairs_.as<int>();
  unsigned long long* const trace = diag != nullptr ? diag->trace : nullptr;
  const int route_blocks = moe_route_blocks(m);
  const int up_blocks = int(up.grid.x * up.grid.y * up.grid.z), down_blocks = int(down.grid.x * down.grid.y * down.grid.z);
  if (trace != nullptr && int64_t(route_blocks) + up_blocks + down_blocks > diag->trace_capacity)
    return invalid_argument("moe_forward: the trace needs {} blocks of stamps, it holds {}",
                            int64_t(route_blocks) + up_blocks + down_blocks, diag->trace_capacity);
  if (trace != nullptr && diag->trace_blocks != nullptr) {
    diag->trace_blocks[0] = route_blocks;
    diag->trace_blocks[1] = up_blocks;
    diag->trace_blocks[2] = down_blocks;
  }
  r.trace = trace;
  const bool pdl = pdl_supported(*dev);
  const int launches = diag != nullptr ? diag->launches : 3;
  if (launches < 1 || launches > 3) return invalid_argument("moe_forward: diagnostic launches {} not in 1..3", launches);
  DSV4_RETURN_IF_ERROR(launch_moe_route(r, stream, pdl));
  if (launches == 1) return Status::ok();

  GemmKernelArgs g;
  g.m = m;
  g.n_shared_tiles = n_shared_tiles;
  g.shared_row0 = m * top_k;
  g.shared_tile_rows = block_m;
  g.tiles = ws.tiles_.as<int4>();
  g.n_tiles = ws.n_tiles_;
  g.sorted_token = ws.sorted_token_.as<int>();
  g.sorted_weight = ws.sorted_weight_.as<float>();
  g.token_pairs = ws.token_pairs_.as<int>();
  g.pairs_per_token = top_k + 1;
  g.shared_expert = kRouterExperts;
  g.partials = ws.partials_.as<float>();
  g.counters = ws.gemm_counters_;
  g.swiglu_limit = w.swiglu_limit;
  g.trace = trace != nullptr ? trace + int64_t(kTracePoints) * route_blocks : nullptr;

  // Gate/up: [pairs, hidden] x [2 inter, hidden]^T -> act [pairs, inter].
  g.mode = GemmMode::kMoeUp;
  g.a = a.x;
  g.lda = a.ldx;
  g.w = reinterpret_cast<const uint4*>(w.w13.qweight);
  g.s = w.w13.scales;
  g.w_expert_stride = int64_t(w4a16_qweight_bytes(2 * inter, hidden) / 16);
  g.s_expert_stride = int64_t(w4a16_scales_bytes(2 * inter, hidden) / 2);
  g.w_shared = reinterpret_cast<const uint4*>(w.shared_w13.qweight);
  g.s_shared = w.shared_w13.scales;
  g.n = 2 * inter;
  g.k = hidden;
  g.c = ws.act_.as<__nv_bfloat16>();
  g.ldc = inter;
  g.splits = up.splits;
  g.cluster_splits = up.cluster ? up.splits : 0;
  g.stages = up.stages;
  g.a_rows = up.a_rows;
  g.a_groups = up.a_groups;
  DSV4_RETURN_IF_ERROR(launch_gemm(up.cfg, g, up.grid, up.smem, stream, up.pdl));
  if (launches == 2) return Status::ok();

  // Down: act [pairs, inter] x [hidden, inter]^T -> down [pairs, hidden], combined into y.
  g.mode = GemmMode::kMoeDown;
  g.a = ws.act_.as<__nv_bfloat16>();
  g.lda = inter;
  g.w = reinterpret_cast<const uint4*>(w.w2.qweight);
  g.s = w.w2.scales;
  g.w_expert_stride = int64_t(w4a16_qweight_bytes(hidden, inter) / 16);
  g.s_expert_stride = int64_t(w4a16_scales_bytes(hidden, inter) / 2);
  g.w_shared = reinterpret_cast<const uint4*>(w.shared_w2.qweight);
  g.s_shared = w.shared_w2.scales;
  g.n = hidden;
  g.k = inter;
  g.c = ws.down_.as<__nv_bfloat16>();
  g.ldc = hidden;
  g.combine_counters = ws.combine_counters_;
  g.y = a.y;
  g.ldy = a.ldy;
  g.trace = trace != nullptr ? trace + int64_t(kTracePoints) * (route_blocks + up_blocks) : nullptr;
  DSV4_ASSIGN_OR_RETURN(const GemmConfigInfo down_ci, gemm_config_info(down.cfg));
  g.defer_combine = a.deferred != nullptr && down_ci.decode;  // only the decode kernel honours it
  if (a.deferred != nullptr)
    *a.deferred = g.defer_combine ? PairSumView{ws.down_.as<__nv_bfloat16>(), hidden, ws.token_pairs_.as<int>(), top_k + 1}
                                  : PairSumView{};
  g.splits = down.splits;
  g.cluster_splits = down.cluster ? down.splits : 0;
  g.stages = down.stages;
  g.a_rows = down.a_rows;
  g.a_groups = down.a_groups;
  DSV4_RETURN_IF_ERROR(launch_gemm(down.cfg, g, down.grid, down.smem, stream, down.pdl));
  return Status::ok();
}

}  // namespace dsv4::cuda
