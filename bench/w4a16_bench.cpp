// w4a16_bench.cpp: speed of the W4A16 GEMM and the fused MoE layer on the real Flash shapes, with
// peers measured in the same run: device-to-device copy bandwidth (the ceiling for weight
// streaming) and cuBLAS BF16 GEMM on the dequantized weights. Prints a table and writes JSON.
//
// Method (METHOD.md): bytes counted up front; every timing is a CUDA graph of L launches replayed
// many times, timed with CUDA events, median of the replays divided by L; launches rotate over
// weight sets (and MoE inputs) totalling more than 3x the L2, so weights come from DRAM as they
// do in a real step. --weights-l2 first reads the dense weight streams (dense_stream, dense_tc)
// with L2 evict-first priority (arch.h set_weights_evict_first), for an A/B against the default in
// two runs; the W4A16 decode GEMMs no longer take it.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/check.h"
#include "bench_json.h"
#include "cuda/common/arch.h"
#include "cuda/common/trace.cuh"  // kTracePoints: the timelines
#include "cuda/common/device_buffer.h"
#include "cuda/moe/moe.h"
#include "cuda/testing/bandwidth.h"
#include "cuda/testing/graph_timing.h"
#include "cuda/testing/random_gptq.h"
#include "cuda/w4a16/gemm_internal.h"  // lab: forced decode launches
#include "cuda/w4a16/w4a16.h"

using namespace dsv4;
using namespace dsv4::cuda;
using json = nlohmann::json;

