// make_model.cpp: deterministic random tensors. Every tensor is seeded from (seed, name, chunk),
// so the bytes do not depend on thread count or generation order. INT4 weights are drawn as
// random codes and random signed FP16 scales directly (no float pass), which keeps flash-shaped
// generation at memory speed; magnitudes follow 1/sqrt(fan_in) so activations stay O(1).
#include "model/make_model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "base/json_depth.h"
#include "base/numeric.h"
#include "model/json_file.h"
#include "model/safetensors.h"

namespace dsv4 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t hash_name(uint64_t seed, const std::string& name, uint64_t chunk) {
  uint64_t h = seed * 0x100000001b3ull ^ 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  h ^= chunk * 0x9e3779b97f4a7c15ull;
  uint64_t s = h;
  return splitmix(s);
}

// Approximately standard normal (sum of four uniforms, rescaled): cheap and bounded.
float approx_normal(uint64_t& s) {
  const uint64_t r = splitmix(s);
  float acc = 0.0f;
  for (int i = 0; i < 4; ++i) acc += float((r >> (16 * i)) & 0xffff) / 65535.0f;
  return (acc - 2.0f) * 1.7320508f;
}

constexpr int64_t kChunk = 1 << 20;
constexpr int kMaxMakeModelLayers = 64;
constexpr uintmax_t kMaxTokenizerBytes = uintmax_t(256) << 20;  // DeepSeek-V4's is 7.8 MB

// Fills n values of std `stddev` (mean `mean`) for tensor `name`.
std::vector<float> normal(uint64_t seed, const std::string& name, int64_t n, float stddev, float mean = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < n_chunks; ++c) {
    uint64_t s = hash_name(seed, name, uint64_t(c));
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) v[size_t(i)] = mean + stddev * approx_normal(s);
  }
  return v;
}

class Builder {
 public:
  Builder(const ModelConfig& cfg, const MakeModelOptions& o) : cfg_(cfg), o_(o) {}

  SafetensorsWriter& w() { return w_; }

