// cpu_runner_test.cpp: the CPU runner against the CPU reference called directly: a prompt fed in
// chunks interleaved with another sequence in another slot, then greedy decode, gives the tokens
// (and logprobs) of one-shot forwards; a released slot starts a fresh sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "cpu/model.h"
#include "model/make_model.h"
#include "model/safetensors.h"
#include "runtime/cpu_runner.h"

namespace dsv4::runtime {
namespace {

namespace fs = std::filesystem;

class CpuRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((fs::temp_directory_path() / ("dsv4_cpu_runner_" + std::to_string(::getpid()))).string());
    MakeModelOptions o;
    o.preset = "tiny";
    o.layers = 4;
    o.seed = 3;
    o.out_dir = *dir_;
    std::string summary;
    ASSERT_TRUE(make_model(o, &summary).is_ok());
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  static std::string* dir_;
};
std::string* CpuRunnerTest::dir_ = nullptr;

// Greedy continuation of `prompt` by the reference: one forward of the prompt, then one token at a time.
std::vector<int32_t> reference_greedy(const std::string& dir, const std::vector<int32_t>& prompt, int n) {
  auto cfg = ModelConfig::load(dir);
  auto w = ModelWeights::load(dir, *cfg);
  cpu::CpuModel model(*cfg, **w, cpu::Numerics::bf16_gpu());
  auto seq = model.new_sequence();
  std::vector<float> logits(size_t(cfg->vocab_size));
  std::vector<int32_t> out;
  std::span<const int32_t> feed(prompt);
  int32_t next = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(model.forward(*seq, feed, cpu::LogitsRows::kLast, logits.data()).is_ok());
    next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    feed = std::span<const int32_t>(&out.back(), 1);
  }
  return out;
}