#define CK(expr) DSV4_CHECK((expr) == cudaSuccess, "{}: {}", #expr, cudaGetErrorString(cudaGetLastError()))
#define CKS(expr)                                                       \
  do {                                                                  \
    const Status st_ = (expr);                                          \
    DSV4_CHECK(st_.is_ok(), "{}: {}", #expr, st_.to_string());          \
  } while (0)
#define CKB(expr) DSV4_CHECK((expr) == CUBLAS_STATUS_SUCCESS, "{}", #expr)

namespace {

// --profile: every measured call runs once, eagerly, with one weight set: for ncu.
bool g_profile = false;

DeviceBuffer alloc(size_t bytes) {
  auto r = DeviceBuffer::create(bytes);
  DSV4_CHECK(r.is_ok(), "{}", r.status().to_string());
  return std::move(r).value();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median time of one call in microseconds: `body(i)` for i = 0..calls-1 captured in one graph.
double time_graph(cudaStream_t s, int calls, const std::function<void(int)>& body, int reps = 15) {
  if (g_profile) {
    body(0);
    CK(cudaStreamSynchronize(s));
    return 1.0;
  }
  Result<std::vector<double>> t = testing::time_graph_calls(s, calls, body, /*warmup=*/2, reps);
  DSV4_CHECK(t.is_ok(), "{}", t.status().to_string());
  return median(*t);
}

struct Shape {
  std::string name;
  int n, k;
};

int sets_for(size_t bytes, size_t l2) {
  return g_profile ? 1 : int(std::clamp<size_t>((3 * l2 + bytes - 1) / bytes, 2, 256));
}

struct Ctx {
  cudaStream_t s;
  cublasHandle_t blas;
  const DeviceInfo* dev;
  double copy_gbs;
  W4A16Workspace ws;
  DeviceBuffer blas_ws;
};

struct Ceilings {
  double copy_memcpy_gbs = 0, copy_kernel_gbs = 0, read_kernel_gbs = 0;
  double copy_gbs() const { return std::max(copy_memcpy_gbs, copy_kernel_gbs); }
};

// Copy bandwidth (bytes read + written) of a 1 GiB device copy, by cudaMemcpyAsync and by a
// streaming kernel, and the read-only bandwidth of a streaming sum; after a warm-up that brings
// the clocks up. The benchmark compares against the larger copy figure.
Ceilings measure_ceilings(Ctx& c) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer a = alloc(bytes), b = alloc(bytes), sink = alloc(4096 * 4);
  CK(cudaMemset(a.get(), 1, bytes));
  CK(cudaMemset(b.get(), 2, bytes));
  for (int i = 0; i < 40; ++i) CKS(testing::stream_copy(b.get(), a.get(), bytes, c.s));  // ~0.5 s warm-up
  CK(cudaStreamSynchronize(c.s));
  Ceilings r;
  double us = time_graph(c.s, 4, [&](int i) {
    CK(cudaMemcpyAsync(i % 2 ? a.get() : b.get(), i % 2 ? b.get() : a.get(), bytes, cudaMemcpyDeviceToDevice, c.s));
  });
  r.copy_memcpy_gbs = 2.0 * double(bytes) / (us * 1e-6) / 1e9;
  us = time_graph(c.s, 4, [&](int i) {
    CKS(testing::stream_copy(i % 2 ? a.get() : b.get(), i % 2 ? b.get() : a.get(), bytes, c.s));
  });
  r.copy_kernel_gbs = 2.0 * double(bytes) / (us * 1e-6) / 1e9;
  us = time_graph(c.s, 4, [&](int i) { CKS(testing::stream_read(i % 2 ? a.get() : b.get(), bytes, sink.as<float>(), c.s)); });
  r.read_kernel_gbs = double(bytes) / (us * 1e-6) / 1e9;
  return r;
}

// cuBLAS BF16: y[M, N] = x[M, K] . W[N, K]^T, fp32 accumulation, bf16 out.
void blas_gemm(Ctx& c, const void* x, const void* w, void* y, int m, int n, int k) {
  const float alpha = 1.0f, beta = 0.0f;
  CKB(cublasGemmEx(c.blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, &beta, y,
                   CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static_assert(kMoeTracePoints == kTracePoints, "the MoE and dense timelines read the same stamp layout");

// One point of a timeline: the percentiles over blocks [first, first + n) of stamp `pt` (of
// kTracePoints a block) in us from t0, printed as a row of the launch's table and returned; null
// when no block stamped it.
json stamp_row(const std::vector<unsigned long long>& t, size_t first, size_t n, int pt, const char* name,
               unsigned long long t0) {
  std::vector<double> v;
  for (size_t b = first; b < first + n; ++b) {
    const unsigned long long st = t[b * kTracePoints + size_t(pt)];
    if (st != 0) v.push_back((double(st) - double(t0)) * 1e-3);
  }
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  auto q = [&](double f) { return v[size_t(f * double(v.size() - 1))]; };
  std::printf("             %-8s n=%-4zu %8.2f %8.2f %8.2f %8.2f %8.2f\n", name, v.size(), v.front(), q(0.1), q(0.5),
              q(0.9), v.back());
  return {{"n", v.size()}, {"min", v.front()}, {"p10", q(0.1)}, {"p50", q(0.5)}, {"p90", q(0.9)}, {"max", v.back()}};
}

// Batch sizes whose dense GEMMs also get a per-block timeline (--dense-timeline-ms; decode
// launches only).
std::vector<int> g_dense_timeline_ms;

// Timeline of one dense decode launch (the heuristics' plan) in the middle of a graph of kCalls
// chained calls: per point (entry, dependency met, weights streamed, exit), percentiles over the
// blocks in us from the first block past its dependency; the span is that to the last exit.
json dense_timeline(Ctx& c, const Shape& sh, int m, const std::function<W4A16GemmArgs(int)>& args) {
  using namespace w4a16_detail;
  constexpr int kCalls = 8, kTraced = 4;
  auto l = plan_dense_launch(m, sh.n, sh.k, c.ws.view());
  CKS(l.status());
  auto ci = gemm_config_info(l->cfg);
  CKS(ci.status());
  if (!ci->decode) return json::object();
  const size_t blocks = size_t(l->grid.x) * l->grid.y * l->grid.z;
  DeviceBuffer tr = alloc(blocks * kTracePoints * 8);
  CK(cudaMemset(tr.get(), 0, tr.bytes()));
  time_graph(c.s, kCalls, [&](int i) {
    GemmLaunch li = *l;
    li.trace = i == kTraced ? tr.as<unsigned long long>() : nullptr;
    CKS(launch_dense(args(i), li, c.ws.view(), c.s));
  }, 1);
  std::vector<unsigned long long> t(blocks * kTracePoints);
  CK(cudaMemcpy(t.data(), tr.get(), t.size() * 8, cudaMemcpyDeviceToHost));
  unsigned long long t0 = ~0ull, t_end = 0;
  for (size_t b = 0; b < blocks; ++b) {
    if (t[b * kTracePoints + 1] != 0) t0 = std::min(t0, t[b * kTracePoints + 1]);
    t_end = std::max(t_end, t[b * kTracePoints + 3]);
  }
  json out = {{"shape", sh.name}, {"m", m}, {"config", w4a16_config_name(int(l->cfg))}, {"splits", l->splits},
              {"blocks", blocks}, {"span_us", (double(t_end) - double(t0)) * 1e-3}};
  std::printf("%-10s M=%-5d timeline %s S=%d (%zu blocks), us from the first block past its dependency (span %.2f): "
              "min p10 p50 p90 max\n",
              sh.name.c_str(), m, w4a16_config_name(int(l->cfg)), l->splits, blocks,
              (double(t_end) - double(t0)) * 1e-3);
  const char* points[kTracePoints] = {"entry", "dep_met", "streamed", "exit"};
  for (int pt = 0; pt < kTracePoints; ++pt)
    if (json r = stamp_row(t, 0, blocks, pt, points[pt], t0); !r.is_null()) out[points[pt]] = r;
  std::fflush(stdout);
  return out;
}

json bench_dense(Ctx& c, const Shape& sh, const std::vector<int>& ms) {
  const size_t qb = w4a16_qweight_bytes(sh.n, sh.k), sb = w4a16_scales_bytes(sh.n, sh.k);
  const size_t wbytes = qb + sb, bf_bytes = size_t(sh.n) * sh.k * 2;
  const int sets = sets_for(wbytes, c.dev->l2_bytes), bsets = sets_for(bf_bytes, c.dev->l2_bytes);
  std::vector<DeviceBuffer> q, s, bw;
  DeviceBuffer gq = alloc(size_t(sh.k / 8) * sh.n * 4), gs = alloc(size_t(sh.k / 128) * sh.n * 2);
  for (int i = 0; i < std::max(sets, bsets); ++i) {
    CKS(testing::fill_random_gptq(gq.as<int32_t>(), gs.as<__half>(), sh.n, sh.k, 1000 + uint64_t(i), testing::ScaleSpec{},
                                  c.s));
    DeviceBuffer qi = alloc(qb), si = alloc(sb);
    CKS(repack_gptq_int4(GptqInt4Tensor{gq.as<int32_t>(), gs.as<__half>(), sh.n, sh.k}, qi.as<uint32_t>(),
                         si.as<__half>(), sh.n, RepackPlacement::concat(0), c.s));
    if (i < bsets) {
      DeviceBuffer b = alloc(bf_bytes);
      CKS(dequant_w4a16(W4A16Weight{qi.as<uint32_t>(), si.as<__half>(), sh.n, sh.k}, b.as<__nv_bfloat16>(), c.s));
      bw.push_back(std::move(b));
    }
    if (i < sets) {
      q.push_back(std::move(qi));
      s.push_back(std::move(si));
    }
  }
  CK(cudaStreamSynchronize(c.s));
  const int max_m = *std::max_element(ms.begin(), ms.end());
  DeviceBuffer x = alloc(size_t(max_m) * sh.k * 2), y = alloc(size_t(max_m) * sh.n * 2);
  CKS(testing::fill_random_bf16(x.as<__nv_bfloat16>(), int64_t(max_m) * sh.k, 5, 1.0f, c.s));
  json rows = json::array();
  for (int m : ms) {
    auto plan = plan_w4a16_gemm(m, sh.n, sh.k, c.ws.view());
    CKS(plan.status());
    const int calls = m <= 64 ? sets * std::max(1, 40 / sets) : sets;
    auto args = [&](int i) {  // weight set i % sets
      W4A16GemmArgs a;
      a.x = x.as<__nv_bfloat16>();
      a.ldx = sh.k;
      a.m = m;
      a.w = W4A16Weight{q[size_t(i % sets)].as<uint32_t>(), s[size_t(i % sets)].as<__half>(), sh.n, sh.k};
      a.y = y.as<__nv_bfloat16>();
      a.ldy = sh.n;
      return a;
    };
    const double us = time_graph(c.s, calls, [&](int i) { CKS(w4a16_gemm(args(i), c.ws.view(), c.s)); });
    // The model's deferred launch (w4a16_gemm_deferred: the split-K sum left to the consumer,
    // wo_b's HCPost): timed where the launch splits K; it is not a complete GEMM on its own.
    auto deferred = [&](int i) {
      SplitSumView v;
      CKS(w4a16_gemm_deferred(args(i), c.ws.view(), c.s, &v));
      return v.splits > 1;
    };
    double deferred_us = 0.0;
    if (m <= 32 && plan->splits > 1 && deferred(0)) deferred_us = time_graph(c.s, calls, deferred);
    const int bcalls = m <= 64 ? bsets * std::max(1, 40 / bsets) : bsets;
    const double blas_us = time_graph(c.s, bcalls, [&](int i) {
      blas_gemm(c, x.get(), bw[size_t(i % bsets)].get(), y.get(), m, sh.n, sh.k);
    });
    const double bytes = double(wbytes) + double(m) * sh.k * 2 + double(m) * sh.n * 2;
    const double flops = 2.0 * m * double(sh.n) * sh.k;
    const double gbs = bytes / (us * 1e-6) / 1e9;
    json r = {{"shape", sh.name},
              {"n", sh.n},
              {"k", sh.k},
              {"m", m},
              {"config", w4a16_config_name(plan->config)},
              {"splits", plan->splits},
              {"us", us},
              {"bytes", bytes},
              {"gbs", gbs},
              {"pct_copy_bw", 100.0 * gbs / c.copy_gbs},
              {"tflops", flops / (us * 1e-6) / 1e12},
              {"deferred_sum_us", deferred_us},
              {"cublas_bf16_us", blas_us},
              {"cublas_bf16_tflops", flops / (blas_us * 1e-6) / 1e12},
              {"weight_sets", sets},
              {"cublas_weight_sets", bsets}};
    std::printf("%-10s M=%-5d %-5s S=%-2d %9.2f us %7.0f GB/s %5.1f%% copy %7.1f TF | cuBLAS %9.2f us %7.1f TF\n",
                sh.name.c_str(), m, w4a16_config_name(plan->config), plan->splits, us, gbs, 100.0 * gbs / c.copy_gbs,
                flops / (us * 1e-6) / 1e12, blas_us, flops / (blas_us * 1e-6) / 1e12);
    if (deferred_us > 0.0)
      std::printf("%-10s M=%-5d       deferred sum %9.2f us (the splits' partials left to the consumer)\n",
                  sh.name.c_str(), m, deferred_us);
    std::fflush(stdout);
    if (std::find(g_dense_timeline_ms.begin(), g_dense_timeline_ms.end(), m) != g_dense_timeline_ms.end())
      r["timeline"] = dense_timeline(c, sh, m, args);
    rows.push_back(r);
  }
  return rows;
}

// Lab data for the decode heuristics: every decode configuration at forced split-K factors and
// ring depths, with and without programmatic dependent launch, through the internal launcher.
// Packed weight sets of one shape, rotated by the labs so that the weights come from DRAM.
struct WeightSets {
  std::vector<DeviceBuffer> q, s;
  int size() const { return int(q.size()); }
  W4A16Weight at(int i, const Shape& sh) const {
    return W4A16Weight{q[size_t(i % size())].as<uint32_t>(), s[size_t(i % size())].as<__half>(), sh.n, sh.k};
  }
};
// y [m, N] = x [m, K] W^T with weight set i of w (the labs' launches).
W4A16GemmArgs lab_args(const DeviceBuffer& x, const DeviceBuffer& y, int m, const Shape& sh, const WeightSets& w, int i) {
  W4A16GemmArgs a;
  a.x = x.as<__nv_bfloat16>();
  a.ldx = sh.k;
  a.m = m;
  a.w = w.at(i, sh);
  a.y = y.as<__nv_bfloat16>();
  a.ldy = sh.n;
  return a;
}

WeightSets make_weight_sets(Ctx& c, const Shape& sh) {
  const size_t qb = w4a16_qweight_bytes(sh.n, sh.k), sb = w4a16_scales_bytes(sh.n, sh.k);
  WeightSets w;
  DeviceBuffer gq = alloc(size_t(sh.k / 8) * sh.n * 4), gs = alloc(size_t(sh.k / 128) * sh.n * 2);
  for (int i = 0; i < sets_for(qb + sb, c.dev->l2_bytes); ++i) {
    CKS(testing::fill_random_gptq(gq.as<int32_t>(), gs.as<__half>(), sh.n, sh.k, 3000 + uint64_t(i), testing::ScaleSpec{},
                                  c.s));
    w.q.push_back(alloc(qb));
    w.s.push_back(alloc(sb));
    CKS(repack_gptq_int4(GptqInt4Tensor{gq.as<int32_t>(), gs.as<__half>(), sh.n, sh.k}, w.q.back().as<uint32_t>(),
                         w.s.back().as<__half>(), sh.n, RepackPlacement::concat(0), c.s));
  }
  CK(cudaStreamSynchronize(c.s));
  return w;
}

// Prefill lab: every tiled configuration (the portable m64/m128, and on SM90 the wgmma wg128/wg256)
// forced unsplit on one shape at each M, against cuBLAS BF16 on the same problem.
json bench_prefill_lab(Ctx& c, const Shape& sh, const std::vector<int>& ms) {
  using namespace w4a16_detail;
  const WeightSets w = make_weight_sets(c, sh);
  const int m_max = *std::max_element(ms.begin(), ms.end());
  DeviceBuffer x = alloc(size_t(m_max) * sh.k * 2), y = alloc(size_t(m_max) * sh.n * 2);
  DeviceBuffer wb = alloc(size_t(sh.n) * sh.k * 2);
  CKS(testing::fill_random_bf16(x.as<__nv_bfloat16>(), int64_t(m_max) * sh.k, 6, 1.0f, c.s));
  CKS(testing::fill_random_bf16(wb.as<__nv_bfloat16>(), int64_t(sh.n) * sh.k, 7, 0.05f, c.s));
  const W4A16WorkspaceView ws = c.ws.view();
  json rows = json::array();
  for (int m : ms) {
    const double flop = 2.0 * m * sh.n * sh.k;
    const double blas_us = time_graph(c.s, 10, [&](int) { blas_gemm(c, x.get(), wb.get(), y.get(), m, sh.n, sh.k); });
    for (const GemmConfig cfg : {GemmConfig::kM64, GemmConfig::kM128, GemmConfig::kWg128, GemmConfig::kWg256}) {
      if ((cfg == GemmConfig::kWg128 || cfg == GemmConfig::kWg256) && !wgmma_supported(*c.dev)) continue;
      auto ci = gemm_config_info(cfg);
      CKS(ci.status());
      GemmLaunch l;
      l.cfg = cfg;
      const int row_blocks = (m + ci->block_m - 1) / ci->block_m;
      if (!complete_launch(&l, *ci, row_blocks, std::min(m, ci->block_m), sh.n, sh.k, *c.dev)) continue;
      l.pdl = pdl_supported(*c.dev);
      const double us = time_graph(c.s, w.size() * std::max(1, 8 / w.size()),
                                   [&](int i) { CKS(launch_dense(lab_args(x, y, m, sh, w, i), l, ws, c.s)); });
      std::printf("plab %-10s M=%-5d %-6s blocks=%-5u %9.2f us %6.1f TF | cuBLAS %8.2f us %6.1f TF | %.2fx\n",
                  sh.name.c_str(), m, w4a16_config_name(int(cfg)), l.grid.x * l.grid.y * l.grid.z, us,
                  flop / us * 1e-6, blas_us, flop / blas_us * 1e-6, blas_us / us);
      rows.push_back({{"shape", sh.name}, {"m", m}, {"config", w4a16_config_name(int(cfg))},
                      {"blocks", l.grid.x * l.grid.y * l.grid.z}, {"us", us}, {"tflops", flop / us * 1e-6},
                      {"cublas_us", blas_us}, {"vs_cublas", blas_us / us}});
    }
  }
  return rows;
}

json bench_decode_lab(Ctx& c, const Shape& sh, const std::vector<int>& ms, bool both_pdl) {
  using namespace w4a16_detail;
  const size_t qb = w4a16_qweight_bytes(sh.n, sh.k), sb = w4a16_scales_bytes(sh.n, sh.k);
  const WeightSets w = make_weight_sets(c, sh);
  const int sets = w.size();
  DeviceBuffer x = alloc(size_t(32) * sh.k * 2), y = alloc(size_t(32) * sh.n * 2);
  CKS(testing::fill_random_bf16(x.as<__nv_bfloat16>(), int64_t(32) * sh.k, 6, 1.0f, c.s));
  CK(cudaStreamSynchronize(c.s));
  const W4A16WorkspaceView ws = c.ws.view();
  json rows = json::array();
  for (int m : ms) {
    auto chosen = plan_dense_launch(m, sh.n, sh.k, ws);
    CKS(chosen.status());
    for (int cfg = 0; cfg < kNumDecodeConfigs; ++cfg) {
      auto ci = gemm_config_info(GemmConfig(cfg));
      CKS(ci.status());
      // 17..32 rows also as two 16-row tiles (each streams the weights; the second read may hit L2),
      // and 9..16 rows as two tiles of at most 8 (the swapped-operand path) beside one 16-row tile.
      const int one_tile_blocks = (m + ci->block_m - 1) / ci->block_m;
      if (one_tile_blocks > 2 || (m <= 16 && ci->block_m > 16)) continue;
      const bool halves = m > 8 && m <= 16 && ci->block_m == 16;
      for (int half : {0, 1})
      for (int splits : {1, 2, 4, 8, 16})
        for (int stages : {2, 3, 4})
          for (int pdl : {0, 1})
          for (int cluster : {0, 1}) {
            if (pdl == 0 && !both_pdl) continue;
            if (half == 1 && !halves) continue;
            const int row_blocks = half == 1 ? 2 : one_tile_blocks;
            const int tile_rows = half == 1 ? (m + 1) / 2 : std::min(m, ci->block_m);
            GemmLaunch l;
            l.cfg = GemmConfig(cfg);
            l.splits = splits;
            l.stages = stages;
            if (!complete_launch(&l, *ci, row_blocks, tile_rows, sh.n, sh.k, *c.dev)) continue;
            if (cluster == 1 && !cluster_splits_ok(l, *c.dev)) continue;
            l.cluster = cluster == 1;
            if (l.splits > 1 && size_t(l.grid.x) * l.grid.z * splits * ci->block_m * ci->block_n > ws.partial_floats)
              continue;
            l.pdl = pdl != 0 && pdl_supported(*c.dev);
            const int calls = sets * std::max(1, 40 / sets);
            const double us =
                time_graph(c.s, calls, [&](int i) { CKS(launch_dense(lab_args(x, y, m, sh, w, i), l, ws, c.s)); });
            const int bps = decode_blocks_per_sm(*ci, l.smem, *c.dev);
            const bool is_chosen = chosen->cfg == l.cfg && chosen->splits == splits && chosen->stages == stages &&
                                   chosen->pdl == l.pdl && chosen->cluster == l.cluster && chosen->grid.z == l.grid.z;
            std::printf("lab %-6s M=%-3d %-8s x%d S=%-2d st=%d pdl=%d cl=%d smem=%6zu bps=%d blocks=%-4u %8.2f us %6.0f GB/s%s\n",
                        sh.name.c_str(), m, w4a16_config_name(cfg), row_blocks, splits, stages, pdl, cluster, l.smem, bps,
                        l.grid.x * l.grid.y * l.grid.z, us, double(qb + sb) / (us * 1e-6) / 1e9, is_chosen ? " *" : "");
            rows.push_back({{"shape", sh.name}, {"m", m}, {"config", w4a16_config_name(cfg)}, {"row_tiles", row_blocks}, {"tile_rows", tile_rows},
                            {"splits", splits},
                            {"stages", stages}, {"pdl", pdl}, {"cluster", cluster}, {"smem", l.smem},
                            {"blocks_per_sm", bps}, {"blocks", l.grid.x * l.grid.y * l.grid.z}, {"us", us},
                            {"chosen", is_chosen}});
          }
    }
  }
  return rows;
}

// --moe-pattern: the M = 1 row also times testing::tile_stream_read, the GEMMs' reads alone.
bool g_moe_pattern = false;
// --moe-force: the MoE rows (time, breakdown, timeline) with these GEMM launches instead of the
// heuristics' (an A/B of a launch against the heuristics: run the benchmark with and without).
std::optional<MoeDiagnosticLaunches> g_moe_force;
// The diagnostic launches of a measured MoE call: forced ones if asked, else the heuristics'.
MoeDiagnosticLaunches moe_launches(int launches) {
  MoeDiagnosticLaunches d = g_moe_force.value_or(MoeDiagnosticLaunches{});
  d.force_configs = g_moe_force.has_value();
  d.launches = launches;
  return d;
}

// Timeline of one MoE call (the heuristics' launches, or --moe-force's) in the middle of a graph of kCalls chained
// calls: the per-block stamps of its three launches (MoeDiagnosticLaunches::trace), printed and
// returned as percentiles per launch and point, in us from the router's first block entry.
json moe_timeline(Ctx& c, int m, int launches, const std::function<void(int, const MoeDiagnosticLaunches*)>& call) {
  constexpr int kCalls = 8, kTraced = 4;
  constexpr size_t kMaxBlocks = 3 * 8192;
  DeviceBuffer tr = alloc(kMaxBlocks * kMoeTracePoints * 8);
  CK(cudaMemset(tr.get(), 0, tr.bytes()));
  int blocks[3] = {0, 0, 0};
  MoeDiagnosticLaunches d = moe_launches(launches);
  d.trace = tr.as<unsigned long long>();
  d.trace_capacity = int64_t(kMaxBlocks);
  d.trace_blocks = blocks;
  time_graph(c.s, kCalls, [&](int i) { call(i, i == kTraced ? &d : nullptr); }, 1);
  const size_t n = size_t(blocks[0]) + blocks[1] + blocks[2];  // moe_forward checked the capacity
  std::vector<unsigned long long> t(n * kMoeTracePoints);
  CK(cudaMemcpy(t.data(), tr.get(), t.size() * 8, cudaMemcpyDeviceToHost));
  json out = json::object();
  unsigned long long t0 = ~0ull;
  for (int b = 0; b + (m <= 32 ? 1 : 0) < blocks[0]; ++b)
    if (t[size_t(b) * kMoeTracePoints] != 0) t0 = std::min(t0, t[size_t(b) * kMoeTracePoints]);
  // Decode batches: the router's last slot is its last block's tail (flag known, acquired, experts
  // selected, pairs grouped), printed on its own. The arrival itself acquires (common/arrival.cuh),
  // so the second point follows the first at once; it stood after a fence of its own before.
  const int tail = m <= 32 ? 1 : 0;
  if (tail != 0) {
    const unsigned long long* ts = t.data() + size_t(blocks[0] - 1) * kMoeTracePoints;
    std::printf("moe        M=%-5d timeline router tail: flag %.2f, acquired %.2f, selected %.2f, grouped %.2f us\n", m,
                (double(ts[0]) - double(t0)) * 1e-3, (double(ts[1]) - double(t0)) * 1e-3,
                (double(ts[2]) - double(t0)) * 1e-3, (double(ts[3]) - double(t0)) * 1e-3);
    out["router_tail"] = {(double(ts[0]) - double(t0)) * 1e-3, (double(ts[1]) - double(t0)) * 1e-3,
                          (double(ts[2]) - double(t0)) * 1e-3, (double(ts[3]) - double(t0)) * 1e-3};
  }
  const char* names[3] = {"router", "gate_up", "down"};
  const char* points[kMoeTracePoints] = {"entry", "dep_met", "streamed", "exit"};
  size_t base = 0;
  for (int l = 0; l < 3; ++l) {
    json pl = json::object();
    std::printf("moe        M=%-5d timeline %-7s (%d blocks), us from the router's first entry: min p10 p50 p90 max\n", m,
                names[l], blocks[l]);
    for (int pt = 0; pt < kMoeTracePoints; ++pt)
      if (json r = stamp_row(t, base, size_t(blocks[l] - (l == 0 ? tail : 0)), pt, points[pt], t0); !r.is_null())
        pl[points[pt]] = r;
    // Every block's stamps (us; 0: not stamped), in block order, for a look at which blocks end late.
    json raw = json::array();
    for (size_t b = base; b < base + size_t(blocks[l]); ++b) {
      json row = json::array();
      for (int pt = 0; pt < kMoeTracePoints; ++pt) {
        const unsigned long long st = t[b * kMoeTracePoints + size_t(pt)];
        row.push_back(st == 0 ? 0.0 : std::round((double(st) - double(t0)) * 0.1) * 0.01);  // 10 ns
      }
      raw.push_back(row);
    }
    pl["blocks"] = raw;
    out[names[l]] = pl;
    base += size_t(blocks[l]);
  }
  std::fflush(stdout);
  return out;
}

// Batch sizes whose MoE layer also gets a per-block timeline (--moe-timeline-ms).
std::vector<int> g_moe_timeline_ms = {1};

json bench_moe(Ctx& c, const std::vector<int>& ms, const std::vector<int>& lab_ms, json* lab_rows) {
  constexpr int H = 4096, I = 2048, E = 256, K = 6;
  const int kLayers = g_profile ? 1 : 2, kInputs = g_profile ? 1 : 8;
  const size_t q13 = w4a16_qweight_bytes(2 * I, H), s13 = w4a16_scales_bytes(2 * I, H);
  const size_t q2 = w4a16_qweight_bytes(H, I), s2 = w4a16_scales_bytes(H, I);
  const double expert_bytes = double(q13 + s13 + q2 + s2);
  struct Layer {
    DeviceBuffer w13q, w13s, w2q, w2s, sh13q, sh13s, sh2q, sh2s, gate, bias;
  };
  std::vector<Layer> layers(kLayers);
  {
    DeviceBuffer gq = alloc(size_t(H / 8) * H * 4), gs = alloc(size_t(H / 128) * H * 2);
    for (int l = 0; l < kLayers; ++l) {
      Layer& L = layers[size_t(l)];
      L.w13q = alloc(q13 * E);
      L.w13s = alloc(s13 * E);
      L.w2q = alloc(q2 * E);
      L.w2s = alloc(s2 * E);
      L.sh13q = alloc(q13);
      L.sh13s = alloc(s13);
      L.sh2q = alloc(q2);
      L.sh2s = alloc(s2);
      L.gate = alloc(size_t(E) * H * 2);
      L.bias = alloc(E * 4);
      CK(cudaMemset(L.bias.get(), 0, E * 4));
      CKS(testing::fill_random_bf16(L.gate.as<__nv_bfloat16>(), int64_t(E) * H, 77 + l, 1.0f / 32, c.s));
      for (int e = 0; e <= E; ++e) {
        const bool sh = e == E;
        uint32_t* a13 = sh ? L.sh13q.as<uint32_t>() : L.w13q.as<uint32_t>() + e * (q13 / 4);
        __half* b13 = sh ? L.sh13s.as<__half>() : L.w13s.as<__half>() + e * (s13 / 2);
        uint32_t* a2 = sh ? L.sh2q.as<uint32_t>() : L.w2q.as<uint32_t>() + e * (q2 / 4);
        __half* b2 = sh ? L.sh2s.as<__half>() : L.w2s.as<__half>() + e * (s2 / 2);
        for (int slot = 0; slot < 2; ++slot) {
          CKS(testing::fill_random_gptq(gq.as<int32_t>(), gs.as<__half>(), I, H, (1u << 20) | uint64_t((l * 1024 + e) * 4 + slot),
                                        testing::ScaleSpec{}, c.s));
          CKS(repack_gptq_int4(GptqInt4Tensor{gq.as<int32_t>(), gs.as<__half>(), I, H}, a13, b13, 2 * I,
                               RepackPlacement::gate_up(slot), c.s));
        }
        CKS(testing::fill_random_gptq(gq.as<int32_t>(), gs.as<__half>(), H, I, (1u << 20) | uint64_t((l * 1024 + e) * 4 + 2),
                                      testing::ScaleSpec{}, c.s));
        CKS(repack_gptq_int4(GptqInt4Tensor{gq.as<int32_t>(), gs.as<__half>(), H, I}, a2, b2, H,
                             RepackPlacement::concat(0), c.s));
      }
    }
    CK(cudaStreamSynchronize(c.s));
  }
  auto weights = [&](int l) {
    const Layer& L = layers[size_t(l)];
    MoeLayerWeights w;
    w.gate_w = L.gate.as<__nv_bfloat16>();
    w.gate_bias = L.bias.as<float>();
    w.w13 = {L.w13q.as<uint32_t>(), L.w13s.as<__half>(), 2 * I, H, E};
    w.w2 = {L.w2q.as<uint32_t>(), L.w2s.as<__half>(), H, I, E};
    w.shared_w13 = {L.sh13q.as<uint32_t>(), L.sh13s.as<__half>(), 2 * I, H};
    w.shared_w2 = {L.sh2q.as<uint32_t>(), L.sh2s.as<__half>(), H, I};
    return w;
  };
  int max_m = *std::max_element(ms.begin(), ms.end());
  for (int m : lab_ms) max_m = std::max(max_m, m);
  auto wsr = MoeWorkspace::create(max_m);
  CKS(wsr.status());
  MoeWorkspace ws = std::move(wsr).value();
  std::vector<DeviceBuffer> xs;
  for (int i = 0; i < kInputs; ++i) {
    xs.push_back(alloc(size_t(max_m) * H * 2));
    CKS(testing::fill_random_bf16(xs.back().as<__nv_bfloat16>(), int64_t(max_m) * H, 900 + i, 1.0f, c.s));
  }
  DeviceBuffer y = alloc(size_t(max_m) * H * 2);
  // cuBLAS peer: one expert-sized pair of GEMMs with the rows an expert gets on average.
  DeviceBuffer bw13 = alloc(size_t(2 * I) * H * 2), bw2 = alloc(size_t(H) * I * 2), bx = alloc(size_t(max_m) * H * 2),
               bact = alloc(size_t(max_m) * 2 * I * 2), by = alloc(size_t(max_m) * H * 2);
  CKS(dequant_w4a16(W4A16Weight{layers[0].w13q.as<uint32_t>(), layers[0].w13s.as<__half>(), 2 * I, H},
                    bw13.as<__nv_bfloat16>(), c.s));
  CKS(dequant_w4a16(W4A16Weight{layers[0].w2q.as<uint32_t>(), layers[0].w2s.as<__half>(), H, I}, bw2.as<__nv_bfloat16>(),
                    c.s));
  CKS(testing::fill_random_bf16(bx.as<__nv_bfloat16>(), int64_t(max_m) * H, 3, 1.0f, c.s));
  CKS(testing::fill_random_bf16(bact.as<__nv_bfloat16>(), int64_t(max_m) * 2 * I, 4, 1.0f, c.s));

  json rows = json::array();
  for (int m : ms) {
    // Bytes a call must read at least: router weight, every distinct expert selected (plus the
    // shared one) once, x and y. Distinct experts are read back from one eager call per input.
    double bytes_sum = 0;
    for (int i = 0; i < kInputs; ++i) {
      MoeArgs a{xs[size_t(i)].as<__nv_bfloat16>(), H, nullptr, m, y.as<__nv_bfloat16>(), H};
      const MoeDiagnosticLaunches d = moe_launches(3);
      CKS(moe_forward(weights(i % kLayers), a, ws, c.s, &d));
      CK(cudaStreamSynchronize(c.s));
      std::vector<int> ids(size_t(m) * K);
      CK(cudaMemcpy(ids.data(), ws.topk_ids(), ids.size() * 4, cudaMemcpyDeviceToHost));
      const std::set<int> uniq(ids.begin(), ids.end());
      bytes_sum += double(E) * H * 2 + (double(uniq.size()) + 1) * expert_bytes + 2.0 * m * H * 2;
    }
    const double bytes = bytes_sum / kInputs;
    const MoeDiagnosticLaunches whole = moe_launches(3);
    const double us = time_graph(c.s, kInputs * 2, [&](int i) {
      MoeArgs a{xs[size_t(i % kInputs)].as<__nv_bfloat16>(), H, nullptr, m, y.as<__nv_bfloat16>(), H};
      CKS(moe_forward(weights(i % kLayers), a, ws, c.s, &whole));
    });
    // The model's form below 257 tokens (MoeArgs::deferred: the combine left to the next HCPost,
    // which adds the pair rows beside its other loads): not a complete layer on its own.
    PairSumView pairs;
    const double deferred_us = time_graph(c.s, kInputs * 2, [&](int i) {
      MoeArgs a{xs[size_t(i % kInputs)].as<__nv_bfloat16>(), H, nullptr, m, y.as<__nv_bfloat16>(), H};
      a.deferred = &pairs;
      CKS(moe_forward(weights(i % kLayers), a, ws, c.s, &whole));
    });
    const double flops = 2.0 * m * (K + 1) * (double(2 * I) * H + double(H) * I);
    const int rows_pe = std::max(1, (m * K + E - 1) / E);
    const double blas_us = time_graph(c.s, 8, [&](int) {
      blas_gemm(c, bx.get(), bw13.get(), bact.get(), rows_pe, 2 * I, H);
      blas_gemm(c, bact.get(), bw2.get(), by.get(), rows_pe, H, I);
    });
    const double blas_flops = 2.0 * rows_pe * (double(2 * I) * H + double(H) * I);
    const double gbs = bytes / (us * 1e-6) / 1e9;
    json r = {{"m", m},
              {"us", us},
              {"bytes", bytes},
              {"gbs", gbs},
              {"pct_copy_bw", 100.0 * gbs / c.copy_gbs},
              {"tflops", flops / (us * 1e-6) / 1e12},
              {"deferred_combine_us", pairs.pairs_per_token > 0 ? deferred_us : 0.0},
              {"cublas_expert_rows", rows_pe},
              {"cublas_expert_us", blas_us},
              {"cublas_expert_tflops", blas_flops / (blas_us * 1e-6) / 1e12}};
    std::printf("moe        M=%-5d %9.2f us %7.0f GB/s %5.1f%% copy %7.1f TF | cuBLAS expert (%d rows) %7.2f us %7.1f TF\n",
                m, us, gbs, 100.0 * gbs / c.copy_gbs, flops / (us * 1e-6) / 1e12, rows_pe, blas_us,
                blas_flops / (blas_us * 1e-6) / 1e12);
    if (pairs.pairs_per_token > 0)
      std::printf("moe        M=%-5d deferred combine %9.2f us %7.0f GB/s %5.1f%% copy (the pair rows left to the next "
                  "HCPost)\n",
                  m, deferred_us, bytes / (deferred_us * 1e-6) / 1e9, 100.0 * bytes / (deferred_us * 1e-6) / 1e9 / c.copy_gbs);
    std::fflush(stdout);
    // Where the time goes: the router alone, router + gate/up, the whole layer (graphs of the
    // same chain, so differences include the PDL overlap between the launches).
    json parts = json::array();
    for (int launches : {1, 2}) {
      const MoeDiagnosticLaunches d = moe_launches(launches);
      const double part_us = time_graph(c.s, kInputs * 2, [&](int i) {
        MoeArgs a{xs[size_t(i % kInputs)].as<__nv_bfloat16>(), H, nullptr, m, y.as<__nv_bfloat16>(), H};
        CKS(moe_forward(weights(i % kLayers), a, ws, c.s, &d));
      });
      parts.push_back(part_us);
    }
    std::printf("moe        M=%-5d breakdown: router %.2f us, + gate/up %.2f us, + down %.2f us\n", m, parts[0].get<double>(),
                parts[1].get<double>() - parts[0].get<double>(), us - parts[1].get<double>());
    r["router_us"] = parts[0];
    r["router_gate_up_us"] = parts[1];
    if (m == 1 && g_moe_pattern && !g_profile) {
      // The ceiling of the access pattern: the GEMMs' reads of 7 experts (d16n128 blocks, rings of
      // 4 KB + 128 B slots) with no arithmetic, over rotating expert sets and both layers.
      json pat = json::array();
      DeviceBuffer sink = alloc(4096 * 4);
      for (const bool up : {true, false})
        for (int stages : {2, 3, 4}) {
          const size_t qb = up ? q13 : q2, sb = up ? s13 : s2;
          const double pbytes = double(K + 1) * double(qb + sb);
          const double pus = time_graph(c.s, 16, [&](int i) {
            const Layer& L = layers[size_t(i % kLayers)];
            testing::TileReadArgs t;
            t.qweight = up ? L.w13q.get() : L.w2q.get();
            t.scales = up ? L.w13s.get() : L.w2s.get();
            t.expert_bytes = qb;
            t.expert_scale_bytes = sb;
            t.n = up ? 2 * I : H;
            t.k = up ? H : I;
            t.n_experts = K + 1;
            for (int e = 0; e <= K; ++e) t.experts[e] = (i * 53 + e * 37) % E;
            t.stages = stages;
            CKS(testing::tile_stream_read(t, sink.as<float>(), c.s));
          });
          const double pgbs = pbytes / (pus * 1e-6) / 1e9;
          std::printf("moe        M=1     pattern read %-7s 7 experts, %d stages: %7.2f us %7.0f GB/s %5.1f%% copy\n",
                      up ? "gate/up" : "down", stages, pus, pgbs, 100.0 * pgbs / c.copy_gbs);
          pat.push_back({{"gemm", up ? "gate_up" : "down"}, {"stages", stages}, {"us", pus}, {"gbs", pgbs}});
        }
      r["pattern_read"] = pat;
    }
    // The timeline of one call in a chain of whole layers, then in a chain of routers alone (no
    // expert weights streamed between them: the router's code and data stay in L2).
    for (int launches : {3, 1}) {
      if (std::find(g_moe_timeline_ms.begin(), g_moe_timeline_ms.end(), m) == g_moe_timeline_ms.end()) break;
      std::printf("moe        M=%-5d timeline of a chain of %s\n", m, launches == 3 ? "layers" : "routers alone");
      r[launches == 3 ? "timeline" : "timeline_router_chain"] =
          moe_timeline(c, m, launches, [&](int i, const MoeDiagnosticLaunches* d) {
            MoeArgs a{xs[size_t(i % kInputs)].as<__nv_bfloat16>(), H, nullptr, m, y.as<__nv_bfloat16>(), H};
            const MoeDiagnosticLaunches plain = moe_launches(launches);
            CKS(moe_forward(weights(i % kLayers), a, ws, c.s, d != nullptr ? d : &plain));
          });
    }
    rows.push_back(r);
  }
  // Lab: forced launches of the two GEMMs (gate/up swept with down fixed, then down with the
  // best gate/up), for each router tile height a decode batch may use, for the decode heuristics.
  for (int m : lab_ms)
    for (int rows : {4, 16}) {
      if (rows == 4 && m * K > E) continue;  // 4-row tiles only while an expert expects <= 1 row
      auto time_with = [&](const MoeDiagnosticLaunches& d) {
        MoeArgs a0{xs[0].as<__nv_bfloat16>(), H, nullptr, m, y.as<__nv_bfloat16>(), H};
        if (!moe_forward(weights(0), a0, ws, c.s, &d).is_ok()) return -1.0;
        CK(cudaStreamSynchronize(c.s));
        return time_graph(c.s, kInputs * 2, [&](int i) {
          MoeArgs a{xs[size_t(i % kInputs)].as<__nv_bfloat16>(), H, nullptr, m, y.as<__nv_bfloat16>(), H};
          CKS(moe_forward(weights(i % kLayers), a, ws, c.s, &d));
        });
      };
      MoeDiagnosticLaunches best{1, 1, 2, 1, 1, 2, rows};
      double best_us = 1e30;
      for (int pass = 0; pass < 2; ++pass)
        for (int cfg = 0; cfg < 3; ++cfg)
          for (int splits : {1, 2})
            for (int stages : {2, 3, 4}) {
              MoeDiagnosticLaunches d = best;
              if (pass == 0) d = {cfg, splits, stages, 1, 1, 2, rows};
              else d = {best.up_config, best.up_splits, best.up_stages, cfg, splits, stages, rows};
              const double us = time_with(d);
              if (us < 0) continue;
              std::printf("lab moe M=%-3d rows=%-2d up %-8s S=%d st=%d down %-8s S=%d st=%d %8.2f us\n", m, rows,
                          w4a16_config_name(d.up_config), d.up_splits, d.up_stages, w4a16_config_name(d.down_config),
                          d.down_splits, d.down_stages, us);
              std::fflush(stdout);
              lab_rows->push_back(
                  {{"m", m},
                   {"block_rows", rows},
                   {"up", {w4a16_config_name(d.up_config), d.up_splits, d.up_stages}},
                   {"down", {w4a16_config_name(d.down_config), d.down_splits, d.down_stages}},
                   {"us", us}});
              if (us < best_us) {
                best_us = us;
                best = d;
              }
            }
      // Where the best launch's time goes: the router alone, router + gate/up, the whole layer
      // (each a graph of the same chain, so the differences include the PDL overlap).
      for (int launches : {1, 2, 3}) {
        MoeDiagnosticLaunches d = best;
        d.launches = launches;
        const double us = time_with(d);
        std::printf("lab moe M=%-3d rows=%-2d breakdown launches=%d %8.2f us\n", m, rows, launches, us);
        lab_rows->push_back({{"m", m}, {"block_rows", rows}, {"breakdown_launches", launches}, {"us", us}});
      }
    }
  return rows;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t e = s.find(',', pos);
    v.push_back(std::stoi(s.substr(pos, e == std::string::npos ? std::string::npos : e - pos)));
    if (e == std::string::npos) break;
    pos = e + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "w4a16_bench.json", commit = "unknown", command, only_shapes;
  bool quick = false, dense = true, moe = true, lab = false;
  std::vector<int> ms_arg, moe_ms_arg, lab_ms = {1, 16, 32}, moe_lab_ms = {1}, prefill_lab_ms;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
    else if (a == "--command" && i + 1 < argc) command = argv[++i];
    else if (a == "--quick") quick = true;
    else if (a == "--profile") g_profile = quick = true;
    else if (a == "--no-moe") moe = false;
    else if (a == "--no-dense") dense = false;
    else if (a == "--lab") lab = true;
    else if (a == "--lab-ms" && i + 1 < argc) lab_ms = parse_list(argv[++i]);
    else if (a == "--ms" && i + 1 < argc) ms_arg = parse_list(argv[++i]);
    else if (a == "--prefill-lab" && i + 1 < argc) prefill_lab_ms = parse_list(argv[++i]);
    else if (a == "--moe-ms" && i + 1 < argc) moe_ms_arg = parse_list(argv[++i]);
    else if (a == "--moe-lab-ms" && i + 1 < argc) moe_lab_ms = parse_list(argv[++i]);
    else if (a == "--moe-timeline-ms" && i + 1 < argc) g_moe_timeline_ms = parse_list(argv[++i]);
    else if (a == "--dense-timeline-ms" && i + 1 < argc) g_dense_timeline_ms = parse_list(argv[++i]);
    else if (a == "--moe-pattern") g_moe_pattern = true;
    else if (a == "--weights-l2" && i + 1 < argc) {
      const std::string v = argv[++i];
      DSV4_CHECK(v == "normal" || v == "first", "--weights-l2 takes normal or first, found '{}'", v);
      set_weights_evict_first(v == "first");  // before any launch is planned or captured (arch.h)
    }
    else if (a == "--moe-force" && i + 1 < argc) {
      const std::vector<int> f = parse_list(argv[++i]);
      DSV4_CHECK(f.size() == 6, "--moe-force wants up_config,splits,stages,down_config,splits,stages; got {} numbers",
                 f.size());
      g_moe_force = MoeDiagnosticLaunches{f[0], f[1], f[2], f[3], f[4], f[5]};
    }
    else if (a == "--shapes" && i + 1 < argc) {
      only_shapes = ",";
      only_shapes += argv[++i];
      only_shapes += ",";
    }
    else {
      std::fprintf(stderr,
                   "usage: %s [--out FILE] [--commit SHA] [--command STR] [--quick] [--profile] [--no-moe] [--no-dense]\n"
                   "          [--lab] [--lab-ms 1,16,32] [--moe-lab-ms 1,..] [--ms 1,16,..] [--moe-ms 1,..]\n"
                   "          [--shapes wq_b,wo_b,..] [--prefill-lab 1024,4096] [--moe-timeline-ms 1,..] [--dense-timeline-ms 1,..]\n"
                   "          [--moe-force up_cfg,splits,stages,down_cfg,splits,stages] [--moe-pattern]\n"
                   "          [--weights-l2 normal|first]\n",
                   argv[0]);
      return 2;
    }
  }
  std::string argv_str;
  for (int i = 0; i < argc; ++i) argv_str += (i ? " " : "") + std::string(argv[i]);

  Ctx c;
  auto dev = current_device_info();
  CKS(dev.status());
  c.dev = dev.value();
  CK(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
  CKB(cublasCreate(&c.blas));
  CKB(cublasSetStream(c.blas, c.s));
  c.blas_ws = alloc(size_t(64) << 20);
  CKB(cublasSetWorkspace(c.blas, c.blas_ws.get(), c.blas_ws.bytes()));
  auto ws = W4A16Workspace::create();
  CKS(ws.status());
  c.ws = std::move(ws).value();

  const Ceilings ceil0 = g_profile ? Ceilings{1, 1, 1} : measure_ceilings(c);
  c.copy_gbs = ceil0.copy_gbs();
  std::printf("GPU %s (%d SMs, L2 %zu MB): copy bandwidth (read + write) memcpy %.0f GB/s, kernel %.0f GB/s; "
              "read-only %.0f GB/s\n",
              c.dev->name, c.dev->n_sms, c.dev->l2_bytes >> 20, ceil0.copy_memcpy_gbs, ceil0.copy_kernel_gbs,
              ceil0.read_kernel_gbs);

  const std::vector<Shape> shapes = {{"wq_a", 1024, 4096},   {"wq_b", 32768, 1024}, {"wkv", 512, 4096},
                                     {"wo_b", 4096, 8192},   {"idx_wq_b", 8192, 1024}, {"w1_w3", 2048, 4096},
                                     {"w2", 4096, 2048},     {"wq_a+wkv", 1536, 4096}, {"w13_gateup", 4096, 4096}};
  std::vector<int> ms = quick ? std::vector<int>{1, 16, 4096} : std::vector<int>{1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096};
  if (!ms_arg.empty()) ms = ms_arg;
  std::vector<int> moe_ms = quick ? std::vector<int>{1, 16, 4096} : std::vector<int>{1, 2, 4, 8, 16, 32, 64, 512, 4096};
  if (!moe_ms_arg.empty()) moe_ms = moe_ms_arg;
  json dense_rows = json::array(), moe_rows = json::array(), lab_rows = json::array(), moe_lab_rows = json::array(),
       prefill_lab_rows = json::array();
  if (!prefill_lab_ms.empty() && !g_profile)
    for (const Shape& sh : shapes) {
      if (!only_shapes.empty() && only_shapes.find("," + sh.name + ",") == std::string::npos) continue;
      for (auto& r : bench_prefill_lab(c, sh, prefill_lab_ms)) prefill_lab_rows.push_back(r);
    }
  if (lab && !g_profile) {
    auto wanted = [&](const Shape& sh) {
      return only_shapes.empty() || only_shapes.find("," + sh.name + ",") != std::string::npos;
    };
    for (const Shape& sh : {shapes[1], shapes[3]})
      if (wanted(sh))
        for (auto& r : bench_decode_lab(c, sh, lab_ms, false)) lab_rows.push_back(r);
    for (const Shape& sh : {shapes[7], shapes[4], shapes[0]})  // wq_a+wkv, idx_wq_b (the model's), wq_a
      if (wanted(sh))
        for (auto& r : bench_decode_lab(c, sh, lab_ms == std::vector<int>{1, 16, 32} ? std::vector<int>{1, 16} : lab_ms,
                                        false))
          lab_rows.push_back(r);
  }
  if (dense)
    for (const Shape& sh : shapes) {
      if (g_profile && sh.name != "wq_b" && sh.name != "wo_b") continue;
      if (!only_shapes.empty() && only_shapes.find("," + sh.name + ",") == std::string::npos) continue;
      for (auto& r : bench_dense(c, sh, ms)) dense_rows.push_back(r);
    }
  if (moe) moe_rows = bench_moe(c, moe_ms, lab && !g_profile ? moe_lab_ms : std::vector<int>{}, &moe_lab_rows);

  const Ceilings ceil1 = g_profile ? ceil0 : measure_ceilings(c);  // again at the end: the clocks did not drift
  std::printf("copy bandwidth at the end: %.0f GB/s\n", ceil1.copy_gbs());
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  json j = {{"benchmark", "w4a16"},
            {"gpu", c.dev->name},
            {"sms", c.dev->n_sms},
            {"l2_bytes", c.dev->l2_bytes},
            {"cuda_runtime", rt},
            {"cuda_driver", drv},
            {"commit", commit},
            {"date", date},
            {"argv", argv_str},
            {"weights_l2", weights_evict_first() ? "first" : "normal"},
            {"command", command},
            {"method",
             "CUDA graph of L calls rotating over weight sets > 3x L2, 15 replays after 2 warm-up, median / L; "
             "copy bandwidth = 2 x bytes / time of a 1 GiB device-to-device copy (the faster of cudaMemcpyAsync "
             "and a streaming kernel, after a warm-up)"},
            {"copy_gbs", c.copy_gbs},
            {"copy_memcpy_gbs", ceil0.copy_memcpy_gbs},
            {"copy_kernel_gbs", ceil0.copy_kernel_gbs},
            {"read_kernel_gbs", ceil0.read_kernel_gbs},
            {"copy_gbs_end", ceil1.copy_gbs()},
            {"dense", dense_rows},
            {"moe", moe_rows},
            {"lab_decode", lab_rows},
            {"lab_moe", moe_lab_rows},
            {"lab_prefill", prefill_lab_rows}};
  const bool written = dsv4::bench::write_json(out, j, "w4a16_bench");
  cublasDestroy(c.blas);
  return written ? 0 : 1;
}
