// responses_test.cpp: the chat and completion responders and the chat output splitter under
// random model output (what the --demo model and a drifting real model produce): random token
// ids, biased towards </think>, DSML pieces, EOS and lone UTF-8 bytes, go through the engine's
// text path (TextOutput) into ChoiceParser and the responders. Whatever the ids and however the
// text is split: the split never changes the result, no text is duplicated, every SSE event is
// strictly valid JSON, and the streamed deltas, logprobs and usage add up to the non-streamed
// body. Seeds are fixed, so a failure reproduces.
#include <gtest/gtest.h>

#include <random>

#include "engine/test_tokenizer.h"
#include "engine/text_output.h"
#include "server/choice_output.h"
#include "server/responses.h"
#include "tokenizer/utf8.h"

namespace dsv4::server {
namespace {

using testing_util::v4_tokenizer;

std::string show(const std::string& s) { return dump_json(Json(s)); }

// Token ids of the pieces the output parser reacts to, plus filler.
std::vector<int32_t> marker_ids(const tok::Tokenizer& t) {
  std::vector<int32_t> ids;
  for (const char* f : {"</think>", "<think>", "｜DSML｜", "\n\n", "\n", "<", "</", ">", "tool_calls", "invoke",
                        "parameter", " name=\"", "\">\n", ">\n", "\" string=\"", "true", "false", "\">", "f", "x",
                        "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "{\"a\": 1}", "\"", "你好", "😀", " "}) {
    const auto encoded = t.encode(f, /*parse_special=*/true);
    ids.insert(ids.end(), encoded->begin(), encoded->end());
  }
  return ids;
}

// Single-byte tokens >= 0x80: lone UTF-8 lead and continuation bytes.
std::vector<int32_t> byte_ids(const tok::Tokenizer& t) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < 128000; ++id) {
    if (t.token_bytes(id).size() == 1 && static_cast<unsigned char>(t.token_bytes(id)[0]) >= 0x80) ids.push_back(id);
  }
  return ids;
}

// A completion made of the real grammar (reasoning, content, a DSML block with calls, EOS, a
// tail), then mutated: cut, a few bytes deleted or repeated.
std::string grammar_text(std::mt19937& rng) {
  std::string s;
  if (rng() % 2) s += "reason " + std::to_string(rng() % 100) + "</think>";
  if (rng() % 2) s += "content 😀";
  if (rng() % 4) {
    s += "\n\n<｜DSML｜tool_calls>\n";
    for (int i = 0, n = rng() % 3; i < n; ++i) {
      s += "<｜DSML｜invoke name=\"f" + std::to_string(i) + "\">\n";
      for (int k = 0, m = rng() % 3; k < m; ++k) {
        const char* values[] = {"1", "[1, {\"a\": \"b\"}]", "\"q\"", "x y", "null", "{", "1 2", "\"\\ud800\""};
        s += "<｜DSML｜parameter name=\"k" + std::to_string(k) + "\" string=\"" + (rng() % 2 ? "true" : "false") +
             "\">" + values[rng() % 8] + "</｜DSML｜parameter>\n";
      }
      s += "</｜DSML｜invoke>\n";
    }
    if (rng() % 4) s += "</｜DSML｜tool_calls>";
  }
  if (rng() % 2) s += "<｜end▁of▁sentence｜>";
  if (rng() % 3 == 0) s += rng() % 2 ? "tail" : "<think>";
  const int mutation = rng() % 5;
  if (mutation == 0 && !s.empty()) s.resize(rng() % s.size());
  if (mutation == 1 && s.size() > 4) s.erase(rng() % (s.size() - 4), 1 + rng() % 3);
  if (mutation == 2 && s.size() > 4) {
    const size_t at = rng() % (s.size() - 4);
    s.insert(at, s.substr(at, 1 + rng() % 4));
  }
  std::string valid;  // the cuts may have split a character; encode() wants UTF-8
  tok::utf8_lossy_append(s.data(), s.size(), /*final=*/true, &valid);
  return valid;
}

struct Split {
  std::string reasoning, content, calls;
  bool operator==(const Split&) const = default;
};

Split split_pieces(const std::vector<std::string>& pieces, tok::ThinkingMode mode) {
  ChoiceParser p(mode);
  tok::OutputDelta d;
  for (const std::string& s : pieces) p.feed(s, &d);
  p.finish(&d);
  Split r{d.reasoning, d.content, ""};
  for (const auto& c : d.tool_calls) {
    r.calls += c.name + " " + c.arguments + "\n";
    EXPECT_FALSE(Json::parse(c.arguments, nullptr, false).is_discarded()) << c.arguments;
  }
  return r;
}

TEST(ChoiceParserFuzz, TokenPiecesWholeTextAndSingleBytesSplitAlike) {
  DSV4_REQUIRE_TOKENIZER();
  const tok::Tokenizer& t = *v4_tokenizer();
  const std::vector<int32_t> markers = marker_ids(t), bytes = byte_ids(t);
  std::mt19937 rng(7);
  int failures = 0;
  for (int round = 0; round < 2000 && failures < 5; ++round) {
    std::vector<int32_t> ids;
    if (rng() % 2) ids = t.encode(grammar_text(rng), true).value();
    for (int k = 0, n = ids.empty() || rng() % 3 == 0 ? rng() % 30 : 0; k < n; ++k) {
      const int r = rng() % 10;
      ids.push_back(r < 6 ? markers[rng() % markers.size()]
                          : r < 8 ? bytes[rng() % bytes.size()] : int32_t(rng() % t.n_ids()));
    }
    // The engine's pieces: one per token (special tokens kept, as with skip_special_tokens false).
    tok::IncrementalDetokenizer detok(t, /*skip_special=*/rng() % 2);
    std::vector<std::string> pieces;
    std::string all;
    for (int32_t id : ids) {
      std::string piece;
      ASSERT_TRUE(detok.push(id, &piece).is_ok());
      pieces.push_back(piece);
      all += piece;
    }
    pieces.emplace_back();
    detok.finish(&pieces.back());
    all += pieces.back();
    std::vector<std::string> single_bytes;
    for (char c : all) single_bytes.emplace_back(1, c);
    for (const auto mode : {tok::ThinkingMode::kChat, tok::ThinkingMode::kThinking}) {
      const Split a = split_pieces(pieces, mode);
      const Split whole = split_pieces({all}, mode);
      const Split b = split_pieces(single_bytes, mode);
      EXPECT_TRUE(tok::utf8_valid(a.reasoning) && tok::utf8_valid(a.content));
      // Markers are consumed and failed text passed through once: never more text than came in.
      const bool grew = a.reasoning.size() + a.content.size() > all.size();
      if (!(a == whole) || !(a == b) || grew) {
        ++failures;
        ADD_FAILURE() << "round " << round << " mode " << int(mode) << " input " << show(all) << "\n  token pieces: "
                      << show(a.reasoning) << " | " << show(a.content) << " | " << show(a.calls)
                      << "\n  whole text:   " << show(whole.reasoning) << " | " << show(whole.content) << " | "
                      << show(whole.calls) << "\n  single bytes: " << show(b.reasoning) << " | " << show(b.content)
                      << " | " << show(b.calls);
      }
    }
  }
}

// The engine's per-token loop (engine.cpp) for one request, without a model: EOS (id 1) ends it
// untexted, a stop string cuts the text, max_tokens ends it with "length".
std::vector<TokenEvent> simulate_engine(const tok::Tokenizer& t, const std::vector<int32_t>& ids,
                                        const std::vector<std::string>& stops, int max_tokens, bool logprobs) {
  engine_detail::TextOutput text(&t, /*skip_special=*/true, stops);
  std::vector<TokenEvent> events;
  int n = 0;
  for (int32_t id : ids) {
    TokenEvent ev;
    ev.tokens = {id};
    ++n;
    if (logprobs) ev.logprobs.push_back(TokenLogprob{id, -1.5f, {{id, -1.5f}, {7, -2.0f}}});
    bool stop_string = false;
    if (id == 1) {
      ev.finish = FinishReason::kStop;
      ev.stop_reason = "eos";
    } else if (std::string matched; text.push(id, &ev.text, &matched)) {
      ev.finish = FinishReason::kStop;
      ev.stop_reason = matched;
      ev.stop_string = stop_string = true;
    } else if (n >= max_tokens || n == int(ids.size())) {
      ev.finish = FinishReason::kLength;
    }
    if (ev.finish != FinishReason::kNone) {
      if (!stop_string) text.flush(&ev.text);
      ev.n_prompt_tokens = 5;
      ev.n_output_tokens = n;
      events.push_back(std::move(ev));
      break;
    }
    events.push_back(std::move(ev));
  }
  return events;
}

// Feeds the events in random batches, as the HTTP layer takes whatever has arrived.
std::string consume_all(Responder& r, const std::vector<TokenEvent>& events, std::mt19937& rng) {
  std::string sse;
  for (size_t i = 0; i < events.size();) {
    std::vector<TokenEvent> batch(events.begin() + i, events.begin() + std::min(events.size(), i + 1 + rng() % 3));
    i += batch.size();
    r.consume(batch, &sse);
  }
  EXPECT_TRUE(r.finished());
  return sse;
}

// "data: JSON\n\n" events, each strictly valid JSON (nlohmann refuses invalid UTF-8), ending
// with "data: [DONE]\n\n".
std::vector<Json> parse_sse(const std::string& sse) {
  std::vector<Json> out;
  EXPECT_TRUE(sse.ends_with("data: [DONE]\n\n")) << sse;
  for (size_t pos = 0; pos < sse.size();) {
    const size_t end = sse.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event in " << sse;
      break;
    }
    const std::string ev = sse.substr(pos, end - pos);
    pos = end + 2;
    EXPECT_TRUE(ev.starts_with("data: ")) << ev;
    if (ev == "data: [DONE]") {
      EXPECT_EQ(pos, sse.size()) << "events after [DONE]";
      break;
    }
    out.push_back(Json::parse(ev.substr(6), nullptr, false));
    EXPECT_FALSE(out.back().is_discarded()) << ev;
  }
  return out;
}

