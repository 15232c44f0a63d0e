// npy.cpp: a strict .npy parser: the header must be a Python dict literal with 'descr',
// 'fortran_order' and 'shape'; anything else is an error naming what was found.
#include "base/npy.h"

#include <charconv>
#include <cstring>
#include <fstream>
#include <regex>

namespace dsv4 {

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<std::vector<int32_t>> NpyArray::as_int32() const {
  std::vector<int32_t> out(static_cast<size_t>(numel()));
  if (dtype == "<i4") {
    if (!out.empty()) std::memcpy(out.data(), data.data(), out.size() * 4);  // empty: data() may be null
  } else if (dtype == "<i8") {
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t v;
      std::memcpy(&v, data.data() + i * 8, 8);
      if (v < INT32_MIN || v > INT32_MAX) return invalid_argument("npy value {} at {} does not fit int32", v, i);
      out[i] = int32_t(v);
    }
  } else {
    return invalid_argument("expected an int32 or int64 array, found dtype '{}'", dtype);
  }
  return out;
}

Result<std::vector<float>> NpyArray::as_float32() const {
  if (dtype != "<f4") return invalid_argument("expected a float32 array, found dtype '{}'", dtype);
  std::vector<float> out(static_cast<size_t>(numel()));
  if (!out.empty()) std::memcpy(out.data(), data.data(), out.size() * 4);  // empty: data() may be null
  return out;
}

Result<NpyArray> read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open '{}'", path);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return invalid_argument("'{}' is not a .npy file (bad magic)", path);
  const int major = uint8_t(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    uint8_t b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) return invalid_argument("'{}': truncated header", path);
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    uint8_t b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) return invalid_argument("'{}': truncated header", path);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
  } else {
    return invalid_argument("'{}': unsupported .npy version {}", path, major);
  }
  if (header_len > (1u << 20)) return invalid_argument("'{}': header of {} bytes is too long", path, header_len);
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) return invalid_argument("'{}': truncated header", path);

  NpyArray arr;
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    return invalid_argument("'{}': header has no 'descr'", path);
  arr.dtype = m[1];
  if (arr.dtype == "=i4") arr.dtype = "<i4";  // native order, little-endian on every supported host
  if (arr.dtype != "<i4" && arr.dtype != "<i8" && arr.dtype != "<f4")
    return invalid_argument("'{}': unsupported dtype '{}' (expected <i4, <i8 or <f4)", path, arr.dtype);
  if (std::regex_search(header, m, std::regex(R"('fortran_order'\s*:\s*True)")))
    return invalid_argument("'{}': Fortran-order arrays are not supported", path);
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    return invalid_argument("'{}': header has no 'shape'", path);
  // The shape is a tuple of non-negative integers: "()", "(3,)", "(2, 3)". Each entry is parsed
  // whole (a '-' or a stray character is an error, not skipped) and the product is bounded before
  // it can overflow.
  const std::string dims = m[1];
  std::vector<std::string> parts(1);
  for (char c : dims) {
    if (c == ',') parts.emplace_back();
    else parts.back() += c;
  }
  for (std::string& p : parts) {
    const size_t b = p.find_first_not_of(' ');
    p = b == std::string::npos ? std::string() : p.substr(b, p.find_last_not_of(' ') - b + 1);
  }
  constexpr int64_t kMaxElements = int64_t(1) << 36;
  int64_t n = 1;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& tok = parts[i];
    // "()" is a scalar and "(3,)" ends in Python's one-tuple comma; any other empty entry is garbage.
    if (tok.empty() && (parts.size() == 1 || (i > 0 && i + 1 == parts.size()))) continue;
    int64_t d = -1;
    const auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), d);
    if (tok.empty() || ec != std::errc() || ptr != tok.data() + tok.size() || d < 0)
      return invalid_argument("'{}': shape ({}) is not a tuple of non-negative integers", path, dims);
    if (d > kMaxElements || (d > 0 && n > kMaxElements / d))
      return invalid_argument("'{}': shape ({}) is implausibly large (more than {} elements)", path, dims,
                              kMaxElements);
    n *= d;
    arr.shape.push_back(d);
  }
  const int64_t itemsize = arr.dtype == "<i8" ? 8 : 4;
  arr.data.resize(size_t(n * itemsize));
  if (!f.read(reinterpret_cast<char*>(arr.data.data()), std::streamsize(arr.data.size())))
    return invalid_argument("'{}': data is shorter than shape x dtype ({} bytes)", path, arr.data.size());
  return arr;
}

static Status write_npy(const std::string& path, const char* descr, const std::vector<int64_t>& shape,
                        const void* data, size_t itemsize) {
  std::string dims;
  size_t n = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ",";
    n *= size_t(d);
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  // Pad so that magic (6) + version (2) + length (2) + header is a multiple of 64, ending in '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) return internal_error("cannot open '{}' for writing", path);
  const uint16_t len = uint16_t(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  const char lb[2] = {char(len & 0xff), char(len >> 8)};
  f.write(lb, 2);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(static_cast<const char*>(data), std::streamsize(n * itemsize));
  if (!f) return internal_error("write to '{}' failed", path);
  return Status::ok();
}

Status write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  return write_npy(path, "<f4", shape, data, 4);
}
Status write_npy_i32(const std::string& path, const std::vector<int64_t>& shape, const int32_t* data) {
  return write_npy(path, "<i4", shape, data, 4);
}

}  // namespace dsv4
