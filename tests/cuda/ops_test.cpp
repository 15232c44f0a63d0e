// ops_test.cpp: the small forward-pass kernels (cuda/ops/ops.h) against the CPU reference in the
// bf16 numerics, at Flash shapes (hidden 4096, hc 4, 64 heads x 512 with 64 rope dims, q_lora
// 1024, window 128, vocab 129280) for T in {1, 7, 64}, random bf16 inputs and fp32 parameters.
//
// Tolerances. Every bf16 output is compared in bf16 ulps (distance on the ordered bit line).
// The kernels follow the reference's rounding points; what they cannot follow is the order of
// fp32 sums (the mix logits, the sum of squares of each RMSNorm), a few fp32 ulps, and CUDA's
// expf / sincosf against glibc (1-2 fp32 ulps). Such a difference changes a bf16 result only when
// the fp32 value sits within a few fp32 ulps of a bf16 rounding midpoint (probability ~2^-15 per
// element), and then by one ulp; an input that flipped one ulp moves the output by about one
// more. So: every element within 2 ulps and at most 0.1% of the elements different at all.
// Real bugs (a wrong weight, stream, orientation, position, rounding point) move most elements
// by many ulps. hc_post has no reordered sum: it must match bit for bit except, at most, in
// 0.01% of elements (allowed only in case the host compiler contracts to FMA). Copies (embed,
// window) and the record scale bytes must be exact. Mix weights: |gpu - ref| <= 1e-5 (1 + |ref|).
// Unwritten outputs are caught by poisoning (0xFF bytes: bf16 / f32 NaN, e4m3 NaN).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/linalg.h"
#include "cpu/mhc.h"
#include "cpu/numerics.h"
#include "cpu/quant.h"
#include "cpu/rope.h"
#include "cuda/ops/mhc_plan.h"
#include "cuda/ops/ops.h"
#include "harness.h"
#include "kvcache/kv_record.h"
#include "model/make_model.h"

namespace dsv4::cuda::test {
namespace {

const int kTokenCounts[] = {1, 7, 64};

const ModelConfig& flash() {
  static const ModelConfig cfg = [] {
    MakeModelOptions o;
    o.preset = "flash-shaped";
    auto r = make_model_config(o);
    DSV4_CHECK(r.is_ok(), "{}", r.status().to_string());
    return r.value();
  }();
  return cfg;
}

HcDims flash_hc_dims() {
  const ModelConfig& c = flash();
  return HcDims{c.hc_mult, c.hidden, c.hc_sinkhorn_iters, float(c.hc_eps), float(c.norm_eps)};
}

std::vector<float> uniform(size_t n, float lo, float hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}
// Norm weights are bf16 values held in fp32 (MODEL_SPEC.md §5).
std::vector<float> norm_weights(size_t n, uint64_t seed) {
  std::vector<float> v = uniform(n, 0.5f, 1.5f, seed);
  for (float& x : v) x = round_bf16(x);
  return v;
}

bool bf16_finite(uint16_t h) { return (h & 0x7f80) != 0x7f80; }
int64_t bf16_ulps(uint16_t a, uint16_t b) {
  auto ord = [](uint16_t h) -> int64_t { return (h & 0x8000) ? -int64_t(h & 0x7fff) : int64_t(h); };
  return std::llabs(ord(a) - ord(b));
}

// bf16 outputs against reference values (bf16 values in fp32): all within max_ulps (or, with
// abs_floor > 0, within abs_floor absolutely: near-cancelling sums such as the mHC collapse turn an
// fp32 summation-order difference into many ulps of a tiny value), at most max_differ_fraction of
// them different, none unwritten.
void expect_bf16_close(const std::vector<uint16_t>& gpu, const std::vector<float>& ref, int64_t max_ulps,
                       double max_differ_fraction, const std::string& what, float abs_floor = 0.0f) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  int64_t nonfinite = 0, differ = 0, over = 0, max_seen = 0, worst = -1;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (!bf16_finite(gpu[i])) {
      ++nonfinite;
      continue;
    }
    const int64_t u = bf16_ulps(gpu[i], f32_to_bf16(ref[i]));
    if (u > 0) ++differ;
    if (u > max_ulps && !(std::fabs(bf16_to_f32(gpu[i]) - ref[i]) <= abs_floor)) ++over;
    if (u > max_seen) {
      max_seen = u;
      worst = int64_t(i);
    }
  }
  const double frac = double(differ) / double(std::max<size_t>(1, gpu.size()));
  std::printf("  %s: %zu values, %lld differ (max %lld ulp), %lld non-finite\n", what.c_str(), gpu.size(),
              (long long)differ, (long long)max_seen, (long long)nonfinite);
  EXPECT_EQ(nonfinite, 0) << what << ": unwritten or broken outputs";
  EXPECT_EQ(over, 0) << what << ": " << over << " values beyond " << max_ulps << " ulps; worst at " << worst
                     << ": gpu " << (worst >= 0 ? bf16_to_f32(gpu[size_t(worst)]) : 0.0f) << " ref "
                     << (worst >= 0 ? ref[size_t(worst)] : 0.0f);
  EXPECT_LE(frac, max_differ_fraction) << what << ": " << differ << " of " << gpu.size() << " values differ";
}

std::vector<uint8_t> download_bytes(const void* src, size_t n) {
  std::vector<uint8_t> v(n);
  DSV4_CHECK(cudaMemcpy(v.data(), src, n, cudaMemcpyDeviceToHost) == cudaSuccess, "download_bytes");
  return v;
}

// The mHC parameters of one site: fn scaled so that mu = (fn . v) rho is O(1) for v ~ U(-2, 2).
HcParams random_hc_params(int n_mix, int n_scale, int64_t hc_dim, uint64_t seed) {
  HcParams p;
  p.fn = uniform(size_t(n_mix) * size_t(hc_dim), -0.02f, 0.02f, seed);
  p.base = uniform(size_t(n_mix), -1.0f, 1.0f, seed + 1);
  p.scale = uniform(size_t(n_scale), 0.5f, 2.0f, seed + 2);
  return p;
}

struct DeviceHcParams {
  DeviceBuffer fn, base, scale;
  int n_mix = 0;
  explicit DeviceHcParams(const HcParams& p)
      : fn(upload_vector(p.fn)), base(upload_vector(p.base)), scale(upload_vector(p.scale)),
        n_mix(int(p.base.size())) {}
  HcParamsView view() const { return HcParamsView{fn.as<float>(), base.as<float>(), scale.as<float>(), n_mix}; }
};

// ---- host logic (runs without a GPU) ----------------------------------------------------------

TEST(OpsHost, MixPlanFitsFlashAndGroupsTokens) {
  using namespace mhc_detail;
  MixPlan p;
  ASSERT_TRUE(plan_mix(1, 4, 4096, 24, p));
  EXPECT_EQ(p.n_splits, 64);
  EXPECT_EQ(p.partial_stride, 25);
  EXPECT_EQ(p.n_groups, 1);
  EXPECT_EQ(p.tokens_per_block, 1);
  ASSERT_TRUE(plan_mix(64, 4, 4096, 24, p));
  EXPECT_EQ(p.tokens_per_block, 8);
  EXPECT_EQ(p.n_groups, 8);
  ASSERT_TRUE(plan_mix(333, 4, 4096, 24, p));  // the uneven case of Ops.HcPreNorm
  EXPECT_EQ(p.tokens_per_block, 11);
  EXPECT_EQ(p.n_groups, 31);
  ASSERT_TRUE(plan_mix(1, 4, 128, 24, p));  // the tiny test model (hidden 128)
  EXPECT_EQ(p.n_splits, 2);
  ASSERT_TRUE(plan_mix(2048, 4, 4096, 24, p));
  EXPECT_EQ(p.n_groups, 32);
  EXPECT_EQ(p.n_groups * p.tokens_per_block, 2048);
  ASSERT_TRUE(plan_mix(7, 4, 4096, 4, p));  // the head
  EXPECT_EQ(p.n_groups, 1);
  EXPECT_EQ(p.tokens_per_block, 7);
  ASSERT_TRUE(plan_mix(0, 4, 4096, 24, p));
  EXPECT_EQ(p.n_groups, 0);
  // A partials block covers 64 columns of D in at most 4 streams, and the slice sums must fit in
  // the token's output row: n_mix + 1 <= 32.
  EXPECT_FALSE(plan_mix(1, 5, 4096, 35, p));
  EXPECT_FALSE(plan_mix(1, 4, 4096, 32, p));
  EXPECT_FALSE(plan_mix(1, 4, 4000, 24, p));  // D not a multiple of 64
  ASSERT_TRUE(plan_mix(1, 3, 192, 15, p));    // hc 3: 3 slices of 64 columns in each stream
  EXPECT_EQ(p.n_splits, 3);
  for (int T : {1, 3, 8, 9, 31, 33, 100, 1000, 4097}) {
    ASSERT_TRUE(plan_mix(T, 4, 4096, 24, p));
    EXPECT_GE(p.n_groups * p.tokens_per_block, T) << T;
    EXPECT_LT((p.n_groups - 1) * p.tokens_per_block, T) << T;  // no empty group
    EXPECT_LE(p.n_groups, kMixMaxGroups) << T;
  }
}

