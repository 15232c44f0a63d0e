// w4a16_test.cpp: the W4A16 repack and dense GEMM against exact CPU references, on every INT4
// shape of DeepSeek-V4-Flash (and the fused ones) for M from 1 to 4096.
//
// Tolerance of a GEMM output element (reference in double from the exact weights):
//   |gpu - ref| <= 2^-8 |ref| + 2^-15 sum_k |x_k w_k|
// The first term is the bf16 rounding of the output (half an ulp is at most 2^-8 of the value);
// the second covers fp32 accumulation in a different order than the CPU's (at most about
// K 2^-24 sum|x w| in the worst case, in practice far below 2^-15 sum|x w|). Any indexing or
// layout error moves elements by the order of |ref| itself. The relative squared error over all
// checked elements must also stay under 1e-5 (bf16 rounding alone gives about 1e-6).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/common/arch.h"
#include "cuda/w4a16/gemm_internal.h"  // forced decode launches
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

struct ShapeSpec {
  std::string name;
  int n = 0, k = 0;
  std::vector<PackedPart> parts;
};

ScaleSpec default_scales() { return ScaleSpec{8, 9, true}; }

std::vector<ShapeSpec> flash_shapes() {
  auto one = [](const std::string& name, int n, int k, uint64_t seed) {
    return ShapeSpec{name, n, k, {PackedPart{HostGptq{seed, n, k, default_scales()}, RepackPlacement::concat(0)}}};
  };
  std::vector<ShapeSpec> v;
  v.push_back(one("wq_a", 1024, 4096, 11));
  v.push_back(one("wq_b", 32768, 1024, 12));
  v.push_back(one("wkv", 512, 4096, 13));
  v.push_back(one("wo_b", 4096, 8192, 14));
  v.push_back(one("idx_wq_b", 8192, 1024, 15));
  v.push_back(one("w1_w3", 2048, 4096, 16));
  v.push_back(one("w2", 4096, 2048, 17));
  // wq_a and wkv read the same input: one packed [1536, 4096] weight, one GEMM.
  v.push_back(ShapeSpec{"wq_a+wkv", 1536, 4096,
                        {PackedPart{HostGptq{21, 1024, 4096, default_scales()}, RepackPlacement::concat(0)},
                         PackedPart{HostGptq{22, 512, 4096, default_scales()}, RepackPlacement::concat(1024)}}});
  // MoE gate/up: w1 and w3 interleaved in 16-column blocks, N = 4096.
  v.push_back(ShapeSpec{"w13_gateup", 4096, 4096,
                        {PackedPart{HostGptq{23, 2048, 4096, default_scales()}, RepackPlacement::gate_up(0)},
                         PackedPart{HostGptq{24, 2048, 4096, default_scales()}, RepackPlacement::gate_up(1)}}});
  return v;
}

// Packed device weight and exact host weights of one shape, built once per test binary.
struct ShapeData {
  DeviceBuffer q, s;
  std::vector<float> w_kn;
  W4A16Weight view(const ShapeSpec& sh) const { return W4A16Weight{q.as<uint32_t>(), s.as<__half>(), sh.n, sh.k}; }
};

ShapeData& shape_data(const ShapeSpec& sh) {
  static std::map<std::string, std::unique_ptr<ShapeData>> cache;
  auto& slot = cache[sh.name];
  if (!slot) {
    slot = std::make_unique<ShapeData>();
    slot->q = device_alloc(w4a16_qweight_bytes(sh.n, sh.k));
    slot->s = device_alloc(w4a16_scales_bytes(sh.n, sh.k));
    poison(slot->q);
    poison(slot->s);
    DeviceBuffer sq, ss;
    build_packed(sh.parts, sh.n, sh.k, slot->q.as<uint32_t>(), slot->s.as<__half>(), sq, ss);
    slot->w_kn = host_weights_kn(sh.parts, sh.n, sh.k);
  }
  return *slot;
}

W4A16WorkspaceView workspace() {
  static W4A16Workspace ws = [] {
    auto r = W4A16Workspace::create();
    DSV4_CHECK(r.is_ok(), "{}", r.status().to_string());
    return std::move(r).value();
  }();
  return ws.view();
}

// Arguments of y [m, ldy] = x [m, K] W^T for shape sh (bf16 device buffers).
W4A16GemmArgs make_gemm_args(const ShapeSpec& sh, const DeviceBuffer& dx, const DeviceBuffer& dy, int m, int64_t ldy) {
  W4A16GemmArgs a;
  a.x = dx.as<__nv_bfloat16>();
  a.ldx = sh.k;
  a.m = m;
  a.w = shape_data(sh).view(sh);
  a.y = dy.as<__nv_bfloat16>();
  a.ldy = ldy;
  return a;
}

