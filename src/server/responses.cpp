// responses.cpp: see responses.h. Chunk shapes follow OpenAI: the first chat chunk carries
// delta.role, later ones reasoning_content / content / tool_calls, the last one finish_reason;
// with include_usage every chunk has "usage": null and a usage-only chunk (choices: []) precedes
// [DONE]. A tool call is streamed as a header delta (id, name, empty arguments) followed by an
// arguments delta, which is how OpenAI clients accumulate them.
#include "server/responses.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "server/api_error.h"

namespace dsv4::server {
namespace {

std::string token_text(const tok::Tokenizer& t, int32_t id) {
  auto s = t.decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false);
  return s.is_ok() ? s.value() : std::string();
}

Json token_bytes_json(const tok::Tokenizer& t, int32_t id) {
  Json b = Json::array();
  if (t.is_valid(id))
    for (const unsigned char c : t.token_bytes(id)) b.push_back(int(c));
  return b;
}

// Chat logprobs entries: {token, logprob, bytes, top_logprobs: [...]}.
void append_chat_logprobs(const tok::Tokenizer& t, const std::vector<TokenLogprob>& lps, Json* content) {
  for (const TokenLogprob& lp : lps) {
    Json e;
    e["token"] = token_text(t, lp.token);
    e["logprob"] = lp.logprob;
    e["bytes"] = token_bytes_json(t, lp.token);
    Json top = Json::array();
    for (const auto& [id, l] : lp.top) {
      Json o;
      o["token"] = token_text(t, id);
      o["logprob"] = l;
      o["bytes"] = token_bytes_json(t, id);
      top.push_back(std::move(o));
    }
    e["top_logprobs"] = std::move(top);
    content->push_back(std::move(e));
  }
}

Json usage_json(int32_t n_prompt, int32_t n_cached, int32_t n_output, int32_t n_reasoning, bool chat) {
  Json u;
  u["prompt_tokens"] = n_prompt;
  u["completion_tokens"] = n_output;
  u["total_tokens"] = n_prompt + n_output;
  u["prompt_tokens_details"] = Json{{"cached_tokens", n_cached}};
  if (chat) u["completion_tokens_details"] = Json{{"reasoning_tokens", n_reasoning}};
  return u;
}

Json error_event_json(const Status& st) {
  ApiError e = from_status(st);
  if (e.ok()) e = server_error("unknown error");
  return e.to_json();
}

Json response_head(const ResponseMeta& meta, const char* object) {
  Json j;
  j["id"] = meta.id;
  j["object"] = object;
  j["created"] = meta.created;
  j["model"] = meta.model;
  return j;
}

// What every choice tracks: usage and the final state.
struct Tally {
  bool finished = false;
  FinishReason finish = FinishReason::kNone;
  std::string stop_reason;
  bool stop_string = false;
  int32_t stop_token = -1;
  Status error;
  int32_t n_prompt = 0, n_cached = 0, n_output = 0;

  void take_final(const TokenEvent& ev) {
    finished = true;
    finish = ev.finish;
    stop_reason = ev.stop_reason;
    stop_string = ev.stop_string;
    stop_token = ev.stop_token;
    error = ev.error;
    n_prompt = ev.n_prompt_tokens;
    n_cached = ev.n_cached_tokens;
    n_output = ev.n_output_tokens;
    if (finish == FinishReason::kError && error.is_ok()) error = internal_error("the request failed in the engine");
    if (finish == FinishReason::kAbort && error.is_ok())
      error = Status(StatusCode::kResourceExhausted, "the request was aborted");
  }
  // vLLM's stop_reason: the stop string, the stop token id, or null (EOS, length, ...). Taken
  // from the event's fields, not parsed from stop_reason: a client's stop string "token:x" made
  // std::stoi throw (500, or std::terminate when streaming) and "eos" read as null.
  Json stop_reason_json() const {
    if (stop_string) return Json(stop_reason);
    if (stop_token >= 0) return Json(stop_token);
    return Json();
  }
};

// One choice of a response: consumes its request's events; streaming, appends its chunks (the
// last one with finish_reason) but not what ends the stream (GroupResponder writes the error
// event, the usage chunk and [DONE] once for all choices).
class Choice {
 public:
  virtual ~Choice() = default;
  virtual void consume(std::vector<TokenEvent>& events, std::string* sse) = 0;
  bool finished() const { return tally_.finished; }
  const Status& error() const { return tally_.error; }
  // Non-streaming: the choice object, once finished without error.
  virtual Json final_choice() = 0;
  const Tally& tally() const { return tally_; }
  virtual int32_t n_reasoning() const { return 0; }