// Launchers reject bad arguments before touching the device (no GPU needed: nothing launches).
TEST(OpsHost, LaunchersValidate) {
  auto* fake_bf16 = reinterpret_cast<__nv_bfloat16*>(uintptr_t(4096));
  auto* fake_f32 = reinterpret_cast<float*>(uintptr_t(4096));
  auto* fake_i32 = reinterpret_cast<int32_t*>(uintptr_t(4096));
  auto* fake_u8 = reinterpret_cast<uint8_t*>(uintptr_t(4096));
  const HcDims dims = flash_hc_dims();
  const HcParamsView p{fake_f32, fake_f32, fake_f32, 24};
  EXPECT_FALSE(hc_pre_norm(nullptr, 1, p, fake_f32, dims, fake_bf16, fake_f32, nullptr).is_ok());
  EXPECT_FALSE(hc_pre_norm(fake_bf16, 1, HcParamsView{fake_f32, fake_f32, fake_f32, 4}, fake_f32, dims, fake_bf16,
                           fake_f32, nullptr).is_ok());  // n_mix of the head at a block site
  HcDims bad = dims;
  bad.hc = 5;
  EXPECT_FALSE(hc_pre_norm(fake_bf16, 1, p, fake_f32, bad, fake_bf16, fake_f32, nullptr).is_ok());
  bad = dims;
  bad.D = 4000;  // not a multiple of 64
  EXPECT_FALSE(hc_pre_norm(fake_bf16, 1, p, fake_f32, bad, fake_bf16, fake_f32, nullptr).is_ok());
  EXPECT_FALSE(hc_post(fake_bf16 + 1, fake_bf16, fake_f32, 1, dims, nullptr).is_ok());  // misaligned X
  EXPECT_FALSE(hc_post_pre_norm(fake_bf16, nullptr, fake_f32, 1, p, fake_f32, dims, fake_bf16 + 4096, fake_f32, nullptr)
                   .is_ok());  // null y
  EXPECT_FALSE(hc_post_pre_norm(fake_bf16, fake_bf16 + 4096, fake_f32, 1, p, fake_f32, dims, fake_bf16 + 4096, fake_f32,
                                nullptr).is_ok());  // y aliases x (the slice sums)
  EXPECT_FALSE(hc_post_pre_norm(fake_bf16, fake_bf16 + 4100, fake_f32, 1, p, fake_f32, dims, fake_bf16 + 8192, fake_f32,
                                nullptr).is_ok());  // misaligned y
  EXPECT_FALSE(hc_head_norm(fake_bf16, nullptr, 1, p, fake_f32, dims, fake_bf16, nullptr).is_ok());  // n_mix 24
  EXPECT_FALSE(rmsnorm_rows(fake_bf16, 1000, 1, 1024, fake_f32, 1e-6f, nullptr).is_ok());  // ld < n
  EXPECT_FALSE(q_norm_rope(fake_bf16, 1, 64, 512, 60, fake_i32, fake_f32, 1e-6f, nullptr).is_ok());  // rope % 8
  LayerKvView kv;
  kv.entry_bytes = 576;  // not 584
  EXPECT_FALSE(kv_finish(fake_bf16, 1536, 1, fake_f32, 1e-6f, fake_i32, fake_f32, kv, fake_u8, nullptr).is_ok());
  const LayerKvView flash_kv;  // nope 448, rope 64, 584-byte records
  EXPECT_FALSE(qkv_norm_finish(fake_bf16, 1536, 1, 1024, fake_f32, 1e-6f, 1016, fake_f32, 1e-6f, fake_i32, fake_f32,
                               flash_kv, fake_u8, nullptr).is_ok());  // kv columns overlap the q columns
  EXPECT_FALSE(qkv_norm_finish(fake_bf16, 1536, 1, 1024, fake_f32, 1e-6f, 1032, fake_f32, 1e-6f, fake_i32, fake_f32,
                               flash_kv, fake_u8, nullptr).is_ok());  // kv columns past ld
  EXPECT_FALSE(qkv_norm_finish(fake_bf16, 1536, 1, 1024, fake_f32, 1e-6f, 1024, fake_f32, 1e-6f, fake_i32, fake_f32,
                               kv, fake_u8, nullptr).is_ok());  // entry_bytes 576
  EXPECT_FALSE(embed_streams(fake_bf16, 129280, 4096, fake_i32, 1, 4, nullptr, nullptr).is_ok());
  StepBatchView b;
  b.n_tokens = 1;
  b.n_seqs = 1;
  EXPECT_FALSE(window_save(b, LayerKvView{}, nullptr).is_ok());  // null arrays
}

// ---- embed_streams ----------------------------------------------------------------------------

TEST(Ops, EmbedStreams) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int V = c.vocab_size, D = c.hidden, hc = c.hc_mult;
  const uint64_t seed = 901;
  DeviceBuffer embed = device_alloc(size_t(V) * D * 2);  // 1 GB, filled on the device
  DSV4_ASSERT_OK(testing::fill_random_bf16(embed.as<__nv_bfloat16>(), int64_t(V) * D, seed, 1.0f, nullptr));
  for (int T : kTokenCounts) {
    SCOPED_TRACE("T=" + std::to_string(T));
    std::vector<int32_t> ids(static_cast<size_t>(T));
    std::mt19937 rng(static_cast<uint32_t>(T));
    for (int t = 0; t < T; ++t) ids[size_t(t)] = int32_t(rng() % uint32_t(V));
    ids[0] = V - 1;  // the last row
    if (T > 1) ids[1] = 0;
    DeviceBuffer d_ids = upload_vector(ids);
    DeviceBuffer X = device_alloc(size_t(T) * hc * D * 2);
    poison(X);
    DSV4_ASSERT_OK(embed_streams(embed.as<__nv_bfloat16>(), V, D, d_ids.as<int32_t>(), T, hc, X.as<__nv_bfloat16>(),
                                 nullptr));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = download<uint16_t>(X.get(), size_t(T) * hc * D);
    int64_t bad = 0;
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < hc; ++i)
        for (int d = 0; d < D; ++d) {
          const float ref = round_bf16(testing::random_uniform_pm2(seed, int64_t(ids[size_t(t)]) * D + d));
          bad += got[(size_t(t) * hc + i) * D + d] != f32_to_bf16(ref);
        }
    EXPECT_EQ(bad, 0) << "embedding rows must be copied exactly into every stream";
  }
}

// ---- hc_pre_norm ------------------------------------------------------------------------------

TEST(Ops, HcPreNorm) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int D = c.hidden, hc = c.hc_mult, n_mix = c.hc_mix();
  const int64_t hcD = c.hc_dim();
  const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
  const HcParams hp = random_hc_params(n_mix, 3, hcD, 11);
  const DeviceHcParams d_hp(hp);
  const std::vector<float> norm_w = norm_weights(size_t(D), 12);
  DeviceBuffer d_norm_w = upload_vector(norm_w);
  // 333 (a prefill chunk): 31 token groups of 11, the last one holding 3 tokens.
  for (int T : {1, 7, 64, 333}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> X = random_bf16_values(T * hcD, 100 + uint64_t(T), 1.0f);
    DeviceBuffer d_X = upload_vector(to_bf16(X));
    DeviceBuffer d_x = device_alloc(size_t(T) * D * 2), d_mix = device_alloc(size_t(T) * (hc + hc * hc) * 4);
    poison(d_x);
    poison(d_mix);
    DSV4_ASSERT_OK(hc_pre_norm(d_X.as<__nv_bfloat16>(), T, d_hp.view(), d_norm_w.as<float>(), flash_hc_dims(),
                               d_x.as<__nv_bfloat16>(), d_mix.as<float>(), nullptr));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> x = download<uint16_t>(d_x.get(), size_t(T) * D);
    const std::vector<float> mix = download<float>(d_mix.get(), size_t(T) * (hc + hc * hc));

    // CpuModel::block's `pre`: hc_pre, then rmsnorm and bf16.
    std::vector<float> ref_x(size_t(T) * D);
    int64_t mix_bad = 0, mix_nonfinite = 0;
    double mix_max_err = 0;
    for (int t = 0; t < T; ++t) {
      cpu::HcMix m;
      float* xt = &ref_x[size_t(t) * D];
      cpu::hc_pre(c, hp, &X[size_t(t * hcD)], m, xt, rnd);
      cpu::rmsnorm(xt, norm_w.data(), D, float(c.norm_eps), xt);
      rnd.apply(xt, D);
      const float* g = &mix[size_t(t) * (hc + hc * hc)];
      for (int i = 0; i < hc + hc * hc; ++i) {
        const float ref = i < hc ? m.post[size_t(i)] : m.comb[size_t(i - hc)];
        if (!std::isfinite(g[i])) {
          ++mix_nonfinite;
          continue;
        }
        const double err = std::fabs(double(g[i]) - ref);
        mix_max_err = std::max(mix_max_err, err);
        mix_bad += err > 1e-5 * (1.0 + std::fabs(ref));
      }
    }
    std::printf("  mix: max abs error %.3g\n", mix_max_err);
    EXPECT_EQ(mix_nonfinite, 0) << "unwritten mix";
    EXPECT_EQ(mix_bad, 0) << "mix (post, comb) beyond 1e-5 (1 + |ref|); max error " << mix_max_err;
    // The pre weights come from 16384-term fp32 dot products summed in another order (~1e-7
    // relative), so about 0.1% of the outputs flip a bf16 rounding, and near-zero collapses by more.
    expect_bf16_close(x, ref_x, 2, 3e-3, "hc_pre_norm x", 1.0f / 128);
  }
}

