// text_output_test.cpp: stop strings on detokenized text: matches across token boundaries, the
// earliest match wins, partial matches are held back and released when they fail or the stream
// ends, nothing after a stop is released, and multi-byte characters never split.
#include <gtest/gtest.h>

#include "engine/text_output.h"
#include "test_tokenizer.h"

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

TEST(TextOutput, NoTokenizerNoText) {
  TextOutput out(nullptr, true, {});
  std::string piece, matched;
  EXPECT_FALSE(out.push(5, &piece, &matched));
  out.flush(&piece);
  EXPECT_EQ(piece, "");
}

}  // namespace
}  // namespace dsv4::engine_detail
