// engine_cpu_test.cpp: the engine over the CPU reference runner. Requests that share steps, and
// requests that are preempted and recomputed because the KV pool is too small for all of them,
// produce exactly the tokens they produce alone, greedy and sampled (the sampler's draws depend
// only on the request's seed and token index).
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "dsv4/engine.h"
#include "model/make_model.h"
#include "runtime/cpu_runner.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class EngineCpuTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((fs::temp_directory_path() / ("dsv4_engine_cpu_" + std::to_string(::getpid()))).string());
    MakeModelOptions o;
    o.preset = "tiny";
    o.layers = 4;
    o.seed = 11;
    o.out_dir = *dir_;
    std::string summary;
    ASSERT_TRUE(make_model(o, &summary).is_ok());
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  static std::unique_ptr<Engine> start(EngineConfig c) {
    auto r = runtime::CpuRunner::load(*dir_, "bf16", "fp8", 1);
    EXPECT_TRUE(r.is_ok());
    auto e = Engine::start(c, std::move(r).value(), nullptr);
    EXPECT_TRUE(e.is_ok()) << e.status().to_string();
    return std::move(e).value();
  }
  static std::string* dir_;
};
std::string* EngineCpuTest::dir_ = nullptr;

GenerationRequest make(int salt, int n_prompt, int max_tokens, float temperature) {
  GenerationRequest g;
  for (int i = 0; i < n_prompt; ++i) g.prompt.push_back((i * 31 + salt * 17 + 3) % 1024);
  g.stop.max_tokens = max_tokens;
  g.stop.ignore_eos = true;  // the random model may emit EOS; keep lengths fixed
  g.sampling.temperature = temperature;
  g.sampling.has_seed = true;
  g.sampling.seed = 1000 + uint64_t(salt);
  return g;
}

std::vector<int32_t> run_all(Engine& e, RequestStream& s) {
  std::vector<int32_t> out;
  std::vector<TokenEvent> evs;
  const auto deadline = Clock::now() + 120s;
  while (!s.done() && Clock::now() < deadline) {
    evs.clear();
    s.wait(&evs, 50ms);
    for (const TokenEvent& ev : evs) out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
  }
  EXPECT_TRUE(s.done());
  return out;
}

TEST_F(EngineCpuTest, PreemptionAndBatchingDoNotChangeTokens) {
  // Three requests of 200 + 80 tokens need 2 blocks each; the small pool holds 3 blocks, so
  // decodes crossing position 256 force preemptions.
  const std::vector<GenerationRequest> reqs{make(1, 200, 80, 0.0f), make(2, 230, 80, 1.0f), make(3, 190, 80, 0.8f)};
  std::vector<std::vector<int32_t>> alone;
  {
    EngineConfig c;
    c.max_num_seqs = 1;
    c.max_model_len = 512;
    auto e = start(c);
    for (const GenerationRequest& g : reqs) {
      auto s = e->submit(g);
      ASSERT_TRUE(s.is_ok());
      alone.push_back(run_all(*e, *s));
      ASSERT_EQ(alone.back().size(), 80u);
    }
    EXPECT_EQ(e->metrics().preemptions_total, 0u);
  }
  EngineConfig c;
  c.max_num_seqs = 3;
  c.max_model_len = 512;
  c.num_kv_blocks = 3;
  c.max_num_batched_tokens = 64;  // chunked prefill too
  auto e = start(c);
  std::vector<RequestStream> streams;
  for (const GenerationRequest& g : reqs) {
    auto s = e->submit(g);
    ASSERT_TRUE(s.is_ok());
    streams.push_back(std::move(s).value());
  }
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(run_all(*e, streams[i]), alone[i]) << "request " << i;
  const EngineMetrics m = e->metrics();
  EXPECT_GT(m.preemptions_total, 0u);
  EXPECT_EQ(m.finished_length, 3u);
  EXPECT_GT(m.computed_tokens_total, 3u * (200 + 80));  // recomputation happened
  for (int i = 0; i < 100 && e->metrics().kv_blocks_free != 3; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(e->metrics().kv_blocks_free, 3);
}

TEST_F(EngineCpuTest, ConfigurationErrorsSayWhy) {
  EngineConfig c;
  c.max_model_len = 1024;
  c.num_kv_blocks = 2;  // 512 tokens: one sequence of 1024 cannot fit
  auto r = runtime::CpuRunner::load(*dir_, "bf16", "fp8", 1);
  auto e = Engine::start(c, std::move(r).value(), nullptr);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("--num-gpu-blocks"), std::string::npos);
  c = EngineConfig{};
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 4;
  r = runtime::CpuRunner::load(*dir_, "bf16", "fp8", 1);
  EXPECT_FALSE(Engine::start(c, std::move(r).value(), nullptr).is_ok());
  // Stop strings need a tokenizer.
  auto ok = start(EngineConfig{});
  GenerationRequest g = make(1, 5, 2, 0.0f);
  g.stop.stop = {"x"};
  EXPECT_EQ(ok->submit(g).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsv4
