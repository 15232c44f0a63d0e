// test_util.h: shared helpers for the tokenizer tests: where the real V4 tokenizer.json lives
// and loading it once per test binary. A missing file is a failure, not a skip: scripts/setup.sh
// always fetches it (scripts/fetch_tokenizer.sh).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

namespace dsv4::tok::testing {

inline std::string v4_tokenizer_path() { return std::string(DSV4_SOURCE_DIR) + "/third_party/tokenizer/tokenizer.json"; }
inline std::string test_data_path(const std::string& name) {
  return std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/" + name;
}

// The real V4 tokenizer, loaded once. Fails the calling test when the file is absent.
inline const Tokenizer* v4_tokenizer() {
  static const Result<Tokenizer>* loaded = new Result<Tokenizer>(Tokenizer::load(v4_tokenizer_path()));
  if (!loaded->is_ok()) {
    ADD_FAILURE() << "cannot load the DeepSeek-V4 tokenizer (run scripts/fetch_tokenizer.sh): "
                  << loaded->status().to_string();
    return nullptr;
  }
  return &loaded->value();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace dsv4::tok::testing
