// engine.h: the narrow API between the front ends (HTTP server, CLI) and the engine. A front end
// turns its input into a GenerationRequest of token ids, submits it, and reads TokenEvents from the
// request's RequestStream. Everything here is a native type: no JSON, no tensors, no device state.
// The engine thread owns requests, the scheduler, the KV block pools and the model runner.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dsv4 {

namespace runtime {
class ModelRunner;
}
namespace tok {
class Tokenizer;
}

using Clock = std::chrono::steady_clock;

// How the next token is drawn from the logits. The defaults sample from the full distribution.
struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax, lowest id on ties)
  float top_p = 1.0f;        // (0, 1]: smallest set of tokens whose probability reaches top_p
  int32_t top_k = 0;         // 0: off; k > 0: the k most likely tokens
  float min_p = 0.0f;        // [0, 1]: drop tokens below min_p * p(most likely)
  bool has_seed = false;     // false: the engine derives a seed from EngineConfig::sampling_seed
  uint64_t seed = 0;
  int32_t logprobs = -1;     // -1: none; k in [0, 20]: the sampled token's logprob and the top k
  // Adjustments of the logits before the filters above (vLLM's order and arithmetic): the bias,
  // then the repetition penalty on tokens of the prompt or the output, then frequency and
  // presence on output counts. With any of them, greedy, the filters and the logprobs all see the
  // adjusted logits (vLLM's "processed" logprobs).
  float presence_penalty = 0.0f;    // [-2, 2]: subtracted once from every token already generated
  float frequency_penalty = 0.0f;   // [-2, 2]: subtracted per occurrence in the output
  float repetition_penalty = 1.0f;  // [0.01, 100]: > 1 discourages tokens of the prompt and output
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, added logit in [-100, 100]), ids distinct
};

// When generation ends. Stop strings are matched on the detokenized text; text that could still
// become a stop string is held back until it cannot, and the matched stop string is not emitted.
struct StopParams {
  int32_t max_tokens = 16;              // >= 1; the front end resolves "unlimited" to the context left
  std::vector<std::string> stop;        // stop strings (non-empty)
  std::vector<int32_t> stop_token_ids;  // ends generation like EOS (not emitted as text)
  bool ignore_eos = false;              // keep going after EOS (benchmarks)
  bool skip_special_tokens = true;      // leave special tokens (BOS, EOS, reserved) out of the text
};

struct GenerationRequest {
  std::string id;               // for logs, e.g. "chatcmpl-1f3a..."; need not be unique
  std::vector<int32_t> prompt;  // token ids, already rendered and tokenized
  SamplingParams sampling;
  StopParams stop;
  Clock::time_point arrival = Clock::now();  // when the front end received it (TTFT starts here)
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
// "stop", "length", "abort", "error" ("" for kNone): vLLM's finished_reason label values.
const char* finish_reason_name(FinishReason r);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;                          // log-softmax of the raw logits
  std::vector<std::pair<int32_t, float>> top;    // the top-k (token, logprob), most likely first
};

// What one engine step produced for one request. Events arrive in order; the last one has
// finish != kNone and carries the token counts.
struct TokenEvent {
  std::vector<int32_t> tokens;        // generated this step (stop tokens such as EOS included)
  std::string text;                   // text that is now final (valid UTF-8, stop strings cut)
  std::vector<TokenLogprob> logprobs; // one per token when requested
  FinishReason finish = FinishReason::kNone;
  std::string stop_reason;            // the stop string, or "eos" / "token:<id>" for stop tokens (logs)
  // What ended it, unambiguously (a stop string may read "eos" or "token:..."): a stop string, or
  // the stop_token_ids entry (-1: none; EOS is neither).
  bool stop_string = false;
  int32_t stop_token = -1;
  Status error;                       // why, when finish == kError
  int32_t n_prompt_tokens = 0;        // final event only
  int32_t n_cached_tokens = 0;        // prompt tokens not computed: copied from the request's first
                                      // choice (n > 1); no prefix cache yet
  int32_t n_output_tokens = 0;        // final event only
};

namespace engine_detail {
struct StreamState;
}

// The output channel of one request. wait() never blocks the engine: the engine only appends.
// Destroying a stream whose request has not finished aborts it (a dropped client never leaks).
class RequestStream {
 public:
  RequestStream() = default;
  explicit RequestStream(std::shared_ptr<engine_detail::StreamState> s) : s_(std::move(s)) {}
  RequestStream(RequestStream&&) noexcept = default;
  RequestStream& operator=(RequestStream&& o) noexcept;
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;
  ~RequestStream();

  // Waits up to `timeout` for events and moves all pending ones into *out (appending). Returns
  // false when none arrived in time. After the final event it returns false at once.
  bool wait(std::vector<TokenEvent>* out, std::chrono::milliseconds timeout);
  // The same for several streams read by one thread (the n choices of one API request): waits
  // up to `timeout` until any of them has events, then moves each stream's pending events into
  // (*out)[i] (out is resized to streams.size(); events are appended). Returns false when none
  // arrived in time, and at once when every stream has given its final event.
  static bool wait_any(std::span<RequestStream> streams, std::vector<std::vector<TokenEvent>>* out,
                       std::chrono::milliseconds timeout);
  // Asks the engine to stop this request; it does so before its next step (prefill chunks
  // included) and frees its KV blocks. Idempotent; the final event then has finish kAbort.
  void abort();
  // True once the final event has been taken by wait().
  bool done() const;
  // True until the engine has run the first step that computes part of the prompt.
  bool queued() const;
  int64_t seq_id() const;
  bool valid() const { return s_ != nullptr; }

