// json_fields.cpp: see json_fields.h.
#include "server/json_fields.h"

#include <fmt/format.h>

#include <cmath>

namespace dsv4::server {

std::string json_kind(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::binary: return "binary data";
    case Json::value_t::discarded: return "invalid JSON";
  }
  return "?";
}

const Json* FieldReader::get(const char* key) const {
  if (!obj_.is_object()) return nullptr;
  const auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool FieldReader::has(const char* key) const { return get(key) != nullptr; }

void FieldReader::fail(const char* key, std::string message) {
  if (err_->ok()) *err_ = bad_request(std::move(message), prefix_ + key);
}

bool FieldReader::str(const char* key, std::string* out) {
  if (!ok()) return false;
  const Json* v = get(key);
  if (v == nullptr) return true;
  if (!v->is_string()) {
    fail(key, fmt::format("'{}{}' must be a string, found {}", prefix_, key, json_kind(*v)));
    return false;
  }
  *out = v->get<std::string>();
  return true;
}

bool FieldReader::boolean(const char* key, bool* out) {
  if (!ok()) return false;
  const Json* v = get(key);
  if (v == nullptr) return true;
  if (!v->is_boolean()) {
    fail(key, fmt::format("'{}{}' must be true or false, found {}", prefix_, key, json_kind(*v)));
    return false;
  }
  *out = v->get<bool>();
  return true;
}

bool FieldReader::number(const char* key, double* out, double lo, double hi) {
  if (!ok()) return false;
  const Json* v = get(key);
  if (v == nullptr) return true;
  if (!v->is_number()) {
    fail(key, fmt::format("'{}{}' must be a number, found {}", prefix_, key, json_kind(*v)));
    return false;
  }
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    fail(key, fmt::format("'{}{}' must be in [{}, {}], found {}", prefix_, key, lo, hi, d));
    return false;
  }
  *out = d;
  return true;
}

bool FieldReader::integer(const char* key, int64_t* out, int64_t lo, int64_t hi) {
  if (!ok()) return false;
  const Json* v = get(key);
  if (v == nullptr) return true;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > uint64_t(hi)) {
      fail(key, fmt::format("'{}{}' must be in [{}, {}], found {}", prefix_, key, lo, hi, u));
      return false;
    }
    x = int64_t(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) {
    // 100.0 is an integer to JavaScript clients; so is 1e30, or a literal too long for 64 bits
    // (which nlohmann stores as a double): those are out of range, not "not an integer".
    const double d = v->get<double>();
    if (std::fabs(d) >= 9e15) {
      fail(key, fmt::format("'{}{}' must be in [{}, {}], found {}", prefix_, key, lo, hi, d));
      return false;
    }
    x = int64_t(d);
  } else {
    fail(key, fmt::format("'{}{}' must be an integer, found {}", prefix_, key, json_kind(*v)));
    return false;
  }
  if (x < lo || x > hi) {
    fail(key, fmt::format("'{}{}' must be in [{}, {}], found {}", prefix_, key, lo, hi, x));
    return false;
  }
  *out = x;
  return true;
}

bool FieldReader::str_list(const char* key, std::vector<std::string>* out, size_t max_items) {
  if (!ok()) return false;
  const Json* v = get(key);
  if (v == nullptr) return true;
  out->clear();
  if (v->is_string()) {
    out->push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const Json& e : *v) {
      if (!e.is_string()) {
        fail(key, fmt::format("'{}{}' must be a string or an array of strings, found an array holding {}", prefix_,
                              key, json_kind(e)));
        return false;
      }
      out->push_back(e.get<std::string>());
    }
  } else {
    fail(key, fmt::format("'{}{}' must be a string or an array of strings, found {}", prefix_, key, json_kind(*v)));
    return false;
  }
  if (out->size() > max_items) {
    fail(key, fmt::format("'{}{}' has {} entries; at most {} are allowed", prefix_, key, out->size(), max_items));
    return false;
  }
  return true;
}

bool FieldReader::int_list(const char* key, std::vector<int32_t>* out, int64_t lo, int64_t hi, size_t max_items) {
  if (!ok()) return false;
  const Json* v = get(key);
  if (v == nullptr) return true;
  if (!v->is_array()) {
    fail(key, fmt::format("'{}{}' must be an array of integers, found {}", prefix_, key, json_kind(*v)));
    return false;
  }
  if (v->size() > max_items) {
    fail(key, fmt::format("'{}{}' has {} entries; at most {} are allowed", prefix_, key, v->size(), max_items));
    return false;
  }
  out->clear();
  for (const Json& e : *v) {
    if (!e.is_number_integer() || e.get<int64_t>() < lo || e.get<int64_t>() > hi) {
      fail(key, fmt::format("'{}{}' must hold integers in [{}, {}], found {}", prefix_, key, lo, hi, dump_json(e)));
      return false;
    }
    out->push_back(int32_t(e.get<int64_t>()));
  }
  return true;
}

const Json* FieldReader::object(const char* key) {
  if (!ok()) return nullptr;
  const Json* v = get(key);
  if (v == nullptr) return nullptr;
  if (!v->is_object()) {
    fail(key, fmt::format("'{}{}' must be an object, found {}", prefix_, key, json_kind(*v)));
    return nullptr;
  }
  return v;
}

const Json* FieldReader::array(const char* key) {
  if (!ok()) return nullptr;
  const Json* v = get(key);
  if (v == nullptr) return nullptr;
  if (!v->is_array()) {
    fail(key, fmt::format("'{}{}' must be an array, found {}", prefix_, key, json_kind(*v)));
    return nullptr;
  }
  return v;
}

}  // namespace dsv4::server