 protected:
  Tally tally_;
};

class ChatChoice final : public Choice {
 public:
  ChatChoice(const ResponseMeta& meta, int index, tok::ThinkingMode mode, const tok::Tokenizer& t)
      : meta_(meta), index_(index), tokenizer_(t), parser_(mode) {}

  void consume(std::vector<TokenEvent>& events, std::string* sse) override {
    for (TokenEvent& ev : events) {
      if (meta_.stream && !sent_role_) {
        Json delta;
        delta["role"] = "assistant";
        delta["content"] = "";
        sse->append(sse_data(chunk(std::move(delta), Json())));
        sent_role_ = true;
      }
      // Tokens count as reasoning while the parser is still in the reasoning part.
      if (parser_.in_reasoning()) n_reasoning_ += int32_t(ev.tokens.size());
      tok::OutputDelta d;
      parser_.feed(ev.text, &d);
      if (ev.finish != FinishReason::kNone) {
        parser_.finish(&d);
        if (!parser_.problem().empty())
          fmt::print(stderr, "server: {}: model output did not parse ({}); passed through as text\n", meta_.id,
                     parser_.problem());
        tally_.take_final(ev);
      }
      pending_lp_.insert(pending_lp_.end(), ev.logprobs.begin(), ev.logprobs.end());
      emit(d, sse);
      if (tally_.finished && meta_.stream && tally_.error.is_ok()) {
        Json last = chunk(Json::object(), finish_reason());
        last["choices"][0]["stop_reason"] = tally_.stop_reason_json();
        sse->append(sse_data(last));
      }
    }
  }

  int32_t n_reasoning() const override { return n_reasoning_; }

  Json final_choice() override {
    Json msg;
    msg["role"] = "assistant";
    msg["content"] = content_.empty() && !tool_calls_.empty() ? Json() : Json(content_);
    if (!reasoning_.empty()) msg["reasoning_content"] = reasoning_;
    if (!tool_calls_.empty()) msg["tool_calls"] = tool_calls_;
    Json choice;
    choice["index"] = index_;
    choice["message"] = std::move(msg);
    choice["logprobs"] = meta_.logprobs ? Json{{"content", all_lp_}} : Json();
    choice["finish_reason"] = finish_reason();
    choice["stop_reason"] = tally_.stop_reason_json();
    return choice;
  }

 private:
  Json chunk(Json delta, Json finish) {
    Json choice;
    choice["index"] = index_;
    choice["delta"] = std::move(delta);
    Json lp;
    if (meta_.logprobs && !pending_lp_.empty()) {
      Json content = Json::array();
      append_chat_logprobs(tokenizer_, pending_lp_, &content);
      pending_lp_.clear();
      lp["content"] = std::move(content);
    }
    choice["logprobs"] = std::move(lp);
    choice["finish_reason"] = std::move(finish);
    Json j = response_head(meta_, "chat.completion.chunk");
    j["choices"] = Json::array({std::move(choice)});
    if (meta_.include_usage) j["usage"] = Json();
    return j;
  }

  Json finish_reason() const {
    switch (tally_.finish) {
      case FinishReason::kStop: return tool_calls_.empty() ? "stop" : "tool_calls";
      case FinishReason::kLength: return "length";
      case FinishReason::kAbort: return "abort";
      case FinishReason::kError: return "error";
      case FinishReason::kNone: return Json();
    }
    return Json();
  }

