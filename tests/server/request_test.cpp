// request_test.cpp: OpenAI request parsing (types, ranges, unsupported options, thinking
// switches, tools, context length), the chat output splitter (reasoning / content / tool calls,
// whatever the chunking, and nothing lost when the model's output does not parse), and the
// Prometheus text.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "engine/test_tokenizer.h"
#include "server/choice_output.h"
#include "server/openai_request.h"
#include "server/prometheus.h"

namespace dsv4::server {
namespace {

using testing_util::v4_tokenizer;

struct Ctx {
  ServerConfig config;
  EngineLimits limits;
  Ctx() {
    config.served_model_names = {"m", "alias"};
    limits.max_model_len = 100;
    limits.vocab_size = 129280;
  }
  RequestContext ctx() const { return RequestContext{config, limits, *v4_tokenizer()}; }
};

ApiError chat(const std::string& body, ChatRequest* out = nullptr) {
  Ctx c;
  ChatRequest r;
  return parse_chat_request(Json::parse(body), c.ctx(), out != nullptr ? out : &r);
}

TEST(ChatRequest, ParsesSamplingAndLimits) {
  DSV4_REQUIRE_TOKENIZER();
  ChatRequest r;
  ApiError e = chat(R"({"model": "alias", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.5,
                       "top_p": 0.9, "top_k": 5, "min_p": 0.1, "seed": -3, "max_completion_tokens": 7,
                       "stop": "END", "logprobs": true, "top_logprobs": 2, "stream": true,
                       "stream_options": {"include_usage": true}, "user": "ignored", "presence_penalty": 0.5,
                       "frequency_penalty": -1, "repetition_penalty": 1.2, "logit_bias": {"17": -100, "005": 2.5}})",
                    &r);
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_FLOAT_EQ(r.common.sampling.temperature, 0.5f);
  EXPECT_EQ(r.common.sampling.top_k, 5);
  EXPECT_TRUE(r.common.sampling.has_seed);
  EXPECT_EQ(r.common.sampling.seed, uint64_t(-3));
  EXPECT_EQ(r.common.stop.max_tokens, 7);
  EXPECT_EQ(r.common.stop.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.common.sampling.logprobs, 2);
  EXPECT_TRUE(r.common.include_usage);
  EXPECT_EQ(r.thinking, tok::ThinkingMode::kThinking);  // DeepSeek's default
  EXPECT_FLOAT_EQ(r.common.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.common.sampling.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(r.common.sampling.repetition_penalty, 1.2f);
  auto bias = r.common.sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{5, 2.5f}, {17, -100.0f}}));
  // No max_tokens: whatever the context leaves.
  ChatRequest fresh;
  ASSERT_TRUE(chat(R"({"messages": [{"role": "user", "content": "hi"}]})", &fresh).ok());
  EXPECT_EQ(fresh.common.stop.max_tokens, 100 - int(fresh.common.prompt.size()));
}

