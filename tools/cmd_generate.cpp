// cmd_generate.cpp: `dsv4 generate`, one request through the same engine the server uses, from
// the command line: a raw prompt (--prompt), a chat turn (--prompt with --chat) or token ids
// (--token-ids). The text streams to stdout as it is generated; timings go to stderr.
#include <fmt/format.h>

#include <chrono>

#include "base/npy.h"
#include "tokenizer/chat_encoding.h"
#include "tools/commands.h"
#include "tools/token_ids.h"
#include "tools/serve_setup.h"

namespace dsv4::cli {
namespace {

struct GenerateArgs {
  EngineConfig engine;
  std::string prompt, token_ids, tokenizer;
  bool chat = false, thinking = false;
  int32_t max_tokens = 64;
  SamplingParams sampling;
  int64_t seed = -1;
  std::vector<std::string> stop;
};

int fail(const Status& st) {
  fmt::print(stderr, "generate: {}\n", st.to_string());
  return 1;
}

int run_generate(GenerateArgs a) {
  if (a.prompt.empty() == a.token_ids.empty()) {
    fmt::print(stderr, "generate: pass exactly one of --prompt and --token-ids\n");
    return 2;
  }
  if (a.engine.model_dir.empty() && a.engine.diagnostic_script.empty()) {
    fmt::print(stderr, "generate: --model DIR is required\n");
    return 2;
  }
  std::string tok_path = a.tokenizer.empty() ? a.engine.model_dir + "/tokenizer.json" : a.tokenizer;
  auto tokenizer = load_tokenizer(tok_path);
  if (!tokenizer.is_ok()) return fail(tokenizer.status());
  std::vector<int32_t> ids;
  if (!a.token_ids.empty()) {
    auto r = read_token_ids(a.token_ids);
    if (!r.is_ok()) return fail(r.status());
    ids = std::move(r).value();
  } else {
    std::string text = a.prompt;
    if (a.chat) {
      tok::ChatMessage m;
      m.role = tok::Role::kUser;
      m.content = a.prompt;
      tok::ChatEncodeOptions o;
      o.thinking_mode = a.thinking ? tok::ThinkingMode::kThinking : tok::ThinkingMode::kChat;
      auto rendered = tok::encode_chat(std::span<const tok::ChatMessage>(&m, 1), o);
      if (!rendered.is_ok()) return fail(rendered.status());
      text = rendered.value();
    }
    auto r = (*tokenizer)->encode(text, true);
    if (!r.is_ok()) return fail(r.status());
    ids = std::move(r).value();
  }
  a.engine.max_num_seqs = 1;
  auto runner = make_runner(a.engine, **tokenizer);
  if (!runner.is_ok()) return fail(runner.status());
  auto engine = Engine::start(a.engine, std::move(runner).value(), tokenizer->get());
  if (!engine.is_ok()) return fail(engine.status());

  GenerationRequest g;
  g.id = "generate";
  g.prompt = ids;
  g.sampling = a.sampling;
  if (a.seed >= 0) {
    g.sampling.has_seed = true;
    g.sampling.seed = uint64_t(a.seed);
  }
  g.stop.max_tokens = a.max_tokens;
  g.stop.stop = a.stop;
  const auto t0 = Clock::now();
  auto stream = (*engine)->submit(std::move(g));
  if (!stream.is_ok()) return fail(stream.status());
  std::vector<TokenEvent> events;
  TokenEvent last;
  Clock::time_point first{};
  while (!stream->done()) {
    events.clear();
    if (!stream->wait(&events, std::chrono::milliseconds(100))) continue;
    for (TokenEvent& ev : events) {
      if (first == Clock::time_point{} && !ev.tokens.empty()) first = Clock::now();
      fmt::print("{}", ev.text);
      std::fflush(stdout);
      if (ev.finish != FinishReason::kNone) last = std::move(ev);
    }
  }
  fmt::print("\n");
  const double total = std::chrono::duration<double>(Clock::now() - t0).count();
  const double ttft = std::chrono::duration<double>(first - t0).count();
  if (last.finish == FinishReason::kError) return fail(last.error);
  fmt::print(stderr, "generate: {} prompt + {} output tokens, finish {}{}, TTFT {:.3f} s, {:.1f} tok/s decode\n",
             last.n_prompt_tokens, last.n_output_tokens, finish_reason_name(last.finish),
             last.stop_reason.empty() ? "" : " (" + last.stop_reason + ")", ttft,
             last.n_output_tokens > 1 ? double(last.n_output_tokens - 1) / std::max(1e-9, total - ttft) : 0.0);
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("generate", "generate text for one prompt through the engine");
  auto a = std::make_shared<GenerateArgs>();
  cmd->add_option("--model", a->engine.model_dir, "checkpoint directory (with tokenizer.json)");
  cmd->add_option("--prompt", a->prompt, "prompt text (raw, or one user turn with --chat)");
  cmd->add_option("--token-ids", a->token_ids, "prompt token ids: an int .npy [T] or a list such as 0,5,17");
  cmd->add_flag("--chat", a->chat, "render --prompt as one user turn of the DeepSeek-V4 chat format");
  cmd->add_flag("--thinking", a->thinking, "with --chat: thinking mode (default: chat mode)");
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json (default: the model's)");
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", a->sampling.temperature, "0: greedy")->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p, "nucleus")->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k, "0: off")->capture_default_str();
  cmd->add_option("--min-p", a->sampling.min_p, "0: off")->capture_default_str();
  cmd->add_option("--seed", a->seed, "sampling seed (-1: random)")->capture_default_str();
  cmd->add_option("--stop", a->stop, "stop string (repeatable)");
  cmd->add_option("--device", a->engine.device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--kv-dtype", a->engine.kv_dtype, "fp8 | bf16")->capture_default_str();
  cmd->add_option("--wo-a", a->engine.wo_a, "--device cuda: bf16 | fp8 (wo_a in the lossless fp8 form where allowed)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--cpu-numerics", a->engine.cpu_numerics, "bf16 | fp32")->capture_default_str();
  cmd->add_option("--cpu-threads", a->engine.cpu_threads, "OpenMP threads (0: default)")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", a->engine.max_num_batched_tokens, "prefill chunk size")
      ->capture_default_str();
  cmd->add_option("--diagnostic-script", a->engine.diagnostic_script,
                  "DIAGNOSTIC: replace the model with a JSON script of outputs");
  cmd->callback([a, &exit_code] { exit_code = run_generate(*a); });
}

}  // namespace dsv4::cli
