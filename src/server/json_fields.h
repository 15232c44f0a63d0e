// json_fields.h: typed, explicit reads of optional request fields. nlohmann's value() throws on a
// type mismatch (a 500 where a 400 belongs), so every field goes through here: absent or null
// leaves the default, a wrong type or range is an ApiError naming the field, what was expected
// and what was found.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace dsv4::server {

using Json = nlohmann::ordered_json;

// "a string", "an integer", "an object", ... for messages.
std::string json_kind(const Json& v);

class FieldReader {
 public:
  // `prefix` names the enclosing object in messages ("" at top level, e.g. "stream_options.").
  FieldReader(const Json& obj, ApiError* err, std::string prefix = "")
      : obj_(obj), err_(err), prefix_(std::move(prefix)) {}

  bool has(const char* key) const;  // present and not null
  // Each returns false once an error is recorded (then *err is set); true otherwise.
  bool str(const char* key, std::string* out);
  bool boolean(const char* key, bool* out);
  bool number(const char* key, double* out, double lo, double hi);
  bool integer(const char* key, int64_t* out, int64_t lo, int64_t hi);
  // A string or an array of strings (OpenAI's "stop").
  bool str_list(const char* key, std::vector<std::string>* out, size_t max_items);
  bool int_list(const char* key, std::vector<int32_t>* out, int64_t lo, int64_t hi, size_t max_items);
  const Json* object(const char* key);  // null when absent; error when not an object
  const Json* array(const char* key);   // null when absent; error when not an array
  bool ok() const { return err_->ok(); }
  void fail(const char* key, std::string message);

 private:
  const Json* get(const char* key) const;
  const Json& obj_;
  ApiError* err_;
  std::string prefix_;
};

}  // namespace dsv4::server