// Checks the downloaded y [m, ldy] (bf16 bits, poisoned before the launch) of y = x W^T: every
// element of [m, N] written and finite, columns past N untouched, and up to `sample` rows
// against the exact reference. Returns the comparison of the checked rows.
CompareResult check_gemm_output(const ShapeSpec& sh, const std::vector<float>& x, const std::vector<uint16_t>& y, int m,
                                int64_t ldy, int sample, uint64_t seed, const std::string& what) {
  int64_t unwritten = 0, guard_touched = 0;
  for (int r = 0; r < m; ++r) {
    for (int c = 0; c < sh.n; ++c) unwritten += !std::isfinite(bf16_to_f32(y[size_t(r) * ldy + c]));
    for (int64_t c = sh.n; c < ldy; ++c) guard_touched += y[size_t(r) * ldy + c] != 0xFFFF;
  }
  EXPECT_EQ(unwritten, 0) << what << ": unwritten or non-finite outputs";
  EXPECT_EQ(guard_touched, 0) << what << ": wrote past column N";
  const std::vector<int> rows = sample_rows(m, sample, seed);
  std::vector<double> ref, absdot;
  ref_gemm_rows(x, sh.k, rows, shape_data(sh).w_kn, sh.n, ref, absdot);
  std::vector<float> gpu(ref.size());
  std::vector<double> tol(ref.size());
  for (size_t i = 0; i < rows.size(); ++i)
    for (int c = 0; c < sh.n; ++c) {
      const size_t j = i * sh.n + c;
      gpu[j] = bf16_to_f32(y[size_t(rows[i]) * ldy + c]);
      tol[j] = std::ldexp(std::fabs(ref[j]), -8) + std::ldexp(absdot[j], -15);
    }
  const CompareResult cr = compare(gpu.data(), ref.data(), tol.data(), int64_t(gpu.size()));
  EXPECT_TRUE(cr.ok(1e-5)) << what << ": " << cr.summary();
  return cr;
}

// Runs y = x W^T for m rows through the planner and checks it (check_gemm_output; 64 guard
// columns past N).
void run_and_check(const ShapeSpec& sh, int m, uint64_t seed) {
  const std::vector<float> x = random_bf16_values(int64_t(m) * sh.k, seed, 1.0f);
  DeviceBuffer dx = upload_vector(to_bf16(x));
  const int64_t ldy = sh.n + 64;  // 64 guard columns must stay poisoned
  DeviceBuffer dy = device_alloc(size_t(m) * ldy * 2);
  poison(dy);
  auto plan = plan_w4a16_gemm(m, sh.n, sh.k, workspace());
  DSV4_ASSERT_OK(plan.status());
  DSV4_ASSERT_OK(w4a16_gemm(make_gemm_args(sh, dx, dy, m, ldy), workspace(), nullptr));
  DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<uint16_t> y = download<uint16_t>(dy.get(), size_t(m) * ldy);
  const std::string what = sh.name + " M=" + std::to_string(m) + " (" + w4a16_config_name(plan->config) +
                           ", splits " + std::to_string(plan->splits) + ")";
  const CompareResult cr = check_gemm_output(sh, x, y, m, ldy, 64, seed + 1, what);
  std::printf("[ check ] %-9s M=%-5d cfg=%-4s splits=%-2d max|d|/tol=%.3f nmse=%.2e\n", sh.name.c_str(), m,
              w4a16_config_name(plan->config), plan->splits, cr.max_ratio, cr.nmse);
}

struct GemmCase {
  int shape = 0;
  int m = 0;
};
std::string case_name(const ::testing::TestParamInfo<GemmCase>& info) {
  std::string s = flash_shapes()[size_t(info.param.shape)].name + "_M" + std::to_string(info.param.m);
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}
std::vector<GemmCase> all_cases() {
  std::vector<GemmCase> v;
  const int n_shapes = int(flash_shapes().size());
  for (int s = 0; s < n_shapes; ++s)
    for (int m : {1, 2, 3, 8, 16, 24, 32, 33, 64, 256, 1024, 4096}) v.push_back({s, m});
  return v;
}

class W4A16Gemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(W4A16Gemm, MatchesExactReference) {
  DSV4_SKIP_WITHOUT_GPU();
  const ShapeSpec sh = flash_shapes()[size_t(GetParam().shape)];
  run_and_check(sh, GetParam().m, 1000 + 17 * uint64_t(GetParam().shape) + uint64_t(GetParam().m));
}
INSTANTIATE_TEST_SUITE_P(FlashShapes, W4A16Gemm, ::testing::ValuesIn(all_cases()), case_name);

