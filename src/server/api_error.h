// api_error.h: an OpenAI error answer ({"error": {message, type, param, code}}) with its HTTP
// status. Request parsing returns one instead of a Status so the client learns which field was
// wrong (param) and, for over-long prompts, the code "context_length_exceeded".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace dsv4::server {

struct ApiError {
  int status = 0;  // 0: no error
  std::string type;
  std::string message;
  std::string param;  // "" -> null
  std::string code;   // "" -> null

  bool ok() const { return status == 0; }
  nlohmann::ordered_json to_json() const;
  std::string body() const;  // to_json() serialized
};

ApiError bad_request(std::string message, std::string param = "", std::string code = "");
ApiError not_found_error(std::string message, std::string code = "");
ApiError unavailable(std::string message);   // 503 (send Retry-After)
ApiError server_error(std::string message);  // 500
// An engine Status: kInvalidArgument -> 400, kOutOfRange -> 400 context_length_exceeded,
// kResourceExhausted -> 503, kNotFound -> 404, kUnimplemented -> 400, others -> 500.
ApiError from_status(const Status& st, const std::string& param = "");

// Serializes JSON for the wire: compact, invalid UTF-8 replaced instead of throwing.
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace dsv4::server