  void vec_f32(const std::string& name, std::vector<int64_t> shape, float stddev, float mean = 0.0f) {
    int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<>());
    w_.add_f32(name, std::move(shape), normal(o_.seed, name, n, stddev, mean));
  }
  void vec_bf16(const std::string& name, std::vector<int64_t> shape, float stddev, float mean = 0.0f) {
    int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<>());
    w_.add_bf16(name, std::move(shape), normal(o_.seed, name, n, stddev, mean));
  }

  // A linear [n, k] as BF16 `.weight`.
  void dense(const std::string& prefix, int64_t n, int64_t k) {
    vec_bf16(prefix + ".weight", {n, k}, 1.0f / std::sqrt(float(k)));
  }

  // A linear [n, k] as auto_gptq INT4 (group 128, symmetric, GPTQ v1 zeros = 7).
  void int4(const std::string& prefix, int64_t n, int64_t k) {
    const int64_t g = 128;
    // qweight I32 [k/8, n]: random codes.
    std::vector<uint8_t> qw(size_t(k / 8 * n * 4));
    const int64_t n_words = k / 8 * n;
    const int64_t n_chunks = (n_words + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; ++c) {
      uint64_t s = hash_name(o_.seed, prefix + ".qweight", uint64_t(c));
      for (int64_t i = c * kChunk; i < std::min(n_words, (c + 1) * kChunk); i += 2) {
        const uint64_t r = splitmix(s);
        std::memcpy(&qw[size_t(i * 4)], &r, size_t(std::min<int64_t>(8, (n_words - i) * 4)));
      }
    }
    w_.add(prefix + ".qweight", DType::kI32, {k / 8, n}, std::move(qw));
    // Uniform codes give (q - 8) with std ~4.6; scale so W has std ~1/sqrt(k). Signs are random
    // (AutoRound's RTN makes negative scales whenever the positive extreme dominates).
    std::vector<float> sc = normal(o_.seed, prefix + ".scales", k / g * n, 0.25f, 1.0f);
    const float base = 1.0f / (4.6f * std::sqrt(float(k)));
    uint64_t s = hash_name(o_.seed, prefix + ".sign", 0);
    for (float& v : sc) v = base * std::fabs(v) * ((splitmix(s) & 1) ? -1.0f : 1.0f);
    w_.add_f16(prefix + ".scales", {k / g, n}, sc);
    std::vector<int32_t> qz(size_t(k / g * ((n + 7) / 8)), int32_t(0x77777777));
    w_.add_i32(prefix + ".qzeros", {k / g, (n + 7) / 8}, qz);
  }

  // A linear [n, k] as FP8 block: E4M3 `.weight` + E8M0 `.scale` per 128x128 (the original release).
  void fp8(const std::string& prefix, int64_t n, int64_t k) {
    std::vector<uint8_t> w(size_t(n * k));
    fill_bytes(prefix + ".weight", w, [](uint8_t b) { return (b & 0x7f) == 0x7f ? uint8_t(b & 0xf0) : b; });
    w_.add(prefix + ".weight", DType::kF8E4M3, {n, k}, std::move(w));
    // Random codes have |w| up to 448 with a typical magnitude ~30; scale to std ~1/sqrt(k).
    const int e = 127 - 5 - int(std::lround(std::log2(std::sqrt(double(k)))));
    std::vector<uint8_t> s(size_t(((n + 127) / 128) * ((k + 127) / 128)));
    fill_bytes(prefix + ".scale", s, [e](uint8_t b) { return uint8_t(e - int(b % 3)); });
    w_.add(prefix + ".scale", DType::kF8E8M0, {(n + 127) / 128, (k + 127) / 128}, std::move(s));
  }

  // A linear [n, k] as BF16 `.weight` whose values are FP8 block values: the draws of fp8() above,
  // each e4m3 code times its block's 2^(scale - 127), exact in BF16 (Intel's export of wo_a).
  void fp8_as_bf16(const std::string& prefix, int64_t n, int64_t k) {
    std::vector<uint8_t> codes(size_t(n * k));
    fill_bytes(prefix + ".weight", codes, [](uint8_t b) { return (b & 0x7f) == 0x7f ? uint8_t(b & 0xf0) : b; });
    const int e = 127 - 5 - int(std::lround(std::log2(std::sqrt(double(k)))));
    const int64_t kb = (k + 127) / 128;
    std::vector<uint8_t> s(size_t(((n + 127) / 128) * kb));
    fill_bytes(prefix + ".scale", s, [e](uint8_t b) { return uint8_t(e - int(b % 3)); });
    std::vector<float> v(codes.size());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c)
        v[size_t(r * k + c)] = std::ldexp(e4m3_to_f32(codes[size_t(r * k + c)]), int(s[size_t((r / 128) * kb + c / 128)]) - 127);
    w_.add_bf16(prefix + ".weight", {n, k}, v);
  }

  // A linear [n, k] as MXFP4: I8 `.weight` [n, k/2] (two E2M1 codes a byte) + E8M0 `.scale` [n, k/32].
  void mxfp4(const std::string& prefix, int64_t n, int64_t k) {
    std::vector<uint8_t> w(size_t(n * k / 2));
    fill_bytes(prefix + ".weight", w, [](uint8_t b) { return b; });
    w_.add(prefix + ".weight", DType::kI8, {n, k / 2}, std::move(w));
    const int e = 127 - 2 - int(std::lround(std::log2(std::sqrt(double(k)))));
    std::vector<uint8_t> s(size_t(n * k / 32));
    fill_bytes(prefix + ".scale", s, [e](uint8_t b) { return uint8_t(e - int(b % 3)); });
    w_.add(prefix + ".scale", DType::kF8E8M0, {n, k / 32}, std::move(s));
  }

  template <typename F>
  void fill_bytes(const std::string& name, std::vector<uint8_t>& out, F map) {
    const int64_t n = int64_t(out.size());
    const int64_t n_chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; ++c) {
      uint64_t s = hash_name(o_.seed, name, uint64_t(c));
      for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) out[size_t(i)] = map(uint8_t(splitmix(s)));
    }
  }

  // The format this linear has in the chosen export: Intel W4A16 quantizes `quantized` linears to
  // INT4; the original release stores them as FP8 (routed experts as MXFP4) and also wo_a as FP8.
  enum class Kind { kBf16Always, kQuantized, kWoA, kRoutedExpert };
  void linear(const std::string& prefix, int64_t n, int64_t k, Kind kind) {
    const bool quantized = kind == Kind::kQuantized || kind == Kind::kRoutedExpert;
    if (o_.format == "w4a16" && quantized) int4(prefix, n, k);
    else if (o_.format == "w4a16" && kind == Kind::kWoA && o_.wo_a_from_fp8) fp8_as_bf16(prefix, n, k);
    else if (o_.format == "fp8" && kind == Kind::kRoutedExpert) mxfp4(prefix, n, k);
    else if (o_.format == "fp8" && (quantized || kind == Kind::kWoA)) fp8(prefix, n, k);
    else dense(prefix, n, k);
  }

  void hc(const std::string& fn, const std::string& base, const std::string& scale, int mix, int n_scale) {
    vec_f32(fn, {mix, cfg_.hc_dim()}, 1.0f / std::sqrt(float(cfg_.hc_dim())));
    vec_f32(base, {mix}, 0.5f);
    vec_f32(scale, {n_scale}, 0.25f, 1.0f);
  }

  void compressor(const std::string& p, int dc, int c, int m) {
    dense(p + ".wkv", int64_t(c) * dc, cfg_.hidden);
    dense(p + ".wgate", int64_t(c) * dc, cfg_.hidden);
    vec_f32(p + ".ape", {m, int64_t(c) * dc}, 0.5f);
    vec_bf16(p + ".norm.weight", {dc}, 0.1f, 1.0f);
  }

  void layer(const std::string& p, const LayerSpec& spec) {
    const ModelConfig& c = cfg_;
    const int D = c.hidden;
    vec_bf16(p + ".attn_norm.weight", {D}, 0.1f, 1.0f);
    vec_bf16(p + ".ffn_norm.weight", {D}, 0.1f, 1.0f);
    hc(p + ".hc_attn_fn", p + ".hc_attn_base", p + ".hc_attn_scale", c.hc_mix(), 3);
    hc(p + ".hc_ffn_fn", p + ".hc_ffn_base", p + ".hc_ffn_scale", c.hc_mix(), 3);
    const std::string a = p + ".attn";
    linear(a + ".wq_a", c.q_lora_rank, D, Kind::kQuantized);
    vec_bf16(a + ".q_norm.weight", {c.q_lora_rank}, 0.1f, 1.0f);
    linear(a + ".wq_b", c.q_dim(), c.q_lora_rank, Kind::kQuantized);
    linear(a + ".wkv", c.head_dim, D, Kind::kQuantized);
    vec_bf16(a + ".kv_norm.weight", {c.head_dim}, 0.1f, 1.0f);
    linear(a + ".wo_a", int64_t(c.o_groups) * c.o_lora_rank, c.group_in_dim(), Kind::kWoA);
    linear(a + ".wo_b", D, int64_t(c.o_groups) * c.o_lora_rank, Kind::kQuantized);
    vec_f32(a + ".attn_sink", {c.n_heads}, 1.0f);
    if (spec.attn == AttnType::kCsa) {
      compressor(a + ".compressor", c.head_dim, 2, spec.compress_ratio);
      linear(a + ".indexer.wq_b", int64_t(c.index_n_heads) * c.index_head_dim, c.q_lora_rank, Kind::kQuantized);
      dense(a + ".indexer.weights_proj", c.index_n_heads, D);
      compressor(a + ".indexer.compressor", c.index_head_dim, 2, spec.compress_ratio);
    } else if (spec.attn == AttnType::kHca) {
      compressor(a + ".compressor", c.head_dim, 1, spec.compress_ratio);
    }
    const std::string f = p + ".ffn";
    dense(f + ".gate", c.n_routed_experts, D);
    if (spec.moe == MoeType::kHash) {
      // Distinct random experts per row, like the real table.
      const int E = c.n_routed_experts, K = c.n_experts_per_tok;
      std::vector<int64_t> t(size_t(int64_t(c.vocab_size) * K));
      uint64_t s = hash_name(o_.seed, f + ".gate.tid2eid", 0);
      std::vector<int> perm(static_cast<size_t>(E));
      for (int64_t v = 0; v < c.vocab_size; ++v) {
        std::iota(perm.begin(), perm.end(), 0);
        for (int k = 0; k < K; ++k) {
          const int j = k + int(splitmix(s) % uint64_t(E - k));
          std::swap(perm[size_t(k)], perm[size_t(j)]);
          t[size_t(v * K + k)] = perm[size_t(k)];
        }
      }
      w_.add_i64(f + ".gate.tid2eid", {c.vocab_size, K}, t);
    } else {
      vec_f32(f + ".gate.bias", {c.n_routed_experts}, 0.1f);
    }
    for (int e = 0; e < c.n_routed_experts; ++e) {
      const std::string q = fmt::format("{}.experts.{}", f, e);
      linear(q + ".w1", c.moe_inter, D, Kind::kRoutedExpert);
      linear(q + ".w3", c.moe_inter, D, Kind::kRoutedExpert);
      linear(q + ".w2", D, c.moe_inter, Kind::kRoutedExpert);
    }
    if (c.n_shared_experts > 0) {
      linear(f + ".shared_experts.w1", c.moe_inter, D, Kind::kQuantized);
      linear(f + ".shared_experts.w3", c.moe_inter, D, Kind::kQuantized);
      linear(f + ".shared_experts.w2", D, c.moe_inter, Kind::kQuantized);
    }
  }

  Status flush(const std::string& path, json& weight_map, std::string* summary) {
    const std::string file = fs::path(path).filename().string();
    for (const std::string& n : w_.names()) weight_map[n] = file;
    if (summary) *summary += fmt::format("{}: {} tensors, {} bytes\n", file, w_.n_tensors(), w_.total_bytes());
    DSV4_RETURN_IF_ERROR(w_.write(path, {{"format", "pt"}}));
    w_ = SafetensorsWriter();
    return Status::ok();
  }

 private:
  const ModelConfig& cfg_;
  const MakeModelOptions& o_;
  SafetensorsWriter w_;
};

}  // namespace

