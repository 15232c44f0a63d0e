// golden_test.cpp: the CPU reference against Hugging Face transformers' fp32 forward on the
// committed tiny random models (fixtures/hf, written by tools/golden/make_hf_goldens.py), in both
// checkpoint layouts, one-shot and chunked; and the bf16 mode's distance from fp32, attributed to
// its sources (bf16 rounding, fp8 KV, fp4 indexer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "base/npy.h"
#include "cpu/model.h"
#include "model/config.h"
#include "model/weights.h"

namespace dsv4::cpu {
namespace {

struct Fixture {
  std::string config, layout;
};

// Readable test parameter names in gtest output.
void PrintTo(const Fixture& f, std::ostream* os) { *os << f.config << "/" << f.layout; }

std::string fixture_dir(const Fixture& f) { return std::string(DSV4_FIXTURES_DIR) + "/hf/" + f.config; }

struct Loaded {
  ModelConfig cfg;
  std::unique_ptr<ModelWeights> weights;
  std::vector<int32_t> ids;
  std::vector<float> golden;  // [T, vocab]
};

Loaded load(const Fixture& f) {
  Loaded l;
  const std::string dir = fixture_dir(f) + "/" + f.layout;
  auto cfg = ModelConfig::load(dir);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  l.cfg = *cfg;
  auto w = ModelWeights::load(dir, l.cfg);
  EXPECT_TRUE(w.is_ok()) << w.status().to_string();
  l.weights = std::move(w).value();
  auto ids = read_npy(fixture_dir(f) + "/input_ids.npy");
  EXPECT_TRUE(ids.is_ok()) << ids.status().to_string();
  l.ids = ids->as_int32().value();
  auto g = read_npy(fixture_dir(f) + "/logits_" + f.layout + ".npy");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->shape, (std::vector<int64_t>{int64_t(l.ids.size()), l.cfg.vocab_size}));
  l.golden = g->as_float32().value();
  return l;
}

std::vector<float> run(const Loaded& l, const Numerics& n, int64_t chunk, ForwardTrace* trace = nullptr) {
  CpuModel model(l.cfg, *l.weights, n);
  auto seq = model.new_sequence();
  const int64_t T = int64_t(l.ids.size()), V = l.cfg.vocab_size;
  std::vector<float> out(size_t(T * V));
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t len = std::min(chunk, T - s);
    ForwardTrace tr;
    const Status st = model.forward(*seq, std::span<const int32_t>(l.ids.data() + s, size_t(len)), LogitsRows::kAll,
                                    out.data() + s * V, nullptr, trace ? &tr : nullptr);
    if (trace) {  // one-shot runs only: a single chunk's trace covers every row
      EXPECT_EQ(len, T);
      *trace = std::move(tr);
    }
    EXPECT_TRUE(st.is_ok()) << st.to_string();
  }
  return out;
}

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::fmax(m, std::fabs(x));
  return m;
}

struct Diff {
  float max_abs = 0.0f, mean_abs = 0.0f, argmax_agree = 0.0f;
};

Diff diff(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  Diff d;
  double sum = 0.0;
  int64_t agree = 0;
  const int64_t T = int64_t(a.size()) / V;
  for (int64_t t = 0; t < T; ++t) {
    int64_t ia = 0, ib = 0;
    for (int64_t v = 0; v < V; ++v) {
      const float e = std::fabs(a[size_t(t * V + v)] - b[size_t(t * V + v)]);
      d.max_abs = std::fmax(d.max_abs, e);
      sum += e;
      if (a[size_t(t * V + v)] > a[size_t(t * V + ia)]) ia = v;
      if (b[size_t(t * V + v)] > b[size_t(t * V + ib)]) ib = v;
    }
    agree += ia == ib;
  }
  d.mean_abs = float(sum / double(a.size()));
  d.argmax_agree = float(agree) / float(T);
  return d;
}

class GoldenTest : public ::testing::TestWithParam<Fixture> {};

TEST_P(GoldenTest, Fp32MatchesTransformersOneShotAndChunked) {
  const Loaded l = load(GetParam());
  ASSERT_NE(l.weights, nullptr);
  const float bound = 1e-4f * max_abs(l.golden);
  const int64_t T = int64_t(l.ids.size());
  const std::vector<float> full = run(l, Numerics::fp32(), T);
  const Diff d = diff(full, l.golden, l.cfg.vocab_size);
  std::printf("[golden] %s/%s fp32 vs HF: max|err| %.3g (bound %.3g), max|logit| %.3g\n", GetParam().config.c_str(),
              GetParam().layout.c_str(), d.max_abs, bound, max_abs(l.golden));
  EXPECT_LE(d.max_abs, bound);
#ifdef DSV4_SANITIZE_BUILD
  const std::vector<int64_t> chunks = {7};
#else
  const std::vector<int64_t> chunks = {1, 7, 64};
#endif
  for (int64_t chunk : chunks) {
    const std::vector<float> c = run(l, Numerics::fp32(), chunk);
    const Diff dc = diff(c, full, l.cfg.vocab_size);
    EXPECT_LE(dc.max_abs, bound) << "chunk " << chunk;
    EXPECT_LE(diff(c, l.golden, l.cfg.vocab_size).max_abs, bound) << "chunk " << chunk;
  }
}

