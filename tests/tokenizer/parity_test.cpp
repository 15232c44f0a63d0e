// parity_test.cpp: our tokenizer against HF `tokenizers` on the real DeepSeek-V4 tokenizer.json:
// identical ids on the committed goldens (tests/data/tokenizer/parity.jsonl, written by
// scripts/tokenizer/gen_tokenizer_goldens.py), decode(encode(x)) == x, and the published vectors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>

#include "tokenizer/test_util.h"

namespace dsv4::tok {
namespace {

using testing::v4_tokenizer;

struct Golden {
  std::string text;
  bool special;
  std::vector<TokenId> ids;
};

std::vector<Golden> load_goldens(nlohmann::json* header) {
  std::ifstream in(testing::test_data_path("parity.jsonl"));
  std::vector<Golden> goldens;
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (first) {
      *header = j;
      first = false;
      continue;
    }
    goldens.push_back({j["text"].get<std::string>(), j["special"].get<bool>(), j["ids"].get<std::vector<TokenId>>()});
  }
  return goldens;
}

std::string escape(const std::string& s) { return nlohmann::json(s).dump(); }

TEST(TokenizerParity, MatchesHfOnGoldens) {
  const Tokenizer* tok = v4_tokenizer();
  ASSERT_NE(tok, nullptr);
  nlohmann::json header;
  const std::vector<Golden> goldens = load_goldens(&header);
  ASSERT_GE(goldens.size(), 2000u) << "parity.jsonl missing or too small";
  int n_fail = 0;
  for (const Golden& g : goldens) {
    auto ids = tok->encode(g.text, g.special);
    ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
    if (ids.value() != g.ids) {
      if (++n_fail <= 10) {
        ADD_FAILURE() << "ids differ for " << escape(g.text) << " (special=" << g.special << ")\n  ours: "
                      << nlohmann::json(ids.value()).dump() << "\n  HF:   " << nlohmann::json(g.ids).dump();
      }
    }
    auto text = tok->decode(g.ids);
    ASSERT_TRUE(text.is_ok()) << text.status().to_string();
    EXPECT_EQ(text.value(), g.text) << "decode(encode(x)) != x for " << escape(g.text);
  }
  EXPECT_EQ(n_fail, 0) << "of " << goldens.size() << " golden strings";
}

// HF decode of random id sequences (many cut UTF-8 sequences apart): same U+FFFD placement.
TEST(TokenizerParity, DecodeMatchesHf) {
  const Tokenizer* tok = v4_tokenizer();
  ASSERT_NE(tok, nullptr);
  std::ifstream in(testing::test_data_path("decode.jsonl"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const auto ids = j["ids"].get<std::vector<TokenId>>();
    auto text = tok->decode(ids, j["skip_special"].get<bool>());
    ASSERT_TRUE(text.is_ok()) << text.status().to_string();
    EXPECT_EQ(text.value(), j["text"].get<std::string>()) << "ids " << j["ids"].dump();
    ++n;
  }
  EXPECT_GE(n, 100) << "missing tests/data/tokenizer/decode.jsonl";
}

// The two merge loops (scan for short pieces, heap for long ones) must agree on every piece.
TEST(TokenizerParity, MergeScanEqualsHeap) {
  const Tokenizer* tok = v4_tokenizer();
  ASSERT_NE(tok, nullptr);
  nlohmann::json header;
  BpeScratch scratch;
  std::mt19937 rng(11);
  int n_pieces = 0;
  for (const Golden& g : load_goldens(&header)) {
    RegexScratch regex_scratch;
    std::vector<Span> pieces;
    ASSERT_TRUE(tok->pre_tokenizer().split(g.text, regex_scratch, &pieces).is_ok());
    for (const Span& p : pieces) {
      const std::string_view piece = std::string_view(g.text).substr(p.begin, p.end - p.begin);
      std::vector<TokenId> scan, heap;
      tok->bpe().merge_piece(piece, false, scratch, &scan);
      tok->bpe().merge_piece(piece, true, scratch, &heap);
      ASSERT_EQ(scan, heap) << escape(std::string(piece));
      ++n_pieces;
    }
  }
  // Random byte strings, which give long runs of unusual merges.
  for (int round = 0; round < 300; ++round) {
    std::string bytes(1 + rng() % 200, '\0');
    for (char& b : bytes) b = static_cast<char>("ab \n\xE4\xB8\xAD" "e"[rng() % 8]);
    std::vector<TokenId> scan, heap;
    tok->bpe().merge_piece(bytes, false, scratch, &scan);
    tok->bpe().merge_piece(bytes, true, scratch, &heap);
    ASSERT_EQ(scan, heap);
  }
  EXPECT_GT(n_pieces, 10000);
}

TEST(TokenizerParity, PublishedVectors) {
  const Tokenizer* tok = v4_tokenizer();
  ASSERT_NE(tok, nullptr);
  auto ids = tok->encode("<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>", true);
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids.value(), (std::vector<TokenId>{128803, 30594, 128804, 128821, 36101, 128822, 7624, 1}));
  ids = tok->encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids.value(), (std::vector<TokenId>{19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223, 20,
                                               6113, 257, 76589, 131, 100, 76032, 1628, 76589, 131, 108, 76589,
                                               131, 98}));
  // Without parse_special, EOS is text; <｜User｜> is a non-special added token and still matches.
  ids = tok->encode("<｜User｜>x<｜end▁of▁sentence｜>", false);
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids.value().front(), 128803);
  EXPECT_GT(ids.value().size(), 3u);
  EXPECT_EQ(std::count(ids.value().begin(), ids.value().end(), 1), 0);
}

