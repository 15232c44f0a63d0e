// linear_weight_test.cpp: exact dequantization of every stored linear format, on tensors built by
// hand: auto_gptq INT4 (v1 and v2 zero points, symmetric and asymmetric, negative FP16 scales),
// compressed-tensors INT4, FP8 block with partial blocks, MXFP4, and slices of fused HF experts.
#include "model/linear_weight.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "base/numeric.h"
#include "model/tensor_names.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

class LinearWeightTest : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove(path_); }

  // Writes `w`, opens it and returns the linear found at `prefix`.
  Result<LinearWeight> write_and_find(SafetensorsWriter& w, const std::string& prefix, int64_t n, int64_t k,
                                      LinearLoadOptions opts = {}) {
    EXPECT_TRUE(w.write(path_).is_ok());
    store_ = std::move(TensorStore::open(path_).value());
    index_ = std::make_unique<TensorIndex>(TensorIndex::build(*store_).value());
    return find_linear(*index_, prefix, n, k, opts);
  }

  std::vector<float> dequant(const LinearWeight& lw) {
    std::vector<float> out(size_t(lw.n * lw.k));
    lw.dequant_rows(0, lw.n, out.data());
    return out;
  }

  std::string path_ = (fs::temp_directory_path() / ("dsv4_lw_" + std::to_string(::getpid()) + ".safetensors")).string();
  std::unique_ptr<TensorStore> store_;
  std::unique_ptr<TensorIndex> index_;
};

// GPTQ tensors for W[n, k] = s[g, n] * (q[k, n] - zero[g, n]) with the given stored zero codes.
void add_gptq(SafetensorsWriter& w, const std::string& p, int64_t N, int64_t K, int64_t G,
              const std::vector<int>& q /*[K, N]*/, const std::vector<float>& s /*[K/G, N]*/,
              const std::vector<int>& zstored /*[K/G, N]*/) {
  std::vector<int32_t> qw(size_t(K / 8 * N), 0), qz(size_t(K / G * ((N + 7) / 8)), 0);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      qw[size_t((k / 8) * N + n)] |= int32_t(uint32_t(q[size_t(k * N + n)]) << (4 * (k % 8)));
  for (int64_t g = 0; g < K / G; ++g)
    for (int64_t n = 0; n < N; ++n)
      qz[size_t(g * ((N + 7) / 8) + n / 8)] |= int32_t(uint32_t(zstored[size_t(g * N + n)]) << (4 * (n % 8)));
  w.add_i32(p + ".qweight", {K / 8, N}, qw);
  w.add_i32(p + ".qzeros", {K / G, (N + 7) / 8}, qz);
  w.add_f16(p + ".scales", {K / G, N}, s);
}

TEST_F(LinearWeightTest, GptqV1SymmetricWithNegativeScales) {
  const int64_t N = 16, K = 256, G = 128;
  std::vector<int> q(size_t(K * N)), z(size_t(K / G * N), 7);
  std::vector<float> s(size_t(K / G * N));
  for (int64_t i = 0; i < K * N; ++i) q[size_t(i)] = int((i * 7 + i / 13) % 16);
  for (int64_t i = 0; i < K / G * N; ++i) s[size_t(i)] = f16_to_f32(f32_to_f16((i % 3 == 0 ? -1.0f : 1.0f) * (0.01f + 0.003f * float(i))));
  SafetensorsWriter w;
  add_gptq(w, "layers.0.attn.wq_a", N, K, G, q, s, z);
  auto lw = write_and_find(w, "layers.0.attn.wq_a", N, K);
  ASSERT_TRUE(lw.is_ok()) << lw.status().to_string();
  EXPECT_EQ(lw->format, WeightFormat::kGptqInt4);
  EXPECT_EQ(lw->group_size, 128);
  EXPECT_TRUE(lw->zeros_uniform);
  const std::vector<float> W = dequant(*lw);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      ASSERT_EQ(W[size_t(n * K + k)], s[size_t((k / G) * N + n)] * float(q[size_t(k * N + n)] - 8)) << n << "," << k;
  // Row blocks in the middle give the same values.
  std::vector<float> rows(size_t(3 * K));
  lw->dequant_rows(5, 8, rows.data());
  EXPECT_TRUE(std::equal(rows.begin(), rows.end(), W.begin() + 5 * K));
}

