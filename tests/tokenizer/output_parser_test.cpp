// output_parser_test.cpp: reasoning/content splitting and strict DSML tool-call parsing: valid
// single and parallel calls, nested JSON, quotes and newlines, truncated blocks, wrong tags,
// duplicate parameters; and the streaming invariant: every split of the input gives the same
// pieces, calls and error as parsing it whole.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>

#include "tokenizer/chat_encoding.h"
#include "tokenizer/output_parser.h"
#include "tokenizer/utf8.h"

namespace dsv4::tok {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kOpen = "\n\n<｜DSML｜tool_calls>\n";
const std::string kClose = "</｜DSML｜tool_calls>";

std::string invoke(const std::string& name, const std::vector<std::string>& params) {
  std::string s = "<｜DSML｜invoke name=\"" + name + "\">\n";
  for (const auto& p : params) s += p + "\n";
  return s + "</｜DSML｜invoke>\n";
}
std::string param(const std::string& key, const std::string& value, bool is_string) {
  return "<｜DSML｜parameter name=\"" + key + "\" string=\"" + (is_string ? "true" : "false") + "\">" + value +
         "</｜DSML｜parameter>";
}

// Everything a parse produced, for comparing splits.
struct Outcome {
  std::string reasoning, content, calls, error;
  OutputState state;
  bool operator==(const Outcome&) const = default;
};

void PrintTo(const Outcome& o, std::ostream* os) {
  *os << "{reasoning=" << nlohmann::json(o.reasoning).dump() << ", content=" << nlohmann::json(o.content).dump()
      << ", calls=" << nlohmann::json(o.calls).dump() << ", error=" << nlohmann::json(o.error).dump()
      << ", state=" << static_cast<int>(o.state) << "}";
}

Outcome run(std::string_view text, ThinkingMode mode, const std::vector<size_t>& cuts) {
  OutputParser parser(mode);
  OutputDelta delta;
  Outcome o;
  size_t prev = 0;
  Status st;
  std::vector<size_t> bounds = cuts;
  bounds.push_back(text.size());
  for (size_t b : bounds) {
    OutputDelta piece;
    st = parser.feed(text.substr(prev, b - prev), &piece);
    // Emitted text never ends inside a UTF-8 character.
    EXPECT_TRUE(utf8_valid(piece.reasoning) && utf8_valid(piece.content));
    o.reasoning += piece.reasoning;
    o.content += piece.content;
    for (const auto& c : piece.tool_calls) o.calls += c.name + " " + c.arguments + "\n";
    prev = b;
    if (!st.is_ok()) break;
  }
  if (st.is_ok()) {
    OutputDelta piece;
    st = parser.finish(&piece);
    o.reasoning += piece.reasoning;
    o.content += piece.content;
    for (const auto& c : piece.tool_calls) o.calls += c.name + " " + c.arguments + "\n";
  }
  o.error = st.is_ok() ? "" : st.message();
  o.state = parser.state();
  return o;
}

// Checks that single cuts, double cuts (short inputs), byte-by-byte and random splits all give
// the one-shot outcome, and returns that outcome.
Outcome run_all_splits(const std::string& text, ThinkingMode mode) {
  const Outcome whole = run(text, mode, {});
  for (size_t i = 1; i < text.size(); ++i) {
    const Outcome one = run(text, mode, {i});
    if (one != whole) {
      ADD_FAILURE() << "input " << nlohmann::json(text).dump() << " cut at " << i << ":\n  "
                    << ::testing::PrintToString(one) << "\nvs whole\n  " << ::testing::PrintToString(whole);
      return whole;
    }
    if (text.size() <= 120) {
      for (size_t j = i + 1; j < text.size(); ++j) {
        if (run(text, mode, {i, j}) != whole) {
          ADD_FAILURE() << "cuts " << i << "," << j;
          return whole;
        }
      }
    }
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  EXPECT_EQ(run(text, mode, every), whole) << "byte by byte";
  std::mt19937 rng(static_cast<uint32_t>(text.size()));
  for (int r = 0; r < 100; ++r) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i) {
      if (rng() % 5 == 0) cuts.push_back(i);
    }
    EXPECT_EQ(run(text, mode, cuts), whole);
  }
  return whole;
}

nlohmann::json args_of(const Outcome& o, int index) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < o.calls.size()) {
    const size_t end = o.calls.find('\n', start);
    lines.push_back(o.calls.substr(start, end - start));
    start = end + 1;
  }
  const std::string& line = lines.at(index);
  return nlohmann::json::parse(line.substr(line.find(' ') + 1));
}

