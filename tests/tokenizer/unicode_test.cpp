// unicode_test.cpp: UTF-8 helpers (lossy decoding like Rust's from_utf8_lossy, streaming-safe),
// the ByteLevel alphabet, and the Oniguruma -> PCRE2 regex translation, checked on every code
// point against what HF tokenizers matches (tests/data/tokenizer/unicode_props.json).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>

#include "tokenizer/onig_compat.h"
#include "tokenizer/regex.h"
#include "tokenizer/test_util.h"
#include "tokenizer/utf8.h"

namespace dsv4::tok {
namespace {

std::string lossy(std::string_view s) {
  std::string out;
  EXPECT_EQ(utf8_lossy_append(s.data(), s.size(), true, &out), s.size());
  return out;
}

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, LossyMatchesMaximalSubpartRule) {
  EXPECT_EQ(lossy("abc"), "abc");
  EXPECT_EQ(lossy("é中😀"), "é中😀");
  EXPECT_EQ(lossy("\x80"), kFffd);
  EXPECT_EQ(lossy("a\xC3"), "a" + kFffd);                      // truncated 2-byte sequence
  EXPECT_EQ(lossy("\xE4\xB8"), kFffd);                         // one U+FFFD for a maximal subpart
  EXPECT_EQ(lossy("\xE4\xB8x"), kFffd + "x");
  EXPECT_EQ(lossy("\xF0\x9F\x98"), kFffd);
  EXPECT_EQ(lossy("\xC0\xAF"), kFffd + kFffd);                 // overlong lead: each byte alone
  EXPECT_EQ(lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);     // surrogate: lead fails on 2nd byte
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  EXPECT_EQ(lossy("\xE0\x80"), kFffd + kFffd);
  EXPECT_EQ(lossy("\xF5"), kFffd);
}

TEST(Utf8, StreamingLossyEqualsOneShot) {
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a", "é", "中", "😀", "\x80", "\xC3", "\xE4\xB8", "\xF0\x9F", "\xFF", "\xED\xA0"};
  for (int round = 0; round < 2000; ++round) {
    std::string bytes;
    const int n = 1 + rng() % 12;
    for (int i = 0; i < n; ++i) bytes += alphabet[rng() % std::size(alphabet)];
    // Feed in random chunks, keeping undecoded bytes, as the incremental detokenizer does.
    std::string streamed, pending;
    size_t pos = 0;
    while (pos < bytes.size()) {
      const size_t take = 1 + rng() % 4;
      pending += bytes.substr(pos, take);
      pos += take;
      const size_t used = utf8_lossy_append(pending.data(), pending.size(), false, &streamed);
      pending.erase(0, used);
      ASSERT_TRUE(utf8_valid(streamed));
    }
    utf8_lossy_append(pending.data(), pending.size(), true, &streamed);
    EXPECT_EQ(streamed, lossy(bytes));
  }
}

TEST(Utf8, Validation) {
  EXPECT_TRUE(utf8_valid("hello 你好 😀"));
  EXPECT_EQ(utf8_valid_prefix("ab\xC3"), 2u);
  EXPECT_EQ(utf8_valid_prefix("ab\xED\xA0\x80"), 2u);
  EXPECT_FALSE(utf8_valid("\xC0\x80"));
}

TEST(ByteLevel, AlphabetRoundTrips) {
  const ByteLevelAlphabet& a = byte_level_alphabet();
  EXPECT_EQ(a.byte_to_char[' '], U'Ġ');
  EXPECT_EQ(a.byte_to_char['\n'], U'Ċ');
  EXPECT_EQ(a.byte_to_char['a'], U'a');
  EXPECT_EQ(a.byte_to_char[0xAD], 0x143u);  // the last remapped byte
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(a.decode(a.encode(all), &back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(a.decode("｜", &back));  // not in the alphabet
}

TEST(OnigCompat, RewritesPropertiesAndWhitespace) {
  auto r = onig_to_pcre2("\\p{N}{1,3}");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value().rfind("[\\p{N}\\x{10D40}-\\x{10D49}", 0), 0u) << r.value();
  EXPECT_NE(r.value().find("]{1,3}"), std::string::npos);
  r = onig_to_pcre2("[^\\r\\n\\p{L}]");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value().rfind("[^\\r\\n\\p{L}\\x{1C89}-\\x{1C8A}", 0), 0u) << r.value();
  r = onig_to_pcre2("\\s+(?!\\S)");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value().find("\\s"), std::string::npos);
  EXPECT_EQ(r.value().find("\\S"), std::string::npos);
  r = onig_to_pcre2("[]a\\]]\\p{Lu}\\x{41}");  // literal ']' first in a class; other properties untouched
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value(), "[]a\\]]\\p{Lu}\\x{41}");
  EXPECT_FALSE(onig_to_pcre2("[\\S]").is_ok());
  EXPECT_FALSE(onig_to_pcre2("[\\P{L}]").is_ok());
  EXPECT_FALSE(onig_to_pcre2("[abc").is_ok());
}

// Every code point, every pattern: PCRE2 (after translation) must match exactly what HF does.
TEST(OnigCompat, MatchesHfOnEveryCodePoint) {
  const std::string text = testing::read_file(testing::test_data_path("unicode_props.json"));
  ASSERT_FALSE(text.empty()) << "missing tests/data/tokenizer/unicode_props.json";
  const auto j = nlohmann::json::parse(text);
  ASSERT_GE(j["patterns"].size(), 6u);
  RegexScratch scratch;
  for (const auto& entry : j["patterns"]) {
    const std::string pattern = entry["pattern"];
    auto regex = Regex::compile(pattern, false);
    ASSERT_TRUE(regex.is_ok()) << regex.status().to_string();
    std::vector<bool> expected(0x110000, false);
    for (const auto& r : entry["ranges"]) {
      for (uint32_t c = r[0].get<uint32_t>(); c <= r[1].get<uint32_t>(); ++c) expected[c] = true;
    }
    std::string only_hf, only_ours;
    for (uint32_t c = 0; c < 0x110000; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      std::string s;
      utf8_append(c, &s);
      size_t b, e;
      const bool ours = regex->find(s.data(), s.size(), 0, scratch, &b, &e) == 1;
      if (ours != expected[c]) (ours ? only_ours : only_hf) += fmt::format(" {:X}", c);
    }
    EXPECT_TRUE(only_hf.empty() && only_ours.empty())
        << "pattern " << pattern << ": matched only by HF:" << only_hf.substr(0, 2000)
        << "\nmatched only by us:" << only_ours.substr(0, 2000)
        << "\n(update the ranges in src/tokenizer/onig_compat.cpp)";
  }
}

}  // namespace
}  // namespace dsv4::tok
