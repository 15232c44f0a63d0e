// safetensors.cpp: mmap-based reader with strict header validation, index.json sharding, writer.
#include "model/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "base/check.h"
#include "base/json_depth.h"
#include "model/json_file.h"
#include "base/numeric.h"

namespace dsv4 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
struct DTypeEntry {
  DType type;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::kBool, "BOOL", 1}, {DType::kU8, "U8", 1},         {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},   {DType::kI32, "I32", 4},       {DType::kI64, "I64", 8},
    {DType::kF16, "F16", 2},   {DType::kBF16, "BF16", 2},     {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},   {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
};
// Headers of real checkpoints are a few MB (the Flash index has ~100k tensors over 46 files);
// anything far larger is corrupt, and refusing it early avoids a huge allocation.
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;
// A header is {name: {dtype, shape: [...], data_offsets: [...]}, "__metadata__": {str: str}}: three
// levels. Deeper text is corrupt, and printing it in a message would recurse once a level.
constexpr size_t kMaxHeaderDepth = 3;
// The sharded index is {"metadata": {...}, "weight_map": {name: file}}; a few levels of slack.
constexpr size_t kMaxIndexDepth = 8;
constexpr uintmax_t kMaxIndexBytes = uintmax_t(256) << 20;
}  // namespace

const char* dtype_name(DType t) {
  for (const auto& e : kDTypes)
    if (e.type == t) return e.name;
  return "?";
}

Result<DType> dtype_from_name(const std::string& s) {
  for (const auto& e : kDTypes)
    if (s == e.name) return e.type;
  if (s == "F8_E8M0FNU") return DType::kF8E8M0;
  return invalid_argument("unknown dtype '{}'", s);
}

size_t dtype_size(DType t) {
  for (const auto& e : kDTypes)
    if (e.type == t) return e.size;
  return 0;
}

bool dtype_is_float(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64;
}

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float TensorInfo::get_f32(int64_t i) const {
  switch (dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, data + i * 4, 4);
      return v;
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, data + i * 2, 2);
      return bf16_to_f32(h);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, data + i * 2, 2);
      return f16_to_f32(h);
    }
    case DType::kF64: {
      double v;
      std::memcpy(&v, data + i * 8, 8);
      return float(v);
    }
    case DType::kF8E4M3: return e4m3_to_f32(data[i]);
    case DType::kF8E8M0: return e8m0_to_f32(data[i]);
    case DType::kBool: case DType::kU8: case DType::kI8: case DType::kI16: case DType::kI32:
    case DType::kI64: case DType::kF8E5M2: break;
  }
  DSV4_CHECK(false, "get_f32 on non-float tensor {} ({})", name, dtype_name(dtype));
  return 0.0f;
}

int64_t TensorInfo::get_i64(int64_t i) const {
  switch (dtype) {
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, data + i * 8, 8);
      return v;
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, data + i * 4, 4);
      return v;
    }
    case DType::kI16: {
      int16_t v;
      std::memcpy(&v, data + i * 2, 2);
      return v;
    }
    case DType::kI8: return int8_t(data[i]);
    case DType::kU8: case DType::kBool: return data[i];
    case DType::kF16: case DType::kBF16: case DType::kF32: case DType::kF64: case DType::kF8E4M3:
    case DType::kF8E5M2: case DType::kF8E8M0: break;
  }
  DSV4_CHECK(false, "get_i64 on non-integer tensor {} ({})", name, dtype_name(dtype));
  return 0;
}