TEST(ChatRequest, RefusesBadInputWithTheField) {
  DSV4_REQUIRE_TOKENIZER();
  struct Case {
    std::string body;
    int status;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {R"([1, 2])", 400, "", ""},
      {R"({})", 400, "messages", ""},
      {R"({"messages": []})", 400, "messages", ""},
      {R"({"messages": "hi"})", 400, "messages", ""},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "messages", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"})", 404, "", "model_not_found"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "10"})", 400, "max_tokens", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", 400, "max_tokens", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1000})", 400, "messages",
       "context_length_exceeded"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", 400, "temperature", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", 400, "top_p", ""},
      // Positive, but 0 as the sampler's 32-bit float (was refused by the engine, naming the messages).
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 1e-46})", 400, "top_p", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", 400, "n", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 129})", 400, "n", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 1.5})", 400, "n", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", 400, "stop", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})", 400, "stop", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": ")" + std::string(1025, 'x') + R"("})", 400,
       "stop", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})", 400, "top_logprobs", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", 400,
       "top_logprobs", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}})", 400,
       "stream_options", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": 2.5})", 400, "frequency_penalty", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "presence_penalty": "1"})", 400, "presence_penalty", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "repetition_penalty": 0})", 400, "repetition_penalty", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": [1]})", 400, "logit_bias", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"x": 1}})", 400, "logit_bias", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"-1": 1}})", 400, "logit_bias", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5 ": 1}})", 400, "logit_bias", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"": 1}})", 400, "logit_bias", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"99999999999999999999": 1}})", 400,
       "logit_bias", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"129280": 1}})", 400, "logit_bias", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"7": 1, "07": 2}})", 400, "logit_bias", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 101}})", 400, "logit_bias", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": "1"}})", 400, "logit_bias", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", 400, "tools", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", 400, "tools", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": "f"}}],
           "tool_choice": "required"})", 400, "tool_choice", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "extreme"})", 400,
       "reasoning_effort", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "maybe"}})", 400, "thinking", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled"},
           "chat_template_kwargs": {"thinking": false}})", 400, "thinking", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})", 400,
       "response_format", ""},
      // A content part whose "type" is not a string (was a 500 from nlohmann's value()).
      {R"({"messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]})", 400, "messages", ""},
      {R"({"messages": [{"role": "tool", "content": [{"type": ["text"]}]}]})", 400, "messages", ""},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]})", 400, "messages", ""},
  };
  // An integer literal too long for 64 bits is out of range, not "not an integer".
  const ApiError huge = chat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 99999999999999999999999})");
  EXPECT_EQ(huge.param, "max_tokens");
  EXPECT_NE(huge.message.find("must be in [1, 2147483647], found 1e+23"), std::string::npos) << huge.message;
  for (const Case& c : cases) {
    const ApiError e = chat(c.body);
    EXPECT_EQ(e.status, c.status) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_EQ(e.code, c.code) << c.body;
    EXPECT_FALSE(e.message.empty());
    const Json j = e.to_json();
    EXPECT_TRUE(j["error"].contains("type") && j["error"].contains("param") && j["error"].contains("code"));
  }
}

TEST(ChatRequest, ThinkingSwitches) {
  DSV4_REQUIRE_TOKENIZER();
  struct Case {
    const char* extra;
    tok::ThinkingMode mode;
    tok::ReasoningEffort effort;
  };
  const Case cases[] = {
      {"", tok::ThinkingMode::kThinking, tok::ReasoningEffort::kDefault},
      {R"(, "chat_template_kwargs": {"thinking": false})", tok::ThinkingMode::kChat, tok::ReasoningEffort::kDefault},
      {R"(, "chat_template_kwargs": {"enable_thinking": false})", tok::ThinkingMode::kChat,
       tok::ReasoningEffort::kDefault},
      {R"(, "thinking": {"type": "disabled"})", tok::ThinkingMode::kChat, tok::ReasoningEffort::kDefault},
      {R"(, "reasoning_effort": "none")", tok::ThinkingMode::kChat, tok::ReasoningEffort::kDefault},
      {R"(, "reasoning_effort": "medium")", tok::ThinkingMode::kThinking, tok::ReasoningEffort::kHigh},
      {R"(, "reasoning_effort": "xhigh")", tok::ThinkingMode::kThinking, tok::ReasoningEffort::kMax},
      {R"(, "chat_template_kwargs": {"reasoning_effort": "max"}, "thinking": {"type": "enabled"})",
       tok::ThinkingMode::kThinking, tok::ReasoningEffort::kMax},
      {R"(, "thinking": {"type": "disabled"}, "reasoning_effort": "high")", tok::ThinkingMode::kChat,
       tok::ReasoningEffort::kDefault},
  };
  for (const Case& c : cases) {
    ChatRequest r;
    const std::string body = std::string(R"({"messages": [{"role": "user", "content": "x"}])") + c.extra + "}";
    ASSERT_TRUE(chat(body, &r).ok()) << body;
    EXPECT_EQ(r.thinking, c.mode) << body;
    EXPECT_EQ(r.effort, c.effort) << body;
    // The prompt ends with the assistant prefix of the mode.
    const std::string prompt = v4_tokenizer()->decode(r.common.prompt).value();
    EXPECT_TRUE(prompt.ends_with(c.mode == tok::ThinkingMode::kThinking ? "<｜Assistant｜><think>"
                                                                          : "<｜Assistant｜></think>"))
        << prompt;
  }
  // --default-thinking off; an effort alone turns thinking on.
  Ctx off;
  off.config.default_thinking = false;
  ChatRequest r;
  ASSERT_TRUE(parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), off.ctx(), &r).ok());
  EXPECT_EQ(r.thinking, tok::ThinkingMode::kChat);
  ASSERT_TRUE(parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "x"}],
                                                 "reasoning_effort": "high"})"),
                                 off.ctx(), &r)
                  .ok());
  EXPECT_EQ(r.thinking, tok::ThinkingMode::kThinking);
}