// What a client assembles from a response: text, reasoning, call arguments, finish reason and
// the number of logprobs entries.
struct Assembled {
  std::string content, reasoning, calls;
  Json finish;
  size_t n_logprobs = 0;
  bool operator==(const Assembled&) const = default;
};

Assembled assemble_body(const Json& body, bool chat, size_t index = 0) {
  const Json& c = body["choices"][index];
  EXPECT_EQ(c["index"], index);
  Assembled a;
  a.finish = c["finish_reason"];
  if (!chat) {
    a.content = c["text"];
    if (!c["logprobs"].is_null()) a.n_logprobs = c["logprobs"]["tokens"].size();
    return a;
  }
  const Json& m = c["message"];
  if (m["content"].is_string()) a.content = m["content"];
  if (m.contains("reasoning_content")) a.reasoning = m["reasoning_content"];
  if (m.contains("tool_calls")) {
    for (const Json& tc : m["tool_calls"]) {
      const std::string args = tc["function"]["arguments"];
      EXPECT_FALSE(Json::parse(args, nullptr, false).is_discarded()) << args;
      a.calls += tc["function"]["name"].get<std::string>() + " " + args + "\n";
    }
  }
  if (!c["logprobs"].is_null()) a.n_logprobs = c["logprobs"]["content"].size();
  return a;
}

