// config_test.cpp: the three config.json styles of DeepSeek-V4-Flash parse to the same
// architecture; malformed configs fail with the field name; tensor names map across families.
#include "model/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/tensor_names.h"

namespace dsv4 {
namespace {

using nlohmann::json;

json flash_ratios() {
  json r = json::array({0, 0});
  for (int i = 2; i < 43; ++i) r.push_back(i % 2 == 0 ? 4 : 128);
  r.push_back(0);  // MTP
  return r;
}

// The published HF config.json (legacy DeepSeek field names), MODEL_SPEC.md §1.1.
json flash_legacy() {
  return json{{"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"},
              {"vocab_size", 129280}, {"hidden_size", 4096}, {"num_hidden_layers", 43},
              {"num_attention_heads", 64}, {"num_key_value_heads", 1}, {"head_dim", 512},
              {"qk_rope_head_dim", 64}, {"q_lora_rank", 1024}, {"o_groups", 8}, {"o_lora_rank", 1024},
              {"moe_intermediate_size", 2048}, {"n_routed_experts", 256}, {"n_shared_experts", 1},
              {"num_experts_per_tok", 6}, {"scoring_func", "sqrtsoftplus"}, {"topk_method", "noaux_tc"},
              {"norm_topk_prob", true}, {"routed_scaling_factor", 1.5}, {"num_hash_layers", 3},
              {"swiglu_limit", 10.0}, {"hidden_act", "silu"}, {"sliding_window", 128}, {"index_n_heads", 64},
              {"index_head_dim", 128}, {"index_topk", 512}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20},
              {"hc_eps", 1e-6}, {"rms_norm_eps", 1e-6}, {"max_position_embeddings", 1048576},
              {"rope_theta", 10000}, {"compress_rope_theta", 160000},
              {"rope_scaling",
               {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536}, {"beta_fast", 32},
                {"beta_slow", 1}}},
              {"compress_ratios", flash_ratios()}, {"num_nextn_predict_layers", 1},
              {"expert_dtype", "fp4"}, {"torch_dtype", "bfloat16"},
              {"quantization_config",
               {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                {"weight_block_size", {128, 128}}}},
              {"bos_token_id", 0}, {"eos_token_id", 1}, {"tie_word_embeddings", false}};
}

// DeepSeek's inference/config.json.
json flash_inference() {
  return json{{"vocab_size", 129280}, {"dim", 4096}, {"moe_inter_dim", 2048}, {"n_layers", 43},
              {"n_hash_layers", 3}, {"n_heads", 64}, {"n_routed_experts", 256}, {"n_shared_experts", 1},
              {"n_activated_experts", 6}, {"score_func", "sqrtsoftplus"}, {"route_scale", 1.5},
              {"swiglu_limit", 10.0}, {"q_lora_rank", 1024}, {"head_dim", 512}, {"rope_head_dim", 64},
              {"o_groups", 8}, {"o_lora_rank", 1024}, {"window_size", 128}, {"original_seq_len", 65536},
              {"rope_theta", 10000}, {"rope_factor", 16}, {"beta_fast", 32}, {"beta_slow", 1},
              {"index_n_heads", 64}, {"index_head_dim", 128}, {"index_topk", 512}, {"hc_mult", 4},
              {"hc_sinkhorn_iters", 20}, {"dtype", "fp8"}, {"scale_fmt", "ue8m0"}, {"expert_dtype", "fp4"},
              {"compress_rope_theta", 160000}, {"compress_ratios", flash_ratios()}};
}

