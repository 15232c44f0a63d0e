// reference_test.cpp: behavior of the CPU reference on make-model checkpoints: chunked prefill and
// token-by-token decode reproduce one-shot prefill exactly (both numerics, all layer types, MTP);
// errors on bad input; the routing, Sinkhorn and top-k rules.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "cpu/compressor.h"
#include "cpu/mhc.h"
#include "cpu/model.h"
#include "cpu/moe.h"
#include "model/make_model.h"

namespace dsv4::cpu {
namespace {

namespace fs = std::filesystem;

struct TinyModel {
  std::string dir;
  ModelConfig cfg;
  std::unique_ptr<ModelWeights> w;
};

// One tiny W4A16 model per process: SWA, SWA, CSA, HCA(16), CSA layers + MTP.
const TinyModel& tiny() {
  static TinyModel m = [] {
    TinyModel t;
    t.dir = (fs::temp_directory_path() / ("dsv4_ref_tiny_" + std::to_string(::getpid()))).string();
    MakeModelOptions o;
    o.preset = "tiny";
    o.layers = 5;
    o.seed = 11;
    o.mtp = true;
    o.out_dir = t.dir;
    const Status st = make_model(o, nullptr);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    t.cfg = ModelConfig::load(t.dir).value();
    t.w = ModelWeights::load(t.dir, t.cfg).value();
    return t;
  }();
  return m;
}

std::vector<int32_t> random_ids(int n, uint32_t seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& v : ids) v = int32_t(rng() % uint32_t(vocab));
  return ids;
}

// Logits [T, V] and final hidden streams [T, hc*D] feeding `ids` in chunks of `chunk`.
void run_chunked(const CpuModel& m, const std::vector<int32_t>& ids, int64_t chunk, std::vector<float>& logits,
                 std::vector<float>& hidden) {
  const ModelConfig& c = m.config();
  const int64_t T = int64_t(ids.size()), V = c.vocab_size, H = int64_t(c.hc_mult) * c.hidden;
  logits.assign(size_t(T * V), 0.0f);
  hidden.assign(size_t(T * H), 0.0f);
  auto seq = m.new_sequence();
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t n = std::min(chunk, T - s);
    ASSERT_TRUE(m.forward(*seq, std::span<const int32_t>(ids.data() + s, size_t(n)), LogitsRows::kAll,
                          logits.data() + s * V, hidden.data() + s * H)
                    .is_ok());
  }
  EXPECT_EQ(seq->pos, T);
}

TEST(Reference, ChunkedPrefillAndDecodeEqualOneShot) {
  const TinyModel& t = tiny();
  // 150 tokens: several HCA windows (16), many CSA entries (> top-k 8), the window (32) slides.
  const std::vector<int32_t> ids = random_ids(150, 3, t.cfg.vocab_size);
  for (const Numerics& n : {Numerics::fp32(), Numerics::bf16_gpu()}) {
    CpuModel m(t.cfg, *t.w, n);
    std::vector<float> ref_l, ref_h;
    run_chunked(m, ids, 150, ref_l, ref_h);
#ifdef DSV4_SANITIZE_BUILD
    const std::vector<int64_t> chunks = {33};
#else
    const std::vector<int64_t> chunks = {1, 5, 16, 33, 149};
#endif
    for (int64_t chunk : chunks) {
      std::vector<float> l, h;
      run_chunked(m, ids, chunk, l, h);
      EXPECT_EQ(l, ref_l) << n.name() << " chunk " << chunk;
      EXPECT_EQ(h, ref_h) << n.name() << " chunk " << chunk;
    }
  }
}

TEST(Reference, LastRowLogitsEqualFullRows) {
  const TinyModel& t = tiny();
  const std::vector<int32_t> ids = random_ids(40, 5, t.cfg.vocab_size);
  CpuModel m(t.cfg, *t.w, Numerics::bf16_gpu());
  const int64_t V = t.cfg.vocab_size;
  std::vector<float> all(size_t(40 * V)), last(static_cast<size_t>(V));
  auto a = m.new_sequence();
  ASSERT_TRUE(m.forward(*a, ids, LogitsRows::kAll, all.data()).is_ok());
  auto b = m.new_sequence();
  ASSERT_TRUE(m.forward(*b, ids, LogitsRows::kLast, last.data()).is_ok());
  EXPECT_EQ(std::vector<float>(all.end() - V, all.end()), last);
  for (float v : all) ASSERT_TRUE(std::isfinite(v));
}