  void emit(tok::OutputDelta& d, std::string* sse) {
    if (!meta_.stream) {
      reasoning_ += d.reasoning;
      content_ += d.content;
      append_chat_logprobs(tokenizer_, pending_lp_, &all_lp_);
      pending_lp_.clear();
      for (const auto& c : d.tool_calls) tool_calls_.push_back(tool_call_json(c, true));
      return;
    }
    if (!d.reasoning.empty() || !d.content.empty()) {
      Json delta = Json::object();
      if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
      if (!d.content.empty()) delta["content"] = d.content;
      sse->append(sse_data(chunk(std::move(delta), Json())));
    }
    for (const auto& c : d.tool_calls) {
      const Json full = tool_call_json(c, true);
      tool_calls_.push_back(full);
      Json header = full;
      header["function"]["arguments"] = "";
      sse->append(sse_data(chunk(Json{{"tool_calls", Json::array({header})}}, Json())));
      Json args;
      args["index"] = full["index"];
      args["function"] = Json{{"arguments", c.arguments}};
      sse->append(sse_data(chunk(Json{{"tool_calls", Json::array({args})}}, Json())));
    }
  }

  Json tool_call_json(const tok::ParsedToolCall& c, bool with_index) {
    Json j;
    if (with_index && meta_.stream) j["index"] = int(tool_calls_.size());
    j["id"] = random_id("call_");
    j["type"] = "function";
    j["function"] = Json{{"name", c.name}, {"arguments", c.arguments}};
    return j;
  }

  const ResponseMeta& meta_;
  int index_;
  const tok::Tokenizer& tokenizer_;
  ChoiceParser parser_;
  bool sent_role_ = false;
  int32_t n_reasoning_ = 0;
  std::vector<TokenLogprob> pending_lp_;
  // Non-streaming accumulators (tool_calls_ also numbers streamed calls).
  std::string reasoning_, content_;
  Json tool_calls_ = Json::array();
  Json all_lp_ = Json::array();
};

class CompletionChoice final : public Choice {
 public:
  CompletionChoice(const ResponseMeta& meta, int index, const tok::Tokenizer& t)
      : meta_(meta), index_(index), tokenizer_(t) {}

  void consume(std::vector<TokenEvent>& events, std::string* sse) override {
    for (TokenEvent& ev : events) {
      if (ev.finish != FinishReason::kNone) tally_.take_final(ev);
      Json lp = logprobs_json(ev.logprobs);
      text_ += ev.text;
      if (!meta_.stream) continue;
      if (!ev.text.empty() || !ev.logprobs.empty()) sse->append(sse_data(chunk(ev.text, std::move(lp), Json())));
      if (tally_.finished && tally_.error.is_ok()) {
        Json last = chunk("", Json(), finish_reason());
        last["choices"][0]["stop_reason"] = tally_.stop_reason_json();
        sse->append(sse_data(last));
      }
    }
  }

  Json final_choice() override {
    Json choice;
    choice["index"] = index_;
    choice["text"] = text_;
    choice["logprobs"] = meta_.logprobs ? all_lp_ : Json();
    choice["finish_reason"] = finish_reason();
    choice["stop_reason"] = tally_.stop_reason_json();
    return choice;
  }

 private:
  Json chunk(const std::string& text, Json logprobs, Json finish) const {
    Json choice;
    choice["index"] = index_;
    choice["text"] = text;
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = std::move(finish);
    Json j = response_head(meta_, "text_completion");
    j["choices"] = Json::array({std::move(choice)});
    if (meta_.include_usage) j["usage"] = Json();
    return j;
  }

  Json finish_reason() const {
    switch (tally_.finish) {
      case FinishReason::kStop: return "stop";
      case FinishReason::kLength: return "length";
      case FinishReason::kAbort: return "abort";
      case FinishReason::kError: return "error";
      case FinishReason::kNone: return Json();
    }
    return Json();
  }

  // Legacy shape: {tokens, token_logprobs, top_logprobs: [{text: logprob}], text_offset}. The
  // streamed form covers this event's tokens; all_lp_ accumulates for the final body.
  Json logprobs_json(const std::vector<TokenLogprob>& lps) {
    if (!meta_.logprobs || lps.empty()) return Json();
    Json j;
    j["tokens"] = Json::array();
    j["token_logprobs"] = Json::array();
    j["top_logprobs"] = Json::array();
    j["text_offset"] = Json::array();
    if (all_lp_.is_null()) all_lp_ = j;
    for (const TokenLogprob& lp : lps) {
      const std::string s = token_text(tokenizer_, lp.token);
      Json top = Json::object();
      for (const auto& [id, l] : lp.top) top[token_text(tokenizer_, id)] = l;
      for (Json* dst : {&j, &all_lp_}) {
        (*dst)["tokens"].push_back(s);
        (*dst)["token_logprobs"].push_back(lp.logprob);
        (*dst)["top_logprobs"].push_back(top);
        (*dst)["text_offset"].push_back(text_offset_);
      }
      // Offsets count characters (code points), as vLLM's len(token) does, so that clients can
      // index the returned text with them; s is valid UTF-8 (decode's output).
      for (const unsigned char c : s) text_offset_ += (c & 0xC0) != 0x80;
    }
    return j;
  }