// The HF transformers style (what save_pretrained writes).
json flash_hf() {
  json lt = json::array(), mt = json::array();
  for (int i = 0; i < 43; ++i) {
    lt.push_back(i < 2 ? "sliding_attention"
                       : (i % 2 == 0 ? "compressed_sparse_attention" : "heavily_compressed_attention"));
    mt.push_back(i < 3 ? "hash_moe" : "moe");
  }
  json j = flash_legacy();
  for (const char* k : {"compress_ratios", "num_hash_layers", "qk_rope_head_dim", "rope_scaling", "quantization_config"})
    j.erase(k);
  j["layer_types"] = lt;
  j["mlp_layer_types"] = mt;
  j["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
  j["partial_rotary_factor"] = 0.125;
  j["rope_parameters"] = {
      {"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.125}}},
      {"compress",
       {{"rope_type", "yarn"}, {"factor", 16.0}, {"original_max_position_embeddings", 65536}, {"beta_fast", 32},
        {"beta_slow", 1}, {"rope_theta", 160000.0}, {"partial_rotary_factor", 0.125}, {"attention_factor", 1.0}}}};
  return j;
}

void expect_flash(const ModelConfig& c) {
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(c.n_layers, 43);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.nope_dim(), 448);
  EXPECT_EQ(c.q_dim(), 32768);
  EXPECT_EQ(c.group_in_dim(), 4096);
  EXPECT_EQ(c.hc_dim(), 16384);
  EXPECT_EQ(c.hc_mix(), 24);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_experts_per_tok, 6);
  EXPECT_EQ(c.moe_inter, 2048);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_DOUBLE_EQ(c.rope_main.theta, 10000.0);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_DOUBLE_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_TRUE(c.rope_compress.yarn);
  EXPECT_DOUBLE_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position, 65536);
  int swa = 0, csa = 0, hca = 0, hash = 0;
  for (const LayerSpec& l : c.layers) {
    swa += l.attn == AttnType::kSliding;
    csa += l.attn == AttnType::kCsa;
    hca += l.attn == AttnType::kHca;
    hash += l.moe == MoeType::kHash;
  }
  EXPECT_EQ(swa, 2);
  EXPECT_EQ(csa, 21);
  EXPECT_EQ(hca, 20);
  EXPECT_EQ(hash, 3);
  EXPECT_EQ(c.layers[42].attn, AttnType::kCsa) << "layer 42 is CSA, not sliding";
  EXPECT_EQ(c.layers[41].compress_ratio, 128);
  EXPECT_EQ(c.mtp_layer.attn, AttnType::kSliding);
  EXPECT_TRUE(c.validate().is_ok()) << c.validate().to_string();
}

TEST(Config, ThreeStylesAgreeOnFlash) {
  auto legacy = ModelConfig::from_json(flash_legacy(), "legacy");
  ASSERT_TRUE(legacy.is_ok()) << legacy.status().to_string();
  EXPECT_EQ(legacy->config_style, "deepseek-hf");
  expect_flash(*legacy);
  EXPECT_EQ(legacy->n_mtp_layers, 1);
  auto inf = ModelConfig::from_json(flash_inference(), "inference");
  ASSERT_TRUE(inf.is_ok()) << inf.status().to_string();
  EXPECT_EQ(inf->config_style, "deepseek-inference");
  expect_flash(*inf);
  EXPECT_EQ(inf->n_mtp_layers, 1);
  auto hf = ModelConfig::from_json(flash_hf(), "hf");
  ASSERT_TRUE(hf.is_ok()) << hf.status().to_string();
  EXPECT_EQ(hf->config_style, "hf");
  expect_flash(*hf);
  // And the legacy serialization round-trips.
  auto again = ModelConfig::from_json(legacy->to_legacy_json(), "again");
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  expect_flash(*again);
}

