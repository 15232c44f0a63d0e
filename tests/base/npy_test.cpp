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

// An empty array has no data: memcpy from its null data() was undefined behaviour (UBSan aborted
// `dsv4 logits --token-ids empty.npy` before it could say the array is empty).
TEST(Npy, EmptyArrays) {
  const std::string p = temp_path("empty.npy");
  ASSERT_TRUE(write_npy_i32(p, {0}, nullptr).is_ok());
  auto a = read_npy(p);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{0}));
  EXPECT_TRUE(a->as_int32().value().empty());
  ASSERT_TRUE(write_npy_f32(p, {0, 4}, nullptr).is_ok());
  auto b = read_npy(p);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_TRUE(b->as_float32().value().empty());
  std::remove(p.c_str());
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

// Writes a version-1 .npy with the given header dict and raw data bytes.
void write_raw_npy(const std::string& path, const std::string& dict, const std::string& data) {
  std::string h = dict;
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {char(h.size() & 0xff), char(h.size() >> 8)};
  f.write(len, 2);
  f << h << data;
}

// Shapes used to go through a digit regex and std::stoll: 20 digits threw std::out_of_range (an
// abort in `dsv4 logits`), "-3" read as 3, "a" as a missing dimension, and (2^32, 2^32) wrapped to
// zero elements. An int8 file was read as int32 and blamed for being short.
TEST(Npy, RejectsShapesThatAreNotTuplesOfSizes) {
  const std::string p = temp_path("shape.npy");
  const std::string three(12, '\x01');
  auto read_with = [&](const std::string& shape, const std::string& descr = "<i4") {
    write_raw_npy(p, "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }", three);
    return read_npy(p);
  };
  auto expect_error = [&](const std::string& shape, const std::string& needle) {
    auto r = read_with(shape);
    ASSERT_FALSE(r.is_ok()) << shape;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect_error("(99999999999999999999999,)", "not a tuple of non-negative integers");
  expect_error("(-3,)", "not a tuple of non-negative integers");
  expect_error("(a,)", "not a tuple of non-negative integers");
  expect_error("(3,,)", "not a tuple of non-negative integers");
  expect_error("(2 3,)", "not a tuple of non-negative integers");
  expect_error("(4294967296, 4294967296)", "implausibly large");
  auto one = read_with("( 3, )");
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  EXPECT_EQ(one->shape, (std::vector<int64_t>{3}));
  auto two = read_with("(1, 3)");
  ASSERT_TRUE(two.is_ok()) << two.status().to_string();
  EXPECT_EQ(two->shape, (std::vector<int64_t>{1, 3}));
  auto scalar = read_with("()");
  ASSERT_TRUE(scalar.is_ok()) << scalar.status().to_string();
  EXPECT_TRUE(scalar->shape.empty());
  auto i8 = read_with("(12,)", "|i1");
  ASSERT_FALSE(i8.is_ok());
  EXPECT_NE(i8.status().message().find("unsupported dtype '|i1'"), std::string::npos) << i8.status().message();
  std::remove(p.c_str());
}

}  // namespace
}  // namespace dsv4
