// make_model_test.cpp: make-model checkpoints load, are deterministic, and their inventory has
// exactly the byte counts the format arithmetic predicts (CHECKPOINTS.md §2.3-2.4), including the
// 13,074,432 bytes of one flash-shaped INT4 expert.
#include "model/make_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "model/fp8_groups.h"
#include "model/inventory.h"
#include "model/weights.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("dsv4_mm_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

// auto_gptq INT4 bytes of a linear [n, k]: qweight + fp16 scales + qzeros.
size_t int4_bytes(int64_t n, int64_t k) {
  return size_t(k / 8 * n * 4 + k / 128 * n * 2 + k / 128 * ((n + 7) / 8) * 4);
}
size_t bf16_bytes(int64_t n, int64_t k) { return size_t(n * k * 2); }

TEST(MakeModel, FlashShapedInventoryHasExactByteCounts) {
  MakeModelOptions o;
  o.preset = "flash-shaped";
  o.layers = 2;
  o.layer_types = {"csa", "hca"};
  o.experts = 2;
  o.vocab = 2048;  // keeps the file small; every other dimension is Flash's
  o.seed = 3;
  o.out_dir = tmp("flash");
  ASSERT_TRUE(make_model(o, nullptr).is_ok());
  auto cfg = ModelConfig::load(o.out_dir);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  auto w = ModelWeights::load(o.out_dir, *cfg);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  const Inventory inv = take_inventory(**w);

  const size_t expert = 2 * int4_bytes(2048, 4096) + int4_bytes(4096, 2048);
  EXPECT_EQ(expert, 13074432u);  // CHECKPOINTS.md §2.4: one routed expert of the Intel export
  EXPECT_EQ(inv.by_role.at("csa routed experts").bytes, 2 * expert);
  EXPECT_EQ(inv.by_role.at("hca routed experts").bytes, 2 * expert);
  EXPECT_EQ(inv.by_role.at("csa shared expert").bytes, expert);
  const size_t attn = int4_bytes(1024, 4096) + int4_bytes(32768, 1024) + int4_bytes(512, 4096) +
                      bf16_bytes(8192, 4096) + int4_bytes(4096, 8192);
  EXPECT_EQ(inv.by_role.at("csa attention").bytes, attn);
  EXPECT_EQ(inv.by_role.at("hca attention").bytes, attn);
  EXPECT_EQ(inv.by_role.at("csa compressor").bytes, 2 * bf16_bytes(1024, 4096));
  EXPECT_EQ(inv.by_role.at("hca compressor").bytes, 2 * bf16_bytes(512, 4096));
  EXPECT_EQ(inv.by_role.at("csa indexer").bytes,
            int4_bytes(8192, 1024) + bf16_bytes(64, 4096) + 2 * bf16_bytes(256, 4096));
  EXPECT_EQ(inv.by_role.at("head").bytes, bf16_bytes(2048, 4096));

  // Every byte in the files is accounted for: linears (incl. routers and head) + the rest.
  const size_t per_layer = 2 * 4096 * 2                        // attn_norm, ffn_norm (BF16)
                           + 2 * (24 * 16384 + 24 + 3) * 4      // hc_attn_*, hc_ffn_* (F32)
                           + 1024 * 2 + 512 * 2 + 64 * 4        // q_norm, kv_norm (BF16), attn_sink (F32)
                           + size_t(2048) * 2 * 8;              // tid2eid I64 [vocab, top_k = 2] (hash layers)
  const size_t csa_extra = 4 * 1024 * 4 + 512 * 2 + 4 * 256 * 4 + 128 * 2;  // compressor + indexer ape, norm
  const size_t hca_extra = 128 * 512 * 4 + 512 * 2;
  const size_t global = bf16_bytes(2048, 4096) /*embed*/ + 4096 * 2 /*norm*/ + (4 * 16384 + 4 + 1) * 4 /*hc head*/;
  size_t linears = 0;
  for (const auto& [k, v] : inv.by_format) linears += v.bytes;
  EXPECT_EQ(inv.total_bytes, linears + global + 2 * per_layer + csa_extra + hca_extra);
  fs::remove_all(o.out_dir);
}

