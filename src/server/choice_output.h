// choice_output.h: turns the engine's text stream of one chat choice into OpenAI message parts:
// reasoning_content, content and tool calls, via the tokenizer's OutputParser (</think>, DSML).
// The model's output is not always well-formed (a random model, or a real one that drifts), and
// the parser's errors are final; then the text it had not yet emitted, and all that follows, is
// passed through as plain text, so nothing the model wrote is lost. The one exception: once tool
// calls were delivered, what follows the last complete call is dropped (and logged). Either way
// the result does not depend on how the text was split into pieces.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/output_parser.h"

namespace dsv4::server {

class ChoiceParser {
 public:
  explicit ChoiceParser(tok::ThinkingMode mode) : parser_(mode), mode_(mode) {}

  void feed(std::string_view text, tok::OutputDelta* delta);
  void finish(tok::OutputDelta* delta);
  // True while generated text still counts as reasoning (for usage.reasoning_tokens).
  bool in_reasoning() const;
  // The first parse problem ("" if none), for logs.
  const std::string& problem() const { return problem_; }
  int n_tool_calls() const { return n_tool_calls_; }

 private:
  void recover(tok::OutputState at, tok::OutputDelta* delta);
  void account(tok::OutputState before, size_t before_size, size_t text_size, const tok::OutputDelta& d);
  // Merges the parser's output d of one feed (text_size bytes) or finish (0) into delta; on the
  // parser's error st, keeps the first problem and recovers what the parser held.
  void take(tok::OutputState before, size_t before_size, size_t text_size, tok::OutputDelta& d, const Status& st,
            tok::OutputDelta* delta);

  tok::OutputParser parser_;
  tok::ThinkingMode mode_;
  std::string all_;          // every byte fed
  size_t held_ = 0;          // bytes the parser holds back (reasoning / content states)
  size_t unparsed_from_ = 0; // before any DSML block: where the text not yet emitted or consumed begins
  size_t block_start_ = 0;   // where the DSML block began in all_
  int n_tool_calls_ = 0;
  bool raw_ = false;         // after a parse error: pass text through (or drop it: raw_drop_)
  bool raw_reasoning_ = false;
  bool raw_drop_ = false;
  std::string problem_;
};

}  // namespace dsv4::server
