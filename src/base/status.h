// status.h: Status and Result<T>, the error type of every fallible call that can fail on bad input
// (malformed checkpoint, bad request, out of resources). Bugs and broken invariants use DSV4_CHECK
// (check.h) instead. No exception crosses a module boundary.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>

namespace dsv4 {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller's input is wrong (bad JSON, wrong shape, unknown name)
  kNotFound,          // a file, tensor or model does not exist
  kOutOfRange,        // offsets past the end, prompt longer than the context
  kResourceExhausted, // out of KV blocks, memory
  kUnimplemented,     // a valid input we do not support (yet)
  kInternal,          // I/O errors and other failures that are not the caller's fault
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

  // Prefixes the message with context, e.g. the file name, keeping the code.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status out_of_range(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kOutOfRange, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status unimplemented(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnimplemented, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status internal_error(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInternal, fmt::format(f, std::forward<Args>(args)...));
}

// Result<T>: a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}
  Result(Status status) : status_(std::move(status)) {}

  bool is_ok() const { return status_.is_ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace dsv4

// Returns early with the Status of `expr` if it is not ok.
#define DSV4_RETURN_IF_ERROR(expr)          \
  do {                                      \
    ::dsv4::Status dsv4_status_ = (expr);   \
    if (!dsv4_status_.is_ok()) return dsv4_status_; \
  } while (0)

#define DSV4_CONCAT_INNER_(a, b) a##b
#define DSV4_CONCAT_(a, b) DSV4_CONCAT_INNER_(a, b)
// Declares `lhs` from a Result, returning its Status early on error.
#define DSV4_ASSIGN_OR_RETURN(lhs, expr)                                  \
  auto DSV4_CONCAT_(dsv4_result_, __LINE__) = (expr);                     \
  if (!DSV4_CONCAT_(dsv4_result_, __LINE__).is_ok())                      \
    return DSV4_CONCAT_(dsv4_result_, __LINE__).status();                 \
  lhs = std::move(DSV4_CONCAT_(dsv4_result_, __LINE__)).value()
