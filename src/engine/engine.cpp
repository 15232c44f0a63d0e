// engine.cpp: Engine (engine.h) and its thread. Each iteration: take new requests, act on aborts
// (before every step, so an abort lands between two prefill chunks at the latest), plan a step,
// run it, then append the sampled tokens, check the stop conditions and push one TokenEvent per
// request that produced something. Finished requests give their blocks and slot back at once.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <random>
#include <unordered_set>

#include "base/check.h"
#include "engine/engine_impl.h"
#include "kvcache/block_pool.h"

namespace dsv4 {

using engine_detail::Request;
using engine_detail::RequestState;
using engine_detail::StepPlan;

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

uint64_t mix_seed(uint64_t seed, int64_t seq_id) {
  uint64_t x = seed + 0x9E3779B97F4A7C15ull * uint64_t(seq_id);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "";
}

Engine::Impl::Impl(const EngineConfig& config_, const EngineLimits& limits_,
                   std::unique_ptr<runtime::ModelRunner> runner_, const tok::Tokenizer* tokenizer_)
    : config(config_),
      limits(limits_),
      runner(std::move(runner_)),
      tokenizer(tokenizer_),
      scheduler(engine_detail::SchedulerConfig{config_.max_num_seqs, config_.max_num_batched_tokens,
                                               limits_.num_kv_blocks}),
      metrics(limits_.max_model_len, config_.max_num_batched_tokens, config_.max_num_seqs) {
  sampling_seed = config.sampling_seed != 0 ? config.sampling_seed : std::random_device{}() | 1ull << 32;
  update_gauges();
}

Engine::Impl::~Impl() { shutdown(); }

Status Engine::Impl::validate(const GenerationRequest& r) const {
  if (r.prompt.empty()) return invalid_argument("the prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= limits.vocab_size)
      return invalid_argument("prompt token {} at index {} is outside the vocabulary [0, {})", r.prompt[i], i,
                              limits.vocab_size);
  }
  const StopParams& s = r.stop;
  if (s.max_tokens < 1) return invalid_argument("max_tokens must be at least 1, found {}", s.max_tokens);
  const int64_t n_prompt = int64_t(r.prompt.size());
  if (n_prompt >= limits.max_model_len) {
    return out_of_range("the prompt has {} tokens, but the maximum context length is {} tokens (prompt + output)",
                        n_prompt, limits.max_model_len);
  }
  if (n_prompt + s.max_tokens > limits.max_model_len) {
    return out_of_range(
        "the maximum context length is {} tokens, but {} were requested ({} in the prompt, {} in the completion)",
        limits.max_model_len, n_prompt + s.max_tokens, n_prompt, s.max_tokens);
  }
  if (int32_t(s.stop.size()) > limits.max_stop_strings)
    return invalid_argument("at most {} stop strings are allowed, found {}", limits.max_stop_strings, s.stop.size());
  for (const std::string& str : s.stop) {
    if (str.empty()) return invalid_argument("stop strings must not be empty");
    if (int32_t(str.size()) > limits.max_stop_string_bytes)
      return invalid_argument("a stop string is {} bytes long; the limit is {}", str.size(),
                              limits.max_stop_string_bytes);
  }
  if (!s.stop.empty() && tokenizer == nullptr) return invalid_argument("stop strings need a tokenizer");
  for (const int32_t t : s.stop_token_ids) {
    if (t < 0 || t >= limits.vocab_size)
      return invalid_argument("stop token {} is outside the vocabulary [0, {})", t, limits.vocab_size);
  }
  const SamplingParams& p = r.sampling;
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f)
    return invalid_argument("temperature must be >= 0, found {}", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return invalid_argument("top_p must be in (0, 1], found {}", p.top_p);
  if (p.top_k < 0) return invalid_argument("top_k must be >= 0 (0: off), found {}", p.top_k);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return invalid_argument("min_p must be in [0, 1], found {}", p.min_p);
  if (p.logprobs < -1 || p.logprobs > limits.max_logprobs)
    return invalid_argument("top_logprobs must be in [0, {}], found {}", limits.max_logprobs, p.logprobs);
  for (const auto& [name, v] : {std::pair{"presence_penalty", p.presence_penalty}, {"frequency_penalty", p.frequency_penalty}})
    if (!(v >= -2.0f && v <= 2.0f)) return invalid_argument("{} must be in [-2, 2], found {}", name, v);
  if (!(p.repetition_penalty >= 0.01f && p.repetition_penalty <= 100.0f))
    return invalid_argument("repetition_penalty must be in [0.01, 100], found {}", p.repetition_penalty);
  std::vector<int32_t> ids;
  for (const auto& [id, b] : p.logit_bias) {
    if (id < 0 || id >= limits.vocab_size)
      return invalid_argument("logit_bias token {} is outside the vocabulary [0, {})", id, limits.vocab_size);
    if (!(b >= -100.0f && b <= 100.0f))
      return invalid_argument("logit_bias of token {} must be in [-100, 100], found {}", id, b);
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  if (const auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end())
    return invalid_argument("logit_bias names token {} twice", *dup);
  return Status::ok();
}

Result<RequestStream> Engine::Impl::submit(GenerationRequest g) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(g));
  DSV4_ASSIGN_OR_RETURN(std::vector<RequestStream> streams, submit_group(std::move(one)));
  return std::move(streams.front());
}

