// openai_request.h: OpenAI request JSON -> native request structs, for /v1/chat/completions,
// /v1/completions and /tokenize. Everything is validated here (types, ranges, unsupported
// options) and the chat prompt is rendered (DeepSeek-V4 encoding: thinking mode, reasoning
// effort, tools) and tokenized, so the handler only submits. Errors are ApiErrors naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/server_config.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

// Choices per request ("n"): each is an engine request of its own, so a large n costs as much as
// that many requests (and is refused with a 503 when the waiting queue cannot take them all).
inline constexpr int64_t kMaxChoices = 128;

struct CommonRequest {
  std::string model;           // as sent ("" when absent)
  int64_t n = 1;               // choices, 1..kMaxChoices
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool max_tokens_set = false;
  int64_t max_tokens = 0;
  SamplingParams sampling;
  StopParams stop;
  std::vector<int32_t> prompt;
};

struct ChatRequest {
  CommonRequest common;
  tok::ThinkingMode thinking = tok::ThinkingMode::kThinking;
  tok::ReasoningEffort effort = tok::ReasoningEffort::kDefault;
  bool tools_offered = false;  // tools rendered into the prompt
};

struct CompletionRequest {
  CommonRequest common;
};

struct RequestContext {
  const ServerConfig& config;
  const EngineLimits& limits;
  const tok::Tokenizer& tokenizer;
};

ApiError parse_chat_request(const Json& j, const RequestContext& ctx, ChatRequest* out);
ApiError parse_completion_request(const Json& j, const RequestContext& ctx, CompletionRequest* out);

// The chat prompt of a request body (messages, tools, thinking controls) as token ids; shared
// with /tokenize. Fills the resolved thinking mode and effort.
ApiError render_chat_prompt(const Json& j, const RequestContext& ctx, std::vector<int32_t>* ids,
                            tok::ThinkingMode* thinking, tok::ReasoningEffort* effort, bool* tools_offered);

// Thinking on/off and effort from chat_template_kwargs.{thinking, enable_thinking,
// reasoning_effort}, the top-level DeepSeek "thinking": {"type": "enabled"|"disabled"}, and
// "reasoning_effort". Contradicting switches are an error.
ApiError resolve_thinking(const Json& j, bool default_thinking, tok::ThinkingMode* mode,
                          tok::ReasoningEffort* effort);

// Checks a served model name ("" = not given, accepted).
ApiError check_model(const std::string& model, const ServerConfig& config);

}  // namespace dsv4::server
