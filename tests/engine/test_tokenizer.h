// test_tokenizer.h: the real DeepSeek-V4 tokenizer for engine tests (scripts/setup.sh fetches it).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace dsv4::testing_util {

inline const tok::Tokenizer* v4_tokenizer() {
  static std::unique_ptr<tok::Tokenizer> t = [] {
    auto r = tok::Tokenizer::load(std::string(DSV4_SOURCE_DIR) + "/third_party/tokenizer/tokenizer.json");
    if (!r.is_ok()) return std::unique_ptr<tok::Tokenizer>();
    return std::make_unique<tok::Tokenizer>(std::move(r).value());
  }();
  return t.get();
}

}  // namespace dsv4::testing_util

#define DSV4_REQUIRE_TOKENIZER()                                                                \
  ASSERT_NE(::dsv4::testing_util::v4_tokenizer(), nullptr)                                       \
      << "third_party/tokenizer/tokenizer.json is missing: run scripts/setup.sh"