TEST(OutputParser, ReasoningThenContent) {
  const Outcome o = run_all_splits("Let me think.\nOK</think>The answer is 4." + kEos, ThinkingMode::kThinking);
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.reasoning, "Let me think.\nOK");
  EXPECT_EQ(o.content, "The answer is 4.");
  EXPECT_EQ(o.state, OutputState::kDone);
}

TEST(OutputParser, ChatModeAndMissingEos) {
  Outcome o = run_all_splits("Hi 你好 😀\n", ThinkingMode::kChat);  // stopped without EOS: fine
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.content, "Hi 你好 😀\n");
  EXPECT_EQ(o.state, OutputState::kContent);
  o = run_all_splits("still thinking <thin", ThinkingMode::kThinking);  // max_tokens hit in reasoning
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.reasoning, "still thinking <thin");
  EXPECT_EQ(o.state, OutputState::kReasoning);
}

TEST(OutputParser, SingleToolCall) {
  const std::string text = "r</think>I'll check." + kOpen +
                           invoke("get_weather", {param("city", "Paris", true), param("days", "3", false)}) + kClose +
                           kEos;
  const Outcome o = run_all_splits(text, ThinkingMode::kThinking);
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.content, "I'll check.");
  EXPECT_EQ(o.calls, "get_weather {\"city\": \"Paris\", \"days\": 3}\n");
  EXPECT_EQ(o.state, OutputState::kDone);
}

TEST(OutputParser, ParallelCallsNestedJsonQuotesNewlines) {
  const std::string nested = R"({"a": [1, {"b": null}], "c": "x", "d": 1.5e3})";
  const std::string text =
      kOpen.substr(2 /*content empty: the block starts the output*/ - 2) +
      invoke("f", {param("obj", nested, false), param("quote", "He said \"hi\"\nline 2\t</tag>", true)}) +
      invoke("g", {}) + invoke("h", {param("list", "[1, 2, 3]", false), param("flag", "true", false)}) + kClose;
  const Outcome o = run_all_splits(text, ThinkingMode::kChat);
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.content, "");
  EXPECT_EQ(o.state, OutputState::kAfterTools);
  EXPECT_EQ(args_of(o, 0)["obj"], nlohmann::json::parse(nested));
  EXPECT_EQ(args_of(o, 0)["quote"], "He said \"hi\"\nline 2\t</tag>");
  EXPECT_EQ(args_of(o, 1), nlohmann::json::object());
  EXPECT_EQ(args_of(o, 2)["list"], nlohmann::json::parse("[1, 2, 3]"));
  EXPECT_EQ(args_of(o, 2)["flag"], true);
  EXPECT_NE(o.calls.find("f {\"obj\": " + nested + ", \"quote\": "), std::string::npos) << o.calls;
}

TEST(OutputParser, TruncatedBlocksAreErrors) {
  const std::string block =
      kOpen + invoke("f", {param("a", "1", false), param("b", "two", true)}) + invoke("g", {}) + kClose;
  int n_truncated = 0;
  for (size_t cut = 1; cut < block.size(); ++cut) {
    std::string text = "x";
    text.append(block, 0, cut);  // not "x" + substr: GCC 12 warns (-Wrestrict) falsely on that
    const Outcome o = run(text, ThinkingMode::kChat, {});
    if (cut < block.size() - kClose.size() + 1) {
      // Cut anywhere before the closing tag is complete: an error once the stream ends, unless
      // the cut leaves only "\n", "\n\n<", ... which are still plain content.
      if (o.state == OutputState::kContent && o.error.empty()) {
        // Only a cut-off "\n\n<｜DS..." before the ｜DSML｜ token is complete stays plain content.
        EXPECT_LT(cut, kOpen.find("｜DSML｜") + std::string("｜DSML｜").size()) << o.content;
        continue;
      }
      EXPECT_NE(o.error, "") << "cut " << cut;
      ++n_truncated;
    }
  }
  EXPECT_GT(n_truncated, 100);
  const Outcome o = run("x" + block.substr(0, block.size() - 3), ThinkingMode::kChat, {});
  EXPECT_NE(o.error.find("truncated DSML tool-call block"), std::string::npos) << o.error;
}

TEST(OutputParser, HeldBackTextAtEnd) {
  // A cut-off marker start is plain text at the end; a complete ｜DSML｜ inside one is not.
  Outcome o = run_all_splits("a\n\n<｜DS", ThinkingMode::kChat);
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.content, "a\n\n<｜DS");
  o = run_all_splits("a\n\n<｜DSML｜tool", ThinkingMode::kChat);
  EXPECT_NE(o.error.find("unexpected ｜DSML｜ in the content"), std::string::npos) << o.error;
  EXPECT_EQ(o.content, "a\n\n<");
  o = run_all_splits("r\n</think", ThinkingMode::kThinking);
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.reasoning, "r\n</think");
}