Result<std::vector<RequestStream>> Engine::Impl::submit_group(std::vector<GenerationRequest> group) {
  auto refused = [this](Status st) {
    std::lock_guard<std::mutex> lk(metrics.mu);
    ++metrics.counters.refused_total;
    return st;
  };
  if (group.empty()) return refused(invalid_argument("a request group needs at least one request"));
  if (group.size() > 1 && int64_t(group.size()) > config.max_waiting)  // one request: "queue full" below
    return refused(invalid_argument("{} requests at once cannot queue: the wait queue holds {} (--max-waiting)",
                                    group.size(), config.max_waiting));
  for (const GenerationRequest& g : group)
    if (Status st = validate(g); !st.is_ok()) return refused(st);
  // Built outside the inbox lock, which the engine thread takes every step: with a repetition
  // penalty this sorts the prompt's tokens.
  std::vector<std::unique_ptr<Request>> built;
  std::vector<RequestStream> streams;
  for (GenerationRequest& g : group) {
    auto r = std::make_unique<Request>();
    r->penalties.init(g.sampling, g.prompt);
    r->stream = std::make_shared<engine_detail::StreamState>();
    r->stream->wakeup = wakeup;
    r->external_id = std::move(g.id);
    r->n_prompt = int64_t(g.prompt.size());
    r->tokens = std::move(g.prompt);
    r->tokens.reserve(size_t(r->n_prompt + g.stop.max_tokens));
    r->sampling = g.sampling;
    r->text = std::make_unique<engine_detail::TextOutput>(tokenizer, g.stop.skip_special_tokens, g.stop.stop);
    r->stop = std::move(g.stop);
    r->arrival = g.arrival;
    built.push_back(std::move(r));
  }
  // Choices of one prompt compute it once (Scheduler: forks) where the runner can copy a
  // sequence's state; a one-token prompt has nothing to share, and with one sequence slot no
  // choice could run beside the first (it would only wait a step for nothing).
  if (runner->can_fork() && config.max_num_seqs > 1 && built.size() > 1 && built.front()->n_prompt >= 2) {
    const bool same = std::all_of(built.begin() + 1, built.end(),
                                  [&](const auto& r) { return r->tokens == built.front()->tokens; });
    if (same)
      for (size_t i = 1; i < built.size(); ++i) built[i]->fork_parent = built.front().get();
  }
  {
    std::lock_guard<std::mutex> lk(inbox_mu);
    // All or nothing: a group admitted in part would leave its other choices to be refused.
    if (stopping) return refused(Status(StatusCode::kResourceExhausted, "the engine is shutting down"));
    if (int64_t(inbox.size()) + n_queued_total + int64_t(built.size()) > config.max_waiting)
      return refused(Status(StatusCode::kResourceExhausted,
                            built.size() == 1
                                ? fmt::format("the wait queue is full ({} requests); retry later", config.max_waiting)
                                : fmt::format("the wait queue ({} requests) has no room for {} more; retry later",
                                              config.max_waiting, built.size())));
    for (auto& r : built) {
      r->seq_id = next_seq_id++;
      r->stream->seq_id = r->seq_id;
      r->seed = r->sampling.has_seed ? r->sampling.seed : mix_seed(sampling_seed, r->seq_id);
      streams.push_back(RequestStream(r->stream));
      inbox.push_back(std::move(r));
    }
  }
  wakeup->notify();
  return streams;
}

