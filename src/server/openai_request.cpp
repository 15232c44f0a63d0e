// openai_request.cpp: see openai_request.h. Unknown fields are ignored (clients send user,
// metadata, store, ...); known fields we cannot honour yet are refused with a 400 that says so,
// rather than silently changing what the client asked for.
#include "server/openai_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

namespace dsv4::server {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

// logit_bias: {"<token id>": bias in [-100, 100], ...}, as OpenAI sends it (ids as decimal
// strings). Each id once (JSON objects may repeat a key; nlohmann keeps the last).
ApiError parse_logit_bias(const Json& lb, int32_t vocab_size, std::vector<std::pair<int32_t, float>>* out) {
  out->clear();
  for (const auto& [key, value] : lb.items()) {
    int64_t id = -1;
    const char* end = key.data() + key.size();
    const auto [ptr, ec] = std::from_chars(key.data(), end, id);
    if (key.empty() || ec != std::errc() || ptr != end || id < 0 || id >= vocab_size)
      return bad_request(fmt::format("'logit_bias' keys must be token ids in [0, {}), found {}", vocab_size,
                                     dump_json(Json(key.substr(0, 40)))),
                         "logit_bias");
    if (!value.is_number())
      return bad_request(fmt::format("'logit_bias' values must be numbers, found {} for token {}", json_kind(value), id),
                         "logit_bias");
    if (const double b = value.get<double>(); !(b >= -100.0 && b <= 100.0))
      return bad_request(fmt::format("'logit_bias' values must be in [-100, 100], found {} for token {}", b, id),
                         "logit_bias");
    out->emplace_back(int32_t(id), float(value.get<double>()));
  }
  // "7" and "07" are one token.
  std::vector<int32_t> ids;
  for (const auto& [id, b] : *out) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  if (const auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end())
    return bad_request(fmt::format("'logit_bias' names token {} twice", *dup), "logit_bias");
  return ApiError{};
}

// Fields shared by both endpoints. `chat` selects the chat spelling of logprobs.
ApiError parse_common(const Json& j, const RequestContext& ctx, bool chat, CommonRequest* c) {
  ApiError err;
  FieldReader f(j, &err);
  f.str("model", &c->model);
  if (!err.ok()) return err;
  if (ApiError e = check_model(c->model, ctx.config); !e.ok()) return e;

  f.boolean("stream", &c->stream);
  if (const Json* so = f.object("stream_options")) {
    if (!c->stream) return bad_request("'stream_options' is only allowed with \"stream\": true", "stream_options");
    FieldReader fo(*so, &err, "stream_options.");
    fo.boolean("include_usage", &c->include_usage);
  }
  f.integer("n", &c->n, 1, kMaxChoices);
  int64_t best_of = 1;
  if (!chat && err.ok() && f.has("best_of") && f.integer("best_of", &best_of, 1, kMaxChoices)) {
    // best_of = n returns every candidate, which is what n alone does.
    if (best_of < c->n) return bad_request(fmt::format("best_of ({}) must be >= n ({})", best_of, c->n), "best_of");
    if (best_of > c->n)
      return bad_request(fmt::format("best_of > n is not supported (found best_of {}, n {})", best_of, c->n),
                         "best_of");
  }

  // max_completion_tokens supersedes the deprecated max_tokens.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    int64_t v = 0;
    if (f.has(key) && f.integer(key, &v, 1, kIntMax)) {
      c->max_tokens = v;
      c->max_tokens_set = true;
    }
  }
  double d = 1.0;
  if (f.has("temperature") && f.number("temperature", &d, 0.0, 100.0)) c->sampling.temperature = float(d);
  if (f.has("top_p") && f.number("top_p", &d, 0.0, 1.0)) {
    // Sampling takes a 32-bit float: a positive value below its smallest (~1e-45) is 0 there.
    if (float(d) <= 0.0f)
      return bad_request(
          fmt::format("'top_p' must be in (0, 1], found {}{}", d, d > 0.0 ? " (0 as a 32-bit float)" : ""), "top_p");
    c->sampling.top_p = float(d);
  }
  if (f.has("min_p") && f.number("min_p", &d, 0.0, 1.0)) c->sampling.min_p = float(d);
  int64_t v = 0;
  if (f.has("top_k") && f.integer("top_k", &v, -1, ctx.limits.vocab_size)) c->sampling.top_k = v < 0 ? 0 : int32_t(v);
  if (f.has("seed") && f.integer("seed", &v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    c->sampling.has_seed = true;
    c->sampling.seed = uint64_t(v);
  }
  if (chat) {
    bool logprobs = false;
    f.boolean("logprobs", &logprobs);
    int64_t top = 0;
    if (f.has("top_logprobs")) {
      f.integer("top_logprobs", &top, 0, ctx.limits.max_logprobs);
      if (err.ok() && !logprobs)
        return bad_request("'top_logprobs' needs \"logprobs\": true", "top_logprobs");
    }
    if (logprobs) c->sampling.logprobs = int32_t(top);
  } else if (f.has("logprobs")) {
    if (f.integer("logprobs", &v, 0, ctx.limits.max_logprobs)) c->sampling.logprobs = int32_t(v);
  }

  f.str_list("stop", &c->stop.stop, size_t(ctx.limits.max_stop_strings));
  for (const std::string& s : c->stop.stop) {
    if (s.empty()) return bad_request("'stop' strings must not be empty", "stop");
    // The engine refuses these too, but its error cannot name the field.
    if (int64_t(s.size()) > ctx.limits.max_stop_string_bytes)
      return bad_request(fmt::format("'stop' strings must be at most {} bytes long, found one of {} bytes",
                                     ctx.limits.max_stop_string_bytes, s.size()),
                         "stop");
  }
  f.int_list("stop_token_ids", &c->stop.stop_token_ids, 0, ctx.limits.vocab_size - 1, 64);
  f.boolean("ignore_eos", &c->stop.ignore_eos);
  f.boolean("skip_special_tokens", &c->stop.skip_special_tokens);

  // Penalties and logit_bias (OpenAI's ranges; repetition_penalty is vLLM's).
  if (f.has("presence_penalty") && f.number("presence_penalty", &d, -2.0, 2.0)) c->sampling.presence_penalty = float(d);
  if (f.has("frequency_penalty") && f.number("frequency_penalty", &d, -2.0, 2.0))
    c->sampling.frequency_penalty = float(d);
  if (f.has("repetition_penalty") && f.number("repetition_penalty", &d, 0.01, 100.0))
    c->sampling.repetition_penalty = float(d);
  if (const Json* lb = f.object("logit_bias"); lb != nullptr) {
    if (ApiError e = parse_logit_bias(*lb, ctx.limits.vocab_size, &c->sampling.logit_bias); !e.ok()) return e;
  }
  if (!err.ok()) return err;

  // Known options we do not implement: refuse instead of ignoring them.
  if (f.has("min_tokens") && f.integer("min_tokens", &v, 0, kIntMax) && v != 0)
    return bad_request("'min_tokens' is not supported yet (only 0)", "min_tokens");
  bool flag = false;
  if (f.boolean("include_stop_str_in_output", &flag) && flag)
    return bad_request("'include_stop_str_in_output' is not supported yet", "include_stop_str_in_output");
  return err;
}

// Context check and the default max_tokens (everything the context has left, as vLLM).
ApiError finalize_lengths(const RequestContext& ctx, CommonRequest* c) {
  const int64_t n_prompt = int64_t(c->prompt.size());
  const int64_t max_len = ctx.limits.max_model_len;
  if (n_prompt == 0) return bad_request("the prompt is empty", "prompt");
  if (n_prompt >= max_len) {
    return bad_request(fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                                   "tokens, which leaves no room for the completion.",
                                   max_len, n_prompt),
                       "messages", "context_length_exceeded");
  }
  if (!c->max_tokens_set) {
    c->max_tokens = max_len - n_prompt;
  } else if (n_prompt + c->max_tokens > max_len) {
    return bad_request(fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                   "tokens ({} in the messages, {} in the completion). Please reduce the length of "
                                   "the messages or completion.",
                                   max_len, n_prompt + c->max_tokens, n_prompt, c->max_tokens),
                       "messages", "context_length_exceeded");
  }
  c->stop.max_tokens = int32_t(c->max_tokens);
  return ApiError{};
}