TEST(ChatRequest, ToolsAndReasoningHistoryReachThePrompt) {
  DSV4_REQUIRE_TOKENIZER();
  Ctx c;
  c.limits.max_model_len = 4096;
  ChatRequest r;
  const char* body = R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": "", "reasoning": "need the tool",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})";
  ASSERT_TRUE(parse_chat_request(Json::parse(body), c.ctx(), &r).ok());
  EXPECT_TRUE(r.tools_offered);
  const std::string prompt = v4_tokenizer()->decode(r.common.prompt).value();
  EXPECT_NE(prompt.find("get_weather"), std::string::npos);
  EXPECT_NE(prompt.find("need the tool"), std::string::npos);  // "reasoning" accepted as reasoning_content
  EXPECT_NE(prompt.find("<tool_result>sunny</tool_result>"), std::string::npos);
  EXPECT_NE(prompt.find("<｜DSML｜invoke name=\"get_weather\">"), std::string::npos);
  // tool_choice none: the tools are not offered.
  Json j = Json::parse(body);
  j["tool_choice"] = "none";
  ASSERT_TRUE(parse_chat_request(j, c.ctx(), &r).ok());
  EXPECT_FALSE(r.tools_offered);
}

TEST(CompletionRequest, PromptForms) {
  DSV4_REQUIRE_TOKENIZER();
  Ctx c;
  CompletionRequest r;
  ASSERT_TRUE(parse_completion_request(Json::parse(R"({"prompt": "Hello", "logprobs": 2})"), c.ctx(), &r).ok());
  EXPECT_EQ(r.common.sampling.logprobs, 2);
  const auto hello = r.common.prompt;
  ASSERT_TRUE(parse_completion_request(Json::parse(R"({"prompt": ["Hello"]})"), c.ctx(), &r).ok());
  EXPECT_EQ(r.common.prompt, hello);
  ASSERT_TRUE(parse_completion_request(Json::parse(R"({"prompt": [5, 6, 7]})"), c.ctx(), &r).ok());
  EXPECT_EQ(r.common.prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(parse_completion_request(Json::parse(R"({"prompt": ["a", "b"]})"), c.ctx(), &r).param, "prompt");
  EXPECT_EQ(parse_completion_request(Json::parse(R"({"prompt": [-1]})"), c.ctx(), &r).param, "prompt");
  // A bad token id is named with its index and value, not called a batch or wrapped to -1.
  for (const char* body : {R"({"prompt": [1, 2.5]})", R"({"prompt": [1, "a"]})", R"({"prompt": [[1, null]]})",
                           R"({"prompt": [1, 18446744073709551615]})", R"({"prompt": [1, 129280]})"}) {
    const ApiError e = parse_completion_request(Json::parse(body), c.ctx(), &r);
    EXPECT_EQ(e.param, "prompt") << body;
    EXPECT_NE(e.message.find("prompt[1] must be a token id"), std::string::npos) << body << " -> " << e.message;
  }
  EXPECT_NE(parse_completion_request(Json::parse(R"({"prompt": [1, 18446744073709551615]})"), c.ctx(), &r)
                .message.find("found 18446744073709551615"),
            std::string::npos);
  EXPECT_EQ(parse_completion_request(Json::parse(R"({"prompt": ""})"), c.ctx(), &r).param, "prompt");
  EXPECT_EQ(parse_completion_request(Json::parse(R"({"prompt": "x", "echo": true})"), c.ctx(), &r).param, "echo");
  // n choices; best_of may only restate n (it would otherwise rank candidates we do not score).
  ASSERT_TRUE(parse_completion_request(Json::parse(R"({"prompt": "x", "n": 3, "best_of": 3})"), c.ctx(), &r).ok());
  EXPECT_EQ(r.common.n, 3);
  ASSERT_TRUE(parse_completion_request(Json::parse(R"({"prompt": "x", "n": 2})"), c.ctx(), &r).ok());
  EXPECT_EQ(r.common.n, 2);
  for (const char* body : {R"({"prompt": "x", "n": 3, "best_of": 2})", R"({"prompt": "x", "n": 2, "best_of": 4})",
                           R"({"prompt": "x", "best_of": 0})"}) {
    const ApiError e = parse_completion_request(Json::parse(body), c.ctx(), &r);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, "best_of") << body << " -> " << e.message;
  }
  EXPECT_EQ(parse_completion_request(Json::parse(R"({})"), c.ctx(), &r).param, "prompt");
  EXPECT_EQ(parse_completion_request(Json::parse(R"({"prompt": "x", "max_tokens": 500})"), c.ctx(), &r).code,
            "context_length_exceeded");
}

