// cmd_inspect.cpp: `dsv4 inspect --model DIR`: config summary, tensor inventory by format and
// layer type, bytes by format, and the full validation result (exit code 0 valid, 1 invalid).
#include <fmt/format.h>

#include <map>

#include "model/config.h"
#include "model/weights.h"
#include "tools/commands.h"

namespace dsv4::cli {

namespace {

struct Tally {
  int64_t count = 0;
  size_t bytes = 0;
};

void add_linear(std::map<std::string, Tally>& by_format, std::map<std::string, Tally>& by_kind, const std::string& kind,
                const LinearWeight& w) {
  if (!w.valid()) return;
  auto& f = by_format[weight_format_name(w.format)];
  f.count += 1;
  f.bytes += w.n_bytes();
  auto& k = by_kind[kind];
  k.count += 1;
  k.bytes += w.n_bytes();
}

void add_layer(std::map<std::string, Tally>& by_format, std::map<std::string, Tally>& by_kind, const LayerWeights& L,
               const std::string& tag) {
  const AttentionWeights& A = L.attn;
  for (const LinearWeight* w : {&A.wq_a, &A.wq_b, &A.wkv, &A.wo_a, &A.wo_b})
    add_linear(by_format, by_kind, tag + " attention", *w);
  if (A.has_compressor) {
    add_linear(by_format, by_kind, tag + " compressor", A.compressor.wkv);
    add_linear(by_format, by_kind, tag + " compressor", A.compressor.wgate);
  }
  if (A.has_indexer) {
    for (const LinearWeight* w : {&A.indexer.wq_b, &A.indexer.weights_proj, &A.indexer.compressor.wkv,
                                  &A.indexer.compressor.wgate})
      add_linear(by_format, by_kind, tag + " indexer", *w);
  }
  add_linear(by_format, by_kind, tag + " router", L.moe.gate);
  for (const ExpertWeights& e : L.moe.experts)
    for (const LinearWeight* w : {&e.w1, &e.w3, &e.w2}) add_linear(by_format, by_kind, tag + " routed experts", *w);
  if (L.moe.has_shared)
    for (const LinearWeight* w : {&L.moe.shared.w1, &L.moe.shared.w3, &L.moe.shared.w2})
      add_linear(by_format, by_kind, tag + " shared expert", *w);
}

int run_inspect(const std::string& dir) {
  auto cfg = ModelConfig::load(dir);
  if (!cfg.is_ok()) {
    fmt::print("INVALID: {}\n", cfg.status().to_string());
    return 1;
  }
  fmt::print("== config ({}/config.json)\n{}", dir, cfg->summary());
  auto w = ModelWeights::load(dir, *cfg);
  if (!w.is_ok()) {
    fmt::print("\nINVALID: {}\n", w.status().to_string());
    return 1;
  }
  const TensorStore& store = *(*w)->store;
  std::map<std::string, Tally> by_dtype;
  for (const auto& [name, t] : store.tensors()) {
    auto& d = by_dtype[dtype_name(t.dtype)];
    d.count += 1;
    d.bytes += t.n_bytes;
  }
  std::map<std::string, Tally> by_format, by_kind;
  for (const LayerWeights& L : (*w)->layers) add_layer(by_format, by_kind, L, attn_type_name(L.spec.attn));
  if ((*w)->has_mtp) add_layer(by_format, by_kind, (*w)->mtp.layer, "mtp");
  add_linear(by_format, by_kind, "head", (*w)->head);

  fmt::print("\n== files: {} ({} tensors, {} bytes of tensor data)\n", store.files().size(), store.tensors().size(),
             store.total_bytes());
  fmt::print("\n== tensors by dtype\n");
  for (const auto& [k, v] : by_dtype) fmt::print("  {:<10} {:>8} tensors {:>16} bytes\n", k, v.count, v.bytes);
  fmt::print("\n== linear weights by format\n");
  for (const auto& [k, v] : by_format) fmt::print("  {:<10} {:>8} linears {:>16} bytes\n", k, v.count, v.bytes);
  fmt::print("\n== linear weights by layer type and role\n");
  for (const auto& [k, v] : by_kind) fmt::print("  {:<28} {:>8} linears {:>16} bytes\n", k, v.count, v.bytes);
  fmt::print("\n  embedding {} {} bytes; MTP block {}\n", dtype_name((*w)->embed->dtype), (*w)->embed->n_bytes,
             (*w)->has_mtp ? "present" : "absent");
  fmt::print("\nVALID: every tensor matches the config\n");
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "validate a checkpoint and summarize its tensors");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("--model", *dir, "checkpoint directory")->required();
  cmd->callback([dir, &exit_code] { exit_code = run_inspect(*dir); });
}

}  // namespace dsv4::cli
