// responses.h: builds the OpenAI response bodies of one request from its TokenEvents: chat
// completions (reasoning_content, content, tool_calls, logprobs) and legacy completions, either
// as SSE chunks (stream) or as one JSON object at the end. No I/O here: the HTTP layer writes
// what these return.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "server/choice_output.h"
#include "server/json_fields.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

struct ResponseMeta {
  std::string id;       // chatcmpl-... / cmpl-...
  int64_t created = 0;  // unix seconds
  std::string model;    // served model name
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
};

// "data: {json}\n\n"
std::string sse_data(const Json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

class Responder {
 public:
  virtual ~Responder() = default;
  // Consumes events in order. Streaming: appends SSE text to *sse (the final event also appends
  // the finish chunk, the usage chunk if asked for, and [DONE]).
  virtual void consume(std::vector<TokenEvent>& events, std::string* sse) = 0;
  virtual bool finished() const = 0;
  // Non-streaming: the whole response (or an error object) once finished().
  virtual std::string final_body() = 0;
  // Set when the request ended in an error (engine failure or shutdown).
  virtual const Status& error() const = 0;
};

std::unique_ptr<Responder> make_chat_responder(const ResponseMeta& meta, tok::ThinkingMode mode,
                                               const tok::Tokenizer& tokenizer);
std::unique_ptr<Responder> make_completion_responder(const ResponseMeta& meta, const tok::Tokenizer& tokenizer);

// A random hex id with the given prefix, e.g. "chatcmpl-3f9a...".
std::string random_id(const char* prefix);

}  // namespace dsv4::server