// Feeds `text` to a ChoiceParser in pieces of `step` bytes.
tok::OutputDelta split(const std::string& text, tok::ThinkingMode mode, size_t step) {
  ChoiceParser p(mode);
  tok::OutputDelta d;
  for (size_t i = 0; i < text.size(); i += step) p.feed(std::string_view(text).substr(i, step), &d);
  p.finish(&d);
  return d;
}

TEST(ChoiceParser, SplitsReasoningContentAndToolCallsAtAnyChunking) {
  const std::string text =
      "I should call it.</think>Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  for (size_t step = 1; step <= text.size(); step += (step < 8 ? 1 : 13)) {
    const tok::OutputDelta d = split(text, tok::ThinkingMode::kThinking, step);
    EXPECT_EQ(d.reasoning, "I should call it.") << step;
    EXPECT_EQ(d.content, "Checking.") << step;
    ASSERT_EQ(d.tool_calls.size(), 1u) << step;
    EXPECT_EQ(d.tool_calls[0].name, "f");
    EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\": \"x\"}");
  }
  const tok::OutputDelta chat = split("plain answer", tok::ThinkingMode::kChat, 3);
  EXPECT_EQ(chat.content, "plain answer");
  EXPECT_EQ(chat.reasoning, "");
}

TEST(ChoiceParser, MalformedOutputIsPassedThroughNotLost) {
  for (size_t step : {1, 2, 5, 100}) {
    // A stray <think> inside the content.
    tok::OutputDelta d = split("ok</think>before<think>after <b>", tok::ThinkingMode::kThinking, step);
    EXPECT_EQ(d.reasoning, "ok") << step;
    EXPECT_EQ(d.content, "before<think>after <b>") << step;
    // A stray ｜DSML｜ in the reasoning stays reasoning.
    d = split("think ｜DSML｜ more", tok::ThinkingMode::kThinking, step);
    EXPECT_EQ(d.reasoning, "think ｜DSML｜ more") << step;
    // A DSML block that breaks before any call: the raw block becomes content.
    const std::string broken = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜oops";
    d = split("fine" + broken, tok::ThinkingMode::kChat, step);
    EXPECT_EQ(d.content, "fine" + broken) << step;
    EXPECT_TRUE(d.tool_calls.empty());
    // A block cut off by max_tokens likewise.
    d = split("x\n\n<｜DSML｜tool_calls>\n<｜DSML｜inv", tok::ThinkingMode::kChat, step);
    EXPECT_EQ(d.content, "x\n\n<｜DSML｜tool_calls>\n<｜DSML｜inv") << step;
  }
}