Result<ModelConfig> make_model_config(const MakeModelOptions& o) {
  ModelConfig c;
  c.config_style = "deepseek-hf";
  c.model_type = "deepseek_v4";
  // DeepSeek-V4-Flash has 43 layers; a flash-shaped layer writes ~3 GB, and 100000 tiny ones
  // filled the disk for an hour.
  if (o.layers <= 0 || o.layers > kMaxMakeModelLayers)
    return invalid_argument("--layers must be in 1..{}, found {}", kMaxMakeModelLayers, o.layers);
  // 0 selects the preset's default; a negative value used to select it silently too.
  if (o.experts < 0) return invalid_argument("--experts must be positive (or 0: the preset's), found {}", o.experts);
  if (o.vocab < 0) return invalid_argument("--vocab must be positive (or 0: the preset's), found {}", o.vocab);
  int hca_rate = 128;
  if (o.preset == "tiny") {
    c.vocab_size = 1024;
    c.hidden = 128;
    c.n_heads = 4;
    c.head_dim = 64;
    c.rope_dim = 16;
    c.q_lora_rank = 128;
    c.o_groups = 2;
    c.o_lora_rank = 64;
    c.n_routed_experts = o.experts > 0 ? o.experts : 8;
    c.n_experts_per_tok = std::min(4, c.n_routed_experts);
    c.moe_inter = 128;
    c.sliding_window = 32;
    c.index_n_heads = 16;
    c.index_head_dim = 64;
    c.index_topk = 8;
    hca_rate = 16;  // so that short test prompts produce HCA entries
    c.max_position_embeddings = 65536;
  } else if (o.preset == "flash-shaped") {
    c.vocab_size = 129280;
    c.hidden = 4096;
    c.n_heads = 64;
    c.head_dim = 512;
    c.rope_dim = 64;
    c.q_lora_rank = 1024;
    c.o_groups = 8;
    c.o_lora_rank = 1024;
    c.n_routed_experts = o.experts > 0 ? o.experts : 256;
    c.n_experts_per_tok = std::min(6, c.n_routed_experts);
    c.moe_inter = 2048;
    c.sliding_window = 128;
    c.index_n_heads = 64;
    c.index_head_dim = 128;
    c.index_topk = 512;
    c.max_position_embeddings = 1048576;
  } else {
    return invalid_argument("unknown preset '{}' (expected 'tiny' or 'flash-shaped')", o.preset);
  }
  if (o.vocab > 0) c.vocab_size = o.vocab;
  if (!o.tokenizer.empty()) {
    if (o.vocab > 0 && o.vocab != 129280)
      return invalid_argument("--vocab {} conflicts with --tokenizer (the DeepSeek-V4 vocabulary is 129280)", o.vocab);
    c.vocab_size = 129280;
  }
  c.n_shared_experts = 1;
  c.routed_scaling_factor = 1.5;
  c.swiglu_limit = 10.0;
  c.scoring_func = "sqrtsoftplus";
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.rope_main = RopeConfig{10000.0, false, 1.0, 0, 32.0, 1.0};
  c.rope_compress = RopeConfig{160000.0, true, 16.0, 65536, 32.0, 1.0};
  c.n_layers = o.layers;
  const int n_hash = std::min(3, o.layers);
  for (int i = 0; i < o.layers; ++i) {
    LayerSpec l;
    std::string t;
    if (!o.layer_types.empty()) {
      if (int(o.layer_types.size()) != o.layers)
        return invalid_argument("--layer-types has {} entries for {} layers", o.layer_types.size(), o.layers);
      t = o.layer_types[size_t(i)];
    } else {
      t = i < 2 ? "swa" : (i % 2 == 0 ? "csa" : "hca");  // Flash's pattern
    }
    if (t == "swa") l = LayerSpec{AttnType::kSliding, 0, MoeType::kScore};
    else if (t == "csa") l = LayerSpec{AttnType::kCsa, 4, MoeType::kScore};
    else if (t == "hca") l = LayerSpec{AttnType::kHca, hca_rate, MoeType::kScore};
    else return invalid_argument("layer type '{}' (expected swa, csa or hca)", t);
    l.moe = i < n_hash ? MoeType::kHash : MoeType::kScore;
    c.layers.push_back(l);
  }
  c.n_mtp_layers = o.mtp ? 1 : 0;
  c.mtp_layer = LayerSpec{AttnType::kSliding, 0, MoeType::kScore};
  if (o.format == "w4a16") {
    c.quant.method = "auto-round";
    c.quant.packing = "auto_round:auto_gptq";
    c.quant.bits = 4;
    c.quant.group_size = 128;
    c.quant.sym = true;
  } else if (o.format == "fp8") {
    c.quant.method = "fp8";
  } else if (o.format != "bf16") {
    return invalid_argument("unknown format '{}' (expected 'w4a16', 'fp8' or 'bf16')", o.format);
  }
  DSV4_RETURN_IF_ERROR(c.validate());
  return c;
}