// ---- MappedFile -----------------------------------------------------------------------------

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; it is
  // refused below with everything else that is not a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return not_found("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return internal_error("cannot stat '{}': {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("'{}' is {}, expected a safetensors file", path,
                            S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return internal_error("cannot mmap '{}': {}", path, std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return f;
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

// ---- header parsing -------------------------------------------------------------------------

Result<std::vector<TensorInfo>> parse_safetensors(const uint8_t* data, size_t size, const std::string& origin) {
  if (size < 8) return invalid_argument("{}: file of {} bytes is too short for a safetensors header", origin, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > size - 8)
    return invalid_argument("{}: header length {} runs past the end of the file ({} bytes)", origin, header_len, size);
  if (header_len > kMaxHeaderBytes)
    return invalid_argument("{}: header length {} exceeds the limit of {} bytes", origin, header_len, kMaxHeaderBytes);
  const char* hbegin = reinterpret_cast<const char*>(data + 8);
  const std::string_view htext(hbegin, size_t(header_len));
  // The JSON parser stops at a NUL as at the end of its input, so bytes after one would be
  // silently ignored; the format pads a header with spaces only.
  if (const size_t nul = htext.find('\0'); nul != std::string_view::npos)
    return invalid_argument("{}: header has a NUL byte at offset {} (expected JSON padded with spaces)", origin, nul);
  if (const size_t depth = json_nesting_depth(htext); depth > kMaxHeaderDepth)
    return invalid_argument("{}: header nests {} levels deep (a safetensors header has {})", origin, depth,
                            kMaxHeaderDepth);
  // A JSON object keeps the last of two equal keys: a tensor named twice would silently lose its
  // first entry, so top-level keys are collected while parsing. __metadata__ maps strings to
  // strings (the format's rule): anything else in it is refused below and not kept while parsing
  // (240 MB of small arrays would take ~6 GB as parsed values).
  std::set<std::string> keys;
  std::string duplicate;
  bool in_metadata = false, bad_metadata = false;
  const json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if (event == E::key && depth == 1) {
      std::string key = parsed.get<std::string>();
      in_metadata = key == "__metadata__";
      if (!keys.insert(std::move(key)).second && duplicate.empty()) duplicate = parsed.get<std::string>();
    }
    if (in_metadata && depth >= 2 && (event == E::value || event == E::array_end || event == E::object_end) &&
        (depth > 2 || !parsed.is_string())) {
      bad_metadata = true;
      return false;
    }
    return true;
  };
  json header = json::parse(htext.begin(), htext.end(), on_event, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    return invalid_argument("{}: header is not a JSON object", origin);
  if (!duplicate.empty()) return invalid_argument("{}: header names '{}' more than once", origin, duplicate);
  if (bad_metadata) return invalid_argument("{}: __metadata__ must map names to strings", origin);

  const uint8_t* body = data + 8 + header_len;
  const uint64_t body_size = size - 8 - header_len;
  std::vector<TensorInfo> out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return invalid_argument("{}: __metadata__ must be an object", origin);
      continue;
    }
    const std::string& name = it.key();
    const json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      return invalid_argument("{}: tensor '{}' must have dtype, shape and data_offsets", origin, name);
    if (!e["dtype"].is_string()) return invalid_argument("{}: tensor '{}': dtype must be a string", origin, name);
    auto dt = dtype_from_name(e["dtype"].get<std::string>());
    if (!dt.is_ok()) return dt.status().with_context(fmt::format("{}: tensor '{}'", origin, name));
    TensorInfo t;
    t.name = name;
    t.dtype = *dt;
    if (!e["shape"].is_array()) return invalid_argument("{}: tensor '{}': shape must be a list", origin, name);
    uint64_t numel = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_unsigned())
        return invalid_argument("{}: tensor '{}': shape entries must be non-negative integers, found {}", origin, name,
                                short_json(d));
      const uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t(1) << 40) || (v != 0 && numel > (uint64_t(1) << 40) / v))
        return invalid_argument("{}: tensor '{}': shape {} is implausibly large", origin, name, short_json(e["shape"]));
      numel *= v;
      t.shape.push_back(int64_t(v));
    }
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return invalid_argument("{}: tensor '{}': data_offsets must be two non-negative integers, found {}", origin,
                              name, short_json(off));
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end)
      return invalid_argument("{}: tensor '{}': data_offsets [{}, {}] are reversed", origin, name, begin, end);
    if (end > body_size)
      return invalid_argument("{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)", origin,
                              name, begin, end, body_size);
    const uint64_t want = numel * dtype_size(t.dtype);
    if (end - begin != want)
      return invalid_argument("{}: tensor '{}': {} {} needs {} bytes but data_offsets span {}", origin, name,
                              dtype_name(t.dtype), shape_str(t.shape), want, end - begin);
    t.data = body + begin;
    t.n_bytes = size_t(end - begin);
    ranges.emplace_back(begin, end);
    out.push_back(std::move(t));
  }
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  // Each non-empty range is checked against the furthest-reaching non-empty range before it (not
  // just its neighbour: an empty tensor sorted in between must not hide an overlap).
  const size_t kNone = ~size_t(0);
  size_t reach = kNone;
  for (size_t i : order) {
    const auto& cur = ranges[i];
    if (cur.first == cur.second) continue;  // empty tensors occupy no bytes
    if (reach != kNone && cur.first < ranges[reach].second)
      return invalid_argument("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", origin, out[reach].name,
                              ranges[reach].first, ranges[reach].second, out[i].name, cur.first, cur.second);
    if (reach == kNone || cur.second > ranges[reach].second) reach = i;
  }
  return out;
}

// ---- TensorStore ----------------------------------------------------------------------------

Status TensorStore::add_file(const std::string& path, const std::vector<std::string>* expected_names) {
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> f, MappedFile::open(path));
  DSV4_ASSIGN_OR_RETURN(std::vector<TensorInfo> infos, parse_safetensors(f->data(), f->size(), path));
  const int idx = int(files_.size());
  for (TensorInfo& t : infos) {
    t.file_idx = idx;
    if (tensors_.count(t.name))
      return invalid_argument("tensor '{}' appears in both '{}' and '{}'", t.name,
                              file_paths_[size_t(tensors_[t.name].file_idx)], path);
    tensors_.emplace(t.name, std::move(t));
  }
  if (expected_names) {
    for (const std::string& n : *expected_names) {
      auto it = tensors_.find(n);
      if (it == tensors_.end() || it->second.file_idx != idx)
        return not_found("tensor '{}' is listed for '{}' in the index but is not in that file", n, path);
    }
  }
  files_.push_back(std::move(f));
  file_paths_.push_back(path);
  return Status::ok();
}