// The repack is checked on its own: dequantizing the packed weight must give bf16(s (q - 8)) of
// the checkpoint tensors bit for bit, including placement, zero and subnormal scales.
TEST(W4A16Repack, DequantRoundTripIsExact) {
  DSV4_SKIP_WITHOUT_GPU();
  for (const ShapeSpec& sh : {flash_shapes()[7], flash_shapes()[8], flash_shapes()[2]}) {
    ShapeData& d = shape_data(sh);
    DeviceBuffer out = device_alloc(size_t(sh.n) * sh.k * 2);
    poison(out);
    DSV4_ASSERT_OK(dequant_w4a16(d.view(sh), out.as<__nv_bfloat16>(), nullptr));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = download<uint16_t>(out.get(), size_t(sh.n) * sh.k);
    int64_t bad = 0, first = -1;
    for (int col = 0; col < sh.n; ++col)
      for (int kk = 0; kk < sh.k; ++kk) {
        const uint16_t want = f32_to_bf16(d.w_kn[size_t(kk) * sh.n + col]);
        const uint16_t have = got[size_t(col) * sh.k + kk];
        // +0 and -0 are the same weight (a zero scale is stored as 1 with code 8).
        if (have != want && !((have & 0x7FFF) == 0 && (want & 0x7FFF) == 0)) {
          if (first < 0) first = int64_t(col) * sh.k + kk;
          ++bad;
        }
      }
    EXPECT_EQ(bad, 0) << sh.name << ": first mismatch at flat index " << first;
  }
}

TEST(W4A16Repack, RejectsBadPlacement) {
  DSV4_SKIP_WITHOUT_GPU();
  DeviceBuffer q = device_alloc(1024), s = device_alloc(1024);
  GptqInt4Tensor t{q.as<int32_t>(), s.as<__half>(), 64, 128};
  EXPECT_FALSE(repack_gptq_int4(t, q.as<uint32_t>(), s.as<__half>(), 64, RepackPlacement::concat(16), nullptr).is_ok());
  EXPECT_FALSE(repack_gptq_int4(t, q.as<uint32_t>(), s.as<__half>(), 100, RepackPlacement::concat(0), nullptr).is_ok());
  t.k = 100;
  EXPECT_FALSE(repack_gptq_int4(t, q.as<uint32_t>(), s.as<__half>(), 64, RepackPlacement::concat(0), nullptr).is_ok());
}

TEST(W4A16Gemm, RejectsBadArguments) {
  DSV4_SKIP_WITHOUT_GPU();
  const ShapeSpec sh = flash_shapes()[2];
  DeviceBuffer x = device_alloc(size_t(4) * sh.k * 2 + 16), y = device_alloc(size_t(4) * sh.n * 2);
  const W4A16GemmArgs a = make_gemm_args(sh, x, y, 4, sh.n);
  EXPECT_TRUE(w4a16_gemm(a, workspace(), nullptr).is_ok());
  W4A16GemmArgs b = a;
  b.x = reinterpret_cast<const __nv_bfloat16*>(x.as<char>() + 2);  // misaligned
  EXPECT_EQ(w4a16_gemm(b, workspace(), nullptr).code(), StatusCode::kInvalidArgument);
  b = a;
  b.w.n = 500;  // not a multiple of 64
  EXPECT_EQ(w4a16_gemm(b, workspace(), nullptr).code(), StatusCode::kInvalidArgument);
  b = a;
  b.m = 0;
  EXPECT_EQ(w4a16_gemm(b, workspace(), nullptr).code(), StatusCode::kInvalidArgument);
  DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
}

// Split-K reductions add partials in a fixed order: the same inputs give the same bits, eagerly
// and replayed from a CUDA graph (the workspace counters return to zero after every launch).
// The heuristics' plan, and below a forced 8-way split of the decode kernel.
TEST(W4A16Gemm, DeterministicAndGraphReplayable) {
  DSV4_SKIP_WITHOUT_GPU();
  const ShapeSpec sh = flash_shapes()[3];  // wo_b: K = 8192, many splits at M = 1
  for (int m : {1, 16}) {
    auto plan = plan_w4a16_gemm(m, sh.n, sh.k, workspace());
    DSV4_ASSERT_OK(plan.status());
    DeviceBuffer dx = upload_vector(to_bf16(random_bf16_values(int64_t(m) * sh.k, 77 + m, 1.0f)));
    DeviceBuffer y0 = device_alloc(size_t(m) * sh.n * 2), y1 = device_alloc(size_t(m) * sh.n * 2);
    poison(y0);
    poison(y1);
    W4A16GemmArgs a = make_gemm_args(sh, dx, y0, m, sh.n);
    DSV4_ASSERT_OK(w4a16_gemm(a, workspace(), nullptr));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto ref = download<uint16_t>(y0.get(), size_t(m) * sh.n);

    cudaStream_t s;
    DSV4_ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    a.y = y1.as<__nv_bfloat16>();
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    DSV4_ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    DSV4_ASSERT_OK(w4a16_gemm(a, workspace(), s));
    DSV4_ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
    DSV4_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      poison(y1);
      DSV4_ASSERT_CUDA(cudaGraphLaunch(exec, s));
      DSV4_ASSERT_CUDA(cudaStreamSynchronize(s));
      EXPECT_EQ(download<uint16_t>(y1.get(), size_t(m) * sh.n), ref) << "M=" << m << " replay " << rep;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
  }
}

