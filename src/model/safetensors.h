// safetensors.h: a strict, zero-copy reader of .safetensors files (single or sharded through
// model.safetensors.index.json) and a small writer used by make-model and the tests.
// Every header is validated before any tensor is handed out: header length inside the file,
// known dtypes, shape x dtype == byte size, offsets inside the data section, no overlaps.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4 {

enum class DType { kBool, kU8, kI8, kI16, kI32, kI64, kF16, kBF16, kF32, kF64, kF8E4M3, kF8E5M2, kF8E8M0 };

const char* dtype_name(DType t);                  // safetensors spelling, e.g. "BF16"
Result<DType> dtype_from_name(const std::string& s);
size_t dtype_size(DType t);
bool dtype_is_float(DType t);                      // F16, BF16, F32, F64

std::string shape_str(const std::vector<int64_t>& shape);

// One tensor inside a mapped file. `data` points into the mapping and lives as long as the store.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;
  int file_idx = 0;

  int64_t numel() const;
  // Reads element i converted to fp32 (float dtypes only) or to int64 (integer dtypes only).
  float get_f32(int64_t i) const;
  int64_t get_i64(int64_t i) const;
};

// A read-only memory mapping of one file.
class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// All tensors of a checkpoint directory (or of one file).
class TensorStore {
 public:
  // `path` is a directory (model.safetensors.index.json, else model.safetensors, else the single
  // *.safetensors file it holds) or a .safetensors file.
  static Result<std::unique_ptr<TensorStore>> open(const std::string& path);

  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::vector<std::string>& files() const { return file_paths_; }
  size_t total_bytes() const;

 private:
  Status add_file(const std::string& path, const std::vector<std::string>* expected_names);
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<std::string> file_paths_;
  std::map<std::string, TensorInfo> tensors_;
};

// Parses and validates one file's header against its size (exposed for the tests).
Result<std::vector<TensorInfo>> parse_safetensors(const uint8_t* data, size_t size, const std::string& origin);

// Collects tensors and writes one .safetensors file (header padded to 8 bytes, offsets in order).
class SafetensorsWriter {
 public:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v);
  void add_bf16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v);
  void add_f16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v);
  void add_i32(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v);
  void add_i64(const std::string& name, std::vector<int64_t> shape, const std::vector<int64_t>& v);
  Status write(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;
  size_t n_tensors() const { return entries_.size(); }
  std::vector<std::string> names() const;
  size_t total_bytes() const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
};

}  // namespace dsv4
