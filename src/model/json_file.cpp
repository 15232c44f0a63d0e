// json_file.cpp: see json_file.h.
#include "model/json_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/json_depth.h"

namespace dsv4 {

Result<std::string> read_json_text(const std::string& path, uintmax_t max_bytes, size_t max_depth) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec) return not_found("cannot open '{}': {}", path, ec.message());
  if (fs::is_directory(status)) return invalid_argument("'{}' is a directory, expected a JSON file", path);
  if (!fs::is_regular_file(status)) return invalid_argument("'{}' is not a regular file, expected a JSON file", path);
  const uintmax_t bytes = fs::file_size(path, ec);
  if (ec || bytes > max_bytes) return invalid_argument("'{}' has {} bytes (at most {})", path, bytes, max_bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open '{}'", path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (const size_t depth = json_nesting_depth(text); depth > max_depth)
    return invalid_argument("'{}' nests {} levels deep (at most {})", path, depth, max_depth);
  return text;
}

std::string short_json(const nlohmann::json& v) {
  return v.is_structured() ? std::string(v.type_name()) : v.dump();
}

}  // namespace dsv4