TEST_F(LinearWeightTest, GptqV2AndAsymmetricZeros) {
  const int64_t N = 8, K = 128, G = 64;
  std::vector<int> q(size_t(K * N)), z(size_t(K / G * N));
  std::vector<float> s(size_t(K / G * N), 0.5f);
  for (int64_t i = 0; i < K * N; ++i) q[size_t(i)] = int(i % 16);
  for (int64_t i = 0; i < K / G * N; ++i) z[size_t(i)] = int(i % 15);
  {
    SafetensorsWriter w;
    add_gptq(w, "p", N, K, G, q, s, z);
    LinearLoadOptions o;
    o.sym = false;
    o.gptq_v2 = true;  // zero = stored
    auto lw = write_and_find(w, "p", N, K, o);
    ASSERT_TRUE(lw.is_ok()) << lw.status().to_string();
    EXPECT_FALSE(lw->zeros_uniform);
    EXPECT_EQ(lw->group_size, 64);
    const std::vector<float> W = dequant(*lw);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        ASSERT_EQ(W[size_t(n * K + k)], 0.5f * float(q[size_t(k * N + n)] - z[size_t((k / G) * N + n)]));
  }
  {
    SafetensorsWriter w;
    add_gptq(w, "p", N, K, G, q, s, z);
    LinearLoadOptions o;
    o.sym = false;  // v1: zero = stored + 1
    auto lw = write_and_find(w, "p", N, K, o);
    ASSERT_TRUE(lw.is_ok());
    const std::vector<float> W = dequant(*lw);
    EXPECT_EQ(W[0], 0.5f * float(q[0] - (z[0] + 1)));
  }
  {
    SafetensorsWriter w;
    add_gptq(w, "p", N, K, G, q, s, std::vector<int>(size_t(K / G * N), 8));
    LinearLoadOptions o;
    o.gptq_v2 = true;  // symmetric v2 stores 8 everywhere
    auto lw = write_and_find(w, "p", N, K, o);
    ASSERT_TRUE(lw.is_ok()) << lw.status().to_string();
    EXPECT_TRUE(lw->zeros_uniform);
  }
}

TEST_F(LinearWeightTest, CompressedTensorsInt4) {
  const int64_t N = 4, K = 256, G = 128;
  std::vector<int32_t> packed(size_t(N * K / 8), 0);
  std::vector<float> s(size_t(N * K / G));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      packed[size_t(n * K / 8 + k / 8)] |= int32_t(uint32_t((n + k) % 16) << (4 * (k % 8)));
  for (size_t i = 0; i < s.size(); ++i) s[i] = round_bf16(0.125f * float(i + 1));
  SafetensorsWriter w;
  w.add_i32("layers.0.ffn.experts.0.w1.weight_packed", {N, K / 8}, packed);
  w.add_bf16("layers.0.ffn.experts.0.w1.weight_scale", {N, K / G}, s);
  w.add_i64("layers.0.ffn.experts.0.w1.weight_shape", {2}, {N, K});
  auto lw = write_and_find(w, "layers.0.ffn.experts.0.w1", N, K);
  ASSERT_TRUE(lw.is_ok()) << lw.status().to_string();
  EXPECT_EQ(lw->format, WeightFormat::kCtInt4);
  const std::vector<float> W = dequant(*lw);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      ASSERT_EQ(W[size_t(n * K + k)], s[size_t(n * 2 + k / G)] * float(int((n + k) % 16) - 8));
}

