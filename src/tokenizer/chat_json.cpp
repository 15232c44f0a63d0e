// chat_json.cpp: OpenAI-style message JSON -> ChatMessage (declared in chat_encoding.h). Kept apart
// from the renderer so that the renderer only sees native structs; errors name the message index.
#include <fmt/format.h>

#include "tokenizer/chat_encoding.h"
#include "tokenizer/python_json.h"

namespace dsv4::tok {
namespace {

Result<Role> parse_role(const std::string& role) {
  if (role == "system") return Role::kSystem;
  if (role == "user") return Role::kUser;
  if (role == "assistant") return Role::kAssistant;
  if (role == "developer") return Role::kDeveloper;
  if (role == "tool") return Role::kTool;
  if (role == "latest_reminder") return Role::kLatestReminder;
  return invalid_argument("unknown role '{}' (expected system, user, assistant, developer, tool or latest_reminder)",
                          role);
}

Result<std::string> parse_content(const nlohmann::ordered_json& content, Role role) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return invalid_argument("content must be a string, null or an array of parts");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto& part = content[i];
    if (i > 0) out += "\n\n";
    // Read "type" by hand: value("type", "") throws on a non-string (a 500 for a client's mistake).
    std::string type;
    if (part.is_object() && part.contains("type") && !part["type"].is_null()) {
      if (!part["type"].is_string())
        return invalid_argument("content part {}: \"type\" must be a string, found {}", i, part["type"].type_name());
      type = part["type"].get<std::string>();
    }
    const bool text_ok = type == "text" && part.contains("text") && part["text"].is_string();
    if (text_ok) {
      out += part["text"].get<std::string>();
    } else if (role == Role::kTool) {
      out += fmt::format("[Unsupported {}]", type);  // what the reference encoder writes
    } else if (type == "text") {
      return invalid_argument("content part {} of type 'text' needs a string \"text\"", i);
    } else {
      return invalid_argument("content part of type '{}' is not supported (only text)", type);
    }
  }
  return out;
}

Result<std::string> string_field(const nlohmann::ordered_json& m, const char* key) {
  const auto it = m.find(key);
  if (it == m.end() || it->is_null()) return std::string();
  if (!it->is_string()) return invalid_argument("\"{}\" must be a string", key);
  return it->get<std::string>();
}

Result<ChatMessage> parse_message(const nlohmann::ordered_json& m) {
  if (!m.is_object()) return invalid_argument("expected an object");
  ChatMessage msg;
  {
    DSV4_ASSIGN_OR_RETURN(std::string role, string_field(m, "role"));
    DSV4_ASSIGN_OR_RETURN(msg.role, parse_role(role));
  }
  if (m.contains("content")) {
    DSV4_ASSIGN_OR_RETURN(msg.content, parse_content(m["content"], msg.role));
  }
  DSV4_ASSIGN_OR_RETURN(msg.reasoning_content, string_field(m, "reasoning_content"));
  DSV4_ASSIGN_OR_RETURN(msg.tool_call_id, string_field(m, "tool_call_id"));
  DSV4_ASSIGN_OR_RETURN(msg.task, string_field(m, "task"));
  if (m.contains("wo_eos") && m["wo_eos"].is_boolean()) msg.wo_eos = m["wo_eos"].get<bool>();
  if (m.contains("tools") && !m["tools"].is_null()) {
    if (!m["tools"].is_array()) return invalid_argument("\"tools\" must be an array");
    msg.tools = m["tools"];
  }
  if (m.contains("response_format")) msg.response_format = m["response_format"];
  if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    if (!m["tool_calls"].is_array()) return invalid_argument("\"tool_calls\" must be an array");
    for (const auto& tc : m["tool_calls"]) {
      if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object()) {
        return invalid_argument("tool call {}: expected {{\"function\": {{\"name\", \"arguments\"}}}}",
                                python_json_dumps(tc));
      }
      const auto& fn = tc["function"];
      ToolCall call;
      DSV4_ASSIGN_OR_RETURN(call.id, string_field(tc, "id"));
      DSV4_ASSIGN_OR_RETURN(call.name, string_field(fn, "name"));
      if (fn.contains("arguments") && fn["arguments"].is_string()) {
        call.arguments = fn["arguments"].get<std::string>();
      } else if (fn.contains("arguments") && !fn["arguments"].is_null()) {
        call.arguments = python_json_dumps(fn["arguments"]);  // some clients send an object
      }
      msg.tool_calls.push_back(std::move(call));
    }
  }
  return msg;
}

}  // namespace

Result<std::vector<ChatMessage>> chat_messages_from_json(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return invalid_argument("messages must be an array");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    auto msg = parse_message(messages[i]);
    if (!msg.is_ok()) return msg.status().with_context(fmt::format("messages[{}]", i));
    out.push_back(std::move(msg).value());
  }
  return out;
}

}  // namespace dsv4::tok
