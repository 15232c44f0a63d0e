// linalg_unoptimized_test.cpp: linear() against dot() with linalg.cpp compiled at -O0, where
// nothing is inlined. Its 4-token blocks run in AVX2 clones (target_clones) that call baseline
// helpers; a 32-byte vector passed by value between the two is an ABI mismatch (GCC's -Wpsabi),
// hidden at -O3 by inlining: Debug and sanitizer builds read stack garbage and gave NaN logits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "cpu/linalg.h"
#include "model/linear_weight.h"
#include "model/safetensors.h"
#include "model/tensor_names.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

TEST(LinalgUnoptimized, LinearEqualsDotForEveryTokenAndRow) {
  // 7 tokens (one 4-token block, then 3 singles) x 21 rows (16-row blocks, 4-row groups, then
  // single rows) x K = 75 (nine 8-wide steps and a tail of 3).
  constexpr int64_t T = 7, N = 21, K = 75;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(size_t(N * K)), x(size_t(T * K)), y(size_t(T * N), -7.0f);
  for (float& v : w) v = u(rng);
  for (float& v : x) v = u(rng);
  const std::string path = (fs::temp_directory_path() / ("dsv4_linalg_" + std::to_string(::getpid()) + ".safetensors")).string();
  SafetensorsWriter sw;
  sw.add_f32("p.weight", {N, K}, w);
  ASSERT_TRUE(sw.write(path).is_ok());
  auto store = TensorStore::open(path);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  auto index = TensorIndex::build(**store);
  ASSERT_TRUE(index.is_ok()) << index.status().to_string();
  auto lw = find_linear(*index, "p", N, K, LinearLoadOptions{});
  ASSERT_TRUE(lw.is_ok()) << lw.status().to_string();
  cpu::linear(*lw, x.data(), T, y.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n)
      EXPECT_EQ(y[size_t(t * N + n)], cpu::dot(&x[size_t(t * K)], &w[size_t(n * K)], K)) << "token " << t << " row " << n;
  fs::remove(path);
}

}  // namespace
}  // namespace dsv4