TEST_F(LinearWeightTest, Fp8BlockWithPartialBlocksAndHfScaleName) {
  const int64_t N = 130, K = 200;  // 2 x 2 blocks of 128, the last ones partial
  std::vector<uint8_t> wb(size_t(N * K));
  for (int64_t i = 0; i < N * K; ++i) {
    uint8_t b = uint8_t((i * 37) % 256);
    if ((b & 0x7f) == 0x7f) b = 0;  // no NaN codes
    wb[size_t(i)] = b;
  }
  const std::vector<uint8_t> sc = {120, 125, 127, 130};  // e8m0 [2, 2]
  SafetensorsWriter w;
  w.add("model.layers.1.self_attn.o_b_proj.weight", DType::kF8E4M3, {N, K}, wb);
  w.add("model.layers.1.self_attn.o_b_proj.weight_scale_inv", DType::kF8E8M0, {2, 2}, sc);
  auto lw = write_and_find(w, "layers.1.attn.wo_b", N, K);
  ASSERT_TRUE(lw.is_ok()) << lw.status().to_string();
  EXPECT_EQ(lw->format, WeightFormat::kFp8Block);
  const std::vector<float> W = dequant(*lw);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      ASSERT_EQ(W[size_t(n * K + k)],
                e4m3_to_f32(wb[size_t(n * K + k)]) * std::ldexp(1.0f, int(sc[size_t((n / 128) * 2 + k / 128)]) - 127));
}

TEST_F(LinearWeightTest, Mxfp4LowNibbleIsTheEvenElement) {
  const int64_t N = 3, K = 64;
  std::vector<uint8_t> wb(size_t(N * K / 2)), sc(size_t(N * K / 32));
  for (size_t i = 0; i < wb.size(); ++i) wb[i] = uint8_t(i * 29 + 3);
  for (size_t i = 0; i < sc.size(); ++i) sc[i] = uint8_t(124 + i);
  SafetensorsWriter w;
  w.add("layers.0.ffn.experts.1.w3.weight", DType::kI8, {N, K / 2}, wb);
  w.add("layers.0.ffn.experts.1.w3.scale", DType::kF8E8M0, {N, K / 32}, sc);
  auto lw = write_and_find(w, "layers.0.ffn.experts.1.w3", N, K);
  ASSERT_TRUE(lw.is_ok()) << lw.status().to_string();
  EXPECT_EQ(lw->format, WeightFormat::kMxfp4);
  const std::vector<float> W = dequant(*lw);
  const float table[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t b = wb[size_t(n * K / 2 + k / 2)];
      const uint8_t code = (k % 2 == 0) ? (b & 0xf) : (b >> 4);
      const float v = ((code & 8) ? -1.0f : 1.0f) * table[code & 7];
      ASSERT_EQ(W[size_t(n * K + k)], v * std::ldexp(1.0f, int(sc[size_t(n * 2 + k / 32)]) - 127)) << n << "," << k;
    }
}

TEST_F(LinearWeightTest, WrongShapesAreNamed) {
  SafetensorsWriter w;
  w.add_bf16("layers.0.attn.wkv.weight", {64, 100}, std::vector<float>(6400, 1.0f));
  auto lw = write_and_find(w, "layers.0.attn.wkv", 64, 128);
  ASSERT_FALSE(lw.is_ok());
  EXPECT_NE(lw.status().message().find("'layers.0.attn.wkv.weight': expected shape [64, 128], found [64, 100]"),
            std::string::npos)
      << lw.status().message();
  auto missing = find_linear(*index_, "layers.0.attn.wq_a", 64, 128, {});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("layers.0.attn.wq_a"), std::string::npos);
}

// One INT4 word packs 8 consecutive in-features and the dequantization applies one scale per word,
// so a group that is not a multiple of 8 (here 4, which K % rows-of-scales accepted) was dequantized
// with the wrong scale for half of every word: silently wrong weights.
TEST_F(LinearWeightTest, Int4GroupNotAMultipleOf8IsRefused) {
  const int64_t N = 8, K = 32, G = 4;
  std::vector<int> q(size_t(K * N), 3), z(size_t(K / G * N), 7);
  std::vector<float> s(size_t(K / G * N));
  for (size_t i = 0; i < s.size(); ++i) s[i] = float(i + 1);
  SafetensorsWriter w;
  add_gptq(w, "p", N, K, G, q, s, z);
  auto lw = write_and_find(w, "p", N, K);
  ASSERT_FALSE(lw.is_ok());
  EXPECT_NE(lw.status().message().find("group size 4 is not a multiple of 8"), std::string::npos)
      << lw.status().message();
}

}  // namespace
}  // namespace dsv4