// The chunks of choice `index` (every chunk carries one choice).
Assembled assemble_chunks(const std::vector<Json>& chunks, bool chat, size_t index = 0) {
  Assembled a;
  std::vector<std::pair<std::string, std::string>> calls;  // by index
  for (const Json& chunk : chunks) {
    EXPECT_EQ(chunk["choices"].size(), 1u) << chunk.dump();
    const Json& c = chunk["choices"][0];
    if (c["index"] != index) continue;
    if (!c["finish_reason"].is_null()) a.finish = c["finish_reason"];
    if (!chat) {
      a.content += c["text"].get<std::string>();
      if (!c["logprobs"].is_null()) a.n_logprobs += c["logprobs"]["tokens"].size();
      continue;
    }
    const Json& d = c["delta"];
    if (d.contains("content") && d["content"].is_string()) a.content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) a.reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const Json& tc : d["tool_calls"]) {
        const size_t i = tc["index"];
        if (calls.size() <= i) calls.resize(i + 1);
        if (tc["function"].contains("name")) calls[i].first += tc["function"]["name"].get<std::string>();
        calls[i].second += tc["function"]["arguments"].get<std::string>();
      }
    }
    if (!c["logprobs"].is_null()) a.n_logprobs += c["logprobs"]["content"].size();
  }
  for (const auto& [name, args] : calls) a.calls += name + " " + args + "\n";
  return a;
}

