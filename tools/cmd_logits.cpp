// cmd_logits.cpp: `dsv4 logits`: teacher-forced logits for every position of a token sequence,
// from the CPU reference or the GPU model (--device cuda), as an fp32 .npy [T, vocab]. `--chunk N`
// feeds the prompt N tokens at a time through the decode state (N = 1 is token-by-token decode).
// The two devices' outputs for the same ids can be compared directly (GPU = CPU in bf16 numerics).
// `--selected FILE` also writes the indexer's chosen compressed entries of every CSA layer, int32
// [n_csa_layers, T, index_topk] (ascending per row, -1 past the row's count), for a direct
// comparison of the two devices' selections (bench/compare_selected.py).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <new>

#include "base/npy.h"
#include "cpu/model.h"
#include "model/config.h"
#include "model/weights.h"
#include "tools/commands.h"
#include "tools/token_ids.h"
#if DSV4_HAVE_CUDA_RUNNER
#include "gpu/gpu_model.h"
#endif

namespace dsv4::cli {

namespace {

struct LogitsArgs {
  std::string model, ids, out, numerics = "fp32", device = "cpu", selected, wo_a = "bf16";
  int64_t chunk = 0;
};

// Selected entries of the CSA layers: rows [T] of each CSA layer, filled chunk by chunk.
struct Selections {
  std::vector<int> csa_layers;                          // layer ids of the CSA layers
  std::vector<std::vector<std::vector<int32_t>>> rows;  // [csa layer][token] entries