// Prefill-sized calls give the same bits every time, with a call on other data in between (a
// split-K or tile scheduler that left state behind, or read a partial before it was complete,
// would show here). Written when a 400-row prefill chunk of the model differed between identical
// runs: the dense GEMMs were deterministic, the MoE router's grouping was not (moe_test).
TEST(W4A16Gemm, PrefillRowsAreDeterministic) {
  DSV4_SKIP_WITHOUT_GPU();
  for (const ShapeSpec& sh : flash_shapes()) {
    for (int m : {400, 300, 1129}) {
      DeviceBuffer dx1 = upload_vector(to_bf16(random_bf16_values(int64_t(m) * sh.k, 501 + m, 1.0f)));
      DeviceBuffer dx2 = upload_vector(to_bf16(random_bf16_values(int64_t(m) * sh.k, 502 + m, 1.0f)));
      DeviceBuffer y0 = device_alloc(size_t(m) * sh.n * 2), y1 = device_alloc(size_t(m) * sh.n * 2);
      poison(y0);
      DSV4_ASSERT_OK(w4a16_gemm(make_gemm_args(sh, dx1, y0, m, sh.n), workspace(), nullptr));
      DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
      const auto ref = download<uint16_t>(y0.get(), size_t(m) * sh.n);
      for (int rep = 0; rep < 3; ++rep) {
        DSV4_ASSERT_OK(w4a16_gemm(make_gemm_args(sh, dx2, y1, m, sh.n), workspace(), nullptr));
        poison(y0);
        DSV4_ASSERT_OK(w4a16_gemm(make_gemm_args(sh, dx1, y0, m, sh.n), workspace(), nullptr));
        DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
        const auto got = download<uint16_t>(y0.get(), size_t(m) * sh.n);
        int64_t diff = 0, first = -1;
        for (size_t i = 0; i < got.size(); ++i)
          if (got[i] != ref[i]) {
            if (first < 0) first = int64_t(i);
            ++diff;
          }
        EXPECT_EQ(diff, 0) << sh.name << " M=" << m << " rep " << rep << ": first differing row "
                           << (first < 0 ? -1 : first / sh.n);
      }
    }
  }
}

// The exact reference of all m rows of y = x W^T with the per-element tolerance of
// check_gemm_output, and a downloaded y (bf16 bits) compared against it.
struct AllRowsReference {
  std::vector<double> ref, tol;
  CompareResult compare_with(const std::vector<uint16_t>& y) const {
    std::vector<float> gpu(y.size());
    for (size_t j = 0; j < y.size(); ++j) gpu[j] = bf16_to_f32(y[j]);
    return compare(gpu.data(), ref.data(), tol.data(), int64_t(gpu.size()));
  }
};
AllRowsReference all_rows_reference(const ShapeSpec& sh, const std::vector<float>& x, int m) {
  std::vector<int> rows(static_cast<size_t>(m));
  for (int r = 0; r < m; ++r) rows[size_t(r)] = r;
  AllRowsReference r;
  std::vector<double> absdot;
  ref_gemm_rows(x, sh.k, rows, shape_data(sh).w_kn, sh.n, r.ref, absdot);
  r.tol.resize(r.ref.size());
  for (size_t j = 0; j < r.ref.size(); ++j) r.tol[j] = std::ldexp(std::fabs(r.ref[j]), -8) + std::ldexp(absdot[j], -15);
  return r;
}

