// safetensors_test.cpp: the reader accepts what the writer writes, and rejects every malformed
// header with a clear message (never a crash): truncated files, header length past the end, bad
// JSON, unknown dtypes, size mismatches, offsets out of range or overlapping; sharded indexes
// that disagree with their shards.
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> f(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f[size_t(i)] = uint8_t(n >> (8 * i));
  std::memcpy(f.data() + 8, header.data(), header.size());
  return f;
}

Status parse(const std::vector<uint8_t>& f) { return parse_safetensors(f.data(), f.size(), "t.safetensors").status(); }

void expect_error(const std::vector<uint8_t>& f, const std::string& needle) {
  const Status st = parse(f);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(needle), std::string::npos) << "message: " << st.message();
}

TEST(Safetensors, ParsesAValidHeader) {
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
      R"("b":{"dtype":"F8_E8M0","shape":[4],"data_offsets":[12,16]},"c":{"dtype":"I64","shape":[],"data_offsets":[16,24]}})";
  auto f = make_file(h, 24);
  auto r = parse_safetensors(f.data(), f.size(), "t");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 3u);
  for (const TensorInfo& t : *r) {
    if (t.name == "a") {
      EXPECT_EQ(t.dtype, DType::kBF16);
      EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
      EXPECT_EQ(t.n_bytes, 12u);
      EXPECT_EQ(t.data, f.data() + 8 + h.size());
    }
    if (t.name == "c") {
      EXPECT_EQ(t.numel(), 1);
    }
  }
}

TEST(Safetensors, RejectsMalformedFiles) {
  expect_error({1, 2, 3}, "too short");
  {
    auto f = make_file("{}", 0);
    f[0] = 0xff;  // header length 255 in a 10-byte file
    expect_error(f, "runs past the end");
  }
  {
    auto f = make_file("{}", 0);
    for (int i = 0; i < 8; ++i) f[size_t(i)] = 0xff;  // 2^64 - 1
    expect_error(f, "runs past the end");
  }
  expect_error(make_file("{not json", 0), "not a JSON object");
  expect_error(make_file("[1,2]", 0), "not a JSON object");
  expect_error(make_file(R"({"a":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}})", 2), "unknown dtype 'Q4_K'");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), "needs 8 bytes");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "run past the data");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "reversed");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "data_offsets");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "two non-negative");
  expect_error(make_file(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8), "dtype must be a string");
  expect_error(make_file(R"({"a":{"dtype":"U8","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})", 8),
               "implausibly large");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         12),
               "overlap");
}

// JSON keeps the last of two equal keys, so a tensor named twice silently lost its first entry.
TEST(Safetensors, RejectsATensorNamedTwice) {
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8),
               "header names 'a' more than once");
  // Only top-level keys are tensor names: a metadata key spelled like a tensor is fine.
  auto f = make_file(R"({"__metadata__":{"a":"x"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     8);
  EXPECT_TRUE(parse(f).is_ok()) << parse(f).to_string();
}

// Overlaps were checked between neighbours in offset order only, skipping pairs with an empty
// tensor: an empty tensor sorted between two overlapping ones hid the overlap.
TEST(Safetensors, EmptyTensorDoesNotHideAnOverlap) {
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                         R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                         R"("c":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                         16),
               "tensors 'a' [0, 16] and 'c' [12, 16] overlap");
  // Empty tensors anywhere (even inside another's bytes) are fine: they occupy nothing.
  auto f = make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                     R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                     R"("c":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})",
                     20);
  EXPECT_TRUE(parse(f).is_ok()) << parse(f).to_string();
}

