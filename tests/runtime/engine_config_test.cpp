// engine_config_test.cpp: EngineConfig::check refuses bad scheduler settings with the CLI's
// names, and the CUDA runner refuses them before it touches a device or reads a weight
// (max_num_seqs = 0 sized its graph list from an empty vector: undefined behaviour after the load).
#include <gtest/gtest.h>

#include <string>

#include "dsv4/engine.h"
#if DSV4_TEST_CUDA_RUNNER
#include "runtime/cuda_runner.h"
#endif

namespace dsv4 {
namespace {

void expect_refused(const EngineConfig& c, const std::string& needle) {
  const Status st = c.check();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

TEST(EngineConfig, CheckNamesTheSetting) {
  EXPECT_TRUE(EngineConfig{}.check().is_ok());
  EngineConfig c;
  c.max_num_seqs = 0;
  expect_refused(c, "--max-num-seqs must be >= 1, found 0");
  c = EngineConfig{};
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 63;
  expect_refused(c, "--max-num-batched-tokens (63) must be >= --max-num-seqs (64)");
  c = EngineConfig{};
  c.max_model_len = -1;
  expect_refused(c, "--max-model-len must be >= 0");
  c = EngineConfig{};
  c.num_kv_blocks = -5;
  expect_refused(c, "--num-gpu-blocks must be >= 0, found -5");
  c = EngineConfig{};
  c.max_waiting = -1;
  expect_refused(c, "--max-waiting must be >= 0");
}

#if DSV4_TEST_CUDA_RUNNER
TEST(EngineConfig, CudaRunnerRefusesBadSettingsBeforeLoading) {
  EngineConfig c;
  c.device = "cuda";
  c.model_dir = "/nonexistent/dsv4-model";  // never read: the settings are checked first
  for (const int32_t seqs : {0, -3}) {
    c.max_num_seqs = seqs;
    const Status st = runtime::CudaRunner::load(c).status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("--max-num-seqs must be >= 1"), std::string::npos) << st.message();
  }
}
#endif

}  // namespace
}  // namespace dsv4