TEST(ResponderFuzz, StreamedChunksAddUpToTheWholeResponse) {
  DSV4_REQUIRE_TOKENIZER();
  const tok::Tokenizer& t = *v4_tokenizer();
  const std::vector<int32_t> markers = marker_ids(t);
  const auto block = t.encode(
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"false\">[1]"
      "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
      true).value();
  std::mt19937 rng(5);
  int failures = 0;
  for (int round = 0; round < 1000 && failures < 5; ++round) {
    std::vector<int32_t> ids;
    for (int k = 0, n = 1 + rng() % 25; k < n; ++k) {
      const int r = rng() % 10;
      if (r == 0) ids.insert(ids.end(), block.begin(), block.end());
      else ids.push_back(r < 6 ? markers[rng() % markers.size()] : int32_t(rng() % t.n_ids()));
    }
    std::vector<std::string> stops;
    if (rng() % 3 == 0) stops.emplace_back(1, "abx\n<"[rng() % 5]);
    const bool logprobs = rng() % 2, chat = rng() % 3 != 0;
    const auto events = simulate_engine(t, ids, stops, 1 + rng() % 30, logprobs);
    const int n_output = events.back().n_output_tokens;
    const auto mode = rng() % 2 ? tok::ThinkingMode::kThinking : tok::ThinkingMode::kChat;
    auto make = [&](const ResponseMeta& m) {
      return chat ? make_chat_responder(m, mode, t) : make_completion_responder(m, t);
    };
    ResponseMeta meta{"id", 1, "m", /*stream=*/false, /*include_usage=*/false, logprobs};
    ::testing::internal::CaptureStderr();  // "model output did not parse" notes
    auto whole_r = make(meta);
    consume_all(*whole_r, events, rng);
    const Json whole = Json::parse(whole_r->final_body());
    meta.stream = true;
    meta.include_usage = rng() % 2;
    auto stream_r = make(meta);
    const std::string sse = consume_all(*stream_r, events, rng);
    ::testing::internal::GetCapturedStderr();

    std::vector<Json> chunks = parse_sse(sse);
    ASSERT_FALSE(chunks.empty());
    Json usage = whole["usage"];
    if (meta.include_usage) {
      usage = chunks.back()["usage"];
      EXPECT_TRUE(chunks.back()["choices"].empty());
      chunks.pop_back();
    }
    if (chat) {
      EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
    }
    const Assembled a = assemble_chunks(chunks, chat), w = assemble_body(whole, chat);
    const bool ok = a == w && usage == whole["usage"] && whole["usage"]["completion_tokens"] == n_output &&
                    w.n_logprobs == (logprobs ? size_t(n_output) : 0u) && !w.finish.is_null();
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "round " << round << " chat " << chat << "\n stream: " << sse << "\n whole: " << whole.dump();
    }
  }
}

