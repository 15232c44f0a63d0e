// engine_test.cpp: the engine thread with the scripted runner and the real tokenizer: events and
// counts, EOS / max_tokens / stop strings, continuous batching (a new request joins a running
// decode), aborts between prefill chunks and mid-decode (blocks freed at once), dropped streams,
// queue limits, refusals that say why, shutdown with requests in flight, and the n choices of one
// prompt sharing its computation.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "dsv4/engine.h"
#include "runtime/scripted_runner.h"
#include "test_tokenizer.h"

namespace dsv4 {
namespace {

using testing_util::v4_tokenizer;
using namespace std::chrono_literals;

constexpr const char* kScript = R"({
  "rules": [
    {"prompt_contains": "count", "output": "one two three four five STOP six seven"},
    {"prompt_contains": "forever", "output": " la", "eos": false}
  ],
  "default": {"output": "Hello from the script."}
})";

std::unique_ptr<runtime::ModelRunner> scripted(const char* json, int step_delay_ms = 0, int token_delay_us = 0) {
  const tok::Tokenizer& t = *v4_tokenizer();
  auto s = runtime::parse_script(json, "test", [&t](std::string_view x) { return t.encode(x, true); });
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  s->step_delay_ms = step_delay_ms;
  s->token_delay_us = token_delay_us;
  auto decode = [&t](std::span<const int32_t> ids) {
    auto r = t.decode(ids, false);
    return r.is_ok() ? r.value() : std::string();
  };
  return std::make_unique<runtime::ScriptedRunner>(std::move(s).value(), decode, t.n_ids(), 1, 1 << 16, "test");
}

std::unique_ptr<Engine> start(std::unique_ptr<runtime::ModelRunner> r, EngineConfig c = {}) {
  if (c.max_model_len == 0) c.max_model_len = 4096;
  auto e = Engine::start(c, std::move(r), v4_tokenizer());
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  return std::move(e).value();
}

GenerationRequest request(const std::string& prompt, int max_tokens = 64) {
  GenerationRequest g;
  g.id = "t";
  g.prompt = v4_tokenizer()->encode(prompt, true).value();
  g.stop.max_tokens = max_tokens;
  return g;
}

struct Collected {
  std::string text;
  std::vector<int32_t> tokens;
  TokenEvent last;
  int n_events = 0;
};

Collected collect(RequestStream& s, std::chrono::milliseconds limit = 20s) {
  Collected c;
  const auto deadline = Clock::now() + limit;
  std::vector<TokenEvent> evs;
  while (!s.done() && Clock::now() < deadline) {
    evs.clear();
    s.wait(&evs, 50ms);
    for (TokenEvent& e : evs) {
      ++c.n_events;
      c.text += e.text;
      c.tokens.insert(c.tokens.end(), e.tokens.begin(), e.tokens.end());
      if (e.finish != FinishReason::kNone) c.last = std::move(e);
    }
  }
  EXPECT_TRUE(s.done()) << "the request did not finish in time";
  return c;
}