// Rows whose discrete choices (indexer top-k sets and routed experts, in every layer) are the same
// in both traces. Elsewhere a near-tie resolved differently, which changes a row outright.
std::vector<bool> same_choices(const ForwardTrace& a, const ForwardTrace& b, int64_t T, int top_k) {
  std::vector<bool> same(size_t(T), true);
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const auto& sa = a.layers[l].attention.selected;
    const auto& sb = b.layers[l].attention.selected;
    for (int64_t t = 0; t < T && !sa.empty(); ++t) {
      std::vector<int32_t> x = sa[size_t(t)], y = sb[size_t(t)];
      std::sort(x.begin(), x.end());
      std::sort(y.begin(), y.end());
      if (x != y) same[size_t(t)] = false;
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> x(a.layers[l].experts.begin() + t * top_k, a.layers[l].experts.begin() + (t + 1) * top_k);
      std::vector<int32_t> y(b.layers[l].experts.begin() + t * top_k, b.layers[l].experts.begin() + (t + 1) * top_k);
      std::sort(x.begin(), x.end());
      std::sort(y.begin(), y.end());
      if (x != y) same[size_t(t)] = false;
    }
  }
  return same;
}

// The bf16 mode is the GPU oracle, not an approximation of HF. Its distance from fp32 on these
// random (not quantization-aware-trained) models has two parts:
//  - a smooth part: bf16 rounding at every op boundary (8-bit mantissa, ~0.4% per op) plus fp8
//    KV (3-bit mantissa) plus fp4 indexer keys, compounded through mHC and attention;
//  - a discrete part: bf16 indexer scores and perturbed router inputs resolve near-ties in the
//    indexer's top-k or the router's top-k differently, which changes that row outright.
// Measured on the four fixtures (max |err| on same-choice rows, % of max|logit|): bf16 rounding
// alone 1.2-1.3%, + fp8 KV 2.6-4.0%, + fp4 indexer the same (fp4 changes the indexer's choices
// for most rows, so its effect shows up in the discrete part: mean |err| 0.7-0.9%).
// Bounds with ~2x margin: smooth part <= 3% (rounding) / 8% (with fp8 KV); over all rows mean
// |err| <= 1.5% of max|logit| and argmax agreement >= 88%; without fp4, at least 80% of rows keep
// every discrete choice.
TEST_P(GoldenTest, Bf16ModeErrorAgainstFp32IsBounded) {
  const Loaded l = load(GetParam());
  ASSERT_NE(l.weights, nullptr);
  const int64_t T = int64_t(l.ids.size()), V = l.cfg.vocab_size;
  ForwardTrace ref_trace;
  const std::vector<float> ref = run(l, Numerics::fp32(), T, &ref_trace);
  const float scale = max_abs(ref);
  struct Variant {
    const char* what;
    Numerics n;
    float smooth_bound;
  } variants[] = {
      {"bf16 rounding only", Numerics{true, false, false}, 0.03f},
      {"+ fp8 KV", Numerics{true, true, false}, 0.08f},
      {"+ fp4 indexer (bf16 mode)", Numerics::bf16_gpu(), 0.08f},
  };
  for (const Variant& v : variants) {
#ifdef DSV4_SANITIZE_BUILD
    if (!(v.n == Numerics::bf16_gpu())) continue;
#endif
    ForwardTrace tr;
    const std::vector<float> out = run(l, v.n, T, &tr);
    const Diff d = diff(out, ref, V);
    const std::vector<bool> same = same_choices(ref_trace, tr, T, l.cfg.n_experts_per_tok);
    float smooth_max = 0.0f;
    int64_t n_same = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (!same[size_t(t)]) continue;
      ++n_same;
      for (int64_t i = 0; i < V; ++i)
        smooth_max = std::fmax(smooth_max, std::fabs(out[size_t(t * V + i)] - ref[size_t(t * V + i)]));
    }
    std::printf(
        "[bf16] %s/%s %-26s all rows: max %.3f (%.1f%%) mean %.4f (%.2f%%) argmax %.3f | same-choice rows %lld/%lld: "
        "max %.3f (%.1f%%)\n",
        GetParam().config.c_str(), GetParam().layout.c_str(), v.what, d.max_abs, 100.0f * d.max_abs / scale,
        d.mean_abs, 100.0f * d.mean_abs / scale, d.argmax_agree, (long long)n_same, (long long)T, smooth_max,
        100.0f * smooth_max / scale);
    EXPECT_LE(smooth_max, v.smooth_bound * scale) << v.what;
    EXPECT_LE(d.mean_abs, 0.015f * scale) << v.what;
    EXPECT_GE(d.argmax_agree, 0.88f) << v.what;
    if (!v.n.fp4_indexer) {
      EXPECT_GE(n_same, T * 8 / 10) << v.what;
    }
  }
  // Chunked prefill follows the same arithmetic in bf16 mode too.
  const std::vector<float> one = run(l, Numerics::bf16_gpu(), T);
  const std::vector<float> chunked = run(l, Numerics::bf16_gpu(), 7);
  EXPECT_EQ(diff(one, chunked, V).max_abs, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest,
                         ::testing::Values(Fixture{"tiny_a", "hf"}, Fixture{"tiny_a", "ds_w4a16"},
                                           Fixture{"tiny_b", "hf"}, Fixture{"tiny_b", "ds_w4a16"}),
                         [](const auto& info) { return info.param.config + "_" + info.param.layout; });

}  // namespace
}  // namespace dsv4::cpu