Result<tok::ReasoningEffort> parse_effort(const std::string& s, bool* off) {
  *off = false;
  if (s == "none") {
    *off = true;
    return tok::ReasoningEffort::kDefault;
  }
  // DeepSeek maps low and medium to high, and xhigh to max.
  if (s == "minimal" || s == "low" || s == "medium" || s == "high") return tok::ReasoningEffort::kHigh;
  if (s == "xhigh" || s == "max") return tok::ReasoningEffort::kMax;
  return invalid_argument("'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max; found '{}'",
                          s);
}

// Attaches tools / response_format to the first system message, inserting an empty one if the
// conversation has none (as vLLM's DeepSeek tokenizer wrapper does).
tok::ChatMessage& system_message(std::vector<tok::ChatMessage>* msgs) {
  if (msgs->empty() || (*msgs)[0].role != tok::Role::kSystem) {
    tok::ChatMessage sys;
    sys.role = tok::Role::kSystem;
    msgs->insert(msgs->begin(), std::move(sys));
  }
  return (*msgs)[0];
}

ApiError parse_tools(const Json& j, Json* tools, bool* enabled) {
  ApiError err;
  FieldReader f(j, &err);
  const Json* t = f.array("tools");
  if (!err.ok()) return err;
  *enabled = t != nullptr && !t->empty();
  if (*enabled) {
    for (size_t i = 0; i < t->size(); ++i) {
      const Json& tool = (*t)[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object())
        return bad_request(where + " must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tools");
      if (tool.contains("type") && !(tool["type"].is_string() && tool["type"] == "function"))
        return bad_request(where + ".type must be \"function\"", "tools");
      const Json& fn = tool["function"];
      if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get_ref<const std::string&>().empty())
        return bad_request(where + ".function.name must be a non-empty string", "tools");
      if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object())
        return bad_request(where + ".function.parameters must be an object", "tools");
    }
    *tools = *t;
  }
  if (f.has("tool_choice")) {
    const Json& tc = j["tool_choice"];
    if (tc.is_string()) {
      const std::string s = tc.get<std::string>();
      if (s == "none") {
        *enabled = false;  // the model is not told about the tools, so it cannot call them
      } else if (s == "required") {
        return bad_request("tool_choice \"required\" is not supported yet (it needs constrained decoding); use \"auto\"",
                           "tool_choice");
      } else if (s != "auto") {
        return bad_request(fmt::format("tool_choice must be \"none\", \"auto\" or \"required\", found \"{}\"", s),
                           "tool_choice");
      }
    } else if (tc.is_object()) {
      return bad_request("a named tool_choice is not supported yet (it needs constrained decoding); use \"auto\"",
                         "tool_choice");
    } else {
      return bad_request(fmt::format("tool_choice must be a string or an object, found {}", json_kind(tc)),
                         "tool_choice");
    }
  }
  return err;
}

}  // namespace

