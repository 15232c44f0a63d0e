// api_error.cpp: see api_error.h.
#include "server/api_error.h"

namespace dsv4::server {

nlohmann::ordered_json ApiError::to_json() const {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param);
  e["code"] = code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(code);
  nlohmann::ordered_json j;
  j["error"] = std::move(e);
  return j;
}

std::string ApiError::body() const { return dump_json(to_json()); }

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{400, "invalid_request_error", std::move(message), std::move(param), std::move(code)};
}

ApiError not_found_error(std::string message, std::string code) {
  return ApiError{404, "not_found_error", std::move(message), "", std::move(code)};
}

ApiError unavailable(std::string message) {
  return ApiError{503, "service_unavailable_error", std::move(message), "", ""};
}

ApiError server_error(std::string message) { return ApiError{500, "server_error", std::move(message), "", ""}; }

ApiError from_status(const Status& st, const std::string& param) {
  switch (st.code()) {
    case StatusCode::kOk: return ApiError{};
    case StatusCode::kInvalidArgument: return bad_request(st.message(), param);
    case StatusCode::kUnimplemented: return bad_request(st.message(), param);
    case StatusCode::kOutOfRange: return bad_request(st.message(), "messages", "context_length_exceeded");
    case StatusCode::kResourceExhausted: return unavailable(st.message());
    case StatusCode::kNotFound: return not_found_error(st.message());
    case StatusCode::kInternal: return server_error(st.message());
  }
  return server_error(st.message());
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace dsv4::server