void Engine::Impl::take_inbox(bool* stop) {
  std::vector<std::unique_ptr<Request>> fresh;
  {
    std::lock_guard<std::mutex> lk(inbox_mu);
    fresh.swap(inbox);
    *stop = stopping;
    n_queued_total = scheduler.n_waiting() + int64_t(fresh.size());  // fresh joins waiting below
  }
  for (auto& r : fresh) {
    Request* p = r.get();
    requests.emplace(p->seq_id, std::move(r));
    scheduler.add(p);
  }
}

void Engine::Impl::reap_aborts() {
  std::vector<Request*> aborted;
  for (auto& [id, r] : requests) {
    if (r->stream->abort_requested.load()) aborted.push_back(r.get());
  }
  for (Request* r : aborted) finish(r, FinishReason::kAbort, TokenEvent{});
}

void Engine::Impl::finish(Request* r, FinishReason reason, TokenEvent ev, Status error) {
  const auto now = Clock::now();
  // A stop string discards what followed it; any other end releases the held-back text.
  if (!ev.stop_string) r->text->flush(&ev.text);
  ev.finish = reason;
  ev.error = std::move(error);
  ev.n_prompt_tokens = int32_t(r->n_prompt);
  ev.n_output_tokens = int32_t(r->n_output());
  ev.n_cached_tokens = int32_t(r->n_forked);
  const int32_t slot = r->slot;
  scheduler.remove(r);
  runner->release(r->seq_id, slot);
  {
    std::lock_guard<std::mutex> lk(metrics.mu);
    EngineMetrics& c = metrics.counters;
    switch (reason) {
      case FinishReason::kStop: ++c.finished_stop; break;
      case FinishReason::kLength: ++c.finished_length; break;
      case FinishReason::kAbort: ++c.finished_abort; break;
      case FinishReason::kError: ++c.finished_error; break;
      case FinishReason::kNone: DSV4_CHECK(false, "finishing request {} without a reason", r->seq_id);
    }
    metrics.e2e.observe(seconds(now - r->arrival));
    if (r->scheduled_once) metrics.inference_time.observe(seconds(now - r->first_scheduled));
    if (r->n_output() > 0) metrics.decode_time.observe(seconds(now - r->first_token));
    metrics.prompt_tokens.observe(double(r->n_prompt));
    metrics.generation_tokens.observe(double(r->n_output()));
    if (reason == FinishReason::kAbort && r->stream->abort_requested.load()) {
      std::lock_guard<std::mutex> sk(r->stream->mu);
      metrics.abort_latency.observe(seconds(now - r->stream->abort_time));
    }
  }
  r->stream->push(std::move(ev));
  requests.erase(r->seq_id);  // r is gone from here on
}

void Engine::Impl::make_forks(StepPlan* plan) {
  const std::vector<std::pair<Request*, Request*>> forks = plan->forks;
  for (const auto& [src, dst] : forks) {
    runtime::ForkSpec f;
    f.src_seq = src->seq_id;
    f.dst_seq = dst->seq_id;
    f.src_slot = src->slot;
    f.dst_slot = dst->slot;
    f.src_blocks = src->blocks.blocks();
    f.dst_blocks = dst->blocks.blocks();
    f.n_tokens = dst->n_forked;
    const Status st = runner->fork(f);
    if (!st.is_ok()) {
      // Not the request's fault: it computes its prompt itself instead.
      fmt::print(stderr, "engine: request {} computes its prompt itself: {}\n", dst->external_id, st.to_string());
      const int32_t slot = dst->slot;
      scheduler.unfork(dst, plan);
      runner->release(dst->seq_id, slot);
      continue;
    }
    std::lock_guard<std::mutex> lk(metrics.mu);
    metrics.counters.forked_prompt_tokens_total += uint64_t(f.n_tokens);
  }
}

void Engine::Impl::update_gauges() {
  size_t n_inbox;
  {
    std::lock_guard<std::mutex> lk(inbox_mu);
    // The inbox is counted live by submit: counted here as well, a request that arrived between
    // take_inbox and this update was counted twice for the whole step (a spurious "queue full").
    n_queued_total = scheduler.n_waiting();
    n_inbox = inbox.size();
  }
  std::lock_guard<std::mutex> lk(metrics.mu);
  EngineMetrics& c = metrics.counters;
  c.n_running = int64_t(scheduler.running().size());
  c.n_waiting = scheduler.n_waiting() + int64_t(n_inbox);
  c.kv_blocks_total = scheduler.blocks().n_total();
  c.kv_blocks_free = scheduler.blocks().n_free();
  c.slots_total = scheduler.slots().n_total();
  c.slots_free = scheduler.slots().n_free();
}

