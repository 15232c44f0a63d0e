// cmd_make_model.cpp: (being written)
#include "tools/commands.h"
namespace dsv4::cli {
void register_make_model(CLI::App& app, int& exit_code) { (void)app; (void)exit_code; }
}  // namespace dsv4::cli