 private:
  std::shared_ptr<engine_detail::StreamState> s_;
};

// Every runtime choice of the engine and its runner. Printed in the startup manifest.
struct EngineConfig {
  // Runner
  std::string device = "cpu";         // cpu | cuda
  std::string model_dir;              // checkpoint directory ("" with a diagnostic script)
  std::string kv_dtype = "fp8";       // fp8 (fp8_ds_mla layout) | bf16
  std::string cpu_numerics = "bf16";  // CPU runner: bf16 (GPU oracle mode) | fp32 (HF mode)
  std::string wo_a = "bf16";          // CUDA runner: bf16 | fp8 (each wo_a in the lossless fp8 form
                                      // where its values allow: half the bytes, the same results)
  int32_t cpu_threads = 0;            // CPU runner: OpenMP threads, 0 = OpenMP's default
  std::string diagnostic_script;      // a JSON script that replaces the model (tests only)
  // Scheduler
  int32_t max_num_seqs = 32;              // requests running at once (sequence slots)
  int32_t max_num_batched_tokens = 2048;  // tokens per step: decodes + prefill chunks
  int64_t max_model_len = 0;              // prompt + output; 0 = the model's, capped by the KV pool
  int32_t num_kv_blocks = 0;              // 256-token KV blocks; 0 = max_num_seqs full sequences
  int32_t max_waiting = 1024;             // queued requests beyond this are refused (503)
  uint64_t sampling_seed = 0;             // seeds requests that bring none (0: chosen at start)

  // Every setting as (name, value), in the CLI's spelling; the manifest marks non-defaults.
  std::vector<std::pair<std::string, std::string>> fields() const;
  // The scheduler settings' own rules (counts >= 1 or >= 0, a step holds every running sequence's
  // decode token), in the CLI's spelling. Engine::start and the runners' loads call it, so a bad
  // setting is refused before any weight is read. Limits that need the model (max_model_len against
  // its positions) are the engine's.
  Status check() const;
};

// What the engine resolved at start; front ends validate requests against it.
struct EngineLimits {
  int64_t max_model_len = 0;
  int32_t vocab_size = 0;
  int32_t eos_token_id = 1;
  int32_t num_kv_blocks = 0;
  int32_t block_tokens = 256;
  int32_t max_num_seqs = 0;
  int32_t max_logprobs = 20;
  int32_t max_stop_strings = 32;
  int32_t max_stop_string_bytes = 1024;
};

// A Prometheus-style histogram: counts[i] observations <= bounds[i] (not cumulative), the last
// entry counts those above every bound.
struct HistogramSnapshot {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1
  double sum = 0.0;
  uint64_t count = 0;
};

// A consistent snapshot of the engine's counters (vLLM V1 metric semantics, ECOSYSTEM.md §1.5).
struct EngineMetrics {
  int64_t n_running = 0;
  int64_t n_waiting = 0;
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_free = 0;
  int32_t slots_total = 0;
  int32_t slots_free = 0;
  uint64_t prompt_tokens_total = 0;       // prompt tokens of requests that were scheduled
  uint64_t generation_tokens_total = 0;
  uint64_t computed_tokens_total = 0;     // tokens run through the model (recompute included)
  uint64_t forked_prompt_tokens_total = 0; // prompt tokens copied between the choices of a request
  uint64_t preemptions_total = 0;
  uint64_t steps_total = 0;
  uint64_t finished_stop = 0, finished_length = 0, finished_abort = 0, finished_error = 0;
  uint64_t refused_total = 0;             // submit() refusals (queue full, invalid)
  HistogramSnapshot ttft, itl, e2e, queue_time, prefill_time, decode_time, inference_time;
  HistogramSnapshot prompt_tokens, generation_tokens;
  HistogramSnapshot iteration_tokens;     // tokens per step
  HistogramSnapshot iteration_decode_seqs; // decoding sequences per step (batch sharing)
  HistogramSnapshot abort_latency;        // abort() -> blocks freed, seconds
  HistogramSnapshot step_time;            // seconds per engine step
};

class Engine {
 public:
  // Starts the engine thread. `tokenizer` (may be null: no text, no stop strings) must outlive
  // the engine. Errors: a configuration the pool cannot hold (with the numbers).
  static Result<std::unique_ptr<Engine>> start(const EngineConfig& config,
                                               std::unique_ptr<runtime::ModelRunner> runner,
                                               const tok::Tokenizer* tokenizer);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Errors: kInvalidArgument (bad ids or parameters), kOutOfRange (prompt +
  // max_tokens over max_model_len: the request can never fit), kResourceExhausted (the wait
  // queue is full, or the engine is shutting down: retry later).
  Result<RequestStream> submit(GenerationRequest request);
  // Queues several requests (the n choices of one API request) all or none: the streams in the
  // group's order, or one error for the group (the first invalid request's, or a queue without
  // room for all of them) and nothing queued.
  Result<std::vector<RequestStream>> submit_group(std::vector<GenerationRequest> group);

  EngineMetrics metrics() const;
  const EngineLimits& limits() const;
  const EngineConfig& config() const;
  // Lines for the startup manifest: runner, KV layout and pools, scheduler limits.
  std::vector<std::string> manifest() const;
  // Aborts everything still queued or running and stops the engine thread. Idempotent.
  void shutdown();

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
