// python_json.cpp: the json.dumps emulation. Floats use std::to_chars for the shortest
// round-trip digits, then Python's layout rules (float_repr_style 'short').
#include "tokenizer/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace dsv4::tok {

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "NaN";  // json.dumps spellings (allow_nan=True)
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string_view sci(buf, res.ptr - buf);  // [-]d[.ddd]e[+-]XX
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    i = 1;
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e_pos; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  const int decpt = exponent + 1;  // value = 0.DIGITS x 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on the chained operator+.
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt < n) {
      out.append(digits, 0, static_cast<size_t>(decpt));
      out += '.';
      out.append(digits, static_cast<size_t>(decpt));
    } else {
      out += digits;
      out.append(static_cast<size_t>(decpt - n), '0');
      out += ".0";
    }
  } else {
    out += digits[0];
    if (n > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  return out;
}

void python_json_string_append(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          *out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void python_json_dumps_append(const nlohmann::ordered_json& v, std::string* out) {
  using Type = nlohmann::ordered_json::value_t;
  switch (v.type()) {
    case Type::null: *out += "null"; break;
    case Type::boolean: *out += v.get<bool>() ? "true" : "false"; break;
    case Type::number_integer: *out += std::to_string(v.get<int64_t>()); break;
    case Type::number_unsigned: *out += std::to_string(v.get<uint64_t>()); break;
    case Type::number_float: *out += python_float_repr(v.get<double>()); break;
    case Type::string: python_json_string_append(v.get_ref<const std::string&>(), out); break;
    case Type::array: {
      out->push_back('[');
      bool first = true;
      for (const auto& item : v) {
        if (!first) *out += ", ";
        first = false;
        python_json_dumps_append(item, out);
      }
      out->push_back(']');
      break;
    }
    case Type::object: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) *out += ", ";
        first = false;
        python_json_string_append(key, out);
        *out += ": ";
        python_json_dumps_append(item, out);
      }
      out->push_back('}');
      break;
    }
    case Type::binary:
    case Type::discarded: *out += "null"; break;
  }
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  python_json_dumps_append(value, &out);
  return out;
}

}  // namespace dsv4::tok
