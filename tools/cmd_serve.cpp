// cmd_serve.cpp: `dsv4 serve`, the OpenAI-compatible server. Order of events: bind the port first
// (so /health answers 503 while loading), load the tokenizer and the model (or make the --demo
// model), start the engine, print the startup manifest, then answer requests until SIGINT or
// SIGTERM; shutdown aborts open requests, which get a final event, before the port closes.
#include <fmt/format.h>
#include <omp.h>
#include <signal.h>

#include <filesystem>
#include <thread>

#include "server/server.h"
#include "tools/commands.h"
#include "tools/serve_setup.h"

namespace dsv4::cli {
namespace {

struct ServeArgs {
  EngineConfig engine;
  server::ServerConfig server;
  bool demo = false;
  std::string tokenizer;
  std::string default_thinking = "on";
};

std::string manifest_text(const ServeArgs& a, const Engine& engine, const std::string& tokenizer_path,
                          const std::string& demo_note) {
  std::string m = "==== dsv4 serve: startup manifest ====\n";
  m += fmt::format("argv: {}\n", command_line());
  m += fmt::format("version: dsv4 {} (git {})\n", DSV4_VERSION, DSV4_GIT_REV);
#if DSV4_HAVE_CUDA_RUNNER
  const char* cuda_build = "CUDA runner built (sm_86, sm_90)";
#else
  const char* cuda_build = "no CUDA (nvcc not found at configure time)";
#endif
  m += fmt::format("build: g++ {}.{}, C++20, {}\n", __GNUC__, __GNUC_MINOR__, cuda_build);
  m += fmt::format("devices: {}; host cpu ({} hardware threads, OpenMP max {})\n", a.engine.device,
                   std::thread::hardware_concurrency(), omp_get_max_threads());
  m += "layout: TP 1 x PP 1 (one runner)\n";
  if (!demo_note.empty()) m += demo_note;
  m += fmt::format("tokenizer: {}\n", tokenizer_path);
  for (const std::string& line : engine.manifest()) m += line + "\n";
  m += fmt::format("kv dtype: {}\n", a.engine.kv_dtype == "fp8" ? "fp8 (fp8_ds_mla layout)" : a.engine.kv_dtype);
  if (a.engine.device != "cuda") m += "graph capture: none (CPU runner)\n";  // the CUDA runner's lines say which
  m += fmt::format("served model name: {}\n", a.server.served_model_names.empty() ? "" : a.server.served_model_names[0]);
  m += fmt::format("thinking default: {} (override per request: chat_template_kwargs.thinking, thinking.type, "
                   "reasoning_effort)\n",
                   a.server.default_thinking ? "on" : "off");
  append_settings("engine settings", a.engine.fields(), EngineConfig{}.fields(), &m);
  append_settings("server settings", a.server.fields(), server::ServerConfig{}.fields(), &m);
  m += "======================================\n";
  return m;
}

int run_serve(ServeArgs a) {
  // Signals go to sigwait below, not to whichever thread happens to run; block them before any
  // thread starts so every thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that vanishes mid-write is handled as a failed write

  if ((a.demo && !a.engine.model_dir.empty()) ||
      (!a.demo && a.engine.model_dir.empty() && a.engine.diagnostic_script.empty())) {
    fmt::print(stderr, "serve: pass exactly one of --model DIR and --demo\n");
    return 2;
  }
  if (a.default_thinking != "on" && a.default_thinking != "off") {
    fmt::print(stderr, "serve: --default-thinking must be on or off, found '{}'\n", a.default_thinking);
    return 2;
  }
  a.server.default_thinking = a.default_thinking == "on";
  if (a.demo && a.engine.device != "cpu") {
    fmt::print(stderr, "serve: --demo runs on the CPU (--device cpu)\n");
    return 2;
  }
  if (a.server.served_model_names.empty()) {
    a.server.served_model_names.push_back(
        a.demo ? "dsv4-demo" : std::filesystem::path(a.engine.model_dir).filename().string());
    if (a.server.served_model_names[0].empty()) a.server.served_model_names[0] = "dsv4";
  }

  server::HttpServer http(a.server);
  if (Status st = http.start(); !st.is_ok()) {
    fmt::print(stderr, "serve: {}\n", st.to_string());
    return 1;
  }
  fmt::print(stderr, "serve: listening on http://{}:{} (loading; /health answers 503 until ready)\n", a.server.host,
             http.port());

  std::string tokenizer_path = a.tokenizer;
  if (tokenizer_path.empty()) {
    if (!a.engine.model_dir.empty() && !a.demo) {
      tokenizer_path = (std::filesystem::path(a.engine.model_dir) / "tokenizer.json").string();
    } else {
      auto found = find_repo_tokenizer();
      if (!found.is_ok()) {
        fmt::print(stderr, "serve: {}\n", found.status().to_string());
        return 1;
      }
      tokenizer_path = found.value();
    }
  }
  auto tokenizer = load_tokenizer(tokenizer_path);
  if (!tokenizer.is_ok()) {
    fmt::print(stderr, "serve: {}\n", tokenizer.status().to_string());
    return 1;
  }

  std::string demo_dir, demo_note;
  if (a.demo && !a.engine.diagnostic_script.empty()) {
    if (a.engine.max_model_len == 0) a.engine.max_model_len = 8192;
  } else if (a.demo) {
    std::string summary;
    auto dir = make_demo_model(tokenizer_path, &summary);
    if (!dir.is_ok()) {
      fmt::print(stderr, "serve: {}\n", dir.status().to_string());
      return 1;
    }
    demo_dir = dir.value();
    a.engine.model_dir = demo_dir;
    // A CPU prefill of tens of thousands of tokens takes minutes: keep the demo's context short.
    if (a.engine.max_model_len == 0) a.engine.max_model_len = 8192;
    demo_note = fmt::format(
        "demo: RANDOM WEIGHTS (tiny preset, 4 layers, seed 0, made in {}): the API is real, the text is noise\n",
        demo_dir);
  }
  auto cleanup = [&] {
    std::error_code ec;
    if (!demo_dir.empty()) std::filesystem::remove_all(demo_dir, ec);
  };

  auto runner = make_runner(a.engine, **tokenizer);
  if (!runner.is_ok()) {
    fmt::print(stderr, "serve: {}\n", runner.status().to_string());
    cleanup();
    return 1;
  }
  auto engine = Engine::start(a.engine, std::move(runner).value(), tokenizer->get());
  if (!engine.is_ok()) {
    fmt::print(stderr, "serve: {}\n", engine.status().to_string());
    cleanup();
    return 1;
  }
  fmt::print("{}", manifest_text(a, **engine, tokenizer_path, demo_note));
  std::fflush(stdout);
  http.set_ready(engine->get(), tokenizer->get());
  fmt::print(stderr, "serve: ready on http://{}:{}\n", a.server.host, http.port());

  int sig = 0;
  sigwait(&sigs, &sig);
  fmt::print(stderr, "serve: signal {}, shutting down\n", sig);
  (*engine)->shutdown();  // open streams get their final event...
  http.stop();            // ...so the HTTP workers can finish
  cleanup();
  return 0;
}

}  // namespace

void register_serve(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible server (chat and completions, SSE, tools, metrics)");
  auto a = std::make_shared<ServeArgs>();
  EngineConfig& e = a->engine;
  server::ServerConfig& s = a->server;
  cmd->add_option("--model", e.model_dir, "checkpoint directory (with tokenizer.json)");
  cmd->add_flag("--demo", a->demo,
                "serve a tiny RANDOM-WEIGHT model made on the fly (real tokenizer, CPU): try the API, not the text");
  cmd->add_option("--device", e.device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--host", s.host, "address to bind (0.0.0.0 for every interface)")->capture_default_str();
  cmd->add_option("--port", s.port, "port (0: any free port)")->capture_default_str();
  cmd->add_option("--served-model-name", s.served_model_names,
                  "model name(s) clients use; the first is reported (default: the model directory's name)");
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json (default: the model's, or the repo's for --demo)");
  cmd->add_option("--max-num-seqs", e.max_num_seqs, "requests running at once")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", e.max_num_batched_tokens, "tokens per engine step")
      ->capture_default_str();
  cmd->add_option("--max-model-len", e.max_model_len,
                  "prompt + output tokens per request (default: the model's, capped by the KV pool; 8192 for --demo)");
  cmd->add_option("--num-gpu-blocks", e.num_kv_blocks,
                  "KV blocks of 256 tokens (default: max-num-seqs full-length sequences)");
  cmd->add_option("--kv-dtype", e.kv_dtype, "fp8 (fp8_ds_mla) | bf16")->capture_default_str();
  cmd->add_option("--wo-a", e.wo_a,
                  "CUDA runner: bf16 | fp8 (each wo_a in the lossless fp8 form where its values allow: half its "
                  "memory, the same results)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--cpu-numerics", e.cpu_numerics, "CPU runner: bf16 (GPU oracle) | fp32 (HF)")
      ->capture_default_str();
  cmd->add_option("--cpu-threads", e.cpu_threads, "CPU runner: OpenMP threads (0: OpenMP default)")
      ->capture_default_str();
  cmd->add_option("--max-waiting", e.max_waiting, "queued requests before 503")->capture_default_str();
  cmd->add_option("--seed", e.sampling_seed, "seed for requests without one (0: random at start)")
      ->capture_default_str();
  cmd->add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY' on /v1/* and /tokenize");
  cmd->add_option("--default-thinking", a->default_thinking, "on (DeepSeek's default) | off")->capture_default_str();
  cmd->add_option("--max-request-body-bytes", s.max_request_body_bytes, "larger bodies get 413")
      ->capture_default_str();
  cmd->add_option("--http-threads", s.http_threads, "HTTP worker threads (each open stream holds one)")
      ->capture_default_str();
  cmd->add_option("--sse-keepalive-seconds", s.sse_keepalive_seconds,
                  "interval of ': keep-alive' comments on quiet streams")
      ->capture_default_str();
  cmd->add_flag("--log-requests", s.log_requests, "one stderr line per HTTP request");
  cmd->add_option("--diagnostic-script", e.diagnostic_script,
                  "DIAGNOSTIC: replace the model with a JSON script of outputs (tests of tools, stops, aborts)");
  cmd->callback([a, &exit_code] { exit_code = run_serve(*a); });
}

}  // namespace dsv4::cli
