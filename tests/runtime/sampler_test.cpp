// sampler_test.cpp: the host sampler: greedy with ties, the distribution under temperature, what
// top-k / top-p / min-p keep, raw logprobs, and that a draw depends only on (seed, index).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "runtime/sampler.h"

namespace dsv4::runtime {
namespace {

std::vector<double> softmax(const std::vector<float>& l, double t) {
  double m = -1e30, s = 0;
  for (float x : l) m = std::max(m, double(x));
  std::vector<double> p;
  for (float x : l) {
    p.push_back(std::exp((x - m) / t));
    s += p.back();
  }
  for (double& x : p) x /= s;
  return p;
}

// Frequencies of n draws with indices [0, n).
std::vector<double> frequencies(const std::vector<float>& logits, const SamplingParams& p, int n, uint64_t seed = 7) {
  Sampler s;
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) f[size_t(s.sample(logits, p, seed, i).token)] += 1.0 / n;
  return f;
}

TEST(Sampler, GreedyPicksTheArgmaxAndTheLowestIdOnTies) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<float> l{0.5f, 3.0f, -1.0f, 3.0f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(l, p, 123, i).token, 1);
}

TEST(Sampler, TemperatureSamplesTheSoftmax) {
  const std::vector<float> l{0.0f, 1.0f, 2.0f, 3.0f};
  for (const float t : {1.0f, 0.5f}) {
    SamplingParams p;
    p.temperature = t;
    const auto f = frequencies(l, p, 20000);
    const auto want = softmax(l, t);
    for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(f[i], want[i], 0.015) << "token " << i << " t " << t;
  }
}

TEST(Sampler, FiltersKeepWhatTheyShould) {
  const std::vector<float> l{0.0f, 1.0f, 2.0f, 3.0f};  // p = .032 .087 .237 .644
  SamplingParams p;
  p.top_k = 2;
  auto f = frequencies(l, p, 20000);
  EXPECT_EQ(f[0] + f[1], 0.0);
  EXPECT_NEAR(f[3], 0.644 / (0.644 + 0.237), 0.015);

  p = SamplingParams{};
  p.top_p = 0.5f;  // the most likely token alone reaches 0.5
  f = frequencies(l, p, 2000);
  EXPECT_NEAR(f[3], 1.0, 1e-9);
  p.top_p = 0.8f;  // needs the two most likely
  f = frequencies(l, p, 20000);
  EXPECT_EQ(f[0] + f[1], 0.0);
  EXPECT_NEAR(f[2], 0.237 / 0.881, 0.015);

  p = SamplingParams{};
  p.min_p = 0.3f;  // keeps p >= 0.3 * 0.644 = 0.193
  f = frequencies(l, p, 20000);
  EXPECT_EQ(f[0] + f[1], 0.0);
  EXPECT_GT(f[2], 0.2);
}

TEST(Sampler, LogprobsAreTheRawLogSoftmax) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 3;
  const std::vector<float> l{0.0f, 1.0f, 2.0f, 3.0f};
  const TokenLogprob t = s.sample(l, p, 1, 0);
  const auto want = softmax(l, 1.0);
  EXPECT_EQ(t.token, 3);
  EXPECT_NEAR(t.logprob, std::log(want[3]), 1e-5);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 3);
  EXPECT_EQ(t.top[1].first, 2);
  EXPECT_EQ(t.top[2].first, 1);
  EXPECT_NEAR(t.top[2].second, std::log(want[1]), 1e-5);
  // Temperature changes the draw, not the reported (raw) logprob.
  p.temperature = 5.0f;
  const TokenLogprob u = s.sample(l, p, 1, 0);
  EXPECT_NEAR(u.logprob, std::log(want[size_t(u.token)]), 1e-5);
}

TEST(Sampler, DrawsDependOnlyOnSeedAndIndex) {
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(std::sin(double(i)));
  SamplingParams p;
  Sampler a, b;
  std::vector<int32_t> x, y;
  for (int i = 0; i < 50; ++i) x.push_back(a.sample(l, p, 42, i).token);
  for (int i = 49; i >= 0; --i) y.insert(y.begin(), b.sample(l, p, 42, i).token);  // other order, other sampler
  EXPECT_EQ(x, y);
  std::vector<int32_t> z;
  for (int i = 0; i < 50; ++i) z.push_back(a.sample(l, p, 43, i).token);
  EXPECT_NE(x, z);
  for (int i = 0; i < 1000; ++i) {
    const double u = counter_uniform(9, i);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(Sampler, NanLogitsAreABug) {
  Sampler s;
  const std::vector<float> l{0.0f, std::nanf("")};
  EXPECT_DEATH(s.sample(l, SamplingParams{}, 0, 0), "NaN");
}

}  // namespace
}  // namespace dsv4::runtime
