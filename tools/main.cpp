// main.cpp: the dsv4 command line. Subcommands live in cmd_*.cpp; this file only wires them up.
#include <fmt/format.h>
#include <string>

#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"dsv4: inference engine and OpenAI-compatible server for DeepSeek-V4-Flash"};
  app.require_subcommand(1);
  app.set_version_flag("--version", fmt::format("dsv4 {} ({})", DSV4_VERSION, DSV4_GIT_REV));
  int exit_code = 0;
  dsv4::cli::register_inspect(app, exit_code);
  dsv4::cli::register_logits(app, exit_code);
  dsv4::cli::register_make_model(app, exit_code);
#ifdef DSV4_HAVE_TOKENIZER
  dsv4::cli::register_tokenizer_commands(app, exit_code);
#endif
#ifdef DSV4_HAVE_SERVER
  dsv4::cli::register_serve(app, exit_code);
  dsv4::cli::register_generate(app, exit_code);
#endif
#ifdef DSV4_HAVE_CUDA_RUNNER
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i > 0 ? " " : "") + std::string(argv[i]);
  dsv4::cli::register_bench(app, exit_code, command_line);
#endif
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