  const ResponseMeta& meta_;
  int index_;
  const tok::Tokenizer& tokenizer_;
  std::string text_;
  Json all_lp_;
  int64_t text_offset_ = 0;
};

// The response of one request with meta.n choices, each fed by its own engine request. Streams
// interleave the choices' chunks as their events come and end once: at the first error (the
// error event and [DONE]; the server then aborts the other choices) or when every choice has
// finished (the usage chunk if asked for, and [DONE]). Usage counts the prompt once and the
// completion tokens of all choices, as OpenAI and vLLM do.
class GroupResponder final : public Responder {
 public:
  GroupResponder(const ResponseMeta& meta, bool chat) : meta_(meta), chat_(chat) {}

  void add(std::unique_ptr<Choice> c) { choices_.push_back(std::move(c)); }

  void consume(size_t choice, std::vector<TokenEvent>& events, std::string* sse) override {
    if (done_ || choice >= choices_.size()) return;
    Choice& c = *choices_[choice];
    c.consume(events, sse);
    if (!c.finished()) return;
    if (!c.error().is_ok()) {
      error_ = c.error();
      done_ = true;
      // Streaming already answered 200; the error travels as an event (vLLM does the same).
      if (meta_.stream) sse->append(sse_data(error_event_json(error_)) + kSseDone);
      return;
    }
    for (const auto& other : choices_)
      if (!other->finished()) return;
    done_ = true;
    if (!meta_.stream) return;
    if (meta_.include_usage) {
      Json u = response_head(meta_, chat_ ? "chat.completion.chunk" : "text_completion");
      u["choices"] = Json::array();
      u["usage"] = usage();
      sse->append(sse_data(u));
    }
    sse->append(kSseDone);
  }

  bool finished() const override { return done_; }
  const Status& error() const override { return error_; }
  const ResponseMeta& meta() const { return meta_; }

  std::string final_body() override {
    if (!error_.is_ok()) return dump_json(error_event_json(error_));
    Json j = response_head(meta_, chat_ ? "chat.completion" : "text_completion");
    j["choices"] = Json::array();
    for (const auto& c : choices_) j["choices"].push_back(c->final_choice());
    j["usage"] = usage();
    return dump_json(j);
  }

 private:
  Json usage() const {
    const Tally& first = choices_.front()->tally();
    int32_t n_output = 0, n_reasoning = 0;
    for (const auto& c : choices_) {
      n_output += c->tally().n_output;
      n_reasoning += c->n_reasoning();
    }
    return usage_json(first.n_prompt, first.n_cached, n_output, n_reasoning, chat_);
  }

  ResponseMeta meta_;  // the choices hold references to it
  bool chat_;
  std::vector<std::unique_ptr<Choice>> choices_;
  bool done_ = false;
  Status error_;
};

}  // namespace

std::string sse_data(const Json& j) { return "data: " + dump_json(j) + "\n\n"; }

std::unique_ptr<Responder> make_chat_responder(const ResponseMeta& meta, tok::ThinkingMode mode,
                                               const tok::Tokenizer& tokenizer) {
  auto g = std::make_unique<GroupResponder>(meta, /*chat=*/true);
  for (int i = 0; i < std::max(meta.n, 1); ++i) g->add(std::make_unique<ChatChoice>(g->meta(), i, mode, tokenizer));
  return g;
}

std::unique_ptr<Responder> make_completion_responder(const ResponseMeta& meta, const tok::Tokenizer& tokenizer) {
  auto g = std::make_unique<GroupResponder>(meta, /*chat=*/false);
  for (int i = 0; i < std::max(meta.n, 1); ++i) g->add(std::make_unique<CompletionChoice>(g->meta(), i, tokenizer));
  return g;
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), uint32_t(rng()));
}

}  // namespace dsv4::server