// ---- hc_post ----------------------------------------------------------------------------------

TEST(Ops, HcPost) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int D = c.hidden, hc = c.hc_mult;
  const int64_t hcD = c.hc_dim();
  const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
  for (int T : kTokenCounts) {
    SCOPED_TRACE("T=" + std::to_string(T));
    std::vector<float> X = random_bf16_values(T * hcD, 200 + uint64_t(T), 1.0f);
    const std::vector<float> y = random_bf16_values(int64_t(T) * D, 300 + uint64_t(T), 1.0f);
    // Mix as hc_pre produces it: post in (0, 2), comb entries in (0, 1) (not symmetric).
    std::vector<float> mix(size_t(T) * (hc + hc * hc));
    const std::vector<float> post = uniform(size_t(T) * hc, 0.0f, 2.0f, 400 + uint64_t(T));
    const std::vector<float> comb = uniform(size_t(T) * hc * hc, 0.0f, 1.0f, 500 + uint64_t(T));
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < hc; ++i) mix[size_t(t * (hc + hc * hc) + i)] = post[size_t(t * hc + i)];
      for (int i = 0; i < hc * hc; ++i) mix[size_t(t * (hc + hc * hc) + hc + i)] = comb[size_t(t * hc * hc + i)];
    }
    DeviceBuffer d_X = upload_vector(to_bf16(X)), d_y = upload_vector(to_bf16(y)), d_mix = upload_vector(mix);
    DSV4_ASSERT_OK(hc_post(d_X.as<__nv_bfloat16>(), d_y.as<__nv_bfloat16>(), d_mix.as<float>(), T, flash_hc_dims(),
                           nullptr));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = download<uint16_t>(d_X.get(), size_t(T * hcD));
    for (int t = 0; t < T; ++t) {
      cpu::HcMix m;
      m.post.assign(post.begin() + t * hc, post.begin() + (t + 1) * hc);
      m.comb.assign(comb.begin() + t * hc * hc, comb.begin() + (t + 1) * hc * hc);
      cpu::hc_post(c, m, &y[size_t(t) * D], &X[size_t(t * hcD)], rnd);  // X becomes the reference
    }
    expect_bf16_close(got, X, 1, 1e-4, "hc_post X");
  }
}

// ---- hc_post_pre_norm ------------------------------------------------------------------------

// The fused entry against the two calls it replaces (hc_post, then hc_pre_norm: bit for bit) and
// against the CPU reference (cpu::hc_post, then CpuModel::block's `pre`). As the forward pass
// calls it, the sublayer's mix and the new mix share one buffer.
TEST(Ops, HcPostPreNorm) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int D = c.hidden, hc = c.hc_mult, n_mix = c.hc_mix(), n_mix_out = hc + hc * hc;
  const int64_t hcD = c.hc_dim();
  const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
  const HcParams hp = random_hc_params(n_mix, 3, hcD, 13);
  const DeviceHcParams d_hp(hp);
  const std::vector<float> norm_w = norm_weights(size_t(D), 14);
  DeviceBuffer d_norm_w = upload_vector(norm_w);
  for (int T : {1, 7, 64, 333}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    std::vector<float> X = random_bf16_values(T * hcD, 1200 + uint64_t(T), 1.0f);
    const std::vector<float> y = random_bf16_values(int64_t(T) * D, 1300 + uint64_t(T), 1.0f);
    // The sublayer's mix as hc_pre produces it: post in (0, 2), comb in (0, 1).
    std::vector<float> post_mix(size_t(T) * n_mix_out);
    const std::vector<float> post = uniform(size_t(T) * hc, 0.0f, 2.0f, 1400 + uint64_t(T));
    const std::vector<float> comb = uniform(size_t(T) * hc * hc, 0.0f, 1.0f, 1500 + uint64_t(T));
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < hc; ++i) post_mix[size_t(t * n_mix_out + i)] = post[size_t(t * hc + i)];
      for (int i = 0; i < hc * hc; ++i) post_mix[size_t(t * n_mix_out + hc + i)] = comb[size_t(t * hc * hc + i)];
    }
    DeviceBuffer d_y = upload_vector(to_bf16(y));
    // Two calls.
    DeviceBuffer X2 = upload_vector(to_bf16(X)), mix2 = upload_vector(post_mix);
    DeviceBuffer x2 = device_alloc(size_t(T) * D * 2);
    poison(x2);
    DSV4_ASSERT_OK(hc_post(X2.as<__nv_bfloat16>(), d_y.as<__nv_bfloat16>(), mix2.as<float>(), T, flash_hc_dims(),
                           nullptr));
    DSV4_ASSERT_OK(hc_pre_norm(X2.as<__nv_bfloat16>(), T, d_hp.view(), d_norm_w.as<float>(), flash_hc_dims(),
                               x2.as<__nv_bfloat16>(), mix2.as<float>(), nullptr));
    // Fused, mix in place.
    DeviceBuffer X1 = upload_vector(to_bf16(X)), mix1 = upload_vector(post_mix);
    DeviceBuffer x1 = device_alloc(size_t(T) * D * 2);
    poison(x1);
    DSV4_ASSERT_OK(hc_post_pre_norm(X1.as<__nv_bfloat16>(), d_y.as<__nv_bfloat16>(), mix1.as<float>(), T, d_hp.view(),
                                    d_norm_w.as<float>(), flash_hc_dims(), x1.as<__nv_bfloat16>(), mix1.as<float>(),
                                    nullptr));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> X1h = download<uint16_t>(X1.get(), size_t(T * hcD));
    const std::vector<uint16_t> X2h = download<uint16_t>(X2.get(), size_t(T * hcD));
    const std::vector<uint16_t> x1h = download<uint16_t>(x1.get(), size_t(T) * D);
    const std::vector<uint16_t> x2h = download<uint16_t>(x2.get(), size_t(T) * D);
    const std::vector<float> mix1h = download<float>(mix1.get(), size_t(T) * n_mix_out);
    const std::vector<float> mix2h = download<float>(mix2.get(), size_t(T) * n_mix_out);
    int64_t X_differ = 0, x_differ = 0, mix_differ = 0;
    for (size_t i = 0; i < X1h.size(); ++i) X_differ += X1h[i] != X2h[i];
    for (size_t i = 0; i < x1h.size(); ++i) x_differ += x1h[i] != x2h[i];
    for (size_t i = 0; i < mix1h.size(); ++i) mix_differ += std::memcmp(&mix1h[i], &mix2h[i], 4) != 0;
    std::printf("  fused vs two calls: X %lld, x %lld, mix %lld values differ\n", (long long)X_differ,
                (long long)x_differ, (long long)mix_differ);
    EXPECT_EQ(X_differ, 0) << "X must equal hc_post's bit for bit";
    EXPECT_EQ(x_differ, 0) << "x must equal hc_pre_norm's bit for bit (same slices, same sums)";
    EXPECT_EQ(mix_differ, 0) << "mix must equal hc_pre_norm's bit for bit";

    // CPU reference: hc_post (X becomes the reference streams), then hc_pre, rmsnorm and bf16.
    std::vector<float> ref_x(size_t(T) * D);
    int64_t mix_bad = 0;
    double mix_max_err = 0;
    for (int t = 0; t < T; ++t) {
      cpu::HcMix pm;
      pm.post.assign(post.begin() + t * hc, post.begin() + (t + 1) * hc);
      pm.comb.assign(comb.begin() + t * hc * hc, comb.begin() + (t + 1) * hc * hc);
      cpu::hc_post(c, pm, &y[size_t(t) * D], &X[size_t(t * hcD)], rnd);
      cpu::HcMix m;
      float* xt = &ref_x[size_t(t) * D];
      cpu::hc_pre(c, hp, &X[size_t(t * hcD)], m, xt, rnd);
      cpu::rmsnorm(xt, norm_w.data(), D, float(c.norm_eps), xt);
      rnd.apply(xt, D);
      const float* g = &mix1h[size_t(t) * n_mix_out];
      for (int i = 0; i < n_mix_out; ++i) {
        const float ref = i < hc ? m.post[size_t(i)] : m.comb[size_t(i - hc)];
        const double err = std::isfinite(g[i]) ? std::fabs(double(g[i]) - ref) : 1e30;
        mix_max_err = std::max(mix_max_err, err);
        mix_bad += err > 1e-5 * (1.0 + std::fabs(ref));
      }
    }
    std::printf("  mix: max abs error %.3g\n", mix_max_err);
    EXPECT_EQ(mix_bad, 0) << "mix (post, comb) beyond 1e-5 (1 + |ref|); max error " << mix_max_err;
    expect_bf16_close(X1h, X, 1, 1e-4, "hc_post_pre_norm X");                    // as hc_post
    expect_bf16_close(x1h, ref_x, 2, 3e-3, "hc_post_pre_norm x", 1.0f / 128);  // as hc_pre_norm
  }
}