// Every decode configuration, split-K factor (even and uneven group counts) and ring depth the
// heuristics may pick, forced through the internal launcher, against the exact reference; also
// checks that a forced split-K launch is deterministic and (SM90) that its cluster and global
// partial sums agree bit for bit.
TEST(W4A16Decode, ForcedLaunchesMatchExactReference) {
  DSV4_SKIP_WITHOUT_GPU();
  using namespace w4a16_detail;
  auto dev = current_device_info();
  DSV4_ASSERT_OK(dev.status());
  for (int si : {3, 1, 8}) {  // wo_b (K = 8192), wq_b (N = 32768), w13_gateup (interleaved)
    const ShapeSpec sh = flash_shapes()[size_t(si)];
    for (int m : {1, 5, 12, 16, 17, 32}) {  // 12: a partial 16-row tile (its last rows clamped)
      const uint64_t seed = 5000 + 31 * uint64_t(si) + uint64_t(m);
      const std::vector<float> x = random_bf16_values(int64_t(m) * sh.k, seed, 1.0f);
      DeviceBuffer dx = upload_vector(to_bf16(x));
      DeviceBuffer dy = device_alloc(size_t(m) * sh.n * 2);
      const AllRowsReference ref = all_rows_reference(sh, x, m);
      for (int c = 0; c < kNumDecodeConfigs; ++c) {
        auto ci = gemm_config_info(GemmConfig(c));
        DSV4_ASSERT_OK(ci.status());
        if (ci->block_m < std::min(m, 32) && m > 16) continue;  // 16-row configurations: M <= 16 only
        for (int splits : {1, 3, 8})
          for (int stages : {2, 3, 4}) {
            if (splits == 8 && stages == 3) continue;
            GemmLaunch l;
            l.cfg = GemmConfig(c);
            l.splits = splits;
            l.stages = stages;
            if (!complete_launch(&l, *ci, (m + ci->block_m - 1) / ci->block_m, std::min(m, ci->block_m), sh.n, sh.k,
                                 **dev))
              continue;
            l.pdl = pdl_supported(**dev);
            l.cluster = cluster_splits_ok(l, **dev);  // SM90: the cluster path, then the global one below
            const W4A16GemmArgs a = make_gemm_args(sh, dx, dy, m, sh.n);
            poison(dy);
            DSV4_ASSERT_OK(launch_dense(a, l, workspace(), nullptr));
            DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
            const std::vector<uint16_t> y = download<uint16_t>(dy.get(), size_t(m) * sh.n);
            const CompareResult cr = ref.compare_with(y);
            EXPECT_TRUE(cr.ok(1e-5)) << sh.name << " M=" << m << " " << w4a16_config_name(c) << " splits " << splits
                                     << " stages " << stages << ": " << cr.summary();
            if (l.cluster) {  // SM90: the global-memory split-K path gives the same bits as the cluster one
              GemmLaunch g = l;
              g.cluster = false;
              poison(dy);
              DSV4_ASSERT_OK(launch_dense(a, g, workspace(), nullptr));
              DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
              EXPECT_EQ(download<uint16_t>(dy.get(), size_t(m) * sh.n), y)
                  << sh.name << " M=" << m << " " << w4a16_config_name(c) << " splits " << splits
                  << ": cluster and global split-K differ";
            }
            if (splits == 8 && stages == 4) {  // same bits again
              DSV4_ASSERT_OK(launch_dense(a, l, workspace(), nullptr));
              DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
              EXPECT_EQ(download<uint16_t>(dy.get(), size_t(m) * sh.n), y)
                  << sh.name << " M=" << m << " " << w4a16_config_name(c) << ": split-K not deterministic";
            }
            std::printf("[ decode] %-10s M=%-3d %-8s splits=%d stages=%d max|d|/tol=%.3f nmse=%.2e\n", sh.name.c_str(),
                        m, w4a16_config_name(c), splits, stages, cr.max_ratio, cr.nmse);
          }
      }
    }
  }
}

// 9..16 rows as two row tiles of at most 8 rows (complete_launch's tile_rows), which take the
// swapped-operand path, match the exact reference; a launch whose tiles do not cover M is refused.
TEST(W4A16Decode, EightRowTilesMatchExactReference) {
  DSV4_SKIP_WITHOUT_GPU();
  using namespace w4a16_detail;
  auto dev = current_device_info();
  DSV4_ASSERT_OK(dev.status());
  for (int si : {1, 3}) {  // wq_b (unsplit), wo_b (split-K)
    const ShapeSpec sh = flash_shapes()[size_t(si)];
    for (int m : {9, 13, 16}) {
      const std::vector<float> x = random_bf16_values(int64_t(m) * sh.k, 7100 + 3 * uint64_t(si) + uint64_t(m), 1.0f);
      DeviceBuffer dx = upload_vector(to_bf16(x));
      DeviceBuffer dy = device_alloc(size_t(m) * sh.n * 2);
      const AllRowsReference ref = all_rows_reference(sh, x, m);
      for (GemmConfig c : {GemmConfig::kD16N256, GemmConfig::kD16N128}) {
        auto ci = gemm_config_info(c);
        DSV4_ASSERT_OK(ci.status());
        for (int splits : {1, 8}) {
          GemmLaunch l;
          l.cfg = c;
          l.splits = splits;
          l.stages = 2;
          const int tile_rows = (m + 1) / 2;
          ASSERT_TRUE(complete_launch(&l, *ci, 2, tile_rows, sh.n, sh.k, **dev));
          ASSERT_EQ(l.a_rows, tile_rows);
          l.pdl = pdl_supported(**dev);
          poison(dy);
          DSV4_ASSERT_OK(launch_dense(make_gemm_args(sh, dx, dy, m, sh.n), l, workspace(), nullptr));
          DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
          const CompareResult cr = ref.compare_with(download<uint16_t>(dy.get(), size_t(m) * sh.n));
          EXPECT_TRUE(cr.ok(1e-5)) << sh.name << " M=" << m << " " << w4a16_config_name(int(c)) << " splits " << splits
                                   << ", tiles of " << tile_rows << " rows: " << cr.summary();
          std::printf("[ 8-row] %-10s M=%-3d %-8s splits=%d tiles of %d rows max|d|/tol=%.3f\n", sh.name.c_str(), m,
                      w4a16_config_name(int(c)), splits, tile_rows, cr.max_ratio);
        }
      }
      // A launch whose tiles cannot cover M is refused, not run short.
      GemmLaunch bad;
      bad.cfg = GemmConfig::kD16N256;
      bad.splits = 1;
      bad.stages = 2;
      auto bad_ci = gemm_config_info(bad.cfg);
      DSV4_ASSERT_OK(bad_ci.status());
      ASSERT_TRUE(complete_launch(&bad, *bad_ci, 1, 8, sh.n, sh.k, **dev));
      EXPECT_EQ(launch_dense(make_gemm_args(sh, dx, dy, m, sh.n), bad, workspace(), nullptr).code(),
                StatusCode::kInvalidArgument);
    }
  }
}

