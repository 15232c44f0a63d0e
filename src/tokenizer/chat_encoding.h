// chat_encoding.h: renders a conversation into the DeepSeek-V4 prompt string, reproducing
// DeepSeek's reference encoder (encoding_dsv4.py, MODEL_SPEC.md §11.2) byte for byte: chat and
// thinking modes, reasoning effort, tools and DSML tool calls, tool results merged into the user
// turn, latest_reminder, and the drop-thinking rules. Tokenize the result with
// Tokenizer::encode(prompt, /*parse_special=*/true); it already starts with BOS.
#pragma once

#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace dsv4::tok {

// Token strings of the V4 prompt format.
inline constexpr const char* kBosToken = "<｜begin▁of▁sentence｜>";
inline constexpr const char* kEosToken = "<｜end▁of▁sentence｜>";
inline constexpr const char* kUserToken = "<｜User｜>";
inline constexpr const char* kAssistantToken = "<｜Assistant｜>";
inline constexpr const char* kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr const char* kThinkStartToken = "<think>";
inline constexpr const char* kThinkEndToken = "</think>";
inline constexpr const char* kDsmlToken = "｜DSML｜";

enum class Role { kSystem, kUser, kAssistant, kDeveloper, kTool, kLatestReminder };
enum class ThinkingMode { kChat, kThinking };
// kDefault is the reference encoder's None; only kMax changes the prompt.
enum class ReasoningEffort { kDefault, kHigh, kMax };

struct ToolCall {
  std::string id;         // OpenAI tool_call id; tool results are ordered by it
  std::string name;
  std::string arguments;  // the OpenAI "arguments" JSON text; non-JSON text becomes one string argument
};

struct ChatMessage {
  Role role = Role::kUser;
  std::string content;                     // plain text (content parts already joined)
  std::string reasoning_content;           // assistant history
  std::vector<ToolCall> tool_calls;        // assistant history
  std::string tool_call_id;                // role kTool
  nlohmann::ordered_json tools;            // system/developer: OpenAI tools array, null when none
  nlohmann::ordered_json response_format;  // system/developer: rendered as a schema, null when none
  std::string task;                        // internal quick-instruction task ("" = none): action,
                                           // query, authority, domain, title, read_url
  bool wo_eos = false;                     // assistant: no EOS after it (a prefix to continue)
};

struct ChatEncodeOptions {
  ThinkingMode thinking_mode = ThinkingMode::kThinking;
  ReasoningEffort reasoning_effort = ReasoningEffort::kDefault;
  // Drop reasoning_content of assistant turns before the last user turn (thinking mode). Turned
  // off automatically when any message defines tools, as in the reference encoder.
  bool drop_thinking = true;
  bool add_bos = true;
};

Result<std::string> encode_chat(std::span<const ChatMessage> messages, const ChatEncodeOptions& options);

// Parses OpenAI-style messages ([{"role", "content", ...}]) into ChatMessages. content may be a
// string, null, or an array of {"type": "text", "text"} parts (joined with "\n\n"; for role tool
// other part types become "[Unsupported TYPE]", as in the reference encoder, and are an error
// elsewhere). tool_calls[].function.arguments may be a JSON string or an object.
Result<std::vector<ChatMessage>> chat_messages_from_json(const nlohmann::ordered_json& messages);

}  // namespace dsv4::tok