void expect_idle(Engine& e) {
  // Gauges are updated at the end of each step; give the engine a moment to go idle.
  EngineMetrics m;
  for (int i = 0; i < 100; ++i) {
    m = e.metrics();
    if (m.n_running == 0 && m.n_waiting == 0 && m.kv_blocks_free == m.kv_blocks_total) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(m.n_running, 0);
  EXPECT_EQ(m.n_waiting, 0);
  EXPECT_EQ(m.kv_blocks_free, m.kv_blocks_total);
  EXPECT_EQ(m.slots_free, m.slots_total);
}

TEST(Engine, GeneratesTheScriptThenEos) {
  DSV4_REQUIRE_TOKENIZER();
  auto e = start(scripted(kScript));
  auto s = e->submit(request("hi there"));
  ASSERT_TRUE(s.is_ok());
  const Collected c = collect(*s);
  EXPECT_EQ(c.text, "Hello from the script.");
  EXPECT_EQ(c.last.finish, FinishReason::kStop);
  EXPECT_EQ(c.last.stop_reason, "eos");
  EXPECT_FALSE(c.last.stop_string);
  EXPECT_EQ(c.last.stop_token, -1);
  EXPECT_EQ(c.tokens.back(), 1);  // EOS is reported as a token but not as text
  EXPECT_EQ(c.last.n_output_tokens, int32_t(c.tokens.size()));
  EXPECT_EQ(c.last.n_prompt_tokens, int32_t(v4_tokenizer()->encode("hi there", true)->size()));
  expect_idle(*e);
  const EngineMetrics m = e->metrics();
  EXPECT_EQ(m.finished_stop, 1u);
  EXPECT_EQ(m.generation_tokens_total, c.tokens.size());
  EXPECT_EQ(m.ttft.count, 1u);
}

// wait_any reads several streams on one thread (the n choices of one API request): it wakes on
// any stream's events without a poll delay, hands each stream's events back under its own index
// in order, sees events that arrived before its first call, and returns false at once when all
// streams are done.
TEST(Engine, WaitAnyReadsSeveralStreams) {
  DSV4_REQUIRE_TOKENIZER();
  auto e = start(scripted(kScript, /*step_delay_ms=*/2));
  std::vector<RequestStream> streams;
  streams.push_back(e->submit(request("count", 64)).value());
  streams.push_back(e->submit(request("hi", 64)).value());
  std::this_thread::sleep_for(30ms);  // events pile up before the first call
  streams.push_back(e->submit(request("count", 3)).value());
  std::string text[3];
  int finals[3] = {0, 0, 0};
  std::vector<std::vector<TokenEvent>> events;
  const auto deadline = Clock::now() + 20s;
  int empty_waits = 0;
  while (Clock::now() < deadline) {
    for (auto& v : events) v.clear();
    const auto t0 = Clock::now();
    if (!RequestStream::wait_any(streams, &events, 5s)) {
      ++empty_waits;
      break;
    }
    // Events are handed back as they come, not after the timeout.
    EXPECT_LT(Clock::now() - t0, 2s);
    ASSERT_EQ(events.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      for (const TokenEvent& ev : events[i]) {
        EXPECT_EQ(finals[i], 0) << "events after the final one";
        text[i] += ev.text;
        finals[i] += ev.finish != FinishReason::kNone;
      }
  }
  EXPECT_EQ(empty_waits, 1);  // the call after the last final event
  for (const RequestStream& s : streams) EXPECT_TRUE(s.done());
  EXPECT_EQ(text[0], "one two three four five STOP six seven");
  EXPECT_EQ(text[1], "Hello from the script.");
  EXPECT_EQ(text[2], "one two three");
  EXPECT_EQ(finals[0] + finals[1] + finals[2], 3);
  const auto t0 = Clock::now();
  EXPECT_FALSE(RequestStream::wait_any(streams, &events, 5s));
  EXPECT_LT(Clock::now() - t0, 1s) << "all done: no wait";
  expect_idle(*e);
}

TEST(Engine, MaxTokensAndStopStrings) {
  DSV4_REQUIRE_TOKENIZER();
  auto e = start(scripted(kScript));
  auto s = e->submit(request("count please", 3));
  const Collected a = collect(*s);
  EXPECT_EQ(a.last.finish, FinishReason::kLength);
  EXPECT_EQ(a.last.n_output_tokens, 3);
  EXPECT_EQ(a.text, "one two three");

  GenerationRequest g = request("count please");
  g.stop.stop = {"STOP", "seven"};
  auto t = e->submit(std::move(g));
  const Collected b = collect(*t);
  EXPECT_EQ(b.last.finish, FinishReason::kStop);
  EXPECT_EQ(b.last.stop_reason, "STOP");
  EXPECT_TRUE(b.last.stop_string);
  EXPECT_EQ(b.last.stop_token, -1);
  EXPECT_EQ(b.text, "one two three four five ");

  g = request("count please");
  g.stop.stop_token_ids = {v4_tokenizer()->encode(" four", false)->at(0)};
  auto u = e->submit(std::move(g));
  const Collected c = collect(*u);
  EXPECT_EQ(c.last.stop_reason.rfind("token:", 0), 0u);
  EXPECT_FALSE(c.last.stop_string);
  EXPECT_EQ(c.last.stop_token, v4_tokenizer()->encode(" four", false)->at(0));
  EXPECT_EQ(c.text, "one two three");
  expect_idle(*e);
}

TEST(Engine, NewRequestsJoinRunningDecodes) {
  DSV4_REQUIRE_TOKENIZER();
  auto e = start(scripted(kScript, /*step_delay_ms=*/5));
  auto a = e->submit(request("sing forever", 60));
  ASSERT_TRUE(a.is_ok());
  std::vector<TokenEvent> evs;
  while (evs.empty()) a->wait(&evs, 50ms);  // a is decoding
  auto b = e->submit(request("hi there"));
  const Collected cb = collect(*b);
  EXPECT_FALSE(a->done()) << "b should finish while a is still running";
  const Collected ca = collect(*a);
  EXPECT_EQ(cb.text, "Hello from the script.");
  EXPECT_EQ(ca.last.finish, FinishReason::kLength);
  const EngineMetrics m = e->metrics();
  // Some steps decoded both sequences together.
  EXPECT_GT(m.iteration_decode_seqs.count - m.iteration_decode_seqs.counts[0], 0u);
  expect_idle(*e);
}

TEST(Engine, AbortBetweenPrefillChunksFreesBlocksBeforeTheNextStep) {
  DSV4_REQUIRE_TOKENIZER();
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 16;
  auto e = start(scripted(kScript, 0, /*token_delay_us=*/10000), c);  // 16 tokens: 160 ms a step
  std::string long_prompt;
  for (int i = 0; i < 60; ++i) long_prompt += " word";
  auto s = e->submit(request(long_prompt));
  ASSERT_TRUE(s.is_ok());
  while (s->queued()) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(50ms);  // inside the first chunk
  EXPECT_LT(e->metrics().kv_blocks_free, e->metrics().kv_blocks_total);
  s->abort();
  const Collected r = collect(*s, 5s);
  EXPECT_EQ(r.last.finish, FinishReason::kAbort);
  EXPECT_TRUE(r.tokens.empty());
  const EngineMetrics m = e->metrics();
  EXPECT_EQ(m.finished_abort, 1u);
  EXPECT_LE(m.steps_total, 2u) << "the abort must land before the next chunk";
  EXPECT_LT(m.computed_tokens_total, 60u);
  EXPECT_EQ(m.abort_latency.count, 1u);
  expect_idle(*e);
}

TEST(Engine, AbortMidDecodeAndDroppedStreams) {
  DSV4_REQUIRE_TOKENIZER();
  auto e = start(scripted(kScript, 2));
  auto s = e->submit(request("sing forever", 1000));
  std::vector<TokenEvent> evs;
  while (evs.size() < 3) s->wait(&evs, 50ms);
  s->abort();
  s->abort();  // idempotent
  const Collected r = collect(*s, 5s);
  EXPECT_EQ(r.last.finish, FinishReason::kAbort);
  EXPECT_LT(r.last.n_output_tokens, 100);
  {
    auto dropped = e->submit(request("sing forever", 1000));  // destroyed while running
    std::vector<TokenEvent> first;
    while (first.empty()) dropped->wait(&first, 50ms);
  }
  expect_idle(*e);
  EXPECT_EQ(e->metrics().finished_abort, 2u);
}

TEST(Engine, RefusesWithReasons) {
  DSV4_REQUIRE_TOKENIZER();
  EngineConfig c;
  c.max_num_seqs = 1;
  c.max_waiting = 1;
  c.max_model_len = 64;
  auto e = start(scripted(kScript, 5), c);
  GenerationRequest g = request("hi", 100);
  auto r = e->submit(g);
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);  // 2 + 100 > 64: can never fit
  EXPECT_NE(r.status().message().find("64"), std::string::npos);
  g.prompt.clear();
  EXPECT_EQ(e->submit(g).status().code(), StatusCode::kInvalidArgument);
  g = request("hi", 4);
  g.prompt.push_back(1 << 20);
  EXPECT_EQ(e->submit(g).status().code(), StatusCode::kInvalidArgument);
  g = request("hi", 4);
  g.sampling.temperature = -1.0f;
  EXPECT_EQ(e->submit(g).status().code(), StatusCode::kInvalidArgument);
  g = request("hi", 4);
  g.stop.stop = {""};
  EXPECT_EQ(e->submit(g).status().code(), StatusCode::kInvalidArgument);

  // One running, one waiting: the third is refused (the queue is full), not lost.
  auto a = e->submit(request("sing forever", 40));
  std::vector<TokenEvent> evs;
  while (evs.empty()) a->wait(&evs, 50ms);
  auto b = e->submit(request("hi", 8));
  ASSERT_TRUE(b.is_ok());
  auto c3 = e->submit(request("hi", 4));
  EXPECT_EQ(c3.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(collect(*b).text, "Hello from the script.");
  collect(*a);
  expect_idle(*e);
  EXPECT_GE(e->metrics().refused_total, 5u);
}

// The n choices of one API request queue all or none: a group that does not fit is refused
// whole and takes no place in the queue; one invalid member refuses the group.
TEST(Engine, AGroupQueuesWholeOrNotAtAll) {
  DSV4_REQUIRE_TOKENIZER();
  EngineConfig c;
  c.max_num_seqs = 1;
  c.max_waiting = 2;
  auto e = start(scripted(kScript, 5), c);
  auto group_of = [](int n, int max_tokens) {
    std::vector<GenerationRequest> g;
    for (int i = 0; i < n; ++i) g.push_back(request("hi", max_tokens));
    return g;
  };
  EXPECT_EQ(e->submit_group({}).status().code(), StatusCode::kInvalidArgument);
  auto too_many = e->submit_group(group_of(3, 4));
  EXPECT_EQ(too_many.status().code(), StatusCode::kInvalidArgument);  // more than the queue ever holds
  EXPECT_NE(too_many.status().message().find("holds 2"), std::string::npos) << too_many.status().message();

  auto a = e->submit(request("sing forever", 40));  // running: the one sequence slot
  std::vector<TokenEvent> evs;
  while (evs.empty()) a->wait(&evs, 50ms);
  auto b = e->submit(request("hi", 8));  // waiting: one place of two left
  ASSERT_TRUE(b.is_ok());
  auto g2 = e->submit_group(group_of(2, 4));
  EXPECT_EQ(g2.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(g2.status().message().find("no room for 2"), std::string::npos) << g2.status().message();
  std::vector<GenerationRequest> bad = group_of(1, 4);
  bad.push_back(request("hi", 4));
  bad.back().sampling.temperature = -1.0f;
  EXPECT_EQ(e->submit_group(std::move(bad)).status().code(), StatusCode::kInvalidArgument);
  // Neither refused group took the last place.
  auto g1 = e->submit_group(group_of(1, 8));
  ASSERT_TRUE(g1.is_ok());
  ASSERT_EQ(g1->size(), 1u);
  EXPECT_EQ(collect(*b).text, "Hello from the script.");
  EXPECT_EQ(collect(g1->front()).text, "Hello from the script.");
  collect(*a);

  // With room, every stream of a group runs to its end.
  auto g3 = e->submit_group(group_of(2, 8));
  ASSERT_TRUE(g3.is_ok());
  ASSERT_EQ(g3->size(), 2u);
  EXPECT_NE((*g3)[0].seq_id(), (*g3)[1].seq_id());
  for (RequestStream& s : *g3) EXPECT_EQ(collect(s).text, "Hello from the script.");
  expect_idle(*e);
  EXPECT_EQ(e->metrics().refused_total, 4u);
}

// The n choices of one prompt compute it once: the first feeds all but the last prompt token, the
// others continue from a copy of its state (runner fork), and each feeds the last token itself.
TEST(Engine, ChoicesOfOnePromptComputeItOnce) {
  DSV4_REQUIRE_TOKENIZER();
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 8;  // the prompt goes in chunks
  std::string prompt = "please count";
  for (int i = 0; i < 6; ++i) prompt += " slowly, one by one";
  const int64_t P = int64_t(request(prompt).prompt.size());
  ASSERT_GT(P, 16);

  auto solo_engine = start(scripted(kScript), c);
  auto solo = solo_engine->submit(request(prompt, 6));
  ASSERT_TRUE(solo.is_ok());
  const Collected ref = collect(*solo);
  ASSERT_EQ(ref.tokens.size(), 6u);
  EXPECT_EQ(solo_engine->metrics().forked_prompt_tokens_total, 0u);

  auto e = start(scripted(kScript), c);
  std::vector<GenerationRequest> g;
  for (int i = 0; i < 3; ++i) g.push_back(request(prompt, 6));
  auto streams = e->submit_group(std::move(g));
  ASSERT_TRUE(streams.is_ok()) << streams.status().to_string();
  for (size_t i = 0; i < 3; ++i) {
    const Collected r = collect((*streams)[i]);
    EXPECT_EQ(r.tokens, ref.tokens) << "choice " << i;
    EXPECT_EQ(r.last.finish, FinishReason::kLength);
    EXPECT_EQ(r.last.n_prompt_tokens, P);
    EXPECT_EQ(r.last.n_cached_tokens, i == 0 ? 0 : P - 1) << "choice " << i;
  }
  expect_idle(*e);  // the last step's counters are added after its tokens reach the streams
  const EngineMetrics m = e->metrics();
  EXPECT_EQ(m.forked_prompt_tokens_total, uint64_t(2 * (P - 1)));
  // The prompt once, the last prompt token twice more, then 5 fed samples per choice.
  EXPECT_EQ(m.computed_tokens_total, uint64_t(P + 2 + 3 * 5));
  EXPECT_EQ(m.preemptions_total, 0u);
}

// A runner that says it can fork and then fails every fork: the engine falls back to computing
// each choice's prompt, and the choices still produce their tokens.
class RefusingForks : public runtime::ModelRunner {
 public:
  explicit RefusingForks(std::unique_ptr<runtime::ModelRunner> inner) : inner_(std::move(inner)) {}
  const runtime::RunnerInfo& info() const override { return inner_->info(); }
  Status execute(const runtime::StepInput& in, runtime::StepOutput* out) override { return inner_->execute(in, out); }
  void release(int64_t seq_id, int32_t slot) override { inner_->release(seq_id, slot); }
  bool can_fork() const override { return true; }
  Status fork(const runtime::ForkSpec&) override {
    ++n_refused;
    return internal_error("test: forks refused");
  }
  std::atomic<int> n_refused{0};

 private:
  std::unique_ptr<runtime::ModelRunner> inner_;
};

TEST(Engine, AFailedForkComputesThePromptInstead) {
  DSV4_REQUIRE_TOKENIZER();
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 8;
  std::string prompt = "please count";
  for (int i = 0; i < 6; ++i) prompt += " slowly, one by one";
  const int64_t P = int64_t(request(prompt).prompt.size());
  auto runner = std::make_unique<RefusingForks>(scripted(kScript));
  RefusingForks* r = runner.get();
  auto e = start(std::move(runner), c);
  std::vector<GenerationRequest> g;
  for (int i = 0; i < 3; ++i) g.push_back(request(prompt, 6));
  auto streams = e->submit_group(std::move(g));
  ASSERT_TRUE(streams.is_ok());
  for (size_t i = 0; i < 3; ++i) {
    const Collected out = collect((*streams)[i]);
    EXPECT_EQ(out.text, "one two three four five STOP") << "choice " << i;
    EXPECT_EQ(out.last.finish, FinishReason::kLength);
    EXPECT_EQ(out.last.n_cached_tokens, 0);
  }
  expect_idle(*e);
  const EngineMetrics m = e->metrics();
  EXPECT_EQ(r->n_refused.load(), 2);
  EXPECT_EQ(m.forked_prompt_tokens_total, 0u);
  EXPECT_EQ(m.computed_tokens_total, uint64_t(3 * P + 3 * 5));
  EXPECT_EQ(m.preemptions_total, 0u);
  EXPECT_EQ(m.finished_error, 0u);
}

// Aborting the first choice while it computes the prompt: the next choice takes over and the
// others still finish, and nothing is left allocated.
TEST(Engine, AbortingTheFirstChoiceLeavesTheOthersToFinish) {
  DSV4_REQUIRE_TOKENIZER();
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 4;
  auto e = start(scripted(kScript, /*step_delay_ms=*/5), c);
  std::string prompt = "please count";
  for (int i = 0; i < 10; ++i) prompt += " slowly, one by one";
  const int64_t P = int64_t(request(prompt).prompt.size());
  std::vector<GenerationRequest> g;
  for (int i = 0; i < 3; ++i) g.push_back(request(prompt, 5));
  auto streams = e->submit_group(std::move(g));
  ASSERT_TRUE(streams.is_ok());
  (*streams)[0].abort();
  EXPECT_EQ(collect((*streams)[0]).last.finish, FinishReason::kAbort);
  for (size_t i = 1; i < 3; ++i) {
    const Collected r = collect((*streams)[i]);
    EXPECT_EQ(r.last.finish, FinishReason::kLength) << "choice " << i;
    EXPECT_EQ(r.text, "one two three four five") << "choice " << i;
  }
  expect_idle(*e);
  const EngineMetrics m = e->metrics();
  EXPECT_GE(m.forked_prompt_tokens_total, uint64_t(P - 1));  // at least the third from the second
  EXPECT_EQ(m.finished_abort, 1u);
}

TEST(Engine, AModelOfHugeLengthServesWhatThePoolHolds) {
  DSV4_REQUIRE_TOKENIZER();
  // A checkpoint claiming 2^40 positions, with the pool sized automatically: the block count for
  // one sequence (2^32) once wrapped to 0 in int32, and the engine served a context of 0 tokens.
  const tok::Tokenizer& t = *v4_tokenizer();
  auto s = runtime::parse_script(kScript, "test", [&t](std::string_view x) { return t.encode(x, true); });
  ASSERT_TRUE(s.is_ok());
  auto decode = [&t](std::span<const int32_t> ids) {
    auto r = t.decode(ids, false);
    return r.is_ok() ? r.value() : std::string();
  };
  auto runner = std::make_unique<runtime::ScriptedRunner>(std::move(s).value(), decode, t.n_ids(), 1,
                                                          int64_t(1) << 40, "test");
  EngineConfig c;
  c.max_num_seqs = 1;  // max_model_len 0: the model's length, capped by the pool
  auto e = Engine::start(c, std::move(runner), v4_tokenizer());
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ((*e)->limits().max_model_len, (int64_t(1) << 24) * (*e)->limits().block_tokens);
  auto r = (*e)->submit(request("hi", 8));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(collect(*r).text, "Hello from the script.");
}

// Forwards to a runner and replaces every sampled id with one past the vocabulary, as a sampler
// fed NaN logits may return.
class OutOfVocabRunner : public runtime::ModelRunner {
 public:
  explicit OutOfVocabRunner(std::unique_ptr<runtime::ModelRunner> inner) : inner_(std::move(inner)) {}
  const runtime::RunnerInfo& info() const override { return inner_->info(); }
  Status execute(const runtime::StepInput& in, runtime::StepOutput* out) override {
    DSV4_RETURN_IF_ERROR(inner_->execute(in, out));
    for (runtime::SampledToken& t : out->sampled) t.token.token = inner_->info().vocab_size;
    return Status::ok();
  }
  void release(int64_t seq_id, int32_t slot) override { inner_->release(seq_id, slot); }

 private:
  std::unique_ptr<runtime::ModelRunner> inner_;
};

TEST(Engine, ASampledIdOutsideTheVocabularyFailsTheRequest) {
  DSV4_REQUIRE_TOKENIZER();
  auto e = start(std::make_unique<OutOfVocabRunner>(scripted(kScript)));
  auto r = e->submit(request("hi", 8));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Collected c = collect(*r);
  EXPECT_EQ(c.last.finish, FinishReason::kError);
  EXPECT_NE(c.last.error.message().find("outside the vocabulary"), std::string::npos) << c.last.error.to_string();
  EXPECT_TRUE(c.tokens.empty());
  expect_idle(*e);
}

TEST(Engine, ShutdownEndsOpenRequests) {
  DSV4_REQUIRE_TOKENIZER();
  auto e = start(scripted(kScript, 2));
  auto a = e->submit(request("sing forever", 2000));
  std::vector<TokenEvent> evs;
  while (evs.empty()) a->wait(&evs, 50ms);
  e->shutdown();
  const Collected r = collect(*a, 5s);
  EXPECT_EQ(r.last.finish, FinishReason::kAbort);
  EXPECT_EQ(e->submit(request("hi")).status().code(), StatusCode::kResourceExhausted);
  e->shutdown();  // idempotent
}

}  // namespace
}  // namespace dsv4
