// npy_test.cpp: .npy round trips and strict rejection of malformed files.
#include "base/npy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace dsv4 {
namespace {

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("dsv4_npy_") + name)).string();
}

TEST(Npy, RoundTripFloatAndInt) {
  const std::string p = temp_path("f.npy");
  std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  ASSERT_TRUE(write_npy_f32(p, {2, 3}, v.data()).is_ok());
  auto a = read_npy(p);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->as_float32().value(), v);
  EXPECT_FALSE(a->as_int32().is_ok());

  const std::string q = temp_path("i.npy");
  std::vector<int32_t> ids = {0, 128803, 5};
  ASSERT_TRUE(write_npy_i32(q, {3}, ids.data()).is_ok());
  auto b = read_npy(q);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(b->as_int32().value(), ids);
  std::remove(p.c_str());
  std::remove(q.c_str());
}

TEST(Npy, RejectsMalformed) {
  const std::string p = temp_path("bad.npy");
  {
    std::ofstream f(p, std::ios::binary);
    f << "not a numpy file";
  }
  auto a = read_npy(p);
  EXPECT_FALSE(a.is_ok());
  EXPECT_NE(a.status().message().find("bad magic"), std::string::npos);

  std::vector<float> v(100, 1.0f);
  ASSERT_TRUE(write_npy_f32(p, {100}, v.data()).is_ok());
  std::filesystem::resize_file(p, 128 + 40);  // header (128 bytes) + 10 of 100 floats
  auto b = read_npy(p);
  EXPECT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("shorter"), std::string::npos);
  EXPECT_FALSE(read_npy(temp_path("missing.npy")).is_ok());
  std::remove(p.c_str());
}

}  // namespace
}  // namespace dsv4