// One whitespace run of ~10 MB exhausted PCRE2's default match limit (10M steps a search: the
// pattern's \s*[\r\n]+ branch takes the run and gives it back a character at a time) and failed
// with an internal error; the limit now grows with the text. HF's Oniguruma fails on it too, so
// the expected tokens come from a shorter run: 12800 spaces are whole pieces of the longest
// space token, and 800 times the run is 800 times the pieces.
TEST(TokenizerParity, LongWhitespaceRunsTokenize) {
#if DSV4_SANITIZE_BUILD
  GTEST_SKIP() << "10 MB through the sanitized regex engine takes minutes";
#else
  const Tokenizer* tok = v4_tokenizer();
  auto short_ids = tok->encode(std::string(12'800, ' '), false);
  ASSERT_TRUE(short_ids.is_ok());
  const std::string text(800 * 12'800, ' ');
  auto ids = tok->encode(text, false);
  ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
  std::vector<TokenId> want;
  for (int i = 0; i < 800; ++i) want.insert(want.end(), short_ids->begin(), short_ids->end());
  EXPECT_EQ(*ids, want);
#endif
}

TEST(TokenizerParity, SpecialTokenIds) {
  const Tokenizer* tok = v4_tokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->n_ids(), 129280);
  const std::pair<const char*, TokenId> expected[] = {
      {"<｜begin▁of▁sentence｜>", 0}, {"<｜end▁of▁sentence｜>", 1}, {"<｜User｜>", 128803},
      {"<｜Assistant｜>", 128804},     {"<think>", 128821},          {"</think>", 128822},
      {"｜DSML｜", 128825},            {"<｜latest_reminder｜>", 128828}, {"<｜action｜>", 128829},
      {"<｜title｜>", 128836},         {"<｜read_url｜>", 128845},   {"<｜image｜>", 129279}};
  for (const auto& [content, id] : expected) {
    EXPECT_EQ(tok->added_token_id(content), std::optional<TokenId>(id)) << content;
  }
  EXPECT_TRUE(tok->is_special(1));
  EXPECT_FALSE(tok->is_special(128821));  // <think> is added but not special
  EXPECT_TRUE(tok->is_added(128821));
  EXPECT_FALSE(tok->is_valid(129280));
  EXPECT_FALSE(tok->decode(std::vector<TokenId>{5, 129280}).is_ok());
  auto skipped = tok->decode(std::vector<TokenId>{0, 128803, 30594, 1}, /*skip_special=*/true);
  ASSERT_TRUE(skipped.is_ok());
  EXPECT_EQ(skipped.value(), "<｜User｜>你好");
}

}  // namespace
}  // namespace dsv4::tok