// A config that parsing or validation must refuse with a message containing `needle`.
void check(const json& j, const std::string& needle) {
  auto r = ModelConfig::from_json(j, "cfg");
  Status st = r.status();
  if (r.is_ok()) st = r->validate();
  EXPECT_FALSE(st.is_ok()) << needle;
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

TEST(Config, MalformedConfigsNameTheField) {
  json j = flash_legacy();
  j.erase("hidden_size");
  check(j, "missing field 'hidden_size'");
  j = flash_legacy();
  j["num_attention_heads"] = "64";
  check(j, "'num_attention_heads' must be a number");
  j = flash_legacy();
  j["head_dim"] = 512.5;
  check(j, "must be an integer");
  j = flash_legacy();
  j["compress_ratios"] = json::array({0, 4});
  check(j, "compress_ratios has 2 entries");
  j = flash_legacy();
  j["compress_ratios"][5] = "x";
  check(j, "compress_ratios[5]");
  j = flash_legacy();
  j["model_type"] = "llama";
  check(j, "model_type 'llama'");
  j = flash_legacy();
  j["num_key_value_heads"] = 8;
  check(j, "num_key_value_heads must be 1");
  j = flash_legacy();
  j["rope_scaling"]["mscale"] = 0.707;
  check(j, "mscale");
  j = flash_hf();
  j["layer_types"][7] = "full_attention";
  check(j, "layer_types[7]");
  j = flash_hf();
  j["mlp_layer_types"] = json::array({"moe"});
  check(j, "mlp_layer_types");
  j = flash_legacy();
  j["num_experts_per_tok"] = 300;
  check(j, "exceeds n_routed_experts");
  check(json::array({1, 2}), "expected a JSON object");
}

// Values beyond the field's integer type used to wrap (hidden_size 2^32 + 4096 read as 4096 and the
// checkpoint validated), and sizes or constants the engine cannot run with ended in std::bad_alloc,
// an endless Sinkhorn loop or NaN logits instead of an error.
TEST(Config, OutOfRangeAndUnrunnableValuesAreErrors) {
  json j = flash_legacy();
  j["hidden_size"] = (int64_t(1) << 32) + 4096;
  check(j, "field 'hidden_size' = 4294971392 is out of range");
  j = flash_legacy();
  j["vocab_size"] = uint64_t(1) << 63;
  check(j, "field 'vocab_size' = 9223372036854775808 is out of range");
  j = flash_legacy();
  j["head_dim"] = 4294967808.0;
  check(j, "field 'head_dim' = 4294967808.0 is out of range");
  j = flash_legacy();
  j["head_dim"] = 3000000000.0;  // between 2^31 and 2^32
  check(j, "field 'head_dim' = 3000000000.0 is out of range");
  j = flash_legacy();
  j["max_position_embeddings"] = 1e19;  // between 2^63 and 2^64, for the int64 field
  check(j, "field 'max_position_embeddings' = 1e+19 is out of range");
  j = flash_legacy();
  j["eos_token_id"] = json::array({int64_t(1) << 40});
  check(j, "eos_token_id[0] = 1099511627776 is out of range");
  j = flash_legacy();
  j["compress_ratios"][5] = int64_t(1) << 40;
  check(j, "compress_ratios[5] = 1099511627776 is out of range");
  j = flash_legacy();
  j["sliding_window"] = 2147483647;
  check(j, "sliding_window must be at most 65536, found 2147483647");
  j = flash_legacy();
  j["hc_sinkhorn_iters"] = 2147483647;
  check(j, "hc_sinkhorn_iters must be at most 1000");
  j = flash_legacy();
  j["rope_theta"] = 0;
  check(j, "rope_theta must be positive");
  j = flash_legacy();
  j["compress_rope_theta"] = -1.0;
  check(j, "compress_rope_theta must be positive");
  j = flash_legacy();
  j["rms_norm_eps"] = -1.0;
  check(j, "rms_norm_eps must be >= 0");
  j = flash_legacy();
  j["hc_mult"] = 2147483647;  // hc_dim() = hc_mult * hidden overflowed int (UBSan) into the shape checks
  check(j, "hc_mult x hidden_size = 8796093018112 is too large");
  j = flash_legacy();
  j["head_dim"] = 1 << 30;
  check(j, "num_attention_heads x head_dim = 68719476736 is too large");
  j = flash_legacy();
  j["max_position_embeddings"] = -1;
  check(j, "max_position_embeddings must be >= 0");
  j = flash_legacy();
  j["eos_token_id"] = 129280;  // a token generation can never produce: it would never stop at EOS
  check(j, "eos_token_id must be in [0, vocab_size = 129280), found 129280");
  j = flash_legacy();
  j["bos_token_id"] = -1;
  check(j, "bos_token_id must be in [0, vocab_size = 129280), found -1");
  j = flash_legacy();
  j["hidden_size"] = 4096.0;  // a whole-valued float is still the integer it spells
  auto ok = ModelConfig::from_json(j, "cfg");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->hidden, 4096);
  EXPECT_TRUE(ok->validate().is_ok()) << ok->validate().to_string();
}

// Found by feeding the loader hostile configs: a negative layer count threw std::length_error
// out of the parser (abort), a deeply nested entry overflowed the stack in the error message,
// and the others ran on silently (a rope dim from INT_MIN, a NaN-making scale or limit).
TEST(Config, HostileValuesAreErrorsNotCrashes) {
  json j = flash_legacy();
  j["num_hidden_layers"] = -1;
  check(j, "num_hidden_layers must be positive, found -1");
  j = flash_hf();
  j["num_hidden_layers"] = -2147483648;
  check(j, "num_hidden_layers must be positive");
  j = flash_hf();
  j["layer_types"][3] = json::array({json::array({json::array({1})})});
  check(j, "layer_types[3] = array is not one of");
  j = flash_hf();
  j["partial_rotary_factor"] = 1e300;
  j.erase("qk_rope_head_dim");
  check(j, "partial_rotary_factor must be in (0, 1], found 1e+300");
  j = flash_hf();
  j["partial_rotary_factor"] = -0.5;
  check(j, "partial_rotary_factor must be in (0, 1]");
  j = flash_legacy();
  j["routed_scaling_factor"] = -1e308;
  check(j, "routed_scaling_factor must be positive and finite");
  j = flash_legacy();
  j["swiglu_limit"] = -1.0;
  check(j, "swiglu_limit must be >= 0");
  j = flash_legacy();
  j["rope_scaling"]["beta_fast"] = -1e308;
  check(j, "beta_fast and beta_slow must be positive");
  j = flash_legacy();
  j["compress_ratios"][5] = 2147483647;
  check(j, "compress ratio must be in [0, 1024], found 2147483647");
}

