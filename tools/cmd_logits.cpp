// cmd_logits.cpp: (being written)
#include "tools/commands.h"
namespace dsv4::cli {
void register_logits(CLI::App& app, int& exit_code) { (void)app; (void)exit_code; }
}  // namespace dsv4::cli
