// cmd_make_model.cpp: `dsv4 make-model`, a random-weight checkpoint in the real layouts.
#include <fmt/format.h>

#include <new>

#include "model/make_model.h"
#include "tools/commands.h"

namespace dsv4::cli {

void register_make_model(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("make-model", "write a random-weight checkpoint (tiny or flash-shaped)");
  auto opts = std::make_shared<MakeModelOptions>();
  cmd->add_option("--preset", opts->preset, "tiny | flash-shaped")->capture_default_str();
  cmd->add_option("--layers", opts->layers, "number of layers")->capture_default_str();
  cmd->add_option("--experts", opts->experts, "routed experts (default: 8 tiny, 256 flash-shaped)");
  cmd->add_option("--vocab", opts->vocab, "vocabulary size (default: 1024 tiny, 129280 flash-shaped)");
  cmd->add_option("--format", opts->format, "w4a16 (Intel AutoRound layout) | fp8 (original FP8 + MXFP4 release) | bf16")->capture_default_str();
  cmd->add_option("--seed", opts->seed, "random seed")->capture_default_str();
  cmd->add_flag("--wo-a-from-fp8", opts->wo_a_from_fp8,
                "w4a16: wo_a's BF16 values drawn as FP8 block values, as in the real W4A16 export "
                "(the GPU loader's fp8 form can then hold it)");
  cmd->add_option("--tokenizer", opts->tokenizer, "tokenizer.json to copy (sets vocab to 129280)");
  cmd->add_option("--layer-types", opts->layer_types, "per-layer attention: swa,csa,hca (default: Flash pattern)")
      ->delimiter(',');
  cmd->add_flag("--mtp", opts->mtp, "also write an MTP block");
  cmd->add_option("--out", opts->out_dir, "output directory")->required();
  cmd->callback([opts, &exit_code] {
    std::string summary;
    Status st;
    // Each shard is built in memory: sizes the machine cannot hold must be an answer, not an abort.
    try {
      st = make_model(*opts, &summary);
    } catch (const std::bad_alloc&) {
      st = Status(StatusCode::kResourceExhausted,
                  fmt::format("not enough memory to build a shard of this checkpoint (preset {}, {} experts, vocab "
                              "{}); use smaller --experts / --vocab",
                              opts->preset, opts->experts, opts->vocab));
    }
    if (!st.is_ok()) {
      fmt::print(stderr, "make-model: {}\n", st.to_string());
      exit_code = 1;
      return;
    }
    fmt::print("{}wrote {}\n", summary, opts->out_dir);
  });
}

}  // namespace dsv4::cli