void Engine::Impl::step(const StepPlan& plan) {
  const auto t0 = Clock::now();
  step_in.seqs.clear();
  uint64_t new_prompt_tokens = 0;
  for (const engine_detail::ScheduledSeq& s : plan.seqs) {
    Request* r = s.req;
    if (!r->scheduled_once) {
      r->scheduled_once = true;
      r->first_scheduled = t0;
      r->stream->started.store(true);
      new_prompt_tokens += uint64_t(r->n_prompt);
      std::lock_guard<std::mutex> lk(metrics.mu);
      metrics.queue_time.observe(seconds(t0 - r->arrival));
    }
    runtime::StepSequence q;
    q.seq_id = r->seq_id;
    q.slot = r->slot;
    q.block_table = r->blocks.blocks();
    q.pos0 = r->n_computed;
    q.tokens = std::span<const int32_t>(r->tokens.data() + r->n_computed, size_t(s.n_tokens));
    q.n_prompt = r->n_prompt;
    q.sample = s.sample;
    q.sampling = &r->sampling;
    q.seed = r->seed;
    q.sample_index = r->n_output();
    q.logit_adjust = r->penalties.adjustments();
    step_in.seqs.push_back(q);
  }
  step_out.clear();
  const Status st = runner->execute(step_in, &step_out);
  const auto t1 = Clock::now();

  std::unordered_set<int64_t> failed;
  if (!st.is_ok()) {
    for (const auto& s : plan.seqs) step_out.failed.emplace_back(s.req->seq_id, st);
    step_out.sampled.clear();
  }
  // A token outside the vocabulary means the logits were not numbers (a checkpoint's NaN weights
  // reach the GPU sampler as NaN logits): that request fails, rather than feeding the id back to
  // the runner's embedding or the detokenizer.
  std::erase_if(step_out.sampled, [&](const runtime::SampledToken& t) {
    if (t.token.token >= 0 && t.token.token < limits.vocab_size) return false;
    step_out.failed.emplace_back(
        t.seq_id, internal_error("the runner sampled token {}, outside the vocabulary [0, {}); non-finite logits "
                                 "(NaN or infinite weights in the checkpoint) are the usual cause",
                                 t.token.token, limits.vocab_size));
    return true;
  });
  for (const auto& [id, status] : step_out.failed) failed.insert(id);
  for (const auto& s : plan.seqs) {
    if (!failed.count(s.req->seq_id)) s.req->n_computed += s.n_tokens;
  }
  for (const auto& [id, status] : step_out.failed) {
    const auto it = requests.find(id);
    if (it != requests.end()) {
      fmt::print(stderr, "engine: request {} failed in the runner: {}\n", it->second->external_id,
                 status.to_string());
      finish(it->second.get(), FinishReason::kError, TokenEvent{}, status);
    }
  }

  uint64_t n_generated = 0;
  for (runtime::SampledToken& t : step_out.sampled) {
    const auto it = requests.find(t.seq_id);
    DSV4_CHECK(it != requests.end(), "the runner sampled for unknown sequence {}", t.seq_id);
    Request* r = it->second.get();
    ++n_generated;
    TokenEvent ev;
    const int32_t id = t.token.token;
    r->tokens.push_back(id);
    r->penalties.add_output(id);
    ev.tokens.push_back(id);
    if (r->sampling.logprobs >= 0) ev.logprobs.push_back(std::move(t.token));
    {
      std::lock_guard<std::mutex> lk(metrics.mu);
      if (r->n_output() == 1) {
        r->first_token = t1;
        metrics.ttft.observe(seconds(t1 - r->arrival));
        metrics.prefill_time.observe(seconds(t1 - r->first_scheduled));
      } else {
        metrics.itl.observe(seconds(t1 - r->last_token));
      }
    }
    r->last_token = t1;

    FinishReason fin = FinishReason::kNone;
    const StopParams& sp = r->stop;
    if (!sp.ignore_eos && id == limits.eos_token_id) {
      fin = FinishReason::kStop;
      ev.stop_reason = "eos";
    } else if (std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), id) != sp.stop_token_ids.end()) {
      fin = FinishReason::kStop;
      ev.stop_reason = fmt::format("token:{}", id);
      ev.stop_token = id;
    } else {
      std::string matched;
      if (r->text->push(id, &ev.text, &matched)) {
        fin = FinishReason::kStop;
        ev.stop_string = true;
        ev.stop_reason = std::move(matched);
      }
    }
    if (fin == FinishReason::kNone &&
        (r->n_output() >= sp.max_tokens || int64_t(r->tokens.size()) >= limits.max_model_len)) {
      fin = FinishReason::kLength;
    }
    if (fin != FinishReason::kNone) {
      finish(r, fin, std::move(ev), Status::ok());
    } else {
      r->stream->push(std::move(ev));
    }
  }

  const auto t2 = Clock::now();
  {
    std::lock_guard<std::mutex> lk(metrics.mu);
    EngineMetrics& c = metrics.counters;
    ++c.steps_total;
    c.prompt_tokens_total += new_prompt_tokens;
    c.generation_tokens_total += n_generated;
    c.computed_tokens_total += uint64_t(plan.n_tokens);
    c.preemptions_total += plan.preempted.size();
    metrics.iteration_tokens.observe(double(plan.n_tokens));
    metrics.iteration_decode_seqs.observe(double(plan.n_decode));
    metrics.step_time.observe(seconds(t2 - t0));
  }
  update_gauges();
}