// config.json as a file: a FIFO blocked the read forever; nesting is refused before parsing.
TEST(Config, LoadRefusesFilesThatAreNotPlainJson) {
  const std::string dir = ::testing::TempDir() + "dsv4_config_files";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/config.json";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  Status st = ModelConfig::load(dir).status();
  EXPECT_NE(st.message().find("is not a regular file, expected a JSON file"), std::string::npos) << st.message();
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  st = ModelConfig::load(dir).status();
  EXPECT_NE(st.message().find("is a directory, expected a JSON file"), std::string::npos) << st.message();
  std::filesystem::remove(path);
  std::ofstream(path) << std::string(100000, '[') << std::string(100000, ']');
  st = ModelConfig::load(dir).status();
  EXPECT_NE(st.message().find("nests 100000 levels deep (at most 32)"), std::string::npos) << st.message();
  std::ofstream(path) << flash_legacy().dump();
  EXPECT_TRUE(ModelConfig::load(dir).is_ok()) << ModelConfig::load(dir).status().to_string();
  std::filesystem::remove_all(dir);
}

TEST(Config, HcaRateFromLegacyRatios) {
  json j = flash_legacy();
  j["num_hidden_layers"] = 3;
  j["compress_ratios"] = json::array({0, 4, 16});
  auto c = ModelConfig::from_json(j, "cfg");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->layers[2].attn, AttnType::kHca);
  EXPECT_EQ(c->layers[2].compress_ratio, 16);
  EXPECT_EQ(c->layers[1].attn, AttnType::kCsa);
}

TEST(TensorNames, HfNamesMapToDeepSeekNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.embed_tokens.weight", "embed.weight"},
      {"lm_head.weight", "head.weight"},
      {"model.hc_head.hc_fn", "hc_head_fn"},
      {"model.layers.3.input_layernorm.weight", "layers.3.attn_norm.weight"},
      {"model.layers.3.attn_hc.fn", "layers.3.hc_attn_fn"},
      {"model.layers.3.ffn_hc.scale", "layers.3.hc_ffn_scale"},
      {"model.layers.3.self_attn.q_a_proj.weight", "layers.3.attn.wq_a.weight"},
      {"model.layers.3.self_attn.kv_norm.weight", "layers.3.attn.kv_norm.weight"},
      {"model.layers.3.self_attn.sinks", "layers.3.attn.attn_sink"},
      {"model.layers.2.self_attn.compressor.kv_norm.weight", "layers.2.attn.compressor.norm.weight"},
      {"model.layers.2.self_attn.compressor.position_bias", "layers.2.attn.compressor.ape"},
      {"model.layers.2.self_attn.compressor.indexer.kv_proj.weight", "layers.2.attn.indexer.compressor.wkv.weight"},
      {"model.layers.2.self_attn.compressor.indexer.q_b_proj.weight", "layers.2.attn.indexer.wq_b.weight"},
      {"model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight",
       "layers.2.attn.indexer.weights_proj.weight"},
      {"model.layers.4.mlp.gate.e_score_correction_bias", "layers.4.ffn.gate.bias"},
      {"model.layers.0.mlp.gate.tid2eid", "layers.0.ffn.gate.tid2eid"},
      {"model.layers.4.mlp.experts.gate_up_proj", "layers.4.ffn.experts.gate_up_proj"},
      {"model.layers.4.mlp.experts.17.down_proj.weight", "layers.4.ffn.experts.17.w2.weight"},
      {"model.layers.4.mlp.shared_experts.up_proj.weight", "layers.4.ffn.shared_experts.w3.weight"},
      {"layers.4.ffn.experts.5.gate_proj.qweight", "layers.4.ffn.experts.5.w1.qweight"},
      {"layers.4.attn.wq_b.weight_scale_inv", "layers.4.attn.wq_b.scale"},
      {"layers.4.attn.wq_b.qweight", "layers.4.attn.wq_b.qweight"},
      {"mtp.0.e_proj.qweight", "mtp.0.e_proj.qweight"},
  };
  for (const auto& [hf, ds] : cases) EXPECT_EQ(canonical_tensor_name(hf), ds) << hf;
}

}  // namespace
}  // namespace dsv4