// The split-K sum's handoff (one acq_rel arrival per block, common/arrival.cuh) over grids of many
// waves (splits 32 with 64-column tiles: 2048 blocks for wo_b), launched back to back without a
// host sync in between: every launch must give the first one's bits. A last block that read a
// partial before its release, or a counter left non-zero for the next launch, would show as a
// differing or poisoned output.
TEST(W4A16Decode, SplitKRepeatsOverManyWaves) {
  DSV4_SKIP_WITHOUT_GPU();
  using namespace w4a16_detail;
  auto dev = current_device_info();
  DSV4_ASSERT_OK(dev.status());
  const ShapeSpec sh = flash_shapes()[3];  // wo_b: K = 8192, 64 groups
  for (int m : {1, 16}) {
    const std::vector<float> x = random_bf16_values(int64_t(m) * sh.k, 9100 + uint64_t(m), 1.0f);
    DeviceBuffer dx = upload_vector(to_bf16(x));
    for (const GemmConfig cfg : {GemmConfig::kD16N64, GemmConfig::kD16N256}) {
      auto ci = gemm_config_info(cfg);
      DSV4_ASSERT_OK(ci.status());
      for (int splits : {2, 7, 32}) {
        GemmLaunch l;
        l.cfg = cfg;
        l.splits = splits;
        l.stages = 2;
        if (!complete_launch(&l, *ci, 1, m, sh.n, sh.k, **dev)) continue;
        l.pdl = pdl_supported(**dev);
        constexpr int kReps = 24;
        std::vector<DeviceBuffer> ys;
        for (int r = 0; r < kReps; ++r) {
          ys.push_back(device_alloc(size_t(m) * sh.n * 2));
          poison(ys.back());
        }
        for (int r = 0; r < kReps; ++r)
          DSV4_ASSERT_OK(launch_dense(make_gemm_args(sh, dx, ys[size_t(r)], m, sh.n), l, workspace(), nullptr));
        DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
        const std::string what =
            "M=" + std::to_string(m) + " " + w4a16_config_name(int(cfg)) + " splits " + std::to_string(splits);
        const std::vector<uint16_t> y0 = download<uint16_t>(ys[0].get(), size_t(m) * sh.n);
        const CompareResult cr = check_gemm_output(sh, x, y0, m, sh.n, m, 0, what);
        for (int r = 1; r < kReps; ++r)
          EXPECT_EQ(download<uint16_t>(ys[size_t(r)].get(), size_t(m) * sh.n), y0)
              << what << ": launch " << r << " differs from the first";
        std::printf("[ splitk] wo_b M=%-2d %-8s splits=%-2d blocks=%u x %d launches: max|d|/tol=%.3f\n", m,
                    w4a16_config_name(int(cfg)), splits, l.grid.x * l.grid.y * l.grid.z, kReps, cr.max_ratio);
      }
    }
  }
}

