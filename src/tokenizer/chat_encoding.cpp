// chat_encoding.cpp: the DeepSeek-V4 prompt renderer. It follows the reference encoder's
// pipeline step by step (merge tool results into user turns, order them by call, drop old
// reasoning, render each message, append the transition after it) because its rules interact:
// e.g. dropping thinking removes developer turns before the last user turn, and the assistant
// prefix after a user turn depends on the messages that remain.
#include "tokenizer/chat_encoding.h"

#include <algorithm>
#include <map>

#include "base/json_depth.h"
#include "tokenizer/python_json.h"

namespace dsv4::tok {
namespace {

// Prompt text of the reference encoder (the model was trained on exactly these bytes).
constexpr const char* kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

constexpr const char* kToolsPreamble =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr const char* kToolsClosing =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

constexpr const char* kResponseFormatPrefix =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

const std::map<std::string, std::string>& task_tokens() {
  static const std::map<std::string, std::string> tokens = {
      {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"}};
  return tokens;
}

// A content block of a merged user turn: text, or a tool result.
struct Block {
  bool tool_result = false;
  std::string text;
  std::string tool_use_id;
};

// A message after merging: user turns carry blocks; other roles point back to their source.
struct Turn {
  Role role;
  const ChatMessage* src = nullptr;  // null for user turns created from tool results
  std::vector<Block> blocks;         // user turns only
  std::string task;
  bool drop_reasoning = false;
};

bool has_tools(const ChatMessage& m) { return m.tools.is_array() && !m.tools.empty(); }
bool has_response_format(const ChatMessage& m) {
  return !m.response_format.is_null() && !(m.response_format.is_object() && m.response_format.empty());
}

// Tool messages become tool_result blocks of a user turn; consecutive user messages merge unless
// the earlier one carries a task. Only task (and wo_eos) survive on user messages.
std::vector<Turn> merge_tool_messages(std::span<const ChatMessage> messages) {
  std::vector<Turn> merged;
  for (const ChatMessage& m : messages) {
    if (m.role == Role::kTool) {
      Block block{true, m.content, m.tool_call_id};
      if (!merged.empty() && merged.back().role == Role::kUser) {
        merged.back().blocks.push_back(std::move(block));
      } else {
        merged.push_back(Turn{Role::kUser, nullptr, {std::move(block)}, "", false});
      }
    } else if (m.role == Role::kUser) {
      Block block{false, m.content, ""};
      if (!merged.empty() && merged.back().role == Role::kUser && merged.back().task.empty()) {
        merged.back().blocks.push_back(std::move(block));
      } else {
        merged.push_back(Turn{Role::kUser, &m, {std::move(block)}, m.task, false});
      }
    } else {
      merged.push_back(Turn{m.role, &m, {}, m.task, false});
    }
  }
  return merged;
}

// Within each user turn, tool results follow the order of the calls in the latest assistant turn
// that made calls (a stable sort; unknown ids sort as position 0).
void sort_tool_results(std::vector<Turn>* turns) {
  std::map<std::string, size_t> order;
  for (Turn& t : *turns) {
    if (t.role == Role::kAssistant && !t.src->tool_calls.empty()) {
      order.clear();
      for (size_t i = 0; i < t.src->tool_calls.size(); ++i) {
        if (!t.src->tool_calls[i].id.empty()) order[t.src->tool_calls[i].id] = i;
      }
    } else if (t.role == Role::kUser) {
      std::vector<Block> results;
      for (const Block& b : t.blocks) {
        if (b.tool_result) results.push_back(b);
      }
      if (results.size() < 2 || order.empty()) continue;
      auto position = [&](const Block& b) {
        const auto it = order.find(b.tool_use_id);
        return it == order.end() ? size_t{0} : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const Block& a, const Block& b) { return position(a) < position(b); });
      size_t k = 0;
      for (Block& b : t.blocks) {
        if (b.tool_result) b = results[k++];
      }
    }
  }
}

int last_user_index(const std::vector<Turn>& turns) {
  for (int i = static_cast<int>(turns.size()) - 1; i >= 0; --i) {
    if (turns[i].role == Role::kUser || turns[i].role == Role::kDeveloper) return i;
  }
  return -1;
}

// Before the last user turn: assistant turns lose their reasoning and developer turns are
// removed; everything from the last user turn on is kept whole.
std::vector<Turn> drop_thinking(std::vector<Turn> turns) {
  const int last_user = last_user_index(turns);
  std::vector<Turn> kept;
  for (int i = 0; i < static_cast<int>(turns.size()); ++i) {
    Turn& t = turns[i];
    const bool keep_role = t.role == Role::kUser || t.role == Role::kSystem || t.role == Role::kLatestReminder;
    if (keep_role || i >= last_user) {
      kept.push_back(std::move(t));
    } else if (t.role == Role::kAssistant) {
      t.drop_reasoning = true;
      kept.push_back(std::move(t));
    }
  }
  return kept;
}

Result<std::string> render_tools(const nlohmann::ordered_json& tools) {
  std::string out = kToolsPreamble;
  bool first = true;
  for (const auto& tool : tools) {
    if (!tool.is_object() || !tool.contains("function")) {
      return invalid_argument("tool {}: expected {{\"type\": \"function\", \"function\": {{...}}}}",
                              python_json_dumps(tool));
    }
    if (!first) out += "\n";
    first = false;
    python_json_dumps_append(tool["function"], &out);
  }
  out += kToolsClosing;
  return out;
}

Status append_system_extras(const ChatMessage& m, std::string* out) {
  if (has_tools(m)) {
    DSV4_ASSIGN_OR_RETURN(std::string tools, render_tools(m.tools));
    *out += "\n\n" + tools;
  }
  if (has_response_format(m)) {
    *out += "\n\n";
    *out += kResponseFormatPrefix;
    python_json_dumps_append(m.response_format, out);
  }
  return Status::ok();
}

// One history tool call as DSML. Arguments that are not JSON become one string parameter named
// "arguments"; JSON that is not an object is an error (the reference encoder crashes on it).
Result<std::string> render_tool_call(const ToolCall& call) {
  // Arguments arrive as a JSON string inside the request, so the body's depth check missed them.
  if (const size_t depth = json_nesting_depth(call.arguments); depth > kMaxJsonDepth)
    return invalid_argument("tool call '{}': arguments nest {} levels deep; at most {} are allowed", call.name, depth,
                            kMaxJsonDepth);
  nlohmann::ordered_json args = nlohmann::ordered_json::parse(call.arguments, nullptr, false);
  if (args.is_discarded()) {
    args = nlohmann::ordered_json::object();
    args["arguments"] = call.arguments;
  }
  if (!args.is_object()) {
    return invalid_argument("tool call '{}': arguments must be a JSON object, found {}", call.name,
                            call.arguments);
  }
  std::string out = fmt::format("<{}invoke name=\"{}\">\n", kDsmlToken, call.name);
  bool first = true;
  for (const auto& [key, value] : args.items()) {
    if (!first) out += "\n";
    first = false;
    const bool is_string = value.is_string();
    out += fmt::format("<{}parameter name=\"{}\" string=\"{}\">", kDsmlToken, key, is_string ? "true" : "false");
    if (is_string) {
      out += value.get_ref<const std::string&>();
    } else {
      python_json_dumps_append(value, &out);
    }
    out += fmt::format("</{}parameter>", kDsmlToken);
  }
  out += fmt::format("\n</{}invoke>", kDsmlToken);
  return out;
}

Result<std::string> render_assistant(const std::vector<Turn>& turns, int idx, int last_user,
                                     const ChatEncodeOptions& opt, bool drop) {
  const ChatMessage& m = *turns[idx].src;
  std::string tool_calls;
  if (!m.tool_calls.empty()) {
    tool_calls = fmt::format("\n\n<{}tool_calls>\n", kDsmlToken);
    for (size_t i = 0; i < m.tool_calls.size(); ++i) {
      DSV4_ASSIGN_OR_RETURN(std::string call, render_tool_call(m.tool_calls[i]));
      if (i > 0) tool_calls += "\n";
      tool_calls += call;
    }
    tool_calls += fmt::format("\n</{}tool_calls>", kDsmlToken);
  }
  // The answer to a task message carries no thinking part.
  const bool prev_has_task = idx > 0 && !turns[idx - 1].task.empty();
  std::string out;
  if (opt.thinking_mode == ThinkingMode::kThinking && !prev_has_task && (!drop || idx > last_user)) {
    if (!turns[idx].drop_reasoning) out += m.reasoning_content;
    out += kThinkEndToken;
  }
  out += m.content;
  out += tool_calls;
  if (!m.wo_eos) out += kEosToken;
  return out;
}

Result<std::string> render_turn(const std::vector<Turn>& turns, int idx, const ChatEncodeOptions& opt, bool drop) {
  const Turn& turn = turns[idx];
  const int last_user = last_user_index(turns);
  const bool thinking = opt.thinking_mode == ThinkingMode::kThinking;
  std::string out;
  if (idx == 0 && thinking && opt.reasoning_effort == ReasoningEffort::kMax) out += kReasoningEffortMax;

  switch (turn.role) {
    case Role::kSystem:
      out += turn.src->content;
      DSV4_RETURN_IF_ERROR(append_system_extras(*turn.src, &out));
      break;
    case Role::kDeveloper:
      if (turn.src->content.empty()) return invalid_argument("a developer message needs non-empty content");
      out += kUserToken;
      out += turn.src->content;
      DSV4_RETURN_IF_ERROR(append_system_extras(*turn.src, &out));
      break;
    case Role::kUser:
      out += kUserToken;
      for (size_t i = 0; i < turn.blocks.size(); ++i) {
        if (i > 0) out += "\n\n";
        const Block& b = turn.blocks[i];
        out += b.tool_result ? "<tool_result>" + b.text + "</tool_result>" : b.text;
      }
      break;
    case Role::kLatestReminder:
      out += kLatestReminderToken;
      out += turn.src->content;
      break;
    case Role::kAssistant: {
      DSV4_ASSIGN_OR_RETURN(std::string assistant, render_assistant(turns, idx, last_user, opt, drop));
      out += assistant;
      break;
    }
    case Role::kTool:
      return internal_error("tool message left after merging");  // merge_tool_messages removes them
  }

  // What follows the message: nothing when the next turn is neither assistant nor reminder;
  // otherwise a task token, or the assistant prefix after a user/developer turn.
  if (idx + 1 < static_cast<int>(turns.size()) && turns[idx + 1].role != Role::kAssistant &&
      turns[idx + 1].role != Role::kLatestReminder) {
    return out;
  }
  if (!turn.task.empty()) {
    const auto it = task_tokens().find(turn.task);
    if (it == task_tokens().end()) {
      return invalid_argument("invalid task '{}' (expected action, query, authority, domain, title or read_url)",
                              turn.task);
    }
    if (turn.task != "action") {
      out += it->second;
    } else {
      out += kAssistantToken;
      out += thinking ? kThinkStartToken : kThinkEndToken;
      out += it->second;
    }
  } else if (turn.role == Role::kUser || turn.role == Role::kDeveloper) {
    out += kAssistantToken;
    const bool open_thinking = thinking && (!drop || idx >= last_user);
    out += open_thinking ? kThinkStartToken : kThinkEndToken;
  }
  return out;
}

}  // namespace

Result<std::string> encode_chat(std::span<const ChatMessage> messages, const ChatEncodeOptions& options) {
  std::vector<Turn> turns = merge_tool_messages(messages);
  sort_tool_results(&turns);
  bool drop = options.drop_thinking;
  for (const Turn& t : turns) {
    if (t.role != Role::kUser && has_tools(*t.src)) drop = false;
  }
  if (options.thinking_mode == ThinkingMode::kThinking && drop) turns = drop_thinking(std::move(turns));

  std::string prompt = options.add_bos ? kBosToken : "";
  for (int i = 0; i < static_cast<int>(turns.size()); ++i) {
    DSV4_ASSIGN_OR_RETURN(std::string text, render_turn(turns, i, options, drop));
    prompt += text;
  }
  return prompt;
}

}  // namespace dsv4::tok