Result<std::unique_ptr<TensorStore>> TensorStore::open(const std::string& path) {
  std::unique_ptr<TensorStore> store(new TensorStore());
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found("'{}' does not exist", path);
  if (!fs::is_directory(path, ec)) {
    DSV4_RETURN_IF_ERROR(store->add_file(path, nullptr));
    return store;
  }
  const fs::path dir(path);
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    DSV4_ASSIGN_OR_RETURN(const std::string text, read_json_text(index.string(), kMaxIndexBytes, kMaxIndexDepth));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return invalid_argument("'{}': expected a JSON object with a 'weight_map' object", index.string());
    std::map<std::string, std::vector<std::string>> by_file;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string())
        return invalid_argument("'{}': weight_map['{}'] must be a file name", index.string(), it.key());
      const std::string file = it->get<std::string>();
      if (file.find('/') != std::string::npos || file.find("..") != std::string::npos)
        return invalid_argument("'{}': weight_map['{}'] = '{}' is not a plain file name", index.string(), it.key(),
                                file);
      by_file[file].push_back(it.key());
    }
    if (by_file.empty()) return invalid_argument("'{}': weight_map is empty", index.string());
    for (const auto& [file, names] : by_file) {
      DSV4_RETURN_IF_ERROR(store->add_file((dir / file).string(), &names));
    }
    // A tensor in a shard but not in the index would be silently ignored by other loaders; we
    // refuse it because it means the index and the shards disagree.
    size_t n_indexed = 0;
    for (const auto& [file, names] : by_file) n_indexed += names.size();
    if (n_indexed != store->tensors_.size()) {
      for (const auto& [name, t] : store->tensors_)
        if (!j["weight_map"].contains(name))
          return invalid_argument("tensor '{}' in '{}' is not listed in '{}'", name,
                                  store->file_paths_[size_t(t.file_idx)], index.string());
    }
    return store;
  }
  if (fs::exists(dir / "model.safetensors", ec)) {
    DSV4_RETURN_IF_ERROR(store->add_file((dir / "model.safetensors").string(), nullptr));
    return store;
  }
  std::vector<std::string> candidates;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") candidates.push_back(e.path().string());
  if (candidates.size() == 1) {
    DSV4_RETURN_IF_ERROR(store->add_file(candidates[0], nullptr));
    return store;
  }
  if (candidates.empty()) return not_found("'{}' holds no .safetensors file", path);
  return invalid_argument("'{}' holds {} .safetensors files but no model.safetensors.index.json", path,
                          candidates.size());
}

const TensorInfo* TensorStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

size_t TensorStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.n_bytes;
  return n;
}

// ---- writer ---------------------------------------------------------------------------------

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  DSV4_CHECK(bytes.size() == size_t(numel) * dtype_size(dtype), "writer: {} has {} bytes for {} {}", name,
             bytes.size(), dtype_name(dtype), shape_str(shape));
  entries_.push_back(Entry{name, dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  add(name, DType::kF32, std::move(shape), std::move(b));
}

void SafetensorsWriter::add_bf16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_bf16(v[i]);
    std::memcpy(b.data() + i * 2, &h, 2);
  }
  add(name, DType::kBF16, std::move(shape), std::move(b));
}

void SafetensorsWriter::add_f16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_f16(v[i]);
    std::memcpy(b.data() + i * 2, &h, 2);
  }
  add(name, DType::kF16, std::move(shape), std::move(b));
}

void SafetensorsWriter::add_i32(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  add(name, DType::kI32, std::move(shape), std::move(b));
}

void SafetensorsWriter::add_i64(const std::string& name, std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  std::vector<uint8_t> b(v.size() * 8);
  std::memcpy(b.data(), v.data(), b.size());
  add(name, DType::kI64, std::move(shape), std::move(b));
}

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> n;
  for (const Entry& e : entries_) n.push_back(e.name);
  return n;
}

size_t SafetensorsWriter::total_bytes() const {
  size_t n = 0;
  for (const Entry& e : entries_) n += e.bytes.size();
  return n;
}

Status SafetensorsWriter::write(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  std::ofstream out(path, std::ios::binary);
  if (!out) return internal_error("cannot open '{}' for writing", path);
  uint8_t len[8];
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(h.data(), std::streamsize(h.size()));
  for (const Entry& e : entries_) out.write(reinterpret_cast<const char*>(e.bytes.data()), std::streamsize(e.bytes.size()));
  if (!out) return internal_error("write to '{}' failed", path);
  return Status::ok();
}

}  // namespace dsv4
