// engine_cpu_test.cpp: the engine over the CPU reference runner. Requests that share steps, and
// requests that are preempted and recomputed because the KV pool is too small for all of them,
// produce exactly the tokens they produce alone, greedy and sampled (the sampler's draws depend
// only on the request's seed and token index), and so do the choices of one prompt that share
// its computation (forks).
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

// The choices of one prompt (one group) fork from the first choice's state after the prompt's
// last-but-one token; each must produce exactly the tokens it produces alone. The prompt crosses a
// KV block and ends mid-window for the compressors, so the copied state includes a partial window.
TEST_F(EngineCpuTest, ForkedChoicesEqualTheRequestsAlone) {
  std::vector<GenerationRequest> reqs;
  for (const float t : {0.0f, 1.0f, 0.7f}) {
    reqs.push_back(make(4, 301, 24, t));
    reqs.back().sampling.seed = 2000 + uint64_t(reqs.size());
  }
  EngineConfig c;
  c.max_num_seqs = 3;
  c.max_model_len = 512;
  c.max_num_batched_tokens = 128;
  std::vector<std::vector<int32_t>> alone;
  {
    auto e = start(c);
    for (const GenerationRequest& g : reqs) {
      auto s = e->submit(g);
      ASSERT_TRUE(s.is_ok());
      alone.push_back(run_all(*e, *s));
      ASSERT_EQ(alone.back().size(), 24u);
    }
    EXPECT_EQ(e->metrics().forked_prompt_tokens_total, 0u);
  }
  auto e = start(c);
  auto streams = e->submit_group(reqs);
  ASSERT_TRUE(streams.is_ok()) << streams.status().to_string();
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(run_all(*e, (*streams)[i]), alone[i]) << "choice " << i;
  // The step's counters are added after its last tokens reach the streams: wait for the gauges,
  // which come after them.
  for (int i = 0; i < 200 && e->metrics().n_running != 0; ++i) std::this_thread::sleep_for(10ms);
  const EngineMetrics m = e->metrics();
  EXPECT_EQ(m.n_running, 0);
  EXPECT_EQ(m.forked_prompt_tokens_total, 2u * 300u);
  EXPECT_EQ(m.computed_tokens_total, 301u + 2u + 3u * 23u);
}

// logit_bias and the penalties end to end: the engine's greedy tokens are those of a decode loop
// that drives the CPU runner itself and adjusts every logit of the vocabulary densely, by vLLM's
// rules, from the tokens so far (an implementation independent of the engine's sparse one). A
// request whose penalties change nothing would pass that check, so the tokens must also differ
// from the request without them.
TEST_F(EngineCpuTest, PenaltiesAndBiasSteerDecoding) {
  GenerationRequest g = make(4, 24, 16, 0.0f);
  const GenerationRequest plain = g;
  g.sampling.presence_penalty = 1.5f;
  g.sampling.frequency_penalty = 0.75f;
  g.sampling.repetition_penalty = 1.8f;
  g.sampling.logit_bias = {{17, 4.0f}, {g.prompt[3], -3.0f}, {900, 2.5f}};
  std::vector<int32_t> got, got_plain;
  {
    auto e = start(EngineConfig{});
    auto s = e->submit(g);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    got = run_all(*e, *s);
    auto p = e->submit(plain);
    ASSERT_TRUE(p.is_ok());
    got_plain = run_all(*e, *p);
  }
  ASSERT_EQ(got.size(), 16u);
  EXPECT_NE(got, got_plain);

  auto runner = runtime::CpuRunner::load(*dir_, "bf16", "fp8", 1);
  ASSERT_TRUE(runner.is_ok());
  runtime::CpuRunner& r = **runner;
  const int V = r.info().vocab_size;
  std::vector<int32_t> seq = g.prompt, want;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (int i = 0; i < 16; ++i) {
    std::vector<LogitAdjust> dense(static_cast<size_t>(V));
    std::vector<int> count(size_t(V), 0);
    std::vector<bool> seen(size_t(V), false);
    for (size_t k = 0; k < seq.size(); ++k) {
      seen[size_t(seq[k])] = true;
      if (k >= g.prompt.size()) ++count[size_t(seq[k])];
    }
    for (int t = 0; t < V; ++t) {
      LogitAdjust& a = dense[size_t(t)];
      a.token = t;
      for (const auto& [id, b] : g.sampling.logit_bias)
        if (id == t) a.bias = b;
      if (seen[size_t(t)]) a.rep = g.sampling.repetition_penalty;
      if (count[size_t(t)] > 0)
        a.sub = g.sampling.frequency_penalty * float(count[size_t(t)]) + g.sampling.presence_penalty;
    }
    const int64_t pos0 = i == 0 ? 0 : int64_t(seq.size()) - 1;
    runtime::StepSequence q{1, 0, {}, pos0, std::span<const int32_t>(seq.data() + pos0, seq.size() - size_t(pos0)),
                            int64_t(g.prompt.size()), true, &greedy, 0, i, dense};
    runtime::StepInput in{{q}};
    runtime::StepOutput out;
    ASSERT_TRUE(r.execute(in, &out).is_ok());
    ASSERT_EQ(out.sampled.size(), 1u);
    want.push_back(out.sampled[0].token.token);
    seq.push_back(want.back());
  }
  EXPECT_EQ(got, want);
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