// w4a16_gemm_deferred: where the decode launch splits K through global memory (wo_b), the
// partials it leaves, added in split order (deferred_sum.h), round to w4a16_gemm's bits and y stays
// untouched; where it does not (wq_b unsplit; the fused wq_a|wkv through an SM90 cluster; 33+
// rows) y is written as by w4a16_gemm. The partials are read back after a second, plain GEMM on
// another shape has run: nothing but a split-K GEMM overwrites them.
TEST(W4A16Decode, DeferredSplitSumEqualsGemm) {
  DSV4_SKIP_WITHOUT_GPU();
  int deferred = 0;
  for (int si : {3, 1, 7}) {  // wo_b, wq_b, wq_a+wkv
    const ShapeSpec sh = flash_shapes()[size_t(si)];
    for (int m : {1, 2, 5, 16, 17, 32, 33}) {
      SCOPED_TRACE(sh.name + " M=" + std::to_string(m));
      const std::vector<float> x = random_bf16_values(int64_t(m) * sh.k, 9000 + 7 * uint64_t(si) + uint64_t(m), 1.0f);
      DeviceBuffer dx = upload_vector(to_bf16(x));
      DeviceBuffer y_ref = device_alloc(size_t(m) * sh.n * 2), y_def = device_alloc(size_t(m) * sh.n * 2);
      DSV4_ASSERT_OK(w4a16_gemm(make_gemm_args(sh, dx, y_ref, m, sh.n), workspace(), nullptr));
      poison(y_def);
      SplitSumView v;
      DSV4_ASSERT_OK(w4a16_gemm_deferred(make_gemm_args(sh, dx, y_def, m, sh.n), workspace(), nullptr, &v));
      DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<uint16_t> ref = download<uint16_t>(y_ref.get(), size_t(m) * sh.n);
      const std::vector<uint16_t> got = download<uint16_t>(y_def.get(), size_t(m) * sh.n);
      if (v.splits == 0) {
        EXPECT_EQ(got, ref) << "not deferred: y as w4a16_gemm writes it";
        continue;
      }
      ++deferred;
      ASSERT_GT(v.splits, 1);
      ASSERT_TRUE(v.data != nullptr && v.block_n % 4 == 0 && int64_t(v.tiles_n) * v.block_n >= sh.n);
      EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint16_t b) { return b == 0xFFFF; })) << "y was written";
      // Another shape's plain (unsplit) GEMM in between must leave the partials alone.
      const ShapeSpec other = flash_shapes()[1];
      DeviceBuffer dx2 = upload_vector(to_bf16(random_bf16_values(int64_t(m) * other.k, 9500, 1.0f)));
      DeviceBuffer dy2 = device_alloc(size_t(m) * other.n * 2);
      DSV4_ASSERT_OK(w4a16_gemm(make_gemm_args(other, dx2, dy2, m, other.n), workspace(), nullptr));
      DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
      const int row_blocks = (m + v.block_m - 1) / v.block_m;
      const std::vector<float> parts =
          download<float>(v.data, size_t(row_blocks) * v.tiles_n * v.splits * v.block_m * v.block_n);
      SplitSumView h = v;
      h.data = parts.data();
      std::vector<float> sum(size_t(m) * sh.n);
      for (int r = 0; r < m; ++r)
        for (int col = 0; col < sh.n; ++col) {
          float acc = 0.0f;
          for (int sp = 0; sp < v.splits; ++sp) acc += *h.at(sp, r, col);
          sum[size_t(r) * sh.n + col] = acc;
        }
      EXPECT_EQ(to_bf16(sum), ref) << v.splits << " splits: the partials' sum is not w4a16_gemm's output";
    }
  }
  EXPECT_GT(deferred, 0) << "wo_b at decode sizes should defer its split-K sum";
}

// The planner's wgmma rule (a host function: runs without a GPU), on the H200's 132 SMs, against
// the prefill lab's winners (bench/results/w4a16_h200_prefill_lab.json, and for the widths of the
// warp-specialized kernel with its TMA producer w4a16_h200_prefill_lab_tma_256_1024_4096.log).
TEST(W4A16Prefill, WgmmaChoiceFollowsTheLab) {
  using namespace w4a16_detail;
  constexpr int kSms = 132;
  EXPECT_EQ(choose_wgmma_config(4096, 32768, kSms), GemmConfig::kWg256);  // wq_b: 564 vs 637 us
  EXPECT_EQ(choose_wgmma_config(256, 32768, kSms), GemmConfig::kWg256);   // 38 vs 42 us
  EXPECT_EQ(choose_wgmma_config(4096, 1536, kSms), GemmConfig::kWg128);   // wq_a+wkv: 88 vs 115 us (TMA)
  EXPECT_EQ(choose_wgmma_config(4096, 512, kSms), GemmConfig::kWg128);    // wkv: 34 vs 56 us
  EXPECT_EQ(choose_wgmma_config(4096, 1024, kSms), GemmConfig::kWg256);   // wq_a: 63 vs 65 us
  EXPECT_EQ(choose_wgmma_config(1024, 4096, kSms), GemmConfig::kWg256);   // wo_b: 108 vs 109 us
  EXPECT_EQ(choose_wgmma_config(256, 8192, kSms), GemmConfig::kWg128);    // idx_wq_b: 11 vs 17 us
  EXPECT_EQ(choose_wgmma_config(256, 4096, kSms), GemmConfig::kWg128);    // wo_b: 54 us vs 97 portable
  EXPECT_EQ(choose_wgmma_config(1024, 1024, kSms), GemmConfig::kWg128);   // wq_a: 28 us vs 56 portable
  EXPECT_EQ(choose_wgmma_config(256, 1024, kSms), std::nullopt);          // wq_a: portable split-K 29 vs 28 us
  EXPECT_EQ(choose_wgmma_config(1024, 512, kSms), GemmConfig::kWg128);    // wkv: 28 us vs 36 portable
  EXPECT_EQ(choose_wgmma_config(64, 32768, kSms), std::nullopt);          // 64 rows: the m64 kernel
  EXPECT_EQ(choose_wgmma_config(65, 32768, kSms), GemmConfig::kWg256);
}

