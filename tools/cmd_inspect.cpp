// cmd_inspect.cpp: `dsv4 inspect --model DIR`: config summary, tensor inventory by format and
// layer type, bytes by format, and the full validation result (exit code 0 valid, 1 invalid).
#include <fmt/format.h>

#include "model/config.h"
#include "model/inventory.h"
#include "model/weights.h"
#include "tools/commands.h"

namespace dsv4::cli {

namespace {

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
  const Inventory inv = take_inventory(**w);

  fmt::print("\n== files: {} ({} tensors, {} bytes of tensor data)\n", store.files().size(), store.tensors().size(),
             store.total_bytes());
  fmt::print("\n== tensors by dtype\n");
  for (const auto& [k, v] : inv.by_dtype) fmt::print("  {:<10} {:>8} tensors {:>16} bytes\n", k, v.count, v.bytes);
  fmt::print("\n== linear weights by format\n");
  for (const auto& [k, v] : inv.by_format) fmt::print("  {:<10} {:>8} linears {:>16} bytes\n", k, v.count, v.bytes);
  fmt::print("\n== linear weights by layer type and role\n");
  for (const auto& [k, v] : inv.by_role) fmt::print("  {:<28} {:>8} linears {:>16} bytes\n", k, v.count, v.bytes);
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