  explicit Selections(const ModelConfig& cfg) {
    for (int l = 0; l < cfg.n_layers; ++l)
      if (cfg.layers[size_t(l)].attn == AttnType::kCsa) csa_layers.push_back(l);
    rows.resize(csa_layers.size());
  }
  // Appends one chunk's rows of layer `l` (no-op for layers that are not CSA).
  void append(int l, std::vector<std::vector<int32_t>> chunk) {
    for (size_t i = 0; i < csa_layers.size(); ++i)
      if (csa_layers[i] == l)
        for (auto& r : chunk) rows[i].push_back(std::move(r));
  }
  Status write(const std::string& path, int64_t T, int topk) const {
    std::vector<int32_t> out(csa_layers.size() * size_t(T) * size_t(topk), -1);
    for (size_t i = 0; i < csa_layers.size(); ++i) {
      if (int64_t(rows[i].size()) != T)
        return internal_error("selections of layer {}: {} rows, expected {}", csa_layers[i], rows[i].size(), T);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> r = rows[i][size_t(t)];
        if (int64_t(r.size()) > topk) return internal_error("row {} selects {} > {} entries", t, r.size(), topk);
        std::sort(r.begin(), r.end());
        std::copy(r.begin(), r.end(), out.begin() + int64_t((i * size_t(T) + size_t(t)) * size_t(topk)));
      }
    }
    return write_npy_i32(path, {int64_t(csa_layers.size()), T, topk}, out.data());
  }
};

#if DSV4_HAVE_CUDA_RUNNER
// All rows of every chunk through gpu::GpuModel (one sequence in slot 0, blocks 0, 1, 2, ...).
Status gpu_logits(const ModelConfig& cfg, const ModelWeights& w, std::span<const int32_t> ids, int64_t chunk,
                  bool wo_a_fp8, float* logits, Selections* sel) {
  const int64_t T = int64_t(ids.size());
  gpu::GpuModelOptions o;
  o.max_seqs = 1;
  o.max_tokens_per_step = int(chunk);
  o.max_positions = T;
  o.n_kv_blocks = int((T + 255) / 256);
  o.wo_a_fp8 = wo_a_fp8;
  DSV4_ASSIGN_OR_RETURN(auto model, gpu::GpuModel::load(cfg, w, o));
  if (!model->fp8_refused().empty()) fmt::print(stderr, "logits: {}\n", model->fp8_refused());
  std::vector<int32_t> blocks(size_t(o.n_kv_blocks));
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = int32_t(i);
  for (int64_t s = 0; s < T; s += chunk) {
    gpu::GpuStepSeq q;
    q.slot = 0;
    q.block_table = blocks;
    q.pos0 = s;
    q.tokens = ids.subspan(size_t(s), size_t(std::min(chunk, T - s)));
    q.logits = true;
    gpu::GpuStepTrace trace;
    DSV4_RETURN_IF_ERROR(model->forward(std::span<const gpu::GpuStepSeq>(&q, 1), logits + s * cfg.vocab_size,
                                        /*all_rows=*/true, sel ? &trace : nullptr));
    if (sel)
      for (int l = 0; l < cfg.n_layers && size_t(l) < trace.selected.size(); ++l)
        sel->append(l, std::move(trace.selected[size_t(l)]));
  }
  return Status::ok();
}
#endif

int run_logits(const LogitsArgs& a) {
  if (a.device != "cpu" && a.device != "cuda") {
    fmt::print(stderr, "logits: --device must be cpu or cuda, found '{}'\n", a.device);
    return 2;
  }
#if !DSV4_HAVE_CUDA_RUNNER
  if (a.device == "cuda") {
    fmt::print(stderr, "logits: --device cuda: this build has no CUDA support\n");
    return 2;
  }
#endif
  cpu::Numerics numerics;
  if (a.numerics == "fp32") numerics = cpu::Numerics::fp32();
  else if (a.numerics == "bf16") numerics = cpu::Numerics::bf16_gpu();
  else {
    fmt::print(stderr, "logits: --numerics must be fp32 or bf16, found '{}'\n", a.numerics);
    return 2;
  }
  if (a.chunk < 0) {
    fmt::print(stderr, "logits: --chunk must be >= 1 (or 0: the default), found {}\n", a.chunk);
    return 2;
  }
  // The outputs are written after the whole forward pass: a path that cannot be written is an
  // answer now, not after it (the files are rewritten at the end).
  for (const std::string* path : {&a.out, &a.selected}) {
    if (!path->empty() && !std::ofstream(*path, std::ios::binary).good()) {
      fmt::print(stderr, "logits: cannot write '{}': {}\n", *path, std::strerror(errno));
      return 1;
    }
  }
  auto cfg = ModelConfig::load(a.model);
  if (!cfg.is_ok()) {
    fmt::print(stderr, "logits: {}\n", cfg.status().to_string());
    return 1;
  }
  auto w = ModelWeights::load(a.model, *cfg);
  if (!w.is_ok()) {
    fmt::print(stderr, "logits: {}\n", w.status().to_string());
    return 1;
  }
  auto ids = read_token_ids(a.ids);
  if (!ids.is_ok()) {
    fmt::print(stderr, "logits: {}\n", ids.status().to_string());
    return 1;
  }
  const int64_t T = int64_t(ids->size());
  if (T == 0) {
    fmt::print(stderr, "logits: the token id array is empty\n");
    return 1;
  }
  if (cfg->max_position_embeddings > 0 && T > cfg->max_position_embeddings) {
    fmt::print(stderr, "logits: {} token ids, more than the model's max_position_embeddings = {}\n", T,
               cfg->max_position_embeddings);
    return 1;
  }
  // The GPU keeps all rows' logits of a step on the device: its default chunk bounds that buffer.
  const int64_t chunk = a.chunk > 0 ? a.chunk : (a.device == "cuda" ? std::min<int64_t>(T, 512) : T);
  const int64_t V = cfg->vocab_size;
  // The whole [T, vocab] output is held in memory; too many ids must be an answer, not std::bad_alloc.
  std::vector<float> logits;
  try {
    logits.resize(size_t(T * V));
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "logits: cannot allocate the [{}, {}] fp32 output ({:.1f} GiB); pass fewer token ids\n", T, V,
               double(T) * double(V) * 4.0 / double(1 << 30));
    return 1;
  }
  Selections selections(*cfg);
  Selections* sel = a.selected.empty() ? nullptr : &selections;
  const auto t0 = std::chrono::steady_clock::now();
#if DSV4_HAVE_CUDA_RUNNER
  if (a.device == "cuda") {
    if (a.numerics != "bf16") {
      fmt::print(stderr, "logits: --device cuda computes bf16 numerics (pass --numerics bf16)\n");
      return 2;
    }
    const Status st = gpu_logits(*cfg, **w, *ids, chunk, a.wo_a == "fp8", logits.data(), sel);
    if (!st.is_ok()) {
      fmt::print(stderr, "logits: {}\n", st.to_string());
      return 1;
    }
  }
#endif
  cpu::CpuModel model(*cfg, **w, numerics);
  auto seq = model.new_sequence();
  for (int64_t s = 0; s < T && a.device == "cpu"; s += chunk) {
    const int64_t n = std::min(chunk, T - s);
    cpu::ForwardTrace trace;
    const Status st = model.forward(*seq, std::span<const int32_t>(ids->data() + s, size_t(n)), cpu::LogitsRows::kAll,
                                    logits.data() + s * V, nullptr, sel ? &trace : nullptr);
    if (!st.is_ok()) {
      fmt::print(stderr, "logits: {}\n", st.to_string());
      return 1;
    }
    if (sel)
      for (size_t l = 0; l < trace.layers.size(); ++l) sel->append(int(l), std::move(trace.layers[l].attention.selected));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Status st = write_npy_f32(a.out, {T, V}, logits.data());
  if (!st.is_ok()) {
    fmt::print(stderr, "logits: {}\n", st.to_string());
    return 1;
  }
  if (sel) {
    const Status ss = sel->write(a.selected, T, cfg->index_topk);
    if (!ss.is_ok()) {
      fmt::print(stderr, "logits: --selected: {}\n", ss.to_string());
      return 1;
    }
  }
  fmt::print(stderr, "logits: {} tokens, device {}, chunk {}, numerics {}, {:.2f} s ({:.1f} tok/s) -> {}\n", T,
             a.device, chunk, a.numerics, secs, double(T) / secs, a.out);
  return 0;
}

}  // namespace

void register_logits(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("logits", "teacher-forced logits for every position, as .npy [T, vocab]");
  auto a = std::make_shared<LogitsArgs>();
  cmd->add_option("--model", a->model, "checkpoint directory")->required();
  cmd->add_option("--token-ids", a->ids, "int32 or int64 .npy [T], or a list such as 0,5,17")->required();
  cmd->add_option("--out", a->out, "output .npy (fp32 [T, vocab])")->required();
  cmd->add_option("--numerics", a->numerics, "fp32 (matches HF transformers) | bf16 (GPU oracle)")
      ->capture_default_str();
  cmd->add_option("--chunk", a->chunk, "feed the prompt in chunks of N tokens (0, the default: all at once; 512 on cuda)");
  cmd->add_option("--device", a->device, "cpu | cuda (needs --numerics bf16)")->capture_default_str();
  cmd->add_option("--wo-a", a->wo_a, "--device cuda: bf16 | fp8 (wo_a in the lossless fp8 form where allowed)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--selected", a->selected,
                  "also write the CSA layers' indexer selections, int32 .npy [n_csa_layers, T, index_topk]");
  cmd->callback([a, &exit_code] { exit_code = run_logits(*a); });
}

}  // namespace dsv4::cli