// The SM90 wgmma prefill kernel forced on shapes and row counts the planner may not give it
// (a single partial block, a last tile of 64 columns, an output stride that is not a multiple of
// 8 elements, an x row stride past K whose padding holds NaN, which the tensor map must skip)
// against the exact reference; repeated launches give the same bits.
TEST(W4A16Prefill, WgmmaLaunchesMatchExactReference) {
  DSV4_SKIP_WITHOUT_GPU();
  using namespace w4a16_detail;
  auto dev = current_device_info();
  DSV4_ASSERT_OK(dev.status());
  if (!wgmma_supported(**dev)) GTEST_SKIP() << "no wgmma on " << (*dev)->name << " or not built for sm_90a";
  std::vector<ShapeSpec> shapes = {flash_shapes()[0], flash_shapes()[1], flash_shapes()[3], flash_shapes()[6]};
  shapes.push_back(ShapeSpec{"n192", 192, 384, {PackedPart{HostGptq{31, 192, 384, default_scales()}, RepackPlacement::concat(0)}}});
  for (const GemmConfig cfg : {GemmConfig::kWg128, GemmConfig::kWg256})
  for (const ShapeSpec& sh : shapes) {
    auto ci = gemm_config_info(cfg);
    DSV4_ASSERT_OK(ci.status());
    for (int m : {1, 77, 128, 300, 1024}) {
      for (const int64_t ldy : {int64_t(sh.n), int64_t(sh.n) + 2}) {
        const uint64_t seed = 7000 + uint64_t(sh.n) + uint64_t(m) + uint64_t(ldy - sh.n);
        const std::vector<float> x = random_bf16_values(int64_t(m) * sh.k, seed, 1.0f);
        const int64_t ldx = ldy == sh.n ? sh.k : sh.k + 64;
        const std::vector<uint16_t> xb = to_bf16(x);
        std::vector<uint16_t> x_rows(size_t(m) * size_t(ldx), 0x7FC0);  // bf16 NaN in the padding
        for (int r = 0; r < m; ++r) std::copy_n(xb.begin() + int64_t(r) * sh.k, sh.k, x_rows.begin() + r * ldx);
        DeviceBuffer dx = upload_vector(x_rows);
        DeviceBuffer dy = device_alloc(size_t(m) * size_t(ldy) * 2);
        GemmLaunch l;
        l.cfg = cfg;
        ASSERT_TRUE(complete_launch(&l, *ci, (m + ci->block_m - 1) / ci->block_m, std::min(m, ci->block_m), sh.n,
                                    sh.k, **dev));
        l.pdl = pdl_supported(**dev);
        W4A16GemmArgs a = make_gemm_args(sh, dx, dy, m, ldy);
        a.ldx = ldx;
        poison(dy);
        DSV4_ASSERT_OK(launch_dense(a, l, workspace(), nullptr));
        DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
        const std::vector<uint16_t> y = download<uint16_t>(dy.get(), size_t(m) * size_t(ldy));
        const std::string what = sh.name + " M=" + std::to_string(m) + " ldy=" + std::to_string(ldy) +
                                 " ldx=" + std::to_string(ldx) + " " + w4a16_config_name(int(cfg));
        const CompareResult cr = check_gemm_output(sh, x, y, m, ldy, 48, seed + 1, what);
        DSV4_ASSERT_OK(launch_dense(a, l, workspace(), nullptr));
        DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
        EXPECT_EQ(download<uint16_t>(dy.get(), size_t(m) * size_t(ldy)), y) << what << ": not deterministic";
        std::printf("[ wgmma ] %-5s %-9s M=%-5d ldy=%-6lld max|d|/tol=%.3f nmse=%.2e\n", w4a16_config_name(int(cfg)),
                    sh.name.c_str(), m, static_cast<long long>(ldy), cr.max_ratio, cr.nmse);
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::cuda::test
