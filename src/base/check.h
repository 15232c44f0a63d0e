// check.h: DSV4_CHECK for bugs and broken invariants: prints the expression, file, line and a
// formatted message, then aborts. Never use it for bad user input; return a Status instead.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace dsv4::detail {
[[noreturn]] inline void check_failed(const char* expr, const char* file, int line,
                                      const std::string& msg) {
  std::fprintf(stderr, "DSV4_CHECK failed: %s at %s:%d: %s\n", expr, file, line, msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace dsv4::detail

#define DSV4_CHECK(cond, ...)                                                               \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::dsv4::detail::check_failed(#cond, __FILE__, __LINE__, fmt::format("" __VA_ARGS__)); \
  } while (0)