// With ignore_eos and skip_special_tokens false the EOS reaches the parser as text, and more may
// follow it. That text does not parse: it is passed through once, with the EOS, however it was
// split (it used to repeat all the content before it when it came in a later piece, and to lose
// the EOS when it came in the same one).
TEST(ChoiceParser, TextAfterEosIsPassedThroughOnce) {
  const std::string eos = "<｜end▁of▁sentence｜>";
  for (size_t step = 1; step <= 40; ++step) {
    tok::OutputDelta d = split("abc" + eos + "def", tok::ThinkingMode::kChat, step);
    EXPECT_EQ(d.content, "abc" + eos + "def") << step;
    d = split("r</think>abc" + eos + "def", tok::ThinkingMode::kThinking, step);
    EXPECT_EQ(d.reasoning, "r") << step;
    EXPECT_EQ(d.content, "abc" + eos + "def") << step;
  }
}

// Text after a closed DSML block (with or without an EOS between) is dropped once calls were
// delivered, in every piece: it used to be cut in the piece that failed (or, when the EOS came
// with the block, sliced at a wrong offset) and passed through in later ones.
TEST(ChoiceParser, TextAfterAToolCallBlockIsDroppedAtAnyChunking) {
  const std::string eos = "<｜end▁of▁sentence｜>";
  const std::string block =
      "x\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  for (const std::string& tail : {std::string("garbage text"), eos + "garbage text"}) {
    for (size_t step = 1; step <= block.size() + tail.size(); step += (step < 12 ? 1 : 7)) {
      const tok::OutputDelta d = split(block + tail, tok::ThinkingMode::kChat, step);
      EXPECT_EQ(d.content, "x") << step;
      ASSERT_EQ(d.tool_calls.size(), 1u) << step;
      EXPECT_EQ(d.tool_calls[0].arguments, "{}");
    }
  }
  // A block without calls delivered nothing: it is content, with all that follows.
  const std::string empty = "x\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>" + eos + "tail";
  for (size_t step = 1; step <= empty.size(); ++step) {
    const tok::OutputDelta d = split(empty, tok::ThinkingMode::kChat, step);
    EXPECT_EQ(d.content, empty) << step;
    EXPECT_TRUE(d.tool_calls.empty());
  }
}

TEST(Prometheus, TextFormatIsWellFormed) {
  EngineMetrics m;
  m.n_running = 2;
  m.kv_blocks_total = 10;
  m.kv_blocks_free = 5;
  m.finished_abort = 3;
  m.ttft.bounds = {0.1, 1.0};
  m.ttft.counts = {2, 1, 1};
  m.ttft.count = 4;
  m.ttft.sum = 3.5;
  ServerCounters sc;
  sc.http_errors[400] = 2;
  EngineLimits l;
  const std::string text = render_prometheus(m, l, sc, "my \"model\"", "fp8");
  // name{model_name="...",...} value
  auto well_formed = [](const std::string& line) {
    const size_t brace = line.find('{'), close = line.rfind("} ");
    if (brace == 0 || brace == std::string::npos || close == std::string::npos || close < brace) return false;
    for (size_t i = 0; i < brace; ++i) {
      const char c = line[i];
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':')) return false;
    }
    constexpr std::string_view kLabel = "{model_name=\"my \\\"model\\\"\"";
    if (line.compare(brace, kLabel.size(), kLabel) != 0) return false;
    const std::string value = line.substr(close + 2);
    if (value == "+Inf") return true;
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    return !value.empty() && *end == '\0';
  };
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) continue;
    EXPECT_TRUE(well_formed(line)) << line;
    ++n;
  }
  EXPECT_GT(n, 50);
  EXPECT_NE(text.find("vllm:num_requests_running{model_name=\"my \\\"model\\\"\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("vllm:kv_cache_usage_perc{model_name=\"my \\\"model\\\"\"} 0.5\n"), std::string::npos);
  EXPECT_NE(text.find("finished_reason=\"abort\"} 3\n"), std::string::npos);
  // Buckets are cumulative and end with +Inf = count.
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{model_name=\"my \\\"model\\\"\",le=\"1\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{model_name=\"my \\\"model\\\"\",le=\"+Inf\"} 4\n"),
            std::string::npos);
  EXPECT_NE(text.find("dsv4:http_errors_total{model_name=\"my \\\"model\\\"\",status=\"400\"} 2\n"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::server
