// penalties_test.cpp: PenaltyState (engine/penalties.h) against a dense reference of vLLM's
// arithmetic: random logit_bias, penalties, prompts and outputs; after every generated token the
// sparse adjustments, applied to random logits, must give what the reference computes for every
// token of the vocabulary, bit for bit, and the entries must stay sorted and distinct.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine/penalties.h"

namespace dsv4::engine_detail {
namespace {

constexpr int kVocab = 97;

// vLLM: bias; repetition on tokens seen in the prompt or the output; then frequency * count and
// presence (one subtraction here, as PenaltyState forms it).
std::vector<float> reference(const std::vector<float>& raw, const SamplingParams& p, const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& output) {
  std::vector<float> x = raw;
  std::vector<int> count(kVocab, 0);
  std::vector<bool> seen(kVocab, false);
  for (int32_t t : prompt) seen[size_t(t)] = true;
  for (int32_t t : output) {
    seen[size_t(t)] = true;
    ++count[size_t(t)];
  }
  for (const auto& [t, b] : p.logit_bias) x[size_t(t)] += b;
  const bool penalties = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f;
  for (int t = 0; t < kVocab; ++t) {
    float& v = x[size_t(t)];
    const bool rep = p.repetition_penalty != 1.0f && (penalties && seen[size_t(t)]);
    if (rep) v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
    if (penalties && count[size_t(t)] > 0) v -= p.frequency_penalty * float(count[size_t(t)]) + p.presence_penalty;
  }
  return x;
}

TEST(PenaltyState, MatchesTheDenseReference) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> logit(-8.0f, 8.0f);
  for (int round = 0; round < 300; ++round) {
    SamplingParams p;
    const float choices[] = {0.0f, 0.0f, 0.5f, -1.25f, 2.0f};
    p.presence_penalty = choices[rng() % 5];
    p.frequency_penalty = choices[rng() % 5];
    const float reps[] = {1.0f, 1.0f, 1.3f, 0.7f, 2.0f};
    p.repetition_penalty = reps[rng() % 5];
    std::vector<int32_t> ids(kVocab);
    for (int i = 0; i < kVocab; ++i) ids[size_t(i)] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int k = 0, n = int(rng() % 6); k < n; ++k) p.logit_bias.emplace_back(ids[size_t(k)], logit(rng) * 10.0f);
    std::vector<int32_t> prompt;
    for (int k = 0, n = 1 + int(rng() % 20); k < n; ++k) prompt.push_back(int32_t(rng() % kVocab));

    PenaltyState st;
    st.init(p, prompt);
    std::vector<int32_t> output;
    for (int step = 0; step <= 30; ++step) {
      std::vector<float> raw(kVocab);
      for (float& v : raw) v = logit(rng);
      std::vector<float> got = raw;
      apply_logit_adjust(got, st.adjustments());
      const std::vector<float> want = reference(raw, p, prompt, output);
      for (int t = 0; t < kVocab; ++t)
        ASSERT_EQ(got[size_t(t)], want[size_t(t)]) << "round " << round << " step " << step << " token " << t;
      const auto adj = st.adjustments();
      for (size_t i = 1; i < adj.size(); ++i) ASSERT_LT(adj[i - 1].token, adj[i].token);
      // Mostly tokens already seen, as real outputs repeat.
      const int32_t next = rng() % 2 && !output.empty() ? output[rng() % output.size()] : int32_t(rng() % kVocab);
      output.push_back(next);
      st.add_output(next);
    }
  }
}

TEST(PenaltyState, NothingAskedNothingStored) {
  SamplingParams p;
  EXPECT_FALSE(PenaltyState::wanted(p));
  PenaltyState st;
  const std::vector<int32_t> prompt{1, 2, 3};
  st.init(p, prompt);
  for (int i = 0; i < 10; ++i) st.add_output(i);
  EXPECT_TRUE(st.adjustments().empty());
  // A bias alone touches only its tokens, however many are generated.
  p.logit_bias = {{7, 1.0f}, {3, -2.0f}};
  st.init(p, prompt);
  for (int i = 0; i < 10; ++i) st.add_output(i);
  ASSERT_EQ(st.adjustments().size(), 2u);
  EXPECT_EQ(st.adjustments()[0].token, 3);
  EXPECT_EQ(st.adjustments()[1].token, 7);
}

}  // namespace
}  // namespace dsv4::engine_detail