// n choices: each choice's events go to the responder in random interleavings, as the HTTP layer
// takes whatever has arrived for any of them. Every choice streams under its own index and adds
// up to its entry of the whole response; the stream ends once, after the last choice; usage
// counts the prompt once and every choice's completion tokens.
TEST(ResponderFuzz, ChoicesInterleaveAndTheStreamEndsOnce) {
  DSV4_REQUIRE_TOKENIZER();
  const tok::Tokenizer& t = *v4_tokenizer();
  const std::vector<int32_t> markers = marker_ids(t);
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    const int n = 2 + rng() % 3;
    const bool logprobs = rng() % 2, chat = rng() % 2;
    std::vector<std::vector<TokenEvent>> events(static_cast<size_t>(n));
    int n_output = 0;
    for (auto& e : events) {
      std::vector<int32_t> ids;
      for (int k = 0, m = 1 + rng() % 12; k < m; ++k)
        ids.push_back(rng() % 2 ? markers[rng() % markers.size()] : int32_t(rng() % t.n_ids()));
      e = simulate_engine(t, ids, {}, 1 + rng() % 20, logprobs);
      n_output += e.back().n_output_tokens;
    }
    // Feeds every choice's events in batches of 1-3, the choices in random order.
    auto feed = [&](Responder& r) {
      std::string sse;
      std::vector<size_t> next(size_t(n), 0);
      for (;;) {
        std::vector<size_t> open;
        for (size_t i = 0; i < size_t(n); ++i)
          if (next[i] < events[i].size()) open.push_back(i);
        if (open.empty()) break;
        EXPECT_FALSE(r.finished());
        const size_t i = open[rng() % open.size()];
        const size_t end = std::min(events[i].size(), next[i] + 1 + rng() % 3);
        std::vector<TokenEvent> batch(events[i].begin() + long(next[i]), events[i].begin() + long(end));
        next[i] = end;
        r.consume(i, batch, &sse);
      }
      EXPECT_TRUE(r.finished());
      return sse;
    };
    auto make = [&](const ResponseMeta& m) {
      return chat ? make_chat_responder(m, tok::ThinkingMode::kThinking, t) : make_completion_responder(m, t);
    };
    ResponseMeta meta{"id", 1, "m", /*stream=*/false, /*include_usage=*/false, logprobs, n};
    ::testing::internal::CaptureStderr();
    auto whole_r = make(meta);
    feed(*whole_r);
    const Json whole = Json::parse(whole_r->final_body());
    meta.stream = true;
    meta.include_usage = true;
    auto stream_r = make(meta);
    const std::string sse = feed(*stream_r);
    ::testing::internal::GetCapturedStderr();

    ASSERT_EQ(whole["choices"].size(), size_t(n));
    EXPECT_EQ(whole["usage"]["prompt_tokens"], 5);
    EXPECT_EQ(whole["usage"]["completion_tokens"], n_output);
    std::vector<Json> chunks = parse_sse(sse);
    ASSERT_FALSE(chunks.empty());
    EXPECT_EQ(chunks.back()["usage"], whole["usage"]);
    EXPECT_TRUE(chunks.back()["choices"].empty());
    chunks.pop_back();
    for (size_t i = 0; i < size_t(n); ++i) {
      EXPECT_EQ(assemble_chunks(chunks, chat, i), assemble_body(whole, chat, i)) << "round " << round << " choice " << i;
      // The finish chunk of choice i comes after all its content.
      size_t last = 0, finish = 0;
      for (size_t k = 0; k < chunks.size(); ++k) {
        if (chunks[k]["choices"][0]["index"] != i) continue;
        last = k;
        if (!chunks[k]["choices"][0]["finish_reason"].is_null()) finish = k;
      }
      EXPECT_EQ(finish, last) << "round " << round << " choice " << i;
    }
  }
}

// One choice failing ends the response: the stream gets one error event and [DONE] (nothing
// after it, whatever the other choices still send), and the whole response is the error.
TEST(Responders, AChoiceThatFailsEndsTheResponse) {
  DSV4_REQUIRE_TOKENIZER();
  const tok::Tokenizer& t = *v4_tokenizer();
  for (const bool chat : {true, false}) {
    for (const bool stream : {false, true}) {
      const ResponseMeta meta{"id", 1, "m", stream, true && stream, false, 3};
      auto r = chat ? make_chat_responder(meta, tok::ThinkingMode::kChat, t) : make_completion_responder(meta, t);
      TokenEvent tokn;
      tokn.tokens = {100};
      tokn.text = "x";
      TokenEvent fail;
      fail.finish = FinishReason::kError;
      fail.error = internal_error("device lost");
      std::string sse;
      std::vector<TokenEvent> a{tokn}, b{fail}, c{tokn};
      r->consume(0, a, &sse);
      EXPECT_FALSE(r->finished());
      r->consume(1, b, &sse);
      EXPECT_TRUE(r->finished());
      const size_t size_at_end = sse.size();
      r->consume(2, c, &sse);
      EXPECT_EQ(sse.size(), size_at_end) << "output after the end";
      EXPECT_FALSE(r->error().is_ok());
      if (stream) {
        const std::vector<Json> events = parse_sse(sse);
        ASSERT_FALSE(events.empty());
        EXPECT_TRUE(events.back().contains("error")) << sse;
      } else {
        const Json body = Json::parse(r->final_body());
        EXPECT_NE(body["error"]["message"].get<std::string>().find("device lost"), std::string::npos) << body;
      }
    }
  }
}