// y as a split-K GEMM's unsummed partials (deferred_sum.h, what wo_b's deferred launch leaves): the
// same X, x and mix bits as with y = bf16(the partials summed in split order), for tiles of 16
// rows and 256 columns (wo_b's decode tiles) and of 16 x 64, token counts across row tiles; and
// y as the MoE's pair rows (what a deferred MoE combine leaves), summed in token_pairs order.
TEST(Ops, HcPostPreNormDeferredY) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int D = c.hidden, hc = c.hc_mult, n_mix = c.hc_mix(), n_mix_out = hc + hc * hc;
  const int64_t hcD = c.hc_dim();
  const HcParams hp = random_hc_params(n_mix, 3, hcD, 23);
  const DeviceHcParams d_hp(hp);
  DeviceBuffer d_norm_w = upload_vector(norm_weights(size_t(D), 24));
  struct Case {
    int T, splits, block_n;
  };
  for (const Case k : {Case{1, 8, 256}, Case{2, 2, 256}, Case{5, 3, 64}, Case{17, 4, 256}, Case{32, 8, 64}}) {
    SCOPED_TRACE("T=" + std::to_string(k.T) + " splits=" + std::to_string(k.splits) + " block_n=" +
                 std::to_string(k.block_n));
    const int T = k.T, bm = 16, tiles_n = D / k.block_n, row_blocks = (T + bm - 1) / bm;
    const std::vector<float> X = random_bf16_values(T * hcD, 2200 + uint64_t(T), 1.0f);
    const std::vector<float> parts =
        uniform(size_t(row_blocks) * tiles_n * k.splits * bm * k.block_n, -1.0f, 1.0f, 2300 + uint64_t(T));
    DeviceBuffer d_parts = upload_vector(parts);
    SplitSumView view{d_parts.as<float>(), k.splits, bm, k.block_n, tiles_n};
    SplitSumView host_view = view;
    host_view.data = parts.data();
    std::vector<float> y(size_t(T) * D);
    for (int t = 0; t < T; ++t)
      for (int col = 0; col < D; ++col) {
        float sum = 0.0f;
        for (int sp = 0; sp < k.splits; ++sp) sum += *host_view.at(sp, t, col);
        y[size_t(t) * D + col] = sum;
      }
    DeviceBuffer d_y = upload_vector(to_bf16(y));  // bf16 of the sums: what the GEMM writes
    std::vector<float> post_mix(size_t(T) * n_mix_out);
    const std::vector<float> u = uniform(post_mix.size(), 0.0f, 1.0f, 2400 + uint64_t(T));
    for (size_t i = 0; i < post_mix.size(); ++i) post_mix[i] = (i % n_mix_out) < size_t(hc) ? 2.0f * u[i] : u[i];
    DeviceBuffer X1 = upload_vector(to_bf16(X)), mix1 = upload_vector(post_mix), x1 = device_alloc(size_t(T) * D * 2);
    DeviceBuffer X2 = upload_vector(to_bf16(X)), mix2 = upload_vector(post_mix), x2 = device_alloc(size_t(T) * D * 2);
    poison(x1);
    poison(x2);
    DSV4_ASSERT_OK(hc_post_pre_norm(X1.as<__nv_bfloat16>(), d_y.as<__nv_bfloat16>(), mix1.as<float>(), T, d_hp.view(),
                                    d_norm_w.as<float>(), flash_hc_dims(), x1.as<__nv_bfloat16>(), mix1.as<float>(),
                                    nullptr));
    DSV4_ASSERT_OK(hc_post_pre_norm(X2.as<__nv_bfloat16>(), nullptr, mix2.as<float>(), T, d_hp.view(),
                                    d_norm_w.as<float>(), flash_hc_dims(), x2.as<__nv_bfloat16>(), mix2.as<float>(),
                                    nullptr, HcComb::kProjected, &view));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(download<uint16_t>(X1.get(), size_t(T * hcD)), download<uint16_t>(X2.get(), size_t(T * hcD)))
        << "X (HCPost of the summed partials) must equal the bf16 y's";
    EXPECT_EQ(download<uint16_t>(x1.get(), size_t(T) * D), download<uint16_t>(x2.get(), size_t(T) * D));
    const std::vector<float> m1 = download<float>(mix1.get(), post_mix.size());
    const std::vector<float> m2 = download<float>(mix2.get(), post_mix.size());
    EXPECT_EQ(std::memcmp(m1.data(), m2.data(), m1.size() * 4), 0) << "mix differs";
  }
  // y as the MoE's pair rows (PairSumView): 7 rows per token in a shuffled order, row stride past D.
  for (const int T : {1, 6, 20}) {
    SCOPED_TRACE("pairs T=" + std::to_string(T));
    constexpr int kPairs = 7;
    const int64_t ld = D + 64;
    const int n_rows = T * kPairs;
    const std::vector<float> rows = random_bf16_values(int64_t(n_rows) * ld, 2500 + uint64_t(T), 1.0f);
    std::vector<int32_t> order(static_cast<size_t>(n_rows));
    for (int i = 0; i < n_rows; ++i) order[size_t(i)] = int32_t((i * 37 + 11) % n_rows);  // a permutation: gcd(37, n) = 1
    std::vector<float> y(size_t(T) * D);
    for (int t = 0; t < T; ++t)
      for (int col = 0; col < D; ++col) {
        float sum = 0.0f;
        for (int i = 0; i < kPairs; ++i) sum += rows[size_t(order[size_t(t * kPairs + i)]) * ld + col];
        y[size_t(t) * D + col] = sum;
      }
    DeviceBuffer d_rows = upload_vector(to_bf16(rows)), d_order = upload_vector(order);
    DeviceBuffer d_y = upload_vector(to_bf16(y));
    const PairSumView view{d_rows.as<__nv_bfloat16>(), ld, d_order.as<int32_t>(), kPairs};
    const std::vector<float> X = random_bf16_values(T * hcD, 2600 + uint64_t(T), 1.0f);
    std::vector<float> post_mix(size_t(T) * n_mix_out);
    const std::vector<float> u = uniform(post_mix.size(), 0.0f, 1.0f, 2700 + uint64_t(T));
    for (size_t i = 0; i < post_mix.size(); ++i) post_mix[i] = (i % n_mix_out) < size_t(hc) ? 2.0f * u[i] : u[i];
    DeviceBuffer X1 = upload_vector(to_bf16(X)), mix1 = upload_vector(post_mix), x1 = device_alloc(size_t(T) * D * 2);
    DeviceBuffer X2 = upload_vector(to_bf16(X)), mix2 = upload_vector(post_mix), x2 = device_alloc(size_t(T) * D * 2);
    DSV4_ASSERT_OK(hc_post_pre_norm(X1.as<__nv_bfloat16>(), d_y.as<__nv_bfloat16>(), mix1.as<float>(), T, d_hp.view(),
                                    d_norm_w.as<float>(), flash_hc_dims(), x1.as<__nv_bfloat16>(), mix1.as<float>(),
                                    nullptr));
    DSV4_ASSERT_OK(hc_post_pre_norm(X2.as<__nv_bfloat16>(), nullptr, mix2.as<float>(), T, d_hp.view(),
                                    d_norm_w.as<float>(), flash_hc_dims(), x2.as<__nv_bfloat16>(), mix2.as<float>(),
                                    nullptr, HcComb::kProjected, nullptr, &view));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(download<uint16_t>(X1.get(), size_t(T * hcD)), download<uint16_t>(X2.get(), size_t(T * hcD)));
    EXPECT_EQ(download<uint16_t>(x1.get(), size_t(T) * D), download<uint16_t>(x2.get(), size_t(T) * D));
    const std::vector<float> m1 = download<float>(mix1.get(), post_mix.size());
    const std::vector<float> m2 = download<float>(mix2.get(), post_mix.size());
    EXPECT_EQ(std::memcmp(m1.data(), m2.data(), m1.size() * 4), 0) << "mix differs";
  }
  // A view whose tiles do not cover D, or whose tile width is not a multiple of 4, is refused.
  DeviceBuffer d_parts = device_alloc(size_t(1) << 20);
  DeviceBuffer X = device_alloc(size_t(hcD) * 2), mix = device_alloc(size_t(n_mix_out) * 4);
  DeviceBuffer x = device_alloc(size_t(D) * 2);
  for (const SplitSumView bad : {SplitSumView{d_parts.as<float>(), 2, 16, 256, D / 256 - 1},
                                 SplitSumView{d_parts.as<float>(), 2, 16, 6, D}}) {
    const Status st = hc_post_pre_norm(X.as<__nv_bfloat16>(), nullptr, mix.as<float>(), 1, d_hp.view(),
                                       d_norm_w.as<float>(), flash_hc_dims(), x.as<__nv_bfloat16>(), mix.as<float>(),
                                       nullptr, HcComb::kProjected, &bad);
    EXPECT_FALSE(st.is_ok());
    std::printf("  refused: %s\n", st.message().c_str());
  }
}