void Engine::Impl::run() {
  for (;;) {
    bool stop = false;
    take_inbox(&stop);
    if (stop) break;
    reap_aborts();
    StepPlan plan = scheduler.schedule();
    // Forks before the releases (the choices of a plan are newer than their first choice, so
    // they are preempted before it; were it preempted, its slot would be -1 and the fork would
    // fail into a recompute).
    make_forks(&plan);
    for (const auto& [r, slot] : plan.preempted) runner->release(r->seq_id, slot);
    if (plan.empty()) {
      // Nothing runnable: with nothing running, every waiting request fits (submit refuses the
      // ones that never can), so the queue must be empty too.
      DSV4_CHECK(!scheduler.running().empty() || scheduler.waiting().empty() || !plan.preempted.empty(),
                 "{} requests wait with nothing running and nothing admissible", scheduler.waiting().size());
      update_gauges();
      std::unique_lock<std::mutex> lk(wakeup->mu);
      wakeup->cv.wait_for(lk, std::chrono::seconds(1), [&] { return wakeup->pending; });
      wakeup->pending = false;
      continue;
    }
    update_gauges();  // admissions are visible while the step runs
    step(plan);
  }
  // Shutting down: every request still here ends as aborted.
  std::vector<Request*> left;
  for (auto& [id, r] : requests) left.push_back(r.get());
  for (Request* r : left) finish(r, FinishReason::kAbort, TokenEvent{}, Status(StatusCode::kResourceExhausted, "the server is shutting down"));
  std::vector<std::unique_ptr<Request>> never_started;
  {
    std::lock_guard<std::mutex> lk(inbox_mu);
    never_started.swap(inbox);
  }
  for (auto& r : never_started) {
    TokenEvent ev;
    ev.finish = FinishReason::kAbort;
    ev.error = Status(StatusCode::kResourceExhausted, "the server is shutting down");
    ev.n_prompt_tokens = int32_t(r->n_prompt);
    r->stream->push(std::move(ev));
  }
  update_gauges();
}

void Engine::Impl::shutdown() {
  {
    std::lock_guard<std::mutex> lk(inbox_mu);
    stopping = true;
  }
  wakeup->notify();
  if (thread.joinable()) thread.join();
}

// ---------------------------------------------------------------------------------------------
// Engine

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (impl_) impl_->shutdown();
}

