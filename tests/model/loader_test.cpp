// loader_test.cpp: ModelWeights::load on make-model checkpoints that were damaged one way at a
// time. Every inconsistency must stop loading with a message naming the tensor and what was
// expected and found; none may crash.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "model/make_model.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

struct Entry {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using Tensors = std::map<std::string, Entry>;

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("dsv4_loader_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    MakeModelOptions o;
    o.preset = "tiny";
    o.layers = 4;  // swa, swa, csa, hca; layers 0-2 hash-routed
    o.seed = 5;
    o.out_dir = dir_;
    ASSERT_TRUE(make_model(o, nullptr).is_ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Rewrites the checkpoint as one model.safetensors after applying `edit` to its tensors.
  void rewrite(const std::function<void(Tensors&)>& edit) {
    Tensors t;
    {
      auto store = TensorStore::open(dir_);
      ASSERT_TRUE(store.is_ok()) << store.status().to_string();
      for (const auto& [name, info] : (*store)->tensors())
        t[name] = Entry{info.dtype, info.shape, std::vector<uint8_t>(info.data, info.data + info.n_bytes)};
    }
    edit(t);
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().extension() == ".safetensors" || e.path().filename() == "model.safetensors.index.json")
        fs::remove(e.path());
    SafetensorsWriter w;
    for (auto& [name, e] : t) w.add(name, e.dtype, e.shape, e.bytes);
    ASSERT_TRUE(w.write(dir_ + "/model.safetensors").is_ok());
  }

  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j;
    std::ifstream(dir_ + "/config.json") >> j;
    edit(j);
    std::ofstream(dir_ + "/config.json") << j.dump(2);
  }

  Status load() {
    auto cfg = ModelConfig::load(dir_);
    if (!cfg.is_ok()) return cfg.status();
    return ModelWeights::load(dir_, *cfg).status();
  }