TEST_F(CpuRunnerTest, ChunkedAndInterleavedMatchesTheReference) {
  auto runner = CpuRunner::load(*dir_, "bf16", "fp8", 1);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  CpuRunner& r = **runner;
  ASSERT_TRUE(r.on_engine_thread_start().is_ok());
  EXPECT_EQ(r.info().vocab_size, 1024);
  EXPECT_GT(r.info().kv_block_bytes, 0);

  std::vector<int32_t> a(40), b(9);
  for (size_t i = 0; i < a.size(); ++i) a[i] = int32_t((i * 37 + 5) % 1024);
  for (size_t i = 0; i < b.size(); ++i) b[i] = int32_t((i * 91 + 2) % 1024);
  const int kSteps = 5;
  const auto want_a = reference_greedy(*dir_, a, kSteps);
  const auto want_b = reference_greedy(*dir_, b, kSteps);

  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.logprobs = 2;
  std::vector<int32_t> got_a, got_b;
  StepOutput out;
  auto step = [&](std::vector<StepSequence> seqs) {
    StepInput in{std::move(seqs)};
    out.clear();
    ASSERT_TRUE(r.execute(in, &out).is_ok());
    ASSERT_TRUE(out.failed.empty());
  };
  // Step 1: a's first chunk (no sample) and all of b (sample).
  step({{1, 0, {}, 0, std::span<const int32_t>(a.data(), 16), 40, false, &greedy, 0, 0, {}},
        {2, 1, {}, 0, std::span<const int32_t>(b), 9, true, &greedy, 0, 0, {}}});
  ASSERT_EQ(out.sampled.size(), 1u);
  got_b.push_back(out.sampled[0].token.token);
  EXPECT_EQ(out.sampled[0].token.top.size(), 2u);
  EXPECT_EQ(out.sampled[0].token.top[0].first, got_b[0]);
  EXPECT_FLOAT_EQ(out.sampled[0].token.top[0].second, out.sampled[0].token.logprob);
  // Step 2: a's second chunk and b's decode.
  step({{1, 0, {}, 16, std::span<const int32_t>(a.data() + 16, 16), 40, false, &greedy, 0, 0, {}},
        {2, 1, {}, 9, std::span<const int32_t>(&got_b.back(), 1), 9, true, &greedy, 0, 1, {}}});
  got_b.push_back(out.sampled[0].token.token);
  // Step 3: a's last chunk samples.
  step({{1, 0, {}, 32, std::span<const int32_t>(a.data() + 32, 8), 40, true, &greedy, 0, 0, {}}});
  got_a.push_back(out.sampled[0].token.token);
  for (int i = 1; i < kSteps; ++i) {
    step({{1, 0, {}, 40 + i - 1, std::span<const int32_t>(&got_a.back(), 1), 40, true, &greedy, 0, i, {}}});
    got_a.push_back(out.sampled[0].token.token);
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(std::vector<int32_t>(want_b.begin(), want_b.begin() + 2), got_b);

  // Slot 1 released and reused by a new sequence: it starts from scratch (same tokens as b).
  r.release(2, 1);
  step({{3, 1, {}, 0, std::span<const int32_t>(b), 9, true, &greedy, 0, 0, {}}});
  EXPECT_EQ(out.sampled[0].token.token, want_b[0]);
}

TEST_F(CpuRunnerTest, BadTokensFailOneSequenceAndBadOptionsAreRefused) {
  auto runner = CpuRunner::load(*dir_, "fp32", "bf16", 0);
  ASSERT_TRUE(runner.is_ok());
  SamplingParams sp;
  const std::vector<int32_t> good{1, 2, 3}, bad{1, 5000};
  StepInput in;
  in.seqs.push_back({1, 0, {}, 0, std::span<const int32_t>(bad), 2, true, &sp, 0, 0, {}});
  in.seqs.push_back({2, 1, {}, 0, std::span<const int32_t>(good), 3, true, &sp, 0, 0, {}});
  StepOutput out;
  ASSERT_TRUE((*runner)->execute(in, &out).is_ok());
  ASSERT_EQ(out.failed.size(), 1u);
  EXPECT_EQ(out.failed[0].first, 1);
  ASSERT_EQ(out.sampled.size(), 1u);
  EXPECT_EQ(out.sampled[0].seq_id, 2);
  EXPECT_FALSE(CpuRunner::load(*dir_, "fp16", "fp8", 0).is_ok());
  EXPECT_FALSE(CpuRunner::load(*dir_, "bf16", "int8", 0).is_ok());
  EXPECT_FALSE(CpuRunner::load(*dir_ + "/missing", "bf16", "fp8", 0).is_ok());
}

// A checkpoint with a NaN in a norm weight produced NaN logits, and the sampler's NaN check aborted
// `dsv4 generate` / the server; now that one request fails with a message.
TEST_F(CpuRunnerTest, NanWeightsFailTheRequestInsteadOfAborting) {
  const std::string dir = *dir_ + "_nan";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(*dir_ + "/config.json", dir + "/config.json");
  {
    auto store = TensorStore::open(*dir_);
    ASSERT_TRUE(store.is_ok()) << store.status().to_string();
    SafetensorsWriter w;
    for (const auto& [name, t] : (*store)->tensors()) {
      std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
      if (name == "norm.weight") {
        ASSERT_EQ(t.dtype, DType::kBF16);
        for (size_t i = 0; i + 1 < bytes.size(); i += 2) bytes[i] = 0xc0, bytes[i + 1] = 0x7f;  // bf16 NaN
      }
      w.add(name, t.dtype, t.shape, std::move(bytes));
    }
    ASSERT_TRUE(w.write(dir + "/model.safetensors").is_ok());
  }
  auto runner = CpuRunner::load(dir, "fp32", "bf16", 0);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  SamplingParams sp;
  const std::vector<int32_t> ids{1, 2, 3};
  StepInput in;
  in.seqs.push_back({1, 0, {}, 0, std::span<const int32_t>(ids), 3, true, &sp, 0, 0, {}});
  StepOutput out;
  ASSERT_TRUE((*runner)->execute(in, &out).is_ok());
  EXPECT_TRUE(out.sampled.empty());
  ASSERT_EQ(out.failed.size(), 1u);
  EXPECT_EQ(out.failed[0].first, 1);
  EXPECT_NE(out.failed[0].second.message().find("NaN logit"), std::string::npos) << out.failed[0].second.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4::runtime
