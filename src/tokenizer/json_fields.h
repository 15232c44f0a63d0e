// json_fields.h: typed reads of tokenizer.json fields. nlohmann's value(key, default) throws
// type_error when the section is not an object or the field has another type, which aborted the
// CLI on a malformed file; these answer "" / the default, or an error naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "base/status.h"

namespace dsv4::tok {

// The "type" of a section, or "" when the section is not an object or its type is not a string.
inline std::string section_type(const nlohmann::json& section) {
  if (!section.is_object()) return "";
  const auto it = section.find("type");
  return it != section.end() && it->is_string() ? it->get<std::string>() : "";
}

// An optional boolean field of `obj`: `dflt` when absent or null, an error when of another type.
inline Result<bool> bool_field(const nlohmann::json& obj, const char* key, bool dflt, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return invalid_argument("{}: \"{}\" must be a boolean, found {}", where, key, it->dump());
  return it->get<bool>();
}

// An optional string field of `obj`: `dflt` when absent or null, an error when of another type.
inline Result<std::string> string_field(const nlohmann::json& obj, const char* key, const std::string& dflt,
                                        const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_string()) return invalid_argument("{}: \"{}\" must be a string, found {}", where, key, it->dump());
  return it->get<std::string>();
}

}  // namespace dsv4::tok
