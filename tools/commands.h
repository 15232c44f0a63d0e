// commands.h: the subcommands of the dsv4 binary. Each register_* adds one CLI11 subcommand whose
// callback stores its process exit code in `exit_code`. One file per subcommand (cmd_*.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace dsv4::cli {

void register_inspect(CLI::App& app, int& exit_code);
void register_logits(CLI::App& app, int& exit_code);
void register_make_model(CLI::App& app, int& exit_code);
void register_tokenizer_commands(CLI::App& app, int& exit_code);  // tokenize, detokenize
void register_serve(CLI::App& app, int& exit_code);
void register_generate(CLI::App& app, int& exit_code);
// CUDA builds only; argv: the process's command line, which the result JSON records.
void register_bench(CLI::App& app, int& exit_code, const std::string& argv);

}  // namespace dsv4::cli
