// serve_setup.cpp: see serve_setup.h.
#include "tools/serve_setup.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/make_model.h"
#include "runtime/cpu_runner.h"
#if DSV4_HAVE_CUDA_RUNNER
#include "runtime/cuda_runner.h"
#endif
#include "runtime/scripted_runner.h"

namespace dsv4::cli {

namespace fs = std::filesystem;

Result<std::string> find_repo_tokenizer() {
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path().parent_path() / "third_party/tokenizer/tokenizer.json");
    candidates.push_back(exe.parent_path() / "third_party/tokenizer/tokenizer.json");
  }
  candidates.push_back(fs::path(DSV4_SOURCE_DIR) / "third_party/tokenizer/tokenizer.json");
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec).string();
  }
  return not_found("the DeepSeek-V4 tokenizer.json was not found (looked in {}); run scripts/setup.sh or pass "
                   "--tokenizer PATH",
                   candidates.back().parent_path().string());
}

Result<std::unique_ptr<tok::Tokenizer>> load_tokenizer(const std::string& path) {
  auto t = tok::Tokenizer::load(path);
  if (!t.is_ok()) return t.status();  // Tokenizer::load names the path already
  return std::make_unique<tok::Tokenizer>(std::move(t).value());
}

Result<std::string> make_demo_model(const std::string& tokenizer_path, std::string* summary) {
  std::string tmpl = (fs::temp_directory_path() / "dsv4-demo-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return internal_error("cannot create a temporary directory for the demo model");
  MakeModelOptions o;
  o.preset = "tiny";
  o.layers = 4;  // Flash's pattern: two sliding-window layers, then CSA and HCA
  o.seed = 0;    // the same demo model on every machine
  o.tokenizer = tokenizer_path;
  o.out_dir = tmpl;
  const Status st = make_model(o, summary);
  if (!st.is_ok()) {
    std::error_code ec;
    fs::remove_all(tmpl, ec);
    return st.with_context("making the demo model");
  }
  return tmpl;
}

Result<std::unique_ptr<runtime::ModelRunner>> make_runner(const EngineConfig& cfg, const tok::Tokenizer& tokenizer) {
  DSV4_RETURN_IF_ERROR(cfg.check());  // before a checkpoint of ~150 GB is read, not after
  if (!cfg.diagnostic_script.empty()) {
    runtime::EncodeFn encode = [&tokenizer](std::string_view text) { return tokenizer.encode(text, true); };
    runtime::DecodeFn decode = [&tokenizer](std::span<const int32_t> ids) {
      auto s = tokenizer.decode(ids, false);
      return s.is_ok() ? s.value() : std::string();
    };
    int64_t max_positions = 1 << 20;
    int32_t vocab = tokenizer.n_ids();
    int32_t eos = tokenizer.added_token_id("<｜end▁of▁sentence｜>").value_or(1);
    if (!cfg.model_dir.empty()) {
      auto mc = ModelConfig::load(cfg.model_dir);
      if (!mc.is_ok()) return mc.status();
      max_positions = mc->max_position_embeddings;
      vocab = mc->vocab_size;
      eos = mc->eos_token_id;
    }
    DSV4_ASSIGN_OR_RETURN(auto r, runtime::ScriptedRunner::from_file(cfg.diagnostic_script, encode, decode, vocab,
                                                                     eos, max_positions));
    return std::unique_ptr<runtime::ModelRunner>(std::move(r));
  }
  if (cfg.device != "cpu" && cfg.device != "cuda")
    return invalid_argument("--device must be cpu or cuda, found '{}'", cfg.device);
  if (cfg.model_dir.empty()) return invalid_argument("--model DIR is required (or --demo)");
  auto check_vocab = [&](int vocab) -> Status {
    if (vocab > tokenizer.n_ids() + 1024 || vocab < tokenizer.n_ids()) {
      return invalid_argument("the model's vocabulary ({}) does not match the tokenizer's ({} ids)", vocab,
                              tokenizer.n_ids());
    }
    return Status::ok();
  };
  if (cfg.device == "cuda") {
#if DSV4_HAVE_CUDA_RUNNER
    DSV4_ASSIGN_OR_RETURN(auto r, runtime::CudaRunner::load(cfg));
    DSV4_RETURN_IF_ERROR(check_vocab(r->model_config().vocab_size));
    return std::unique_ptr<runtime::ModelRunner>(std::move(r));
#else
    return unimplemented("--device cuda: this build has no CUDA support (nvcc was not found at configure time)");
#endif
  }
  DSV4_ASSIGN_OR_RETURN(auto r, runtime::CpuRunner::load(cfg.model_dir, cfg.cpu_numerics, cfg.kv_dtype,
                                                         cfg.cpu_threads));
  DSV4_RETURN_IF_ERROR(check_vocab(r->model_config().vocab_size));
  return std::unique_ptr<runtime::ModelRunner>(std::move(r));
}

std::string command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  for (char& c : s)
    if (c == '\0') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void append_settings(const std::string& title, const std::vector<std::pair<std::string, std::string>>& fields,
                     const std::vector<std::pair<std::string, std::string>>& defaults, std::string* out) {
  *out += title + ":\n";
  for (size_t i = 0; i < fields.size(); ++i) {
    const bool changed = i < defaults.size() && defaults[i].second != fields[i].second;
    *out += fmt::format("  {:<24} {}{}\n", fields[i].first, fields[i].second.empty() ? "\"\"" : fields[i].second,
                        changed ? "   (set)" : "");
  }
}

}  // namespace dsv4::cli
