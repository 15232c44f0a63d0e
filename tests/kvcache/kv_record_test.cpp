// kv_record_test.cpp: the fp8 KV records hold exactly what the reference computes: pack/unpack is
// bit-exact on the window entries, compressed entries and indexer keys of a real forward (bf16
// numerics), and on Flash-sized vectors through the reference quantizers; values off the grids
// are refused.
#include "kvcache/kv_record.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "cpu/model.h"
#include "cpu/quant.h"
#include "kvcache/kv_layout.h"
#include "model/make_model.h"

namespace dsv4::kv {
namespace {

namespace fs = std::filesystem;

void expect_entry_round_trip(const float* v, int nope, int rope) {
  std::vector<uint8_t> rec(size_t(entry_bytes(nope, rope)));
  const Status st = pack_entry(v, nope, rope, rec.data());
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  std::vector<float> back(size_t(nope + rope));
  unpack_entry(rec.data(), nope, rope, back.data());
  for (int i = 0; i < nope + rope; ++i) ASSERT_EQ(back[size_t(i)], v[i]) << "dim " << i;
}

void expect_key_round_trip(const float* v, int dim) {
  std::vector<uint8_t> rec(size_t(indexer_key_bytes(dim)));
  const Status st = pack_indexer_key(v, dim, rec.data());
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  std::vector<float> back(static_cast<size_t>(dim));
  unpack_indexer_key(rec.data(), dim, back.data());
  for (int i = 0; i < dim; ++i) ASSERT_EQ(back[size_t(i)], v[i]) << "dim " << i;
}

TEST(KvRecord, FlashSizes) {
  EXPECT_EQ(entry_bytes(448, 64), 584);
  EXPECT_EQ(indexer_key_bytes(128), 68);
  MakeModelOptions o;
  o.preset = "flash-shaped";
  o.layers = 3;
  o.layer_types = {"swa", "csa", "hca"};
  const ModelConfig cfg = make_model_config(o).value();
  const KvLayout l = make_kv_layout(cfg, KvDtype::kFp8);
  EXPECT_EQ(l.entry_bytes, entry_bytes(cfg.nope_dim(), cfg.rope_dim));
  EXPECT_EQ(l.indexer_key_bytes, indexer_key_bytes(cfg.index_head_dim));
}

TEST(KvRecord, FlashSizedVectorsThroughTheReferenceQuantizers) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const float mag = std::ldexp(1.0f, int(rng() % 40) - 20);  // scales from 2^-20 to 2^19
    std::vector<float> e(512), k(128);
    for (float& x : e) x = round_bf16(nd(rng) * mag);
    if (trial % 7 == 0) std::fill(e.begin(), e.begin() + 64, 0.0f);  // an all-zero block
    if (trial % 11 == 0) e[3] = round_bf16(230.0f * std::ldexp(1.0f, -8));  // block max rounds to half range
    cpu::fp8sim(e.data(), 448, 64);
    expect_entry_round_trip(e.data(), 448, 64);
    for (float& x : k) x = round_bf16(nd(rng) * mag);
    cpu::hadamard_bf16(k.data(), 128);
    cpu::fp4sim(k.data(), 128, 32);
    expect_key_round_trip(k.data(), 128);
  }
}

TEST(KvRecord, ReferenceForwardStateIsLossless) {
  const std::string dir = (fs::temp_directory_path() / ("dsv4_kvrec_" + std::to_string(::getpid()))).string();
  MakeModelOptions o;
  o.layers = 4;  // swa, swa, csa, hca(16)
  o.seed = 21;
  o.out_dir = dir;
  ASSERT_TRUE(make_model(o, nullptr).is_ok());
  const ModelConfig cfg = ModelConfig::load(dir).value();
  auto w = ModelWeights::load(dir, cfg);
  ASSERT_TRUE(w.is_ok());
  cpu::CpuModel m(cfg, **w, cpu::Numerics::bf16_gpu());
  auto s = m.new_sequence();
  std::vector<int32_t> ids(100);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 131 + 7) % size_t(cfg.vocab_size));
  ASSERT_TRUE(m.forward(*s, ids, cpu::LogitsRows::kNone, nullptr).is_ok());
  const int nope = cfg.nope_dim(), rope = cfg.rope_dim, d = cfg.head_dim;
  int64_t n_entries = 0, n_keys = 0;
  for (const cpu::LayerState& L : s->layers) {
    for (int slot = 0; slot < cfg.sliding_window; ++slot) expect_entry_round_trip(&L.window[size_t(slot * d)], nope, rope);
    if (L.has_compressor)
      for (int64_t i = 0; i < L.compressor.n_entries; ++i, ++n_entries)
        expect_entry_round_trip(&L.compressor.entries[size_t(i * d)], nope, rope);
    if (L.has_indexer)
      for (int64_t i = 0; i < L.indexer.n_entries; ++i, ++n_keys)
        expect_key_round_trip(&L.indexer.entries[size_t(i * cfg.index_head_dim)], cfg.index_head_dim);
  }
  EXPECT_EQ(n_entries, 100 / 4 + 100 / 16);
  EXPECT_EQ(n_keys, 100 / 4);
  fs::remove_all(dir);
}

TEST(KvRecord, ValuesOffTheGridAreRefused) {
  std::vector<float> e(80, 0.0f);
  e[0] = 1.0f;
  e[1] = 1.0625f;  // between e4m3 neighbours at scale 2^-8 (1.0 / 448 -> 2^-8: 1.0625 * 256 = 272, grid 256/288)
  std::vector<uint8_t> rec(size_t(entry_bytes(64, 16)));
  Status st = pack_entry(e.data(), 64, 16, rec.data());
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("not on the fp8 grid"), std::string::npos) << st.message();
  e[1] = 0.0f;
  e[70] = 1.0f + std::ldexp(1.0f, -10);  // a rope value that is not bf16
  st = pack_entry(e.data(), 64, 16, rec.data());
  EXPECT_NE(st.message().find("not a bf16 value"), std::string::npos) << st.message();
  std::vector<float> k(32, 0.0f);
  k[0] = 6.0f;
  k[1] = 2.5f;  // e2m1 has 2 and 3, not 2.5, at scale 1
  std::vector<uint8_t> krec(size_t(indexer_key_bytes(32)));
  st = pack_indexer_key(k.data(), 32, krec.data());
  EXPECT_NE(st.message().find("not on the fp4 grid"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace dsv4::kv
