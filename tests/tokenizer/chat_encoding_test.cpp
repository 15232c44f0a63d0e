// chat_encoding_test.cpp: encode_chat against strings produced by DeepSeek's reference encoder
// (tests/data/tokenizer/encoding_goldens.json, from scripts/tokenizer/gen_encoding_goldens.py),
// the token ids of those prompts (one BOS, none added), Python-compatible JSON, and input errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "tokenizer/chat_encoding.h"
#include "tokenizer/python_json.h"
#include "tokenizer/test_util.h"

namespace dsv4::tok {
namespace {

nlohmann::ordered_json load_cases() {
  const std::string text = testing::read_file(testing::test_data_path("encoding_goldens.json"));
  if (text.empty()) return nlohmann::ordered_json::array();
  return nlohmann::ordered_json::parse(text)["cases"];
}

ChatEncodeOptions options_of(const nlohmann::ordered_json& c) {
  ChatEncodeOptions opt;
  opt.thinking_mode = c["thinking_mode"] == "thinking" ? ThinkingMode::kThinking : ThinkingMode::kChat;
  opt.reasoning_effort = c["reasoning_effort"].is_null()    ? ReasoningEffort::kDefault
                         : c["reasoning_effort"] == "max" ? ReasoningEffort::kMax
                                                          : ReasoningEffort::kHigh;
  opt.drop_thinking = c["drop_thinking"].get<bool>();
  return opt;
}

TEST(ChatEncoding, MatchesReferenceEncoder) {
  const auto cases = load_cases();
  ASSERT_GE(cases.size(), 20u) << "missing tests/data/tokenizer/encoding_goldens.json";
  std::set<std::string> modes;
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto messages = chat_messages_from_json(c["messages"]);
    ASSERT_TRUE(messages.is_ok()) << messages.status().to_string();
    auto prompt = encode_chat(messages.value(), options_of(c));
    ASSERT_TRUE(prompt.is_ok()) << prompt.status().to_string();
    EXPECT_EQ(prompt.value(), c["expected"].get<std::string>());
    modes.insert(c["thinking_mode"].get<std::string>());
  }
  EXPECT_EQ(modes.size(), 2u);
}

// The rendered prompt is tokenized with special tokens recognised and nothing added: the ids
// match HF's and hold exactly one BOS, at the front.
TEST(ChatEncoding, PromptTokensMatchHf) {
  const Tokenizer* tok = testing::v4_tokenizer();
  ASSERT_NE(tok, nullptr);
  for (const auto& c : load_cases()) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto ids = tok->encode(c["expected"].get<std::string>(), /*parse_special=*/true);
    ASSERT_TRUE(ids.is_ok());
    EXPECT_EQ(ids.value(), c["ids"].get<std::vector<TokenId>>());
    ASSERT_FALSE(ids.value().empty());
    EXPECT_EQ(ids.value()[0], 0);
    EXPECT_EQ(std::count(ids.value().begin(), ids.value().end(), 0), 1);
  }
}

TEST(ChatEncoding, SpecExamples) {
  std::vector<ChatMessage> msgs(1);
  msgs[0].content = "hello";
  ChatEncodeOptions opt;
  opt.thinking_mode = ThinkingMode::kChat;
  EXPECT_EQ(encode_chat(msgs, opt).value(), "<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜></think>");
  msgs.push_back(ChatMessage{Role::kAssistant, "Hello! I am DeepSeek.", "hmm", {}, "", nullptr, nullptr, "", false});
  msgs.push_back(ChatMessage{Role::kUser, "1+1=?", "", {}, "", nullptr, nullptr, "", false});
  opt.thinking_mode = ThinkingMode::kThinking;
  EXPECT_EQ(encode_chat(msgs, opt).value(),
            "<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜></think>Hello! I am "
            "DeepSeek.<｜end▁of▁sentence｜><｜User｜>1+1=?<｜Assistant｜><think>");
  opt.add_bos = false;
  EXPECT_EQ(encode_chat(msgs, opt).value().rfind("<｜User｜>hello", 0), 0u);
}

TEST(ChatEncoding, RejectsBadInput) {
  ChatEncodeOptions opt;
  std::vector<ChatMessage> dev(1);
  dev[0].role = Role::kDeveloper;  // empty developer content
  EXPECT_FALSE(encode_chat(dev, opt).is_ok());

  std::vector<ChatMessage> task(1);
  task[0].content = "x";
  task[0].task = "poem";
  auto r = encode_chat(task, opt);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("poem"), std::string::npos);

  std::vector<ChatMessage> call(2);
  call[0].content = "go";
  call[1].role = Role::kAssistant;
  call[1].tool_calls.push_back(ToolCall{"c", "f", "[1, 2]"});  // JSON but not an object
  EXPECT_FALSE(encode_chat(call, opt).is_ok());
  // Arguments nesting a million levels: refused, not rendered by a recursion that overflows the stack.
  const size_t n = 1000000;
  call[1].tool_calls[0].arguments = "{\"a\": " + std::string(n, '[') + std::string(n, ']') + "}";
  auto deep = encode_chat(call, opt);
  ASSERT_FALSE(deep.is_ok());
  EXPECT_NE(deep.status().message().find("levels deep"), std::string::npos) << deep.status().message();

  EXPECT_FALSE(chat_messages_from_json(nlohmann::ordered_json::parse(R"([{"role": "robot", "content": "x"}])")).is_ok());
  auto bad_part = chat_messages_from_json(
      nlohmann::ordered_json::parse(R"([{"role": "user", "content": [{"type": "image_url"}]}])"));
  ASSERT_FALSE(bad_part.is_ok());
  EXPECT_NE(bad_part.status().message().find("messages[0]"), std::string::npos);
}

TEST(PythonJson, MatchesJsonDumps) {
  EXPECT_EQ(python_json_dumps(nlohmann::ordered_json::parse(R"({"b": [1, 2.0, -0.5, true, null], "a": {}})")),
            R"({"b": [1, 2.0, -0.5, true, null], "a": {}})");
  EXPECT_EQ(python_json_dumps(nlohmann::ordered_json("q\"\\\n\t\x01é😀\x7f")), "\"q\\\"\\\\\\n\\t\\u0001é😀\x7f\"");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(0.00001), "1e-05");
  EXPECT_EQ(python_float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float_repr(123456789.125), "123456789.125");
  EXPECT_EQ(python_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(2.5e300), "2.5e+300");
}

}  // namespace
}  // namespace dsv4::tok