  void expect_error(std::initializer_list<const char*> needles) {
    const Status st = load();
    ASSERT_FALSE(st.is_ok());
    for (const char* n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
  }

  std::string dir_;
};

TEST_F(LoaderTest, LoadsTheIntactCheckpoint) {
  const Status st = load();
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  // Still loads after flattening the shards into one file.
  rewrite([](Tensors&) {});
  EXPECT_TRUE(load().is_ok());
}

TEST_F(LoaderTest, MissingTensor) {
  rewrite([](Tensors& t) { t.erase("layers.1.attn.q_norm.weight"); });
  expect_error({"missing tensor 'layers.1.attn.q_norm.weight'", "expected float [128]"});
}

TEST_F(LoaderTest, MissingInt4Part) {
  rewrite([](Tensors& t) { t.erase("layers.2.attn.wq_b.scales"); });
  expect_error({"layers.2.attn.wq_b.scales"});
}

TEST_F(LoaderTest, WrongShape) {
  rewrite([](Tensors& t) {
    Entry& e = t["layers.0.attn.attn_sink"];
    e.shape = {5};
    e.bytes.resize(20);
  });
  expect_error({"layers.0.attn.attn_sink", "expected shape [4]", "found [5]"});
}

TEST_F(LoaderTest, WrongDtype) {
  rewrite([](Tensors& t) { t["layers.3.attn.wo_b.qweight"].dtype = DType::kF32; });
  expect_error({"layers.3.attn.wo_b.qweight", "expected dtype I32", "found F32"});
}

TEST_F(LoaderTest, QzerosNotSevensInASymmetricV1File) {
  rewrite([](Tensors& t) {
    Entry& e = t["layers.2.ffn.experts.3.w2.qzeros"];
    const uint32_t bad = 0x77777778u;
    std::memcpy(e.bytes.data() + 4, &bad, 4);
  });
  expect_error({"layers.2.ffn.experts.3.w2.qzeros", "0x77777778", "expected 0x77777777"});
}

TEST_F(LoaderTest, ActOrderGidxIsRefused) {
  rewrite([](Tensors& t) {
    std::vector<int32_t> g(128, 0);
    g[5] = 1;
    Entry e{DType::kI32, {128}, std::vector<uint8_t>(512)};
    std::memcpy(e.bytes.data(), g.data(), 512);
    t["layers.0.attn.wkv.g_idx"] = e;
  });
  expect_error({"layers.0.attn.wkv.g_idx", "act-order"});
}

TEST_F(LoaderTest, ConfigDisagreesWithTensors) {
  edit_config([](nlohmann::json& j) { j["n_routed_experts"] = 16; });
  expect_error({"layers.0.ffn.gate.weight", "expected shape [16, 128]", "found [8, 128]"});
}

TEST_F(LoaderTest, ConfigSaysHashWhereTheCheckpointHasABias) {
  edit_config([](nlohmann::json& j) { j["num_hash_layers"] = 4; });
  expect_error({"layers.3.ffn.gate.tid2eid"});
}

TEST_F(LoaderTest, ConfigSaysCsaWhereTheCheckpointHasHca) {
  edit_config([](nlohmann::json& j) { j["compress_ratios"][3] = 4; });
  expect_error({"layers.3.attn.compressor"});
}

TEST_F(LoaderTest, UnexpectedTensor) {
  rewrite([](Tensors& t) { t["layers.7.attn_norm.weight"] = t["layers.0.attn_norm.weight"]; });
  expect_error({"unexpected tensor 'layers.7.attn_norm.weight'"});
}

TEST_F(LoaderTest, HashTableEntryOutOfRange) {
  rewrite([](Tensors& t) {
    const int64_t bad = 99;
    std::memcpy(t["layers.1.ffn.gate.tid2eid"].bytes.data() + 8 * 10, &bad, 8);
  });
  expect_error({"layers.1.ffn.gate.tid2eid", "expert 99", "token 2"});
}

TEST_F(LoaderTest, TruncatedShard) {
  const std::string shard = dir_ + "/model-00003-of-00005.safetensors";
  fs::resize_file(shard, fs::file_size(shard) / 2);
  expect_error({"model-00003-of-00005.safetensors", "run past the data section"});
}

TEST_F(LoaderTest, MalformedConfigJson) {
  std::ofstream(dir_ + "/config.json") << "{\"vocab_size\": ";
  expect_error({"config.json", "not valid JSON"});
}

// A directory where a JSON file belongs opens fine and then threw std::ios_failure out of the
// parser (abort); a --model that is a file named no reason.
TEST_F(LoaderTest, DirectoryInsteadOfAJsonFile) {
  fs::remove(dir_ + "/model.safetensors.index.json");
  fs::create_directory(dir_ + "/model.safetensors.index.json");
  expect_error({"model.safetensors.index.json' is a directory"});
  fs::remove(dir_ + "/config.json");
  fs::create_directory(dir_ + "/config.json");
  expect_error({"config.json' is a directory"});
  auto cfg = ModelConfig::load(dir_ + "/model-00001-of-00005.safetensors");
  ASSERT_FALSE(cfg.is_ok());
  EXPECT_NE(cfg.status().message().find("Not a directory"), std::string::npos) << cfg.status().message();
}

// Layer 3's per-expert W4A16 tensors, removed to make room for fused HF expert tensors.
void erase_layer3_experts(Tensors& t) {
  for (int e = 0; e < 8; ++e)
    for (const char* w : {"w1", "w2", "w3"})
      for (const char* part : {"qweight", "qzeros", "scales"})
        t.erase("layers.3.ffn.experts." + std::to_string(e) + "." + w + "." + part);
}

TEST_F(LoaderTest, FusedHfExpertsWithWrongShape) {
  rewrite([](Tensors& t) {
    // Replace layer 3's per-expert weights by fused HF tensors with one expert too few.
    erase_layer3_experts(t);
    t["model.layers.3.mlp.experts.gate_up_proj"] = Entry{DType::kBF16, {7, 256, 128}, std::vector<uint8_t>(7 * 256 * 128 * 2)};
    t["model.layers.3.mlp.experts.down_proj"] = Entry{DType::kBF16, {7, 128, 128}, std::vector<uint8_t>(7 * 128 * 128 * 2)};
  });
  expect_error({"gate_up_proj", "expected BF16/F16/F32 [8, 256, 128]", "[7, 256, 128]"});
}

// F64 passed the fused experts' "float" check, and the dense dequantization read its 8-byte
// elements as F16: silently wrong expert weights.
TEST_F(LoaderTest, FusedHfExpertsInF64AreRefused) {
  rewrite([](Tensors& t) {
    erase_layer3_experts(t);
    t["model.layers.3.mlp.experts.gate_up_proj"] = Entry{DType::kF64, {8, 256, 128}, std::vector<uint8_t>(8 * 256 * 128 * 8)};
    t["model.layers.3.mlp.experts.down_proj"] = Entry{DType::kBF16, {8, 128, 128}, std::vector<uint8_t>(8 * 128 * 128 * 2)};
  });
  expect_error({"gate_up_proj", "expected BF16/F16/F32 [8, 256, 128]", "found F64 [8, 256, 128]"});
}

}  // namespace
}  // namespace dsv4