// ---- HcComb::kLogits ---------------------------------------------------------------------------

// The decode chain with comb logits (ops.h HcComb): hc_pre_norm leaves the logits, the next
// hc_post_pre_norm projects them in its prologue and leaves its own, hc_sinkhorn projects the
// last ones. X, x and the final mix must equal the kProjected chain's bit for bit. The calls
// are synchronized in between: the prologue reads post_mix before its PDL wait, which is only
// safe when the producer is two launches back (the forward pass has whole sublayers there).
TEST(Ops, HcCombLogits) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int D = c.hidden, n_mix = c.hc_mix(), n_mix_out = c.hc_mult + c.hc_mult * c.hc_mult;
  const int64_t hcD = c.hc_dim();
  const HcParams hp1 = random_hc_params(n_mix, 3, hcD, 17), hp2 = random_hc_params(n_mix, 3, hcD, 19);
  const DeviceHcParams d_hp1(hp1), d_hp2(hp2);
  DeviceBuffer d_norm_w = upload_vector(norm_weights(size_t(D), 18));
  const float* nw = d_norm_w.as<float>();
  for (int T : {1, 2, 3, 4}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> X = random_bf16_values(T * hcD, 1600 + uint64_t(T), 1.0f);
    const std::vector<float> y = random_bf16_values(int64_t(T) * D, 1700 + uint64_t(T), 1.0f);
    DeviceBuffer d_y = upload_vector(to_bf16(y));
    DeviceBuffer d_X[2] = {upload_vector(to_bf16(X)), upload_vector(to_bf16(X))};
    DeviceBuffer d_mix[2] = {device_alloc(size_t(T) * n_mix_out * 4), device_alloc(size_t(T) * n_mix_out * 4)};
    DeviceBuffer d_x[2] = {device_alloc(size_t(T) * D * 2), device_alloc(size_t(T) * D * 2)};
    for (int k = 0; k < 2; ++k) {
      poison(d_x[k]);
      poison(d_mix[k]);
      const HcComb mode = k == 0 ? HcComb::kProjected : HcComb::kLogits;
      auto* Xk = d_X[k].as<__nv_bfloat16>();
      auto* xk = d_x[k].as<__nv_bfloat16>();
      float* mk = d_mix[k].as<float>();
      DSV4_ASSERT_OK(hc_pre_norm(Xk, T, d_hp1.view(), nw, flash_hc_dims(), xk, mk, nullptr, mode));
      DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
      DSV4_ASSERT_OK(hc_post_pre_norm(Xk, d_y.as<__nv_bfloat16>(), mk, T, d_hp2.view(), nw, flash_hc_dims(), xk, mk,
                                      nullptr, mode));
      DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
      if (mode == HcComb::kLogits) DSV4_ASSERT_OK(hc_sinkhorn(mk, T, flash_hc_dims(), nullptr));
    }
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<float> m0 = download<float>(d_mix[0].get(), size_t(T) * n_mix_out);
    const std::vector<float> m1 = download<float>(d_mix[1].get(), size_t(T) * n_mix_out);
    const std::vector<uint16_t> x0 = download<uint16_t>(d_x[0].get(), size_t(T) * D);
    const std::vector<uint16_t> x1 = download<uint16_t>(d_x[1].get(), size_t(T) * D);
    const std::vector<uint16_t> X0 = download<uint16_t>(d_X[0].get(), size_t(T * hcD));
    const std::vector<uint16_t> X1 = download<uint16_t>(d_X[1].get(), size_t(T * hcD));
    int64_t mix_differ = 0, x_differ = 0, X_differ = 0, X_changed = 0;
    for (size_t i = 0; i < m0.size(); ++i) mix_differ += std::memcmp(&m0[i], &m1[i], 4) != 0;
    for (size_t i = 0; i < x0.size(); ++i) x_differ += x0[i] != x1[i];
    for (size_t i = 0; i < X0.size(); ++i) X_differ += X0[i] != X1[i];
    for (size_t i = 0; i < X0.size(); ++i) X_changed += X0[i] != f32_to_bf16(X[i]);
    EXPECT_EQ(mix_differ, 0) << "comb projected in the prologue / by hc_sinkhorn = in the finish kernel";
    EXPECT_EQ(x_differ, 0);
    EXPECT_EQ(X_differ, 0) << "HCPost with the prologue's comb = with the finish kernel's";
    EXPECT_GT(X_changed, int64_t(X0.size()) / 2) << "HCPost ran";
    for (float v : m0) EXPECT_TRUE(std::isfinite(v));
  }
  // More tokens than a partials block projects, and argument checks.
  DeviceBuffer big_X = device_alloc(size_t(5) * hcD * 2, true), big_x = device_alloc(size_t(5) * D * 2),
               big_mix = device_alloc(size_t(5) * n_mix_out * 4, true);
  EXPECT_FALSE(hc_pre_norm(big_X.as<__nv_bfloat16>(), kHcLogitsMaxTokens + 1, d_hp1.view(), nw, flash_hc_dims(),
                           big_x.as<__nv_bfloat16>(), big_mix.as<float>(), nullptr, HcComb::kLogits)
                   .is_ok());
  EXPECT_FALSE(hc_sinkhorn(nullptr, 1, flash_hc_dims(), nullptr).is_ok());
  HcDims bad = flash_hc_dims();
  bad.sinkhorn_iters = 0;
  EXPECT_FALSE(hc_sinkhorn(big_mix.as<float>(), 1, bad, nullptr).is_ok());
}

// ---- hc_head_norm -----------------------------------------------------------------------------

TEST(Ops, HcHeadNorm) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int D = c.hidden, hc = c.hc_mult;
  const int64_t hcD = c.hc_dim();
  const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
  const HcParams hp = random_hc_params(hc, 1, hcD, 21);
  const DeviceHcParams d_hp(hp);
  const std::vector<float> norm_w = norm_weights(size_t(D), 22);
  DeviceBuffer d_norm_w = upload_vector(norm_w);
  const int T = 64;
  const std::vector<float> X = random_bf16_values(T * hcD, 600, 1.0f);
  DeviceBuffer d_X = upload_vector(to_bf16(X));
  // A rows list (the last row of each sequence, any order, a repeat) and the null list (rows 0..n-1).
  const std::vector<std::vector<int32_t>> row_lists = {{63, 0, 17, 5, 63, 40}, {}};
  for (const std::vector<int32_t>& list : row_lists) {
    const bool all = list.empty();
    const int n = all ? 7 : int(list.size());
    SCOPED_TRACE(all ? "rows = null, n = 7" : "rows list");
    DeviceBuffer d_rows = all ? DeviceBuffer() : upload_vector(list);
    DeviceBuffer d_x = device_alloc(size_t(n) * D * 2);
    poison(d_x);
    DSV4_ASSERT_OK(hc_head_norm(d_X.as<__nv_bfloat16>(), all ? nullptr : d_rows.as<int32_t>(), n, d_hp.view(),
                                d_norm_w.as<float>(), flash_hc_dims(), d_x.as<__nv_bfloat16>(), nullptr));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> x = download<uint16_t>(d_x.get(), size_t(n) * D);
    // CpuModel::head_logits before the LM head: hc_head, rmsnorm, bf16.
    std::vector<float> ref(size_t(n) * D);
    for (int i = 0; i < n; ++i) {
      const int row = all ? i : list[size_t(i)];
      float* xt = &ref[size_t(i) * D];
      cpu::hc_head(c, hp, &X[size_t(row * hcD)], xt, rnd);
      cpu::rmsnorm(xt, norm_w.data(), D, float(c.norm_eps), xt);
      rnd.apply(xt, D);
    }
    expect_bf16_close(x, ref, 2, 3e-3, "hc_head_norm x", 1.0f / 128);  // as hc_pre_norm
  }
}

// ---- rmsnorm_rows -----------------------------------------------------------------------------

