// memory_estimate_test.cpp: the host estimate of a GpuModel's device bytes against loads measured
// on the H200 (GpuModel::device_bytes() of `dsv4 bench --synthetic flash --layers 20`, files in
// bench/results), its weight count against the benchmark's own sum of the step's reads, and the
// layer count `bench --layers max` derives from it.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu/memory_estimate.h"
#include "model/make_model.h"

namespace dsv4::gpu {
namespace {

ModelConfig flash_config(int layers) {
  MakeModelOptions o;
  o.preset = "flash-shaped";
  o.layers = layers;
  auto c = make_model_config(o);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return std::move(c).value();
}

// The bench's buffers for a ladder without traced steps.
DeviceBytesShape bench_shape(int max_batch, int n_batches, int64_t ctx, int chunk, int decode_steps) {
  return ladder_shape(max_batch, n_batches, ctx, chunk, decode_steps, 0);
}

struct Measured {
  DeviceBytesShape shape;
  int64_t device_bytes;
  const char* file;
};

TEST(MemoryEstimate, MatchesMeasuredH200Loads) {
  const ModelConfig cfg = flash_config(20);
  const auto w = ModelWeights::synthetic(cfg, 1);
  const Measured cases[] = {
      {bench_shape(32, 2, 4096, 4096, 20), 73320640244, "forward_h200_6d2eab8_4k.json"},
      {bench_shape(1, 1, 65536, 8192, 20), 74281213028, "forward_h200_6d2eab8_64k.json"},
      {bench_shape(1, 1, 262144, 8192, 20), 74577713252, "forward_h200_6d2eab8_262k_chunk8192.json"},
  };
  for (const Measured& m : cases) {
    const DeviceBytesEstimate e = estimate_device_bytes(cfg, *w, m.shape);
    const double rel = double(e.total() - m.device_bytes) / double(m.device_bytes);
    std::printf("[estimate] %s: weights %.3f GB, kv %.3f GB, activations %.3f GB, total %.3f GB; measured %.3f GB (%+.3f%%)\n",
                m.file, e.weights / 1e9, e.kv / 1e9, e.activations / 1e9, e.total() / 1e9, m.device_bytes / 1e9,
                100 * rel);
    EXPECT_LT(std::abs(rel), 0.002) << m.file;
  }
}

// A longer synthetic model's first n layers weigh what an n-layer model does (the premise of
// layers_that_fit), and the layer count follows the budget byte for byte.
TEST(MemoryEstimate, LayersThatFitFollowTheBudget) {
  const ModelConfig c43 = flash_config(43), c20 = flash_config(20), c2 = flash_config(2);
  const auto w43 = ModelWeights::synthetic(c43, 1);
  const auto w20 = ModelWeights::synthetic(c20, 2);
  const auto w2 = ModelWeights::synthetic(c2, 3);
  EXPECT_EQ(device_weight_bytes(c20, *w20), device_weight_bytes(c20, *w43));
  EXPECT_EQ(device_weight_bytes(c2, *w2), device_weight_bytes(c2, *w43));
  // One Flash layer holds 256 + 1 experts of 3 x 2048 x 4096 INT4 weights (12.98 MB each) and more.
  const int64_t layer20 = device_weight_bytes(flash_config(21), *w43) - device_weight_bytes(c20, *w43);
  EXPECT_GT(layer20, 257 * int64_t(12976128));
  EXPECT_LT(layer20, 257 * int64_t(12976128) + 200000000);

  const DeviceBytesShape shape = bench_shape(32, 2, 4096, 4096, 20);
  const int64_t at20 = estimate_device_bytes(c20, *w43, shape).total();
  EXPECT_EQ(layers_that_fit(c43, *w43, shape, at20), 20);
  EXPECT_EQ(layers_that_fit(c43, *w43, shape, at20 - 1), 19);
  EXPECT_EQ(layers_that_fit(c43, *w43, shape, int64_t(1) << 50), 43);
  EXPECT_EQ(layers_that_fit(c43, *w43, shape, int64_t(1) << 30), 0);
  // The H200 of the benchmarks: 150 GB of which ~8 GB are held back (bench --layers max's reserve).
  const int n = layers_that_fit(c43, *w43, shape, int64_t(142e9));
  std::printf("[estimate] layers that fit 142 GB at batch 32, 4K: %d\n", n);
  EXPECT_GE(n, 36);
  EXPECT_LE(n, 42);
}

// wo_a in the fp8 form: each layer's 8 x 1024 x 4096 weight takes 1 + 1/128 bytes a weight instead
// of 2, and steps of more than 32 rows add one bf16 copy of it (GpuModel's workspace).
TEST(MemoryEstimate, Fp8WoAHalvesItsBytes) {
  const ModelConfig c20 = flash_config(20);
  const auto w = ModelWeights::synthetic(c20, 4);
  const int64_t n = int64_t(8) * 1024 * 4096;
  EXPECT_EQ(device_weight_bytes(c20, *w) - device_weight_bytes(c20, *w, true), 20 * (2 * n - n - n / 128));
  DeviceBytesShape shape = bench_shape(1, 1, 4096, 4096, 20);
  const DeviceBytesEstimate bf16 = estimate_device_bytes(c20, *w, shape);
  shape.wo_a_fp8 = true;
  const DeviceBytesEstimate fp8 = estimate_device_bytes(c20, *w, shape);
  EXPECT_EQ(fp8.activations - bf16.activations, 2 * n);
  EXPECT_EQ(fp8.kv, bf16.kv);
  shape.max_tokens_per_step = 32;  // decode-only steps: the decode kernels read the fp8 form
  shape.wo_a_fp8 = false;
  const int64_t act32 = estimate_device_bytes(c20, *w, shape).activations;
  shape.wo_a_fp8 = true;
  EXPECT_EQ(estimate_device_bytes(c20, *w, shape).activations, act32);
  // More layers fit: at batch 32 and 4K on 142 GB, at least as many as with bf16.
  const ModelConfig c43 = flash_config(43);
  const auto w43 = ModelWeights::synthetic(c43, 1);
  DeviceBytesShape s32 = bench_shape(32, 2, 4096, 4096, 20);
  const int n_bf16 = layers_that_fit(c43, *w43, s32, int64_t(142e9));
  s32.wo_a_fp8 = true;
  EXPECT_GE(layers_that_fit(c43, *w43, s32, int64_t(142e9)), n_bf16);
}

}  // namespace
}  // namespace dsv4::gpu