namespace {

// The tokenizer is copied after every shard is written: a path that is not a tokenizer.json must
// fail before (a copied /etc/passwd made a checkpoint that failed only when served). A HF
// tokenizer.json is a JSON object whose "model" holds a "vocab".
Status check_tokenizer_file(const std::string& path) {
  auto text = read_json_text(path, kMaxTokenizerBytes, kMaxJsonDepth);
  if (!text.is_ok()) return text.status().with_context("--tokenizer");
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_object() ||
      !j["model"].contains("vocab"))
    return invalid_argument("--tokenizer '{}' is not a tokenizer.json (expected a JSON object with model.vocab)", path);
  return Status::ok();
}

}  // namespace

Status make_model(const MakeModelOptions& o, std::string* summary) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig c, make_model_config(o));
  if (o.out_dir.empty()) return invalid_argument("--out is required");
  if (!o.tokenizer.empty()) DSV4_RETURN_IF_ERROR(check_tokenizer_file(o.tokenizer));
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return internal_error("cannot create '{}': {}", o.out_dir, ec.message());

  json cfg = c.to_legacy_json();
  if (c.quant.method == "fp8") {
    cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                  {"scale_fmt", "ue8m0"}, {"weight_block_size", {128, 128}}};
    cfg["expert_dtype"] = "fp4";
  } else if (!c.quant.method.empty()) {
    json extra = json::object();
    extra["wo_a"] = {{"bits", 16}, {"data_type", "float"}};
    cfg["quantization_config"] = {{"quant_method", c.quant.method}, {"packing_format", c.quant.packing},
                                  {"bits", 4}, {"group_size", 128}, {"sym", true}, {"data_type", "int"},
                                  {"iters", 0}, {"autoround_version", "0.14.0"}, {"model_free", true},
                                  {"extra_config", extra}};
  }
  {
    std::ofstream f(fs::path(o.out_dir) / "config.json");
    f << cfg.dump(2) << "\n";
    if (!f) return internal_error("cannot write config.json in '{}'", o.out_dir);
  }

  const int n_shards = 1 + c.n_layers + (o.mtp ? 1 : 0);
  auto shard_path = [&](int i) {
    return (fs::path(o.out_dir) / fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n_shards)).string();
  };
  json weight_map = json::object();
  Builder b(c, o);
  const int D = c.hidden;
  b.vec_bf16("embed.weight", {c.vocab_size, D}, 1.0f);
  b.dense("head", c.vocab_size, D);
  b.vec_bf16("norm.weight", {D}, 0.1f, 1.0f);
  b.hc("hc_head_fn", "hc_head_base", "hc_head_scale", c.hc_mult, 1);
  DSV4_RETURN_IF_ERROR(b.flush(shard_path(0), weight_map, summary));
  for (int i = 0; i < c.n_layers; ++i) {
    b.layer(fmt::format("layers.{}", i), c.layers[size_t(i)]);
    DSV4_RETURN_IF_ERROR(b.flush(shard_path(1 + i), weight_map, summary));
  }
  if (o.mtp) {
    b.linear("mtp.0.e_proj", D, D, Builder::Kind::kQuantized);
    b.linear("mtp.0.h_proj", D, D, Builder::Kind::kQuantized);
    b.vec_bf16("mtp.0.enorm.weight", {D}, 0.1f, 1.0f);
    b.vec_bf16("mtp.0.hnorm.weight", {D}, 0.1f, 1.0f);
    b.vec_bf16("mtp.0.norm.weight", {D}, 0.1f, 1.0f);
    b.hc("mtp.0.hc_head_fn", "mtp.0.hc_head_base", "mtp.0.hc_head_scale", c.hc_mult, 1);
    b.layer("mtp.0", c.mtp_layer);
    DSV4_RETURN_IF_ERROR(b.flush(shard_path(n_shards - 1), weight_map, summary));
  }
  {
    json index = {{"metadata", {{"generator", "dsv4 make-model"}}}, {"weight_map", weight_map}};
    std::ofstream f(fs::path(o.out_dir) / "model.safetensors.index.json");
    f << index.dump(1) << "\n";
    if (!f) return internal_error("cannot write model.safetensors.index.json in '{}'", o.out_dir);
  }
  if (!o.tokenizer.empty()) {
    const fs::path tok(o.tokenizer);
    fs::copy_file(tok, fs::path(o.out_dir) / "tokenizer.json", fs::copy_options::overwrite_existing, ec);
    if (ec) return not_found("cannot copy tokenizer '{}': {}", o.tokenizer, ec.message());
    const fs::path tc = tok.parent_path() / "tokenizer_config.json";
    if (fs::exists(tc)) fs::copy_file(tc, fs::path(o.out_dir) / "tokenizer_config.json", fs::copy_options::overwrite_existing, ec);
  }
  return Status::ok();
}

}  // namespace dsv4