ApiError check_model(const std::string& model, const ServerConfig& config) {
  if (model.empty()) return ApiError{};
  if (std::find(config.served_model_names.begin(), config.served_model_names.end(), model) !=
      config.served_model_names.end())
    return ApiError{};
  return not_found_error(fmt::format("The model '{}' does not exist (this server serves '{}').", model,
                                     config.served_model_names.empty() ? "" : config.served_model_names[0]),
                         "model_not_found");
}

ApiError resolve_thinking(const Json& j, bool default_thinking, tok::ThinkingMode* mode,
                          tok::ReasoningEffort* effort) {
  ApiError err;
  FieldReader f(j, &err);
  // Explicit switches, each (source, on).
  std::vector<std::pair<std::string, bool>> switches;
  std::string effort_str, effort_src;
  if (f.has("thinking")) {
    const Json& t = j["thinking"];
    if (t.is_boolean()) {
      switches.emplace_back("thinking", t.get<bool>());
    } else if (t.is_object()) {
      FieldReader ft(t, &err, "thinking.");
      std::string type;
      ft.str("type", &type);
      if (!err.ok()) return err;
      if (type == "enabled") switches.emplace_back("thinking.type", true);
      else if (type == "disabled") switches.emplace_back("thinking.type", false);
      else return bad_request(fmt::format("'thinking.type' must be \"enabled\" or \"disabled\", found \"{}\"", type),
                              "thinking");
    } else {
      return bad_request(fmt::format("'thinking' must be {{\"type\": \"enabled\"|\"disabled\"}}, found {}",
                                     json_kind(t)),
                         "thinking");
    }
  }
  if (const Json* kw = f.object("chat_template_kwargs")) {
    FieldReader fk(*kw, &err, "chat_template_kwargs.");
    for (const char* key : {"thinking", "enable_thinking"}) {
      bool on = false;
      if (fk.has(key) && fk.boolean(key, &on)) switches.emplace_back(std::string("chat_template_kwargs.") + key, on);
    }
    if (fk.has("reasoning_effort") && fk.str("reasoning_effort", &effort_str))
      effort_src = "chat_template_kwargs.reasoning_effort";
  }
  if (!err.ok()) return err;
  if (f.has("reasoning_effort")) {
    std::string top;
    if (!f.str("reasoning_effort", &top)) return err;
    if (!effort_src.empty() && top != effort_str)
      return bad_request(fmt::format("'reasoning_effort' (\"{}\") contradicts {} (\"{}\")", top, effort_src, effort_str),
                         "reasoning_effort");
    effort_str = top;
    effort_src = "reasoning_effort";
  }
  *effort = tok::ReasoningEffort::kDefault;
  bool effort_given = false;
  if (!effort_src.empty()) {
    bool off = false;
    auto e = parse_effort(effort_str, &off);
    if (!e.is_ok()) return bad_request(e.status().message(), "reasoning_effort");
    if (off) switches.emplace_back(effort_src + "=none", false);
    else effort_given = true;
    *effort = e.value();
  }
  for (size_t i = 1; i < switches.size(); ++i) {
    if (switches[i].second != switches[0].second) {
      return bad_request(fmt::format("{} turns thinking {} but {} turns it {}", switches[0].first,
                                     switches[0].second ? "on" : "off", switches[i].first,
                                     switches[i].second ? "on" : "off"),
                         "thinking");
    }
  }
  // An effort other than "none" asks for reasoning, unless thinking is explicitly off.
  const bool on = !switches.empty() ? switches[0].second : (effort_given || default_thinking);
  *mode = on ? tok::ThinkingMode::kThinking : tok::ThinkingMode::kChat;
  if (!on) *effort = tok::ReasoningEffort::kDefault;
  return ApiError{};
}

