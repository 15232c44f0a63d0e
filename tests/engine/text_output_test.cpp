// text_output_test.cpp: stop strings on detokenized text: matches across token boundaries, the
// earliest match wins, partial matches are held back and released when they fail or the stream
// ends, nothing after a stop is released, and multi-byte characters never split; and a
// randomized comparison with a plain reference on stop strings that overlap themselves, prefix
// one another, are multi-byte or U+FFFD, over tokens that split characters.
#include <gtest/gtest.h>

#include <random>

#include "engine/text_output.h"
#include "test_tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4::engine_detail {
namespace {

using testing_util::v4_tokenizer;

struct StopRun {
  std::vector<std::string> pieces;  // released per token
  std::string text;                 // all released
  std::string matched;
  bool stopped = false;
  size_t stopped_at = 0;            // index of the token that completed the stop
};

StopRun run(const std::string& input, std::vector<std::string> stops, bool flush = true) {
  const tok::Tokenizer& t = *v4_tokenizer();
  auto ids = t.encode(input, false);
  EXPECT_TRUE(ids.is_ok());
  TextOutput out(&t, true, std::move(stops));
  StopRun r;
  for (size_t i = 0; i < ids->size(); ++i) {
    std::string piece;
    r.stopped = out.push((*ids)[i], &piece, &r.matched);
    r.pieces.push_back(piece);
    r.text += piece;
    if (r.stopped) {
      r.stopped_at = i;
      return r;
    }
  }
  if (flush) {
    std::string tail;
    out.flush(&tail);
    r.pieces.push_back(tail);
    r.text += tail;
  }
  return r;
}

TEST(TextOutput, NoStopsReleasesEverything) {
  DSV4_REQUIRE_TOKENIZER();
  const StopRun r = run("Hello, wörld! 你好", {});
  EXPECT_EQ(r.text, "Hello, wörld! 你好");
  EXPECT_FALSE(r.stopped);
}

TEST(TextOutput, StopAcrossTokensCutsBeforeIt) {
  DSV4_REQUIRE_TOKENIZER();
  const StopRun r = run("one two three four five", {"hree fo"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "hree fo");
  EXPECT_EQ(r.text, "one two t");
  // Nothing of the stop string was ever released.
  for (const std::string& p : r.pieces) EXPECT_EQ(p.find("hree"), std::string::npos) << p;
}

TEST(TextOutput, EarliestMatchWins) {
  DSV4_REQUIRE_TOKENIZER();
  const StopRun r = run("alpha beta gamma delta", {"delta", "beta", "gamma"});
  EXPECT_EQ(r.matched, "beta");
  EXPECT_EQ(r.text, "alpha ");
}

TEST(TextOutput, PartialMatchIsHeldThenReleased) {
  DSV4_REQUIRE_TOKENIZER();
  // "fiv" looks like the start of "five!" until "e?" arrives.
  const StopRun r = run("one fiv e? two", {"five!"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, "one fiv e? two");
  // A partial match still open at the end of the stream is released by flush.
  const StopRun tail = run("count to fi", {"five"}, /*flush=*/true);
  EXPECT_EQ(tail.text, "count to fi");
  EXPECT_EQ(tail.pieces.back(), "fi");  // held back until the end
}

TEST(TextOutput, MultiByteStopsAndText) {
  DSV4_REQUIRE_TOKENIZER();
  const StopRun r = run("前面的文字。结束吧后面", {"结束"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "前面的文字。");
  const StopRun e = run("emoji 🙂 then stop here", {"stop"});
  EXPECT_EQ(e.text, "emoji 🙂 then ");
}

// Reference: after each token, the text decoded so far (an incomplete character at the end not
// yet decoded); the first token whose text contains a stop string ends the output right before
// the earliest one. Without a stop, the whole decode.
TEST(TextOutput, RandomTokensAndStopsMatchAReference) {
  DSV4_REQUIRE_TOKENIZER();
  const tok::Tokenizer& t = *v4_tokenizer();
  std::vector<int32_t> alphabet;
  for (const char* piece : {"a", "b", "ab", "ba", "bb", "é", "<｜end▁of▁sentence｜>", "</think>", " ", "\n"}) {
    const auto ids = t.encode(piece, /*parse_special=*/true);
    ASSERT_EQ(ids->size(), 1u) << piece;
    alphabet.push_back(ids->front());
  }
  for (int32_t id = 0; id < 128000; ++id) {  // pieces of "é" (C3 A9) and "😀" (F0 9F 98 80)
    const std::string_view b = t.token_bytes(id);
    if (b == "\xC3" || b == "\xA9" || b == "\xF0" || b == "\x9F" || b == "\x98" || b == "\x80") alphabet.push_back(id);
  }
  ASSERT_EQ(alphabet.size(), 16u);
  const char* stop_parts[] = {"a", "b", "é", "\xEF\xBF\xBD", " ", "\n"};
  std::mt19937 rng(11);
  int failures = 0;
  for (int round = 0; round < 20000 && failures < 5; ++round) {
    std::vector<int32_t> ids;
    for (int k = 0, n = 1 + rng() % 12; k < n; ++k) ids.push_back(alphabet[rng() % alphabet.size()]);
    std::vector<std::string> stops;
    for (int k = 0, n = 1 + rng() % 3; k < n; ++k) {
      std::string s;
      for (int j = 0, m = 1 + rng() % 3; j < m; ++j) s += stop_parts[rng() % (rng() % 4 == 0 ? 6 : 3)];
      stops.push_back(s);
    }
    const bool skip = rng() % 2;

    std::string expect, bytes;
    bool expect_stop = false;
    for (size_t i = 0; i < ids.size() && !expect_stop; ++i) {
      if (!(skip && t.is_special(ids[i]))) bytes += t.token_bytes(ids[i]);
      std::string text;
      tok::utf8_lossy_append(bytes.data(), bytes.size(), /*final=*/false, &text);
      size_t first = std::string::npos;
      for (const std::string& s : stops) first = std::min(first, text.find(s));
      if (first != std::string::npos) {
        expect = text.substr(0, first);
        expect_stop = true;
      }
    }
    if (!expect_stop) tok::utf8_lossy_append(bytes.data(), bytes.size(), /*final=*/true, &expect);

    TextOutput out(&t, skip, stops);
    std::string got, matched;
    bool stopped = false;
    for (int32_t id : ids) {
      std::string piece;
      stopped = out.push(id, &piece, &matched);
      EXPECT_TRUE(tok::utf8_valid(piece));
      got += piece;
      if (stopped) break;
    }
    if (!stopped) out.flush(&got);
    if (got != expect || stopped != expect_stop ||
        (stopped && std::find(stops.begin(), stops.end(), matched) == stops.end())) {
      ++failures;
      std::string desc;
      for (const std::string& s : stops) desc += "[" + s + "] ";
      ADD_FAILURE() << "round " << round << " stops " << desc << "skip " << skip << ": got [" << got << "] stopped "
                    << stopped << ", expected [" << expect << "] stopped " << expect_stop;
    }
  }
}

TEST(TextOutput, NoTokenizerNoText) {
  TextOutput out(nullptr, true, {});
  std::string piece, matched;
  EXPECT_FALSE(out.push(5, &piece, &matched));
  out.flush(&piece);
  EXPECT_EQ(piece, "");
}

}  // namespace
}  // namespace dsv4::engine_detail
