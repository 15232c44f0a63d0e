// detokenizer_test.cpp: streaming detokenization on the real V4 vocabulary: no piece ends inside
// a UTF-8 character, the pieces concatenate to decode(all ids) (also for id sequences that cut
// characters apart or contain invalid bytes), and tokens -> detokenizer -> OutputParser gives
// the same result as parsing the decoded text at once.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/detokenizer.h"
#include "tokenizer/output_parser.h"
#include "tokenizer/test_util.h"
#include "tokenizer/utf8.h"

namespace dsv4::tok {
namespace {

std::string stream(const Tokenizer& tok, const std::vector<TokenId>& ids, bool skip_special) {
  IncrementalDetokenizer detok(tok, skip_special);
  std::string all;
  for (TokenId id : ids) {
    std::string piece;
    EXPECT_TRUE(detok.push(id, &piece).is_ok());
    EXPECT_TRUE(utf8_valid(piece)) << "piece ends inside a character";
    all += piece;
  }
  std::string tail;
  detok.finish(&tail);
  EXPECT_EQ(detok.n_pending_bytes(), 0u);
  return all + tail;
}

TEST(Detokenizer, ConcatenationEqualsDecode) {
  const Tokenizer* tok = testing::v4_tokenizer();
  ASSERT_NE(tok, nullptr);
  const char* texts[] = {"Hello, 世界! 😀👨‍👩‍👧 café\n\tx", "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>",
                         "ĠÑĤÐ²ÑĬÑĢ 🏳️‍🌈 ١٢٣ 𝟘𝟙"};
  for (const char* text : texts) {
    auto ids = tok->encode(text, true);
    ASSERT_TRUE(ids.is_ok());
    EXPECT_EQ(stream(*tok, ids.value(), false), text);
    EXPECT_EQ(stream(*tok, ids.value(), true), tok->decode(ids.value(), true).value());
  }
  // Random ids, half of them single-byte tokens that split characters or are invalid UTF-8.
  std::mt19937 rng(3);
  std::vector<TokenId> byte_tokens;
  for (TokenId id = 0; id < 128000; ++id) {
    if (tok->token_bytes(id).size() == 1 && static_cast<unsigned char>(tok->token_bytes(id)[0]) >= 0x80) {
      byte_tokens.push_back(id);
    }
  }
  ASSERT_EQ(byte_tokens.size(), 128u);
  for (int round = 0; round < 500; ++round) {
    std::vector<TokenId> ids;
    for (int k = 0, n = 1 + rng() % 20; k < n; ++k) {
      ids.push_back(rng() % 2 ? byte_tokens[rng() % byte_tokens.size()] : static_cast<TokenId>(rng() % tok->n_ids()));
    }
    const bool skip = round % 3 == 0;
    EXPECT_EQ(stream(*tok, ids, skip), tok->decode(ids, skip).value());
  }
}

TEST(Detokenizer, HoldsBackPartialCharacters) {
  const Tokenizer* tok = testing::v4_tokenizer();
  ASSERT_NE(tok, nullptr);
  // "😀" is 4 bytes; feed it as byte tokens one at a time.
  const std::string emoji = "😀";
  IncrementalDetokenizer detok(*tok);
  std::string out;
  for (size_t i = 0; i < emoji.size(); ++i) {
    TokenId byte_id = -1;
    for (TokenId id = 0; id < 128000 && byte_id < 0; ++id) {
      if (tok->token_bytes(id) == emoji.substr(i, 1)) byte_id = id;
    }
    ASSERT_GE(byte_id, 0);
    ASSERT_TRUE(detok.push(byte_id, &out).is_ok());
    EXPECT_EQ(out.empty(), i + 1 < emoji.size());
  }
  EXPECT_EQ(out, emoji);
  EXPECT_FALSE(detok.push(129280, &out).is_ok());
  // An unfinished character at the end becomes U+FFFD.
  IncrementalDetokenizer cut(*tok);
  std::string piece;
  for (TokenId id = 0; id < 128000; ++id) {
    if (tok->token_bytes(id) == "\xF0") {
      ASSERT_TRUE(cut.push(id, &piece).is_ok());
      break;
    }
  }
  EXPECT_EQ(piece, "");
  cut.finish(&piece);
  EXPECT_EQ(piece, "\xEF\xBF\xBD");
}

// The server's path: generated ids -> text pieces -> reasoning/content/tool calls.
TEST(Detokenizer, StreamsIntoOutputParser) {
  const Tokenizer* tok = testing::v4_tokenizer();
  ASSERT_NE(tok, nullptr);
  const std::string completion =
      "用户问天气。\nI should call the tool.</think>好的 😀\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">北京 \"Beijing\"\n</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"days\" string=\"false\">[1, 2]</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls><｜end▁of▁sentence｜>";
  auto ids = tok->encode(completion, true);
  ASSERT_TRUE(ids.is_ok());
  auto whole = parse_output(completion, ThinkingMode::kThinking);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  EXPECT_EQ(whole->reasoning, "用户问天气。\nI should call the tool.");
  EXPECT_EQ(whole->content, "好的 😀");
  ASSERT_EQ(whole->tool_calls.size(), 1u);
  EXPECT_EQ(whole->tool_calls[0].arguments, "{\"city\": \"北京 \\\"Beijing\\\"\\n\", \"days\": [1, 2]}");

  IncrementalDetokenizer detok(*tok);
  OutputParser parser(ThinkingMode::kThinking);
  OutputDelta all;
  for (TokenId id : ids.value()) {
    std::string text;
    ASSERT_TRUE(detok.push(id, &text).is_ok());
    ASSERT_TRUE(parser.feed(text, &all).is_ok());
  }
  std::string tail;
  detok.finish(&tail);
  ASSERT_TRUE(parser.feed(tail, &all).is_ok());
  ASSERT_TRUE(parser.finish(&all).is_ok());
  EXPECT_EQ(all.reasoning, whole->reasoning);
  EXPECT_EQ(all.content, whole->content);
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].name, "get_weather");
  EXPECT_EQ(all.tool_calls[0].arguments, whole->tool_calls[0].arguments);
  EXPECT_EQ(parser.state(), OutputState::kDone);
}

}  // namespace
}  // namespace dsv4::tok
