// json_file.h: reading the JSON files of a checkpoint directory (config.json, the sharded index,
// tokenizer.json), which come from outside and are checked before they are parsed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace dsv4 {

// The text of `path`, refused unless it is a regular file (a directory throws out of the parser,
// a FIFO blocks the read forever) of at most max_bytes that nests at most max_depth levels
// (messages print parts of it, and printing recurses once a level: base/json_depth.h). Errors
// name the file; the caller parses and names its own expectations.
Result<std::string> read_json_text(const std::string& path, uintmax_t max_bytes, size_t max_depth);

// A JSON value for an error message: scalars as written, containers by their type only.
std::string short_json(const nlohmann::json& v);

}  // namespace dsv4