ApiError render_chat_prompt(const Json& j, const RequestContext& ctx, std::vector<int32_t>* ids,
                            tok::ThinkingMode* thinking, tok::ReasoningEffort* effort, bool* tools_offered) {
  ids->clear();
  ApiError err;
  FieldReader f(j, &err);
  const Json* messages = f.array("messages");
  if (!err.ok()) return err;
  if (messages == nullptr || messages->empty())
    return bad_request("'messages' is required: a non-empty array of {\"role\", \"content\"} objects", "messages");
  // Accept vLLM's newer "reasoning" as a spelling of "reasoning_content".
  Json msgs = *messages;
  for (Json& m : msgs) {
    if (m.is_object() && m.contains("reasoning") && m["reasoning"].is_string() &&
        (!m.contains("reasoning_content") || m["reasoning_content"].is_null()))
      m["reasoning_content"] = m["reasoning"];
  }
  auto parsed = tok::chat_messages_from_json(msgs);
  if (!parsed.is_ok()) return bad_request(parsed.status().message(), "messages");
  std::vector<tok::ChatMessage> chat = std::move(parsed).value();

  if (ApiError e = resolve_thinking(j, ctx.config.default_thinking, thinking, effort); !e.ok()) return e;
  Json tools;
  if (ApiError e = parse_tools(j, &tools, tools_offered); !e.ok()) return e;
  if (*tools_offered) system_message(&chat).tools = tools;
  if (const Json* rf = f.object("response_format")) {
    std::string type;
    FieldReader fr(*rf, &err, "response_format.");
    fr.str("type", &type);
    if (!err.ok()) return err;
    if (type == "json_object" || type == "json_schema") {
      // DeepSeek's encoder states the format in the system prompt; nothing constrains decoding.
      system_message(&chat).response_format = *rf;
    } else if (type != "text") {
      return bad_request(fmt::format("'response_format.type' must be text, json_object or json_schema, found \"{}\"",
                                     type),
                         "response_format");
    }
  }
  bool continue_final = false;
  f.boolean("continue_final_message", &continue_final);
  if (!err.ok()) return err;
  if (continue_final) {
    if (chat.back().role != tok::Role::kAssistant)
      return bad_request("'continue_final_message' needs an assistant message last", "continue_final_message");
    chat.back().wo_eos = true;
  }
  tok::ChatEncodeOptions opt;
  opt.thinking_mode = *thinking;
  opt.reasoning_effort = *effort;
  auto prompt = tok::encode_chat(chat, opt);
  if (!prompt.is_ok()) return bad_request(prompt.status().message(), "messages");
  auto toks = ctx.tokenizer.encode(prompt.value(), /*parse_special=*/true);
  if (!toks.is_ok()) return bad_request(toks.status().message(), "messages");
  *ids = std::move(toks).value();
  return ApiError{};
}