// Legacy completions' text_offset counts characters, as vLLM's len(token) does: a client indexes
// the (decoded) text with it. It used to count UTF-8 bytes.
TEST(CompletionResponder, TextOffsetsCountCharacters) {
  DSV4_REQUIRE_TOKENIZER();
  const tok::Tokenizer& t = *v4_tokenizer();
  const auto ids = t.encode("héllo 你好 wörld 😀!", false).value();
  std::vector<TokenEvent> events;
  for (size_t i = 0; i < ids.size(); ++i) {
    TokenEvent ev;
    ev.tokens = {ids[i]};
    ev.text = t.decode(std::span<const int32_t>(&ids[i], 1), false).value();
    ev.logprobs.push_back(TokenLogprob{ids[i], -0.5f, {}});
    if (i + 1 == ids.size()) {
      ev.finish = FinishReason::kLength;
      ev.n_output_tokens = int32_t(ids.size());
    }
    events.push_back(std::move(ev));
  }
  auto r = make_completion_responder(ResponseMeta{"id", 1, "m", false, false, true}, t);
  std::string unused;
  r->consume(events, &unused);
  const Json lp = Json::parse(r->final_body())["choices"][0]["logprobs"];
  ASSERT_EQ(lp["text_offset"].size(), ids.size());
  std::u32string before;  // the text of the tokens so far, in characters
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i], before.size()) << i;
    const std::string tok = lp["tokens"][i];
    for (size_t k = 0; k < tok.size();) before.push_back(tok::utf8_next(tok, &k));
  }
}

// stop_reason as vLLM gives it: the stop string, the stop token id, or null for EOS. A stop
// string that reads like the engine's log form ("token:x", "eos") is still a string: "token:x"
// used to go through std::stoi (a 500, or std::terminate when streaming).
TEST(Responders, StopReasonIsTheStopStringTheTokenIdOrNull) {
  DSV4_REQUIRE_TOKENIZER();
  const tok::Tokenizer& t = *v4_tokenizer();
  struct Case {
    std::string reason;
    bool stop_string;
    int32_t stop_token;
    Json want;
  };
  const Case cases[] = {{"token:abc", true, -1, "token:abc"}, {"token:", true, -1, "token:"},
                        {"token:99999999999", true, -1, "token:99999999999"}, {"eos", true, -1, "eos"},
                        {"eos", false, -1, Json()}, {"token:42", false, 42, 42}};
  for (const Case& c : cases) {
    for (const bool chat : {true, false}) {
      for (const bool stream : {false, true}) {
        TokenEvent ev;
        ev.tokens = {100};
        ev.text = "x";
        ev.finish = FinishReason::kStop;
        ev.stop_reason = c.reason;
        ev.stop_string = c.stop_string;
        ev.stop_token = c.stop_token;
        ev.n_output_tokens = 1;
        const ResponseMeta meta{"id", 1, "m", stream, false, false};
        auto r = chat ? make_chat_responder(meta, tok::ThinkingMode::kChat, t) : make_completion_responder(meta, t);
        std::vector<TokenEvent> events{ev};
        std::string sse;
        r->consume(events, &sse);
        const Json choice = stream ? parse_sse(sse).back()["choices"][0] : Json::parse(r->final_body())["choices"][0];
        EXPECT_EQ(choice["stop_reason"], c.want) << c.reason << " chat " << chat << " stream " << stream;
        EXPECT_EQ(choice["finish_reason"], "stop");
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::server