TEST(Ops, RmsnormRows) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int n = c.q_lora_rank;                  // q_norm of qa
  const int64_t ld = n + c.head_dim;            // qa inside the fused wq_a|wkv output [T, 1536]
  const std::vector<float> w = norm_weights(size_t(n), 31);
  DeviceBuffer d_w = upload_vector(w);
  for (int T : kTokenCounts) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> buf = random_bf16_values(T * ld, 700 + uint64_t(T), 1.0f);
    const std::vector<uint16_t> buf_bits = to_bf16(buf);
    DeviceBuffer d_buf = upload_vector(buf_bits);
    DSV4_ASSERT_OK(rmsnorm_rows(d_buf.as<__nv_bfloat16>(), ld, T, n, d_w.as<float>(), float(c.norm_eps), nullptr));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> got_all = download<uint16_t>(d_buf.get(), size_t(T * ld));
    std::vector<uint16_t> got(size_t(T) * n);
    std::vector<float> ref(size_t(T) * n);
    int64_t outside_changed = 0;
    for (int t = 0; t < T; ++t) {
      std::copy_n(&got_all[size_t(t * ld)], n, &got[size_t(t) * n]);
      for (int64_t j = n; j < ld; ++j) outside_changed += got_all[size_t(t * ld + j)] != buf_bits[size_t(t * ld + j)];
      float* r = &ref[size_t(t) * n];
      std::copy_n(&buf[size_t(t * ld)], n, r);
      cpu::rmsnorm(r, w.data(), n, float(c.norm_eps), r);
      cpu::Rounder(cpu::Numerics::bf16_gpu()).apply(r, n);
    }
    EXPECT_EQ(outside_changed, 0) << "columns past n of each row must stay untouched";
    expect_bf16_close(got, ref, 2, 1e-3, "rmsnorm_rows");
  }
}

// ---- q_norm_rope ------------------------------------------------------------------------------

// Positions: 0, the largest (2^18 - 1) and random ones in between.
std::vector<int32_t> random_positions(int T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) pos[size_t(t)] = int32_t(rng() % 262144);
  pos[0] = 262143;
  if (T > 1) pos[1] = 0;
  return pos;
}

TEST(Ops, QNormRope) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int H = c.n_heads, d = c.head_dim, r = c.rope_dim;
  const float eps = float(c.norm_eps);
  const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
  for (int T : kTokenCounts) {
    // Both RoPE flavours: the YaRN-blended compress rope (CSA/HCA layers) and the plain one.
    for (bool yarn : {true, false}) {
      SCOPED_TRACE("T=" + std::to_string(T) + (yarn ? " compress rope" : " main rope"));
      const cpu::Rope rope(yarn ? c.rope_compress : c.rope_main, r);
      DeviceBuffer d_freq = upload_vector(rope.inv_freq());
      const std::vector<int32_t> pos = random_positions(T, 800 + uint64_t(T));
      DeviceBuffer d_pos = upload_vector(pos);
      std::vector<float> q = random_bf16_values(int64_t(T) * H * d, 900 + uint64_t(T), 1.0f);
      DeviceBuffer d_q = upload_vector(to_bf16(q));
      DSV4_ASSERT_OK(q_norm_rope(d_q.as<__nv_bfloat16>(), T, H, d, r, d_pos.as<int32_t>(), d_freq.as<float>(), eps,
                                 nullptr));
      DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<uint16_t> got = download<uint16_t>(d_q.get(), q.size());
      // cpu::attention_forward's query loop.
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h) {
          float* qh = &q[(size_t(t) * H + h) * d];
          cpu::rmsnorm_unweighted(qh, d, eps, qh);
          rnd.apply(qh, d);
          rope.rotate(qh + d - r, long(pos[size_t(t)]));
          rnd.apply(qh + d - r, r);
        }
      expect_bf16_close(got, q, 2, 1e-3, "q_norm_rope");
    }
  }
}

// ---- kv_finish --------------------------------------------------------------------------------

// One kv_finish case: kv rows of `nope + rope` values at column ql of a fused [T, ql + d] buffer.
void check_kv_finish(const ModelConfig& c, int nope, int r, int ql, const std::vector<int>& token_counts) {
  const int d = nope + r;
  const int64_t ld = ql + d;
  const float eps = float(c.norm_eps);
  const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
  LayerKvView layout;
  layout.nope = nope;
  layout.rope = r;
  layout.entry_bytes = int(kv::entry_bytes(nope, r));
  const int eb = layout.entry_bytes, n_blocks = (nope + 63) / 64;
  const std::vector<float> norm_w = norm_weights(size_t(d), 41);
  DeviceBuffer d_norm_w = upload_vector(norm_w);
  const cpu::Rope rope(c.rope_compress, r);
  DeviceBuffer d_freq = upload_vector(rope.inv_freq());
  for (int T : token_counts) {
    SCOPED_TRACE("nope " + std::to_string(nope) + ", T=" + std::to_string(T));
    std::vector<float> buf = random_bf16_values(T * ld, 1000 + uint64_t(T), 1.0f);
    // Vary the scale per row and per 64 dims so that the fp8 block scales spread over exponents.
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < d; ++j) {
        const float s = std::ldexp(1.0f, (t + j / 64) % 7 - 3);
        buf[size_t(t * ld + ql + j)] = round_bf16(buf[size_t(t * ld + ql + j)] * s);
      }
    DeviceBuffer d_buf = upload_vector(to_bf16(buf));
    const std::vector<int32_t> pos = random_positions(T, 1100 + uint64_t(T));
    DeviceBuffer d_pos = upload_vector(pos);
    DeviceBuffer d_rec = device_alloc(size_t(T) * eb);
    poison(d_rec);
    DSV4_ASSERT_OK(kv_finish(d_buf.as<__nv_bfloat16>() + ql, ld, T, d_norm_w.as<float>(), eps, d_pos.as<int32_t>(),
                             d_freq.as<float>(), layout, d_rec.as<uint8_t>(), nullptr));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint8_t> rec = download_bytes(d_rec.get(), size_t(T) * eb);

    int64_t scale_bad = 0, pad_bad = 0, nope_nonfinite = 0, nope_differ = 0, nope_over = 0;
    std::vector<uint16_t> rope_got;
    std::vector<float> rope_ref;
    for (int t = 0; t < T; ++t) {
      // cpu::attention_forward's KV loop.
      std::vector<float> k(&buf[size_t(t * ld + ql)], &buf[size_t(t * ld + ql + d)]);
      cpu::rmsnorm(k.data(), norm_w.data(), d, eps, k.data());
      rnd.apply(k.data(), d);
      rope.rotate(k.data() + nope, long(pos[size_t(t)]));
      rnd.apply(k.data() + nope, r);
      std::vector<int8_t> scale_exp(static_cast<size_t>(n_blocks));
      cpu::fp8sim(k.data(), nope, 64, scale_exp.data());

      const uint8_t* rt = &rec[size_t(t) * eb];
      std::vector<float> v(static_cast<size_t>(d));
      kv::unpack_entry(rt, nope, r, v.data());
      for (int b = 0; b < n_blocks; ++b) scale_bad += rt[nope + 2 * r + b] != uint8_t(scale_exp[size_t(b)] + 127);
      for (int i = nope + 2 * r + n_blocks; i < eb; ++i) pad_bad += rt[i] != 0;
      for (int i = 0; i < nope; ++i) {
        if (!std::isfinite(v[size_t(i)])) {
          ++nope_nonfinite;
          continue;
        }
        // One e4m3 step at this value: 2^-3 of it (normal codes) or 2^-9 of the block scale.
        const float step = std::max(std::fabs(k[size_t(i)]) * 0.125f,
                                    std::ldexp(1.0f, int(scale_exp[size_t(i / 64)]) - 9));
        const float err = std::fabs(v[size_t(i)] - k[size_t(i)]);
        nope_differ += err != 0.0f;
        nope_over += err > step;
      }
      for (int i = 0; i < 2 * r; i += 2) {
        uint16_t h;
        std::memcpy(&h, rt + nope + i, 2);
        rope_got.push_back(h);
      }
      rope_ref.insert(rope_ref.end(), k.begin() + nope, k.end());
    }
    const int64_t n_nope = int64_t(T) * nope;
    std::printf("  kv_finish nope: %lld of %lld values differ; scale mismatches %lld\n", (long long)nope_differ,
                (long long)n_nope, (long long)scale_bad);
    EXPECT_EQ(scale_bad, 0) << "ue8m0 scale bytes must equal fp8sim's block exponents + 127";
    EXPECT_EQ(pad_bad, 0) << "the pad byte must be 0";
    EXPECT_EQ(nope_nonfinite, 0) << "unwritten e4m3 codes";
    EXPECT_EQ(nope_over, 0) << "nope values more than one e4m3 step from the reference";
    EXPECT_LE(double(nope_differ) / double(n_nope), 1e-3) << nope_differ << " nope values differ";
    expect_bf16_close(rope_got, rope_ref, 2, 1e-3, "kv_finish rope dims");
  }
}

TEST(Ops, KvFinish) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  // Flash: nope 448 = 7 fp8 blocks, rope 64, 584-byte records; kv = columns [1024, 1536) of the
  // fused wq_a|wkv output.
  ASSERT_EQ(LayerKvView{}.entry_bytes, kv::entry_bytes(c.nope_dim(), c.rope_dim));
  check_kv_finish(c, c.nope_dim(), c.rope_dim, c.q_lora_rank, {1, 7, 64});
  // The tiny test model: nope 48 (one short fp8 block), rope 16, 88-byte records.
  check_kv_finish(c, 48, 16, 128, {7});
}

