// make_model.h: random-weight checkpoints in the real layouts, for tests and benchmarks without
// the 150 GB download. `tiny` is small enough for CI; `flash-shaped` has the real Flash
// dimensions with fewer layers/experts. The w4a16 format is laid out exactly like Intel's
// AutoRound export (DeepSeek names, auto_gptq INT4 for the linears Intel quantizes, BF16 wo_a /
// compressors / router / embedding / head, F32 mHC / sinks / ape / bias, I64 tid2eid).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"

namespace dsv4 {

struct MakeModelOptions {
  std::string preset = "tiny";   // "tiny" or "flash-shaped"
  int layers = 4;
  int experts = 0;               // 0: preset default (8 tiny, 256 flash-shaped)
  int vocab = 0;                 // 0: preset default (1024 tiny, 129280 flash-shaped)
  std::string format = "w4a16";  // "w4a16", "fp8" (original release: FP8 block + MXFP4 experts) or "bf16"
  uint64_t seed = 0;
  std::string tokenizer;         // optional tokenizer.json to copy; sets vocab to 129280
  std::vector<std::string> layer_types;  // optional override per layer: "swa", "csa", "hca"
  bool mtp = false;              // also write an MTP block (mtp.0.*)
  // w4a16: wo_a's BF16 values drawn as FP8 block values (e4m3 codes times a ue8m0 scale per
  // 128 x 128), as Intel's export of the real model holds them (dequantized from the source's
  // FP8), instead of plain random BF16. The GPU loader can then keep wo_a in the fp8 form.
  bool wo_a_from_fp8 = false;
  std::string out_dir;
};

// The config the options describe (validated).
Result<ModelConfig> make_model_config(const MakeModelOptions& opts);

// Writes config.json, the shards (one per layer plus one for the global tensors) with
// model.safetensors.index.json, and the tokenizer files if given. `summary` gets one line per shard.
Status make_model(const MakeModelOptions& opts, std::string* summary);

}  // namespace dsv4