std::string tmp_dir(const char* name) {
  const fs::path p = fs::temp_directory_path() / (std::string("dsv4_st_") + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

TEST(Safetensors, WriterRoundTripAndTruncation) {
  const std::string dir = tmp_dir("rt");
  SafetensorsWriter w;
  w.add_f32("x", {2, 2}, {1.0f, -2.0f, 3.5f, 0.25f});
  w.add_bf16("y", {3}, {1.0f, 0.5f, -4.0f});
  w.add_f16("z", {1}, {65504.0f});
  w.add_i64("t", {2}, {7, -1});
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(w.write(path).is_ok());
  {
    auto store = TensorStore::open(dir);
    ASSERT_TRUE(store.is_ok()) << store.status().to_string();
    const TensorInfo* x = (*store)->find("x");
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(x->get_f32(1), -2.0f);
    EXPECT_EQ((*store)->find("y")->get_f32(2), -4.0f);
    EXPECT_EQ((*store)->find("z")->get_f32(0), 65504.0f);
    EXPECT_EQ((*store)->find("t")->get_i64(1), -1);
    EXPECT_EQ((size_t(reinterpret_cast<uintptr_t>(x->data)) - 8) % 8, 0u) << "data section not 8-byte aligned";
  }
  fs::resize_file(path, fs::file_size(path) - 3);
  auto bad = TensorStore::open(path);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("run past the data section"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(TensorStore::open(dir + "/missing").is_ok());
  fs::remove_all(dir);
}

TEST(Safetensors, ShardedIndexMustAgreeWithShards) {
  const std::string dir = tmp_dir("shard");
  SafetensorsWriter a, b;
  a.add_f32("p", {1}, {1.0f});
  b.add_f32("q", {1}, {2.0f});
  ASSERT_TRUE(a.write(dir + "/s1.safetensors").is_ok());
  ASSERT_TRUE(b.write(dir + "/s2.safetensors").is_ok());
  auto write_index = [&](const nlohmann::json& map) {
    std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
  };
  write_index({{"p", "s1.safetensors"}, {"q", "s2.safetensors"}});
  auto ok = TensorStore::open(dir);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)->tensors().size(), 2u);
  EXPECT_EQ((*ok)->find("q")->get_f32(0), 2.0f);

  write_index({{"p", "s1.safetensors"}, {"q", "s1.safetensors"}});
  auto st = TensorStore::open(dir).status();
  EXPECT_NE(st.message().find("'q' is listed for"), std::string::npos) << st.message();

  write_index({{"p", "s1.safetensors"}, {"q", "s3.safetensors"}});
  st = TensorStore::open(dir).status();
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.message();

  write_index({{"p", "s1.safetensors"}, {"q", "../s2.safetensors"}});
  st = TensorStore::open(dir).status();
  EXPECT_NE(st.message().find("not a plain file name"), std::string::npos) << st.message();

  SafetensorsWriter c;
  c.add_f32("q", {1}, {3.0f});
  c.add_f32("extra", {1}, {3.0f});
  ASSERT_TRUE(c.write(dir + "/s2.safetensors").is_ok());
  write_index({{"p", "s1.safetensors"}, {"q", "s2.safetensors"}});
  st = TensorStore::open(dir).status();
  EXPECT_NE(st.message().find("'extra'"), std::string::npos) << st.message();

  SafetensorsWriter d;
  d.add_f32("p", {1}, {3.0f});
  ASSERT_TRUE(d.write(dir + "/s2.safetensors").is_ok());
  write_index({{"p", "s1.safetensors"}});
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map": {"p": "s1.safetensors", "p2": "s2.safetensors"}})";
  st = TensorStore::open(dir).status();
  EXPECT_FALSE(st.is_ok());  // s2 holds "p" (duplicate of s1) and not "p2"

  std::ofstream(dir + "/model.safetensors.index.json") << "{oops";
  st = TensorStore::open(dir).status();
  EXPECT_NE(st.message().find("weight_map"), std::string::npos) << st.message();
  fs::remove_all(dir);
}

// Found by feeding the loader hostile files: each of these crashed, hung, or took gigabytes.
TEST(Safetensors, RejectsHostileHeadersWithoutCrashing) {
  // A shape nested 100k deep is a 200 KB header; printing it in the message overflowed the stack.
  const std::string deep = std::string(100000, '[') + "2" + std::string(100000, ']');
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,8]}})", 8),
               "nests 100002 levels deep");
  // The parser stops at a NUL as at the end of its input: the garbage behind it went unseen.
  std::string nul = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  nul += std::string(1, '\0') + "GARBAGE{{";
  expect_error(make_file(nul, 8), "NUL byte at offset 54");
  // __metadata__ maps strings to strings; other values are refused (and not kept while parsing).
  expect_error(make_file(R"({"__metadata__":{"x":[[],[]]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
               "nests 4 levels");
  expect_error(make_file(R"({"__metadata__":{"x":[1,2]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
               "__metadata__ must map names to strings");
  expect_error(make_file(R"({"__metadata__":{"x":7},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
               "__metadata__ must map names to strings");
  auto ok = make_file(R"({"__metadata__":{"format":"pt","n":"7"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                      8);
  EXPECT_TRUE(parse(ok).is_ok()) << parse(ok).to_string();
  // A container in a shape nests too deep; a scalar of the wrong type is named.
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", 8), "nests 4 levels");
  expect_error(make_file(R"({"a":{"dtype":"F32","shape":[true],"data_offsets":[0,8]}})", 8), "found true");
}

// Opening a FIFO waited for a writer forever; a directory gave "cannot mmap ...: No such device".
TEST(Safetensors, ShardsThatAreNotRegularFilesAreRefused) {
  const std::string dir = tmp_dir("notreg");
  SafetensorsWriter a;
  a.add_f32("p", {1}, {1.0f});
  ASSERT_TRUE(a.write(dir + "/s1.safetensors").is_ok());
  ASSERT_EQ(mkfifo((dir + "/fifo.safetensors").c_str(), 0600), 0);
  fs::create_directory(dir + "/d.safetensors");
  for (const auto& [shard, says] : {std::pair{"fifo.safetensors", "is not a regular file, expected a safetensors"},
                                     {"d.safetensors", "is a directory, expected a safetensors file"}}) {
    std::ofstream(dir + "/model.safetensors.index.json")
        << nlohmann::json{{"weight_map", {{"p", "s1.safetensors"}, {"q", shard}}}}.dump();
    const Status st = TensorStore::open(dir).status();
    EXPECT_NE(st.message().find(says), std::string::npos) << shard << ": " << st.message();
  }
  // The index itself: a FIFO index blocked the same way.
  fs::remove(dir + "/model.safetensors.index.json");
  ASSERT_EQ(mkfifo((dir + "/model.safetensors.index.json").c_str(), 0600), 0);
  const Status st = TensorStore::open(dir).status();
  EXPECT_NE(st.message().find("is not a regular file, expected a JSON file"), std::string::npos) << st.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4