ApiError parse_chat_request(const Json& j, const RequestContext& ctx, ChatRequest* out) {
  *out = ChatRequest{};
  if (!j.is_object()) return bad_request(fmt::format("the request body must be a JSON object, found {}", json_kind(j)));
  if (ApiError e = parse_common(j, ctx, /*chat=*/true, &out->common); !e.ok()) return e;
  if (ApiError e = render_chat_prompt(j, ctx, &out->common.prompt, &out->thinking, &out->effort, &out->tools_offered);
      !e.ok())
    return e;
  return finalize_lengths(ctx, &out->common);
}

ApiError parse_completion_request(const Json& j, const RequestContext& ctx, CompletionRequest* out) {
  *out = CompletionRequest{};
  if (!j.is_object()) return bad_request(fmt::format("the request body must be a JSON object, found {}", json_kind(j)));
  if (ApiError e = parse_common(j, ctx, /*chat=*/false, &out->common); !e.ok()) return e;
  ApiError err;
  FieldReader f(j, &err);
  bool echo = false;
  if (f.boolean("echo", &echo) && echo) return bad_request("'echo' is not supported yet", "echo");
  std::string suffix;
  if (f.str("suffix", &suffix) && !suffix.empty()) return bad_request("'suffix' is not supported", "suffix");
  if (!err.ok()) return err;
  if (!f.has("prompt")) return bad_request("'prompt' is required: a string or an array of token ids", "prompt");
  const Json* p = &j["prompt"];
  // A one-element batch is the same as its element.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  std::vector<int32_t>& ids = out->common.prompt;
  if (p->is_string()) {
    auto toks = ctx.tokenizer.encode(p->get_ref<const std::string&>(), /*parse_special=*/true);
    if (!toks.is_ok()) return bad_request(toks.status().message(), "prompt");
    ids = std::move(toks).value();
  } else if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    return bad_request("batched prompts are not supported yet: send one prompt (a string or an array of token ids) "
                       "per request",
                       "prompt");
  } else if (p->is_array()) {
    // Token ids. The bad element is named as sent: a float, a string, or an unsigned value that
    // would wrap to a negative int64.
    for (size_t i = 0; i < p->size(); ++i) {
      const Json& e = (*p)[i];
      const bool in_vocab = (e.is_number_unsigned() && e.get<uint64_t>() < uint64_t(ctx.limits.vocab_size)) ||
                            (e.is_number_integer() && !e.is_number_unsigned() && e.get<int64_t>() >= 0 &&
                             e.get<int64_t>() < ctx.limits.vocab_size);
      if (!in_vocab)
        return bad_request(fmt::format("prompt[{}] must be a token id, an integer in [0, {}), found {}", i,
                                       ctx.limits.vocab_size, dump_json(e)),
                           "prompt");
      ids.push_back(int32_t(e.get<int64_t>()));
    }
  } else {
    return bad_request(fmt::format("'prompt' must be a string or an array of token ids, found {}", json_kind(*p)),
                       "prompt");
  }
  ApiError e = finalize_lengths(ctx, &out->common);
  if (!e.ok() && e.param == "messages") e.param = "prompt";
  return e;
}

}  // namespace dsv4::server