TEST(Reference, TokenOutsideVocabularyIsAnErrorAndLeavesTheStateAlone) {
  const TinyModel& t = tiny();
  CpuModel m(t.cfg, *t.w, Numerics::fp32());
  auto s = m.new_sequence();
  std::vector<float> logits(size_t(3 * t.cfg.vocab_size));
  const std::vector<int32_t> bad = {1, t.cfg.vocab_size, 2};
  const Status st = m.forward(*s, bad, LogitsRows::kAll, logits.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
  EXPECT_EQ(s->pos, 0);
  const std::vector<int32_t> neg = {-1};
  EXPECT_FALSE(m.forward(*s, neg, LogitsRows::kAll, logits.data()).is_ok());
}

TEST(Reference, MtpBlockRunsAndChunksConsistently) {
  const TinyModel& t = tiny();
  ASSERT_TRUE(t.w->has_mtp);
  const std::vector<int32_t> ids = random_ids(60, 9, t.cfg.vocab_size);
  CpuModel m(t.cfg, *t.w, Numerics::bf16_gpu());
  std::vector<float> logits, hidden;
  run_chunked(m, ids, 60, logits, hidden);
  // MTP pairs the final state at t with the embedding of token t+1.
  const int64_t T = 59, V = t.cfg.vocab_size, H = int64_t(t.cfg.hc_mult) * t.cfg.hidden;
  std::vector<int32_t> next(ids.begin() + 1, ids.end());
  std::vector<float> one(size_t(T * V)), chunked(size_t(T * V));
  auto s1 = m.new_sequence();
  ASSERT_TRUE(m.mtp_forward(*s1, hidden.data(), next, one.data()).is_ok());
  auto s2 = m.new_sequence();
  for (int64_t s = 0; s < T; s += 10) {
    const int64_t n = std::min<int64_t>(10, T - s);
    ASSERT_TRUE(m.mtp_forward(*s2, hidden.data() + s * H, std::span<const int32_t>(next.data() + s, size_t(n)),
                              chunked.data() + s * V)
                    .is_ok());
  }
  EXPECT_EQ(one, chunked);
  // The MTP logits are a different function of the input than the main head's.
  float diff = 0;
  for (int64_t i = 0; i < T * V; ++i) diff = std::fmax(diff, std::fabs(one[size_t(i)] - logits[size_t(i)]));
  EXPECT_GT(diff, 1e-3f);
}

TEST(Reference, TopkTiesGoToTheLowestIndex) {
  const std::vector<float> s = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f, -INFINITY, 2.0f};
  EXPECT_EQ(topk_indices(s.data(), 7, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(topk_indices(s.data(), 7, 4), (std::vector<int32_t>{1, 2, 4, 3}));
  EXPECT_EQ(topk_indices(s.data(), 7, 100).size(), 7u);
  const std::vector<float> zeros(10, 0.0f);
  EXPECT_EQ(topk_indices(zeros.data(), 10, 3), (std::vector<int32_t>{0, 1, 2}));
}

TEST(Reference, SinkhornEndsColumnNormalized) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int iters : {1, 7, 20}) {
    std::vector<float> M(16);
    for (float& v : M) v = nd(rng);
    sinkhorn(M.data(), 4, iters, 1e-6f);
    for (int k = 0; k < 4; ++k) {
      float col = 0;
      for (int j = 0; j < 4; ++j) {
        EXPECT_GT(M[size_t(j * 4 + k)], 0.0f);
        col += M[size_t(j * 4 + k)];
      }
      EXPECT_NEAR(col, 1.0f, 1e-5f) << "iters " << iters;
    }
    if (iters == 20) {
      for (int j = 0; j < 4; ++j) {
        EXPECT_NEAR(M[size_t(j * 4)] + M[size_t(j * 4 + 1)] + M[size_t(j * 4 + 2)] + M[size_t(j * 4 + 3)], 1.0f, 1e-3f);
      }
    }
  }
}

TEST(Reference, RoutingFollowsTheRules) {
  const TinyModel& t = tiny();
  const ModelConfig& c = t.cfg;
  const int64_t T = 12;
  std::vector<float> x(size_t(T * c.hidden));
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : x) v = nd(rng);
  const std::vector<int32_t> ids = random_ids(int(T), 8, c.vocab_size);
  const int K = c.n_experts_per_tok;
  ASSERT_EQ(c.layers[0].moe, MoeType::kHash);
  const Routing hash = route(c, t.w->layers[0].moe, MoeType::kHash, x.data(), ids.data(), T);
  for (int64_t i = 0; i < T; ++i) {
    float sum = 0;
    for (int k = 0; k < K; ++k) {
      EXPECT_EQ(hash.experts[size_t(i * K + k)], t.w->layers[0].moe.tid2eid[size_t(ids[size_t(i)] * K + k)]);
      sum += hash.weights[size_t(i * K + k)];
    }
    EXPECT_NEAR(sum, c.routed_scaling_factor, 1e-5);
  }
  const int L = 4;
  ASSERT_EQ(c.layers[L].moe, MoeType::kScore);
  const MoeWeights& mw = t.w->layers[L].moe;
  const Routing score = route(c, mw, MoeType::kScore, x.data(), ids.data(), T);
  for (int64_t i = 0; i < T; ++i) {
    // Recompute the scores; the chosen experts must be the top-K of score + bias.
    std::vector<float> logit(size_t(c.n_routed_experts));
    std::vector<float> wrow(size_t(c.hidden));
    for (int e = 0; e < c.n_routed_experts; ++e) {
      mw.gate.dequant_rows(e, e + 1, wrow.data());
      double acc = 0;
      for (int d = 0; d < c.hidden; ++d) acc += double(wrow[size_t(d)]) * x[size_t(i * c.hidden + d)];
      logit[size_t(e)] = std::sqrt(std::log1p(std::exp(float(acc)))) + mw.bias[size_t(e)];
    }
    std::vector<int32_t> want = topk_indices(logit.data(), c.n_routed_experts, K);
    std::vector<int32_t> got(score.experts.begin() + i * K, score.experts.begin() + (i + 1) * K);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << "token " << i;
  }
}

}  // namespace
}  // namespace dsv4::cpu
