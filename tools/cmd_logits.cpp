// cmd_logits.cpp: `dsv4 logits`: teacher-forced logits for every position of a token sequence,
// from the CPU reference, as an fp32 .npy [T, vocab]. `--chunk N` feeds the prompt N tokens at a
// time through the decode state (N = 1 is token-by-token decode).
#include <fmt/format.h>

#include <chrono>

#include "base/npy.h"
#include "cpu/model.h"
#include "model/config.h"
#include "model/weights.h"
#include "tools/commands.h"
#include "tools/token_ids.h"

namespace dsv4::cli {

namespace {

struct LogitsArgs {
  std::string model, ids, out, numerics = "fp32", device = "cpu";
  int64_t chunk = 0;
};

int run_logits(const LogitsArgs& a) {
  if (a.device != "cpu") {
    fmt::print(stderr, "logits: --device {} is not available in this build (only cpu)\n", a.device);
    return 2;
  }
  cpu::Numerics numerics;
  if (a.numerics == "fp32") numerics = cpu::Numerics::fp32();
  else if (a.numerics == "bf16") numerics = cpu::Numerics::bf16_gpu();
  else {
    fmt::print(stderr, "logits: --numerics must be fp32 or bf16, found '{}'\n", a.numerics);
    return 2;
  }
  auto cfg = ModelConfig::load(a.model);
  if (!cfg.is_ok()) {
    fmt::print(stderr, "logits: {}\n", cfg.status().to_string());
    return 1;
  }
  auto w = ModelWeights::load(a.model, *cfg);
  if (!w.is_ok()) {
    fmt::print(stderr, "logits: {}\n", w.status().to_string());
    return 1;
  }
  auto ids = read_token_ids(a.ids);
  if (!ids.is_ok()) {
    fmt::print(stderr, "logits: {}\n", ids.status().to_string());
    return 1;
  }
  const int64_t T = int64_t(ids->size());
  if (T == 0) {
    fmt::print(stderr, "logits: the token id array is empty\n");
    return 1;
  }
  const int64_t chunk = a.chunk > 0 ? a.chunk : T;
  const int64_t V = cfg->vocab_size;
  cpu::CpuModel model(*cfg, **w, numerics);
  auto seq = model.new_sequence();
  std::vector<float> logits(size_t(T * V));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t n = std::min(chunk, T - s);
    const Status st = model.forward(*seq, std::span<const int32_t>(ids->data() + s, size_t(n)), cpu::LogitsRows::kAll,
                                    logits.data() + s * V);
    if (!st.is_ok()) {
      fmt::print(stderr, "logits: {}\n", st.to_string());
      return 1;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Status st = write_npy_f32(a.out, {T, V}, logits.data());
  if (!st.is_ok()) {
    fmt::print(stderr, "logits: {}\n", st.to_string());
    return 1;
  }
  fmt::print(stderr, "logits: {} tokens, chunk {}, numerics {}, {:.2f} s ({:.1f} tok/s) -> {}\n", T, chunk,
             a.numerics, secs, double(T) / secs, a.out);
  return 0;
}

}  // namespace

void register_logits(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("logits", "teacher-forced logits for every position, as .npy [T, vocab]");
  auto a = std::make_shared<LogitsArgs>();
  cmd->add_option("--model", a->model, "checkpoint directory")->required();
  cmd->add_option("--token-ids", a->ids, "int32 or int64 .npy [T], or a list such as 0,5,17")->required();
  cmd->add_option("--out", a->out, "output .npy (fp32 [T, vocab])")->required();
  cmd->add_option("--numerics", a->numerics, "fp32 (matches HF transformers) | bf16 (GPU oracle)")
      ->capture_default_str();
  cmd->add_option("--chunk", a->chunk, "feed the prompt in chunks of N tokens (default: all at once)");
  cmd->add_option("--device", a->device, "cpu")->capture_default_str();
  cmd->callback([a, &exit_code] { exit_code = run_logits(*a); });
}

}  // namespace dsv4::cli
