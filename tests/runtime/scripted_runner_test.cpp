// scripted_runner_test.cpp: the diagnostic script runner: script parsing and its errors, rule
// choice from the decoded prompt, the step protocol (nothing until the prompt's last chunk),
// EOS after the output or repetition, and restart from position 0 after a release.
#include <gtest/gtest.h>

#include "runtime/scripted_runner.h"

namespace dsv4::runtime {
namespace {

// A toy "tokenizer": one token per character (its code), decode is the inverse.
Result<std::vector<int32_t>> encode(std::string_view s) {
  std::vector<int32_t> ids;
  for (const char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}
std::string decode(std::span<const int32_t> ids) {
  std::string s;
  for (const int32_t i : ids) s += char(i);
  return s;
}

TEST(Script, ParsesRulesAndRejectsMistakes) {
  auto s = parse_script(R"({"rules": [{"prompt_contains": "hi", "output": "yo", "eos": false}],
                            "default": {"output": "d"}, "step_delay_ms": 0})",
                        "t", encode);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_EQ(s->rules.size(), 1u);
  EXPECT_EQ(s->rules[0].output, (std::vector<int32_t>{'y', 'o'}));
  EXPECT_FALSE(s->rules[0].eos);
  EXPECT_TRUE(s->fallback.eos);
  for (const char* bad : {"[", "[]", R"({"rules": 3})", R"({"rules": [{"output": "x"}]})",
                          R"({"rules": [{"prompt_contains": "a", "output": 5}]})", R"({"typo": 1})",
                          R"({"step_delay_ms": -1})", R"({"default": {"output": "", "eos": false}})"}) {
    EXPECT_FALSE(parse_script(bad, "t", encode).is_ok()) << bad;
  }
}

TEST(ScriptedRunner, FollowsTheStepProtocol) {
  auto script = parse_script(R"({"rules": [{"prompt_contains": "loop", "output": "ab", "eos": false}],
                                 "default": {"output": "xy"}})",
                             "t", encode);
  ASSERT_TRUE(script.is_ok());
  ScriptedRunner r(std::move(script).value(), decode, 256, /*eos=*/1, 1024, "t");
  SamplingParams sp;
  const std::vector<int32_t> p1 = encode("say loop").value(), p2 = encode("other").value();
  // Step 1: both prompts in chunks; only the chunk that ends a prompt samples.
  StepInput in;
  in.seqs.push_back({1, 0, {}, 0, std::span<const int32_t>(p1.data(), 4), int64_t(p1.size()), false, &sp, 0, 0, {}});
  in.seqs.push_back({2, 1, {}, 0, std::span<const int32_t>(p2), int64_t(p2.size()), true, &sp, 0, 0, {}});
  StepOutput out;
  ASSERT_TRUE(r.execute(in, &out).is_ok());
  ASSERT_EQ(out.sampled.size(), 1u);
  EXPECT_EQ(out.sampled[0].seq_id, 2);
  EXPECT_EQ(out.sampled[0].token.token, 'x');
  // Step 2: the rest of prompt 1 (rule "loop"), and the decode of sequence 2.
  in.seqs.clear();
  out.clear();
  const int32_t x = 'x';
  in.seqs.push_back({1, 0, {}, 4, std::span<const int32_t>(p1.data() + 4, p1.size() - 4), int64_t(p1.size()), true,
                     &sp, 0, 0, {}});
  in.seqs.push_back({2, 1, {}, int64_t(p2.size()), std::span<const int32_t>(&x, 1), int64_t(p2.size()), true, &sp, 0, 1, {}});
  ASSERT_TRUE(r.execute(in, &out).is_ok());
  ASSERT_EQ(out.sampled.size(), 2u);
  EXPECT_EQ(out.sampled[0].token.token, 'a');
  EXPECT_EQ(out.sampled[1].token.token, 'y');
  // Past the end: EOS for the default rule, repetition for "eos": false.
  in.seqs.clear();
  out.clear();
  const int32_t a = 'a', y = 'y';
  in.seqs.push_back({1, 0, {}, int64_t(p1.size()), std::span<const int32_t>(&a, 1), int64_t(p1.size()), true, &sp, 0, 3, {}});
  in.seqs.push_back({2, 1, {}, int64_t(p2.size()) + 1, std::span<const int32_t>(&y, 1), int64_t(p2.size()), true, &sp, 0, 2, {}});
  ASSERT_TRUE(r.execute(in, &out).is_ok());
  EXPECT_EQ(out.sampled[0].token.token, 'b');  // index 3 of "abab..."
  EXPECT_EQ(out.sampled[1].token.token, 1);    // EOS
  // A released slot starts over at position 0 (after a preemption the engine recomputes).
  r.release(1, 0);
  in.seqs.clear();
  out.clear();
  in.seqs.push_back({1, 0, {}, 0, std::span<const int32_t>(p1), int64_t(p1.size()), true, &sp, 0, 0, {}});
  ASSERT_TRUE(r.execute(in, &out).is_ok());
  EXPECT_EQ(out.sampled[0].token.token, 'a');
}

}  // namespace
}  // namespace dsv4::runtime