TEST(OutputParser, MalformedBlocks) {
  struct Bad {
    std::string text;
    std::string message;
  };
  const std::string p = param("a", "1", false);
  const Bad cases[] = {
      {kOpen + "<｜DSML｜invok name=\"f\">\n" + p + "\n</｜DSML｜invoke>\n" + kClose, "expected \">\\n\""},
      {kOpen + "<｜DSML｜invoke nam=\"f\">\n" + p + "\n</｜DSML｜invoke>\n" + kClose, "invoke header"},
      {kOpen + "<｜DSML｜invoke name=\"f\">" + p + "\n</｜DSML｜invoke>\n" + kClose, "invoke header"},
      {kOpen + invoke("f", {"<｜DSML｜parameter name=\"a\" string=\"maybe\">1</｜DSML｜parameter>"}) + kClose,
       "string must be"},
      {kOpen + invoke("f", {"<｜DSML｜parameter key=\"a\" string=\"true\">1</｜DSML｜parameter>"}) + kClose,
       "malformed DSML parameter"},
      {kOpen + invoke("f", {p + " "}) + kClose, "after a parameter"},
      {kOpen + invoke("f", {p, param("a", "2", false)}) + kClose, "duplicate DSML parameter 'a'"},
      {kOpen + invoke("f", {param("n", "not json", false)}) + kClose, "is not JSON"},
      {kOpen + invoke("f", {p}) + "</｜DSML｜tool_call>" + kEos, "truncated"},
      {kOpen + invoke("f", {p}) + kClose + "\n" + kEos, "after </｜DSML｜tool_calls>"},
      {"\n<｜DSML｜tool_calls>\n" + invoke("f", {p}) + kClose, "unexpected ｜DSML｜ in the content"},
      {"a" + kEos + "b", "after <｜end▁of▁sentence｜>"},
      {"a <think> b", "unexpected <think> in the content"},
      {"a </think> b", "unexpected </think> in the content"},
  };
  for (const Bad& b : cases) {
    const Outcome o = run_all_splits(b.text, ThinkingMode::kChat);
    EXPECT_NE(o.error.find(b.message), std::string::npos) << "input " << nlohmann::json(b.text).dump()
                                                          << "\nerror: " << o.error;
  }
  // Thinking mode: a block (or any special token) before </think>.
  Outcome o = run_all_splits("thinking" + kOpen + invoke("f", {p}) + kClose, ThinkingMode::kThinking);
  EXPECT_NE(o.error.find("inside the reasoning"), std::string::npos) << o.error;
  EXPECT_EQ(o.reasoning, "thinking");
  o = run_all_splits("a" + kEos + "</think>", ThinkingMode::kThinking);
  EXPECT_NE(o.error.find("unexpected <｜end▁of▁sentence｜> in the reasoning"), std::string::npos) << o.error;
}

// Tool calls rendered by encode_chat (history) parse back to the same arguments.
TEST(OutputParser, RoundTripsEncodedToolCalls) {
  const nlohmann::ordered_json args = nlohmann::ordered_json::parse(
      R"({"code": "print(\"x\")\n  y = 'z'", "n": 3, "ratio": 0.25, "tags": ["a", "b"], "opt": {"k": null}, "ok": false, "uni": "中文😀"})");
  std::vector<ChatMessage> msgs(2);
  msgs[0].content = "go";
  msgs[1].role = Role::kAssistant;
  msgs[1].content = "Running.";
  msgs[1].tool_calls = {ToolCall{"1", "run", args.dump()}, ToolCall{"2", "noop", "{}"}};
  ChatEncodeOptions opt;
  opt.thinking_mode = ThinkingMode::kChat;
  auto prompt = encode_chat(msgs, opt);
  ASSERT_TRUE(prompt.is_ok());
  const std::string marker = "<｜Assistant｜></think>";
  const std::string completion = prompt.value().substr(prompt.value().find(marker) + marker.size());
  const Outcome o = run_all_splits(completion, ThinkingMode::kChat);
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.content, "Running.");
  EXPECT_EQ(o.state, OutputState::kDone);
  EXPECT_EQ(args_of(o, 0), nlohmann::json::parse(args.dump()));
  EXPECT_EQ(args_of(o, 1), nlohmann::json::object());
}

TEST(OutputParser, OneShotApi) {
  auto r = parse_output("why</think>because" + kEos, ThinkingMode::kThinking);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->reasoning, "why");
  EXPECT_EQ(r->content, "because");
  EXPECT_EQ(r->final_state, OutputState::kDone);
  EXPECT_FALSE(parse_output(kOpen + "<｜DSML｜invoke", ThinkingMode::kChat).is_ok());
}

}  // namespace
}  // namespace dsv4::tok