TEST(MakeModel, DeterministicPerSeed) {
  auto bytes_of = [](const std::string& dir) {
    std::string all;
    for (int i = 1; i <= 4; ++i) {
      std::ifstream f(dir + "/model-0000" + std::to_string(i) + "-of-00004.safetensors", std::ios::binary);
      all += std::string(std::istreambuf_iterator<char>(f), {});
    }
    return all;
  };
  MakeModelOptions o;
  o.layers = 3;
  o.seed = 42;
  o.out_dir = tmp("a");
  ASSERT_TRUE(make_model(o, nullptr).is_ok());
  MakeModelOptions o2 = o;
  o2.out_dir = tmp("b");
  ASSERT_TRUE(make_model(o2, nullptr).is_ok());
  MakeModelOptions o3 = o;
  o3.seed = 43;
  o3.out_dir = tmp("c");
  ASSERT_TRUE(make_model(o3, nullptr).is_ok());
  const std::string a = bytes_of(o.out_dir), b = bytes_of(o2.out_dir), c = bytes_of(o3.out_dir);
  EXPECT_GT(a.size(), 100000u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (const auto& d : {o.out_dir, o2.out_dir, o3.out_dir}) fs::remove_all(d);
}

TEST(MakeModel, Bf16FormatLoadsWithDenseLinears) {
  MakeModelOptions o;
  o.layers = 3;
  o.format = "bf16";
  o.mtp = true;
  o.out_dir = tmp("bf16");
  ASSERT_TRUE(make_model(o, nullptr).is_ok());
  auto cfg = ModelConfig::load(o.out_dir);
  ASSERT_TRUE(cfg.is_ok());
  auto w = ModelWeights::load(o.out_dir, *cfg);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_TRUE((*w)->has_mtp);
  const Inventory inv = take_inventory(**w);
  EXPECT_EQ(inv.by_format.size(), 1u);
  EXPECT_EQ(inv.by_format.count("dense"), 1u);
  fs::remove_all(o.out_dir);
}

// --wo-a-from-fp8: every wo_a's BF16 values are FP8 block values (so model/fp8_groups.h encodes
// them exactly), everything else is what the plain W4A16 export of the same seed writes; plain
// random BF16 wo_a values are refused by the encoder.
TEST(MakeModel, WoAFromFp8HoldsFp8BlockValues) {
  MakeModelOptions o;
  o.layers = 2;
  o.seed = 5;
  o.out_dir = tmp("plain");
  MakeModelOptions f = o;
  f.wo_a_from_fp8 = true;
  f.out_dir = tmp("wo_a_fp8");
  ASSERT_TRUE(make_model(o, nullptr).is_ok());
  ASSERT_TRUE(make_model(f, nullptr).is_ok());
  auto cfg = ModelConfig::load(f.out_dir);
  ASSERT_TRUE(cfg.is_ok());
  auto wp = ModelWeights::load(o.out_dir, *cfg);
  auto wf = ModelWeights::load(f.out_dir, *cfg);
  ASSERT_TRUE(wp.is_ok() && wf.is_ok());
  for (int l = 0; l < 2; ++l) {
    const LinearWeight& a = (*wf)->layers[size_t(l)].attn.wo_a;
    const LinearWeight& p = (*wp)->layers[size_t(l)].attn.wo_a;
    EXPECT_EQ(a.format, WeightFormat::kDense);
    EXPECT_EQ(a.weight->dtype, DType::kBF16);
    std::vector<float> v(size_t(a.n * a.k));
    std::vector<uint8_t> codes(v.size());
    std::vector<int8_t> exps(v.size() / kFp8GroupSize);
    a.dequant_rows(0, a.n, v.data());
    Fp8GroupsMiss miss;
    EXPECT_TRUE(encode_fp8_groups(v.data(), a.n, a.k, codes.data(), exps.data(), &miss)) << miss.why;
    int64_t nonzero = 0;
    for (const float x : v) nonzero += x != 0.0f;
    EXPECT_GT(nonzero, int64_t(v.size()) / 2);
    p.dequant_rows(0, p.n, v.data());
    EXPECT_FALSE(encode_fp8_groups(v.data(), p.n, p.k, codes.data(), exps.data(), &miss));
    // The rest of the layer is the plain export's, byte for byte (wq_b's INT4 codes, for one).
    const TensorInfo* qa = (*wf)->layers[size_t(l)].attn.wq_b.qweight;
    const TensorInfo* qp = (*wp)->layers[size_t(l)].attn.wq_b.qweight;
    ASSERT_TRUE(qa != nullptr && qp != nullptr);
    ASSERT_EQ(qa->n_bytes, qp->n_bytes);
    EXPECT_EQ(std::memcmp(qa->data, qp->data, qa->n_bytes), 0);
  }
  fs::remove_all(o.out_dir);
  fs::remove_all(f.out_dir);
}

// A synthetic model (GPU benchmarks) has exactly the shapes and formats a loaded W4A16 checkpoint
// of the same config has, linear by linear, and the same small-parameter sizes.
TEST(MakeModel, SyntheticWeightsMatchLoadedShapes) {
  MakeModelOptions o;
  o.layers = 3;
  o.layer_types = {"swa", "csa", "hca"};
  o.out_dir = tmp("synthetic");
  ASSERT_TRUE(make_model(o, nullptr).is_ok());
  auto cfg = ModelConfig::load(o.out_dir);
  ASSERT_TRUE(cfg.is_ok());
  auto w = ModelWeights::load(o.out_dir, *cfg);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  const auto s = ModelWeights::synthetic(*cfg, 7);
  ASSERT_TRUE(s->is_synthetic);
  auto same = [](const LinearWeight& a, const LinearWeight& b) {
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.n, b.n) << a.name;
    EXPECT_EQ(a.k, b.k) << a.name;
    EXPECT_EQ(a.format, b.format) << a.name;
  };
  same((*w)->head, s->head);
  EXPECT_EQ((*w)->hc_head.fn.size(), s->hc_head.fn.size());
  for (int l = 0; l < cfg->n_layers; ++l) {
    const LayerWeights& a = (*w)->layers[size_t(l)];
    const LayerWeights& b = s->layers[size_t(l)];
    for (auto [x, y] : {std::pair{&a.attn.wq_a, &b.attn.wq_a}, {&a.attn.wq_b, &b.attn.wq_b}, {&a.attn.wkv, &b.attn.wkv},
                        {&a.attn.wo_a, &b.attn.wo_a}, {&a.attn.wo_b, &b.attn.wo_b}, {&a.moe.gate, &b.moe.gate},
                        {&a.moe.shared.w1, &b.moe.shared.w1}, {&a.moe.shared.w2, &b.moe.shared.w2}})
      same(*x, *y);
    ASSERT_EQ(a.attn.has_compressor, b.attn.has_compressor);
    ASSERT_EQ(a.attn.has_indexer, b.attn.has_indexer);
    if (a.attn.has_compressor) {
      same(a.attn.compressor.wkv, b.attn.compressor.wkv);
      EXPECT_EQ(a.attn.compressor.ape.size(), b.attn.compressor.ape.size());
    }
    if (a.attn.has_indexer) {
      same(a.attn.indexer.wq_b, b.attn.indexer.wq_b);
      same(a.attn.indexer.weights_proj, b.attn.indexer.weights_proj);
      same(a.attn.indexer.compressor.wgate, b.attn.indexer.compressor.wgate);
    }
    ASSERT_EQ(a.moe.experts.size(), b.moe.experts.size());
    same(a.moe.experts.back().w2, b.moe.experts.back().w2);
    EXPECT_EQ(a.moe.tid2eid.size(), b.moe.tid2eid.size());
    EXPECT_EQ(a.moe.bias.size(), b.moe.bias.size());
    EXPECT_EQ(a.hc_attn.fn.size(), b.hc_attn.fn.size());
    EXPECT_EQ(a.attn.sink.size(), b.attn.sink.size());
  }
  fs::remove_all(o.out_dir);
}

TEST(MakeModel, RejectsBadOptions) {
  MakeModelOptions o;
  o.preset = "huge";
  o.out_dir = tmp("bad");
  EXPECT_NE(make_model(o, nullptr).message().find("unknown preset 'huge'"), std::string::npos);
  o.preset = "tiny";
  o.format = "gguf";
  EXPECT_NE(make_model(o, nullptr).message().find("unknown format 'gguf'"), std::string::npos);
  o.format = "w4a16";
  o.layer_types = {"swa", "mla"};
  o.layers = 2;
  EXPECT_NE(make_model(o, nullptr).message().find("'mla'"), std::string::npos);
  o.layer_types.clear();
  // Negative sizes used to fall back to the preset's defaults silently.
  o.experts = -3;
  EXPECT_NE(make_model(o, nullptr).message().find("--experts must be positive"), std::string::npos);
  o.experts = 0;
  o.vocab = -1;
  EXPECT_NE(make_model(o, nullptr).message().find("--vocab must be positive"), std::string::npos);
  fs::remove_all(o.out_dir);
}

}  // namespace
}  // namespace dsv4