// ---- qkv_norm_finish --------------------------------------------------------------------------

// The fused launch against rmsnorm_rows + kv_finish (each checked against the CPU reference
// above): the whole buffer and the records must match bit for bit.
void check_qkv_norm_finish(const ModelConfig& c, int q_n, int nope, int r, const std::vector<int>& token_counts) {
  const int d = nope + r;
  const int64_t kv_col = q_n, ld = q_n + d;
  LayerKvView layout;
  layout.nope = nope;
  layout.rope = r;
  layout.entry_bytes = int(kv::entry_bytes(nope, r));
  const int eb = layout.entry_bytes;
  DeviceBuffer d_qw = upload_vector(norm_weights(size_t(q_n), 51));
  DeviceBuffer d_kvw = upload_vector(norm_weights(size_t(d), 52));
  const cpu::Rope rope(c.rope_compress, r);
  DeviceBuffer d_freq = upload_vector(rope.inv_freq());
  const float eps = float(c.norm_eps);
  for (int T : token_counts) {
    SCOPED_TRACE("q_n " + std::to_string(q_n) + ", nope " + std::to_string(nope) + ", T=" + std::to_string(T));
    const std::vector<uint16_t> buf = to_bf16(random_bf16_values(T * ld, 1600 + uint64_t(T), 2.0f));
    DeviceBuffer d_pos = upload_vector(random_positions(T, 1700 + uint64_t(T)));
    DeviceBuffer buf2 = upload_vector(buf), rec2 = device_alloc(size_t(T) * eb);
    DeviceBuffer buf1 = upload_vector(buf), rec1 = device_alloc(size_t(T) * eb);
    poison(rec1);
    poison(rec2);
    DSV4_ASSERT_OK(rmsnorm_rows(buf2.as<__nv_bfloat16>(), ld, T, q_n, d_qw.as<float>(), eps, nullptr));
    DSV4_ASSERT_OK(kv_finish(buf2.as<__nv_bfloat16>() + kv_col, ld, T, d_kvw.as<float>(), eps, d_pos.as<int32_t>(),
                             d_freq.as<float>(), layout, rec2.as<uint8_t>(), nullptr));
    DSV4_ASSERT_OK(qkv_norm_finish(buf1.as<__nv_bfloat16>(), ld, T, q_n, d_qw.as<float>(), eps, kv_col,
                                   d_kvw.as<float>(), eps, d_pos.as<int32_t>(), d_freq.as<float>(), layout,
                                   rec1.as<uint8_t>(), nullptr));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> b1 = download<uint16_t>(buf1.get(), buf.size());
    const std::vector<uint16_t> b2 = download<uint16_t>(buf2.get(), buf.size());
    const std::vector<uint8_t> r1 = download_bytes(rec1.get(), size_t(T) * eb);
    const std::vector<uint8_t> r2 = download_bytes(rec2.get(), size_t(T) * eb);
    int64_t buf_differ = 0, rec_differ = 0, q_changed = 0;
    for (size_t i = 0; i < b1.size(); ++i) {
      buf_differ += b1[i] != b2[i];
      q_changed += int64_t(i % size_t(ld)) < q_n && b1[i] != buf[i];
    }
    for (size_t i = 0; i < r1.size(); ++i) rec_differ += r1[i] != r2[i];
    std::printf("  qkv_norm_finish vs two calls: buffer %lld, record bytes %lld differ; %lld q values normed\n",
                (long long)buf_differ, (long long)rec_differ, (long long)q_changed);
    EXPECT_EQ(buf_differ, 0) << "q columns must equal rmsnorm_rows' bit for bit, the rest untouched";
    EXPECT_EQ(rec_differ, 0) << "records must equal kv_finish's bit for bit";
    EXPECT_GT(q_changed, int64_t(T) * q_n / 2) << "the q columns were not normalized";

    // A decode step (one row per sequence; with T > 1 the last row is padding, its sequence has
    // no slot): the ring copy in the same launch equals window_save's.
    const int W = 128, n_slots = T + 2;
    std::vector<int32_t> token_seq(static_cast<size_t>(T)), seq_slot(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) {
      const bool pad = T > 1 && t == T - 1;
      token_seq[size_t(t)] = pad ? -1 : t;
      seq_slot[size_t(t)] = pad ? -1 : (t + 2) % n_slots;
    }
    std::vector<uint8_t> window(size_t(n_slots) * W * eb);
    std::mt19937 rng(uint32_t(1800 + T));
    for (uint8_t& v : window) v = uint8_t(rng());
    const std::vector<int32_t> pos = download<int32_t>(d_pos.get(), size_t(T));
    std::vector<uint8_t> ref = window;
    for (int t = 0; t < T; ++t)
      if (token_seq[size_t(t)] >= 0)
        std::memcpy(&ref[(size_t(seq_slot[size_t(t)]) * W + size_t(pos[size_t(t)] % W)) * eb], &r2[size_t(t) * eb],
                    size_t(eb));
    DeviceBuffer d_win = upload_vector(window), d_ts = upload_vector(token_seq), d_ss = upload_vector(seq_slot);
    DeviceBuffer buf3 = upload_vector(buf), rec3 = device_alloc(size_t(T) * eb);
    poison(rec3);
    StepBatchView b;
    b.n_tokens = T;
    b.n_seqs = T;
    b.token_seq = d_ts.as<int32_t>();
    b.token_pos = d_pos.as<int32_t>();
    b.seq_slot = d_ss.as<int32_t>();
    b.one_row_per_seq = true;
    LayerKvView ring_layout = layout;
    ring_layout.window = d_win.as<uint8_t>();
    ring_layout.window_size = W;
    DSV4_ASSERT_OK(qkv_norm_finish(buf3.as<__nv_bfloat16>(), ld, T, q_n, d_qw.as<float>(), eps, kv_col,
                                   d_kvw.as<float>(), eps, d_pos.as<int32_t>(), d_freq.as<float>(), ring_layout,
                                   rec3.as<uint8_t>(), nullptr, &b));
    DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint8_t> r3 = download_bytes(rec3.get(), size_t(T) * eb);
    const std::vector<uint8_t> got = download_bytes(d_win.get(), window.size());
    int64_t rec3_differ = 0, ring_differ = 0;
    for (size_t i = 0; i < r3.size(); ++i) rec3_differ += r3[i] != r2[i];
    for (size_t e = 0; e < size_t(n_slots) * W; ++e) ring_differ += std::memcmp(&got[e * eb], &ref[e * eb], size_t(eb)) != 0;
    EXPECT_EQ(rec3_differ, 0) << "records with the ring copy must equal kv_finish's";
    EXPECT_EQ(ring_differ, 0) << "ring entries differ from window_save's (copied rows, or untouched slots)";
    b.one_row_per_seq = false;  // a chunk: the copy must wait for attention (window_save)
    EXPECT_FALSE(qkv_norm_finish(buf3.as<__nv_bfloat16>(), ld, T, q_n, d_qw.as<float>(), eps, kv_col,
                                 d_kvw.as<float>(), eps, d_pos.as<int32_t>(), d_freq.as<float>(), ring_layout,
                                 rec3.as<uint8_t>(), nullptr, &b)
                     .is_ok());
  }
}

TEST(Ops, QkvNormFinish) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  // Flash: qa = columns [0, 1024), kv = [1024, 1536) of the fused wq_a|wkv output. T = 1, 4 and
  // 5 (one and two kv blocks), 32, 64.
  check_qkv_norm_finish(c, c.q_lora_rank, c.nope_dim(), c.rope_dim, {1, 4, 5, 7, 32, 64});
  // The tiny test model: q_lora 128, nope 48, rope 16.
  check_qkv_norm_finish(c, 128, 48, 16, {7});
}

// ---- timing -----------------------------------------------------------------------------------

// Median time of one launch over 50 back-to-back launches (events between them), after a warm-up,
// in us. Prints the per-kernel latency of the decode step's small launches.
template <typename F>
void time_launch(const char* name, int T, F&& launch) {
  constexpr int kWarm = 5, kRuns = 50;
  for (int i = 0; i < kWarm; ++i) DSV4_ASSERT_OK(launch());
  std::vector<cudaEvent_t> ev(kRuns + 1);
  for (cudaEvent_t& e : ev) DSV4_ASSERT_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < kRuns; ++i) {
    DSV4_ASSERT_CUDA(cudaEventRecord(ev[size_t(i)], nullptr));
    DSV4_ASSERT_OK(launch());
  }
  DSV4_ASSERT_CUDA(cudaEventRecord(ev[kRuns], nullptr));
  DSV4_ASSERT_CUDA(cudaEventSynchronize(ev[kRuns]));
  std::vector<float> us(kRuns);
  for (int i = 0; i < kRuns; ++i) {
    float ms = 0.0f;
    DSV4_ASSERT_CUDA(cudaEventElapsedTime(&ms, ev[size_t(i)], ev[size_t(i) + 1]));
    us[size_t(i)] = 1000.0f * ms;
  }
  for (cudaEvent_t e : ev) cudaEventDestroy(e);
  std::sort(us.begin(), us.end());
  std::printf("[ time  ] %-18s T=%-2d %8.2f us (median of %d; min %.2f)\n", name, T, 0.5 * (us[kRuns / 2 - 1] + us[kRuns / 2]),
              kRuns, us[0]);
}

