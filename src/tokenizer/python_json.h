// python_json.h: JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it
// (", " and ": " separators, keys in their original order, repr() floats). DeepSeek's prompt
// encoder embeds tool schemas and arguments this way, so the bytes must match.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::tok {

std::string python_json_dumps(const nlohmann::ordered_json& value);
void python_json_dumps_append(const nlohmann::ordered_json& value, std::string* out);
// A JSON string literal for `s` (valid UTF-8), as json.dumps(s, ensure_ascii=False).
void python_json_string_append(std::string_view s, std::string* out);
// Python's repr() of a float (shortest round-trip digits, exponent form outside [1e-4, 1e16)).
std::string python_float_repr(double v);

}  // namespace dsv4::tok