Result<std::unique_ptr<Engine>> Engine::start(const EngineConfig& c, std::unique_ptr<runtime::ModelRunner> runner,
                                              const tok::Tokenizer* tokenizer) {
  if (!runner) return invalid_argument("the engine needs a model runner");
  DSV4_RETURN_IF_ERROR(c.check());
  const runtime::RunnerInfo& info = runner->info();
  if (info.vocab_size <= 0 || info.max_positions <= 1)
    return invalid_argument("runner {} reports vocab {} and max positions {}", info.name, info.vocab_size,
                            info.max_positions);
  if (c.max_model_len > info.max_positions) {
    return invalid_argument("--max-model-len {} exceeds the model's maximum of {} positions", c.max_model_len,
                            info.max_positions);
  }
  EngineLimits lim;
  lim.vocab_size = info.vocab_size;
  lim.eos_token_id = info.eos_token_id;
  lim.max_num_seqs = c.max_num_seqs;
  lim.block_tokens = kv::kBlockTokens;
  int64_t max_len = c.max_model_len > 0 ? c.max_model_len : info.max_positions;
  // Block counts in int64: a model that claims 2^40 positions needs 2^32 blocks for one sequence,
  // which kv::blocks_for_tokens (int32, sized for real pools) would wrap to 0.
  constexpr int64_t kMaxPoolBlocks = int64_t(1) << 24;  // 4G tokens: far beyond any real pool
  const int64_t seq_blocks = (max_len + kv::kBlockTokens - 1) / kv::kBlockTokens;
  int64_t blocks = c.num_kv_blocks;
  if (blocks == 0) blocks = int64_t(c.max_num_seqs) * std::min(seq_blocks, kMaxPoolBlocks);
  blocks = std::min(blocks, kMaxPoolBlocks);
  if (info.max_kv_blocks > 0) {
    if (c.num_kv_blocks > info.max_kv_blocks) {
      return invalid_argument("--num-gpu-blocks {} exceeds the {} KV blocks runner {} has room for", c.num_kv_blocks,
                              info.max_kv_blocks, info.name);
    }
    blocks = std::min(blocks, info.max_kv_blocks);
  }
  if (max_len > blocks * kv::kBlockTokens) {
    if (c.max_model_len > 0) {
      return invalid_argument(
          "--max-model-len {} needs {} KV blocks of {} tokens for one sequence, but the pool has {} "
          "(--num-gpu-blocks); lower --max-model-len or add blocks",
          c.max_model_len, seq_blocks, kv::kBlockTokens, blocks);
    }
    max_len = blocks * kv::kBlockTokens;  // the model's length does not fit: serve what does
  }
  lim.max_model_len = max_len;
  lim.num_kv_blocks = int32_t(blocks);

  auto impl = std::make_unique<Impl>(c, lim, std::move(runner), tokenizer);
  std::promise<Status> started;
  std::future<Status> started_f = started.get_future();
  Impl* p = impl.get();
  impl->thread = std::thread([p, &started] {
    started.set_value(p->runner->on_engine_thread_start());
    p->run();
  });
  const Status st = started_f.get();
  if (!st.is_ok()) {
    p->shutdown();
    return st.with_context("starting the runner on the engine thread");
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<RequestStream> Engine::submit(GenerationRequest request) { return impl_->submit(std::move(request)); }
Result<std::vector<RequestStream>> Engine::submit_group(std::vector<GenerationRequest> group) {
  return impl_->submit_group(std::move(group));
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m = impl_->metrics.snapshot();
  return m;
}

const EngineLimits& Engine::limits() const { return impl_->limits; }
const EngineConfig& Engine::config() const { return impl_->config; }

void Engine::shutdown() { impl_->shutdown(); }

std::vector<std::string> Engine::manifest() const {
  const Impl& m = *impl_;
  const runtime::RunnerInfo& info = m.runner->info();
  std::vector<std::string> out = info.manifest;
  const EngineLimits& l = m.limits;
  out.push_back(fmt::format("max_model_len: {} tokens{}", l.max_model_len,
                            m.config.max_model_len > 0 ? "" : " (auto: the model's, capped by the KV pool)"));
  if (!info.kv_layout.empty()) out.push_back(fmt::format("kv layout: {}", info.kv_layout));
  out.push_back(fmt::format(
      "kv pools: {} blocks x {} tokens = {} tokens ({:.1f} MiB){}; {} sequence slots ({:.1f} MiB)", l.num_kv_blocks,
      l.block_tokens, int64_t(l.num_kv_blocks) * l.block_tokens,
      double(int64_t(l.num_kv_blocks) * info.kv_block_bytes) / 1048576.0,
      m.config.num_kv_blocks > 0 ? " (--num-gpu-blocks)" : " (auto: max_num_seqs full-length sequences)",
      l.max_num_seqs, double(int64_t(l.max_num_seqs) * info.kv_slot_bytes) / 1048576.0));
  out.push_back(fmt::format(
      "scheduler: continuous batching, decode-first, chunked prefill; max_num_seqs {}, max_num_batched_tokens {}, "
      "max_waiting {}; preemption: recompute (newest running request); n choices: {}",
      m.config.max_num_seqs, m.config.max_num_batched_tokens, m.config.max_waiting,
      m.runner->can_fork() ? "the prompt computed once, its state copied to the other choices"
                           : "the prompt computed per choice (the runner cannot fork)"));
  out.push_back(fmt::format("sampling seed for requests without one: {}{}", m.sampling_seed,
                            m.config.sampling_seed != 0 ? "" : " (random at start)"));
  return out;
}

}  // namespace dsv4