TEST(Ops, Timing) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int D = c.hidden, hc = c.hc_mult, n_mix = c.hc_mix(), n_mix_out = hc + hc * hc;
  const int64_t hcD = c.hc_dim();
  const int H = c.n_heads, hd = c.head_dim, r = c.rope_dim, q_n = c.q_lora_rank;
  const int64_t ld = q_n + hd;
  const float eps = float(c.norm_eps);
  constexpr int kMaxT = 32;
  const DeviceHcParams d_hp(random_hc_params(n_mix, 3, hcD, 61));
  const DeviceHcParams d_head(random_hc_params(hc, 1, hcD, 62));
  DeviceBuffer d_norm_w = upload_vector(norm_weights(size_t(D), 63));
  DeviceBuffer d_qw = upload_vector(norm_weights(size_t(q_n), 64));
  DeviceBuffer d_kvw = upload_vector(norm_weights(size_t(hd), 65));
  const cpu::Rope rope(c.rope_compress, r);
  DeviceBuffer d_freq = upload_vector(rope.inv_freq());
  DeviceBuffer d_pos = upload_vector(random_positions(kMaxT, 66));
  DeviceBuffer X = upload_vector(to_bf16(random_bf16_values(kMaxT * hcD, 67, 1.0f)));
  DeviceBuffer y = upload_vector(to_bf16(random_bf16_values(int64_t(kMaxT) * D, 68, 1.0f)));
  DeviceBuffer x = device_alloc(size_t(kMaxT) * D * 2);
  DeviceBuffer mix = device_alloc(size_t(kMaxT) * n_mix_out * 4), post_mix = device_alloc(size_t(kMaxT) * n_mix_out * 4);
  DeviceBuffer qkv = upload_vector(to_bf16(random_bf16_values(kMaxT * ld, 69, 1.0f)));
  DeviceBuffer q = upload_vector(to_bf16(random_bf16_values(int64_t(kMaxT) * H * hd, 70, 1.0f)));
  const LayerKvView layout;  // Flash records
  DeviceBuffer rec = device_alloc(size_t(kMaxT) * layout.entry_bytes);
  const HcDims dims = flash_hc_dims();
  auto* Xb = X.as<__nv_bfloat16>();
  auto* yb = y.as<__nv_bfloat16>();
  auto* xb = x.as<__nv_bfloat16>();
  // A valid post mix (post in (0, 2), comb doubly stochastic) for hc_post and hc_post_pre_norm.
  DSV4_ASSERT_OK(hc_pre_norm(Xb, kMaxT, d_hp.view(), d_norm_w.as<float>(), dims, xb, post_mix.as<float>(), nullptr));
  for (int T : {1, 32}) {
    time_launch("hc_pre_norm", T, [&] {
      return hc_pre_norm(Xb, T, d_hp.view(), d_norm_w.as<float>(), dims, xb, mix.as<float>(), nullptr);
    });
    time_launch("hc_post", T, [&] { return hc_post(Xb, yb, post_mix.as<float>(), T, dims, nullptr); });
    time_launch("hc_post_pre_norm", T, [&] {
      return hc_post_pre_norm(Xb, yb, post_mix.as<float>(), T, d_hp.view(), d_norm_w.as<float>(), dims, xb,
                              mix.as<float>(), nullptr);
    });
    time_launch("hc_head_norm", T, [&] {
      return hc_head_norm(Xb, nullptr, T, d_head.view(), d_norm_w.as<float>(), dims, xb, nullptr);
    });
    time_launch("rmsnorm_rows", T, [&] {
      return rmsnorm_rows(qkv.as<__nv_bfloat16>(), ld, T, q_n, d_qw.as<float>(), eps, nullptr);
    });
    time_launch("kv_finish", T, [&] {
      return kv_finish(qkv.as<__nv_bfloat16>() + q_n, ld, T, d_kvw.as<float>(), eps, d_pos.as<int32_t>(),
                       d_freq.as<float>(), layout, rec.as<uint8_t>(), nullptr);
    });
    time_launch("qkv_norm_finish", T, [&] {
      return qkv_norm_finish(qkv.as<__nv_bfloat16>(), ld, T, q_n, d_qw.as<float>(), eps, q_n, d_kvw.as<float>(), eps,
                             d_pos.as<int32_t>(), d_freq.as<float>(), layout, rec.as<uint8_t>(), nullptr);
    });
    time_launch("q_norm_rope", T, [&] {
      return q_norm_rope(q.as<__nv_bfloat16>(), T, H, hd, r, d_pos.as<int32_t>(), d_freq.as<float>(), eps, nullptr);
    });
  }
  DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
}

// ---- window_save ------------------------------------------------------------------------------

TEST(Ops, WindowSave) {
  DSV4_SKIP_WITHOUT_GPU();
  const ModelConfig& c = flash();
  const int W = c.sliding_window, eb = 584, n_slots = 6;
  // Sequences in step order: a decode token, a chunk longer than W, a chunk shorter than W, and a
  // padding sequence; three padding rows at the end. Slots are non-contiguous.
  struct Seq {
    int slot, pos0, ntok;
  };
  const std::vector<Seq> seqs = {{4, 300, 1}, {1, 1000, 200}, {3, 50, 40}, {-1, 0, 0}};
  const int n_pad_rows = 3;
  std::vector<int32_t> token_seq, token_pos, token_ids, seq_slot, seq_pos0, seq_tok0, seq_ntok;
  for (size_t s = 0; s < seqs.size(); ++s) {
    seq_slot.push_back(seqs[s].slot);
    seq_pos0.push_back(seqs[s].pos0);
    seq_tok0.push_back(int32_t(token_seq.size()));
    seq_ntok.push_back(seqs[s].ntok);
    for (int j = 0; j < seqs[s].ntok; ++j) {
      token_seq.push_back(int32_t(s));
      token_pos.push_back(seqs[s].pos0 + j);
      token_ids.push_back(j);
    }
  }
  for (int i = 0; i < n_pad_rows; ++i) {
    token_seq.push_back(-1);
    token_pos.push_back(0);
    token_ids.push_back(0);
  }
  const int n_tokens = int(token_seq.size());

  std::vector<uint8_t> chunk(size_t(n_tokens) * eb), window(size_t(n_slots) * W * eb);
  std::mt19937 rng(77);
  for (uint8_t& b : chunk) b = uint8_t(rng());
  for (uint8_t& b : window) b = uint8_t(rng());
  DeviceBuffer d_chunk = upload_vector(chunk), d_window = upload_vector(window);
  DeviceBuffer d_token_seq = upload_vector(token_seq), d_token_pos = upload_vector(token_pos),
               d_token_ids = upload_vector(token_ids), d_slot = upload_vector(seq_slot),
               d_pos0 = upload_vector(seq_pos0), d_tok0 = upload_vector(seq_tok0), d_ntok = upload_vector(seq_ntok);

  StepBatchView b;
  b.n_tokens = n_tokens;
  b.n_seqs = int(seqs.size());
  b.token_ids = d_token_ids.as<int32_t>();
  b.token_seq = d_token_seq.as<int32_t>();
  b.token_pos = d_token_pos.as<int32_t>();
  b.seq_slot = d_slot.as<int32_t>();
  b.seq_pos0 = d_pos0.as<int32_t>();
  b.seq_tok0 = d_tok0.as<int32_t>();
  b.seq_ntok = d_ntok.as<int32_t>();
  LayerKvView kv;
  kv.window = d_window.as<uint8_t>();
  kv.window_size = W;
  kv.chunk = d_chunk.as<uint8_t>();
  kv.entry_bytes = eb;
  DSV4_ASSERT_OK(window_save(b, kv, nullptr));
  DSV4_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = download_bytes(d_window.get(), window.size());

  // The ring advance of cpu::attention_forward: rows t >= T - W go to slot (p0 + t) % W.
  std::vector<uint8_t> ref = window;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s].slot < 0) continue;
    for (int t = std::max(0, seqs[s].ntok - W); t < seqs[s].ntok; ++t)
      std::memcpy(&ref[(size_t(seqs[s].slot) * W + size_t((seqs[s].pos0 + t) % W)) * eb],
                  &chunk[size_t(seq_tok0[s] + t) * eb], size_t(eb));
  }
  int64_t bad_entries = 0;
  for (size_t e = 0; e < size_t(n_slots) * W; ++e)
    bad_entries += std::memcmp(&got[e * eb], &ref[e * eb], size_t(eb)) != 0;
  EXPECT_EQ(bad_entries, 0) << "ring entries differ (saved rows, or untouched slots and positions)";
}

}  // namespace
}  // namespace dsv4::cuda::test
