// serve_setup.h: what `dsv4 serve` and `dsv4 generate` share: finding and loading the tokenizer,
// making the --demo model, building the runner an EngineConfig asks for, and the startup
// manifest (ARCHITECTURE.md §7). Kept in tools/ because it picks concrete runners (CPU today,
// CUDA later), which the engine itself must not know about.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "dsv4/engine.h"
#include "runtime/runner.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

// The DeepSeek-V4 tokenizer.json fetched by scripts/setup.sh: next to the binary's source tree.
Result<std::string> find_repo_tokenizer();

Result<std::unique_ptr<tok::Tokenizer>> load_tokenizer(const std::string& path);

// Writes the --demo checkpoint (tiny preset, random weights, the real tokenizer) into a fresh
// temporary directory and returns it.
Result<std::string> make_demo_model(const std::string& tokenizer_path, std::string* summary);

// The runner for cfg.device (cpu only for now) or the diagnostic script.
Result<std::unique_ptr<runtime::ModelRunner>> make_runner(const EngineConfig& cfg, const tok::Tokenizer& tokenizer);

// The command line of this process, from /proc/self/cmdline.
std::string command_line();

// Formats "name = value" lines, marking the ones that differ from `defaults`.
void append_settings(const std::string& title, const std::vector<std::pair<std::string, std::string>>& fields,
                     const std::vector<std::pair<std::string, std::string>>& defaults, std::string* out);

}  // namespace dsv4::cli
