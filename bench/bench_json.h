// bench_json.h: how the benchmark programs write their result file (bench/results/*.json): the
// JSON with one space of indent, a final newline, and a clear message when the file cannot be
// written (the run's numbers are still on stdout).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace dsv4::bench {

// False (after a message on stderr naming `program` and the path) when `path` cannot be written.
inline bool write_json(const std::string& path, const nlohmann::json& j, const char* program) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "%s: cannot write %s\n", program, path.c_str());
    return false;
  }
  const std::string text = j.dump(1) + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    std::fprintf(stderr, "%s: writing %s failed\n", program, path.c_str());
    return false;
  }
  std::printf("wrote %s\n", path.c_str());
  return true;
}

}  // namespace dsv4::bench
