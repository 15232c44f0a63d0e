// npy.h: reading and writing NumPy .npy arrays (version 1.0/2.0, little-endian, C order) for the
// command line (token ids in, logits out) and for test fixtures. Only the dtypes we exchange:
// int32, int64 and float32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4 {

struct NpyArray {
  std::string dtype;           // "<i4", "<i8" or "<f4"
  std::vector<int64_t> shape;  // C order
  std::vector<uint8_t> data;   // raw little-endian bytes, product(shape) * itemsize

  int64_t numel() const;
  // Converts integer arrays (int32 or int64) to int32 values; error on other dtypes or overflow.
  Result<std::vector<int32_t>> as_int32() const;
  Result<std::vector<float>> as_float32() const;
};

Result<NpyArray> read_npy(const std::string& path);
Status write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data);
Status write_npy_i32(const std::string& path, const std::vector<int64_t>& shape, const int32_t* data);

}  // namespace dsv4
