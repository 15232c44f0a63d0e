// output_parser.h: splits a streamed DeepSeek-V4 completion into reasoning (up to </think>),
// content, and DSML tool calls, piece by piece, as DeepSeek's reference parser
// (parse_message_from_completion_text) does for a whole text. Text that might still become a
// marker is held back, so the pieces it emits do not depend on how the input was split.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/dsml.h"

namespace dsv4::tok {

// What one feed() call made certain. Append-only: the parser adds to whatever is in it.
struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

enum class OutputState {
  kReasoning,  // thinking mode, before </think>
  kContent,    // after </think> (or from the start in chat mode)
  kToolCalls,  // inside the DSML block
  kAfterTools, // the block closed; only EOS may follow
  kDone,       // EOS seen
};

class OutputParser {
 public:
  // In thinking mode the prompt ended with <think>, so the text starts as reasoning.
  explicit OutputParser(ThinkingMode mode)
      : state_(mode == ThinkingMode::kThinking ? OutputState::kReasoning : OutputState::kContent) {}

  // Consumes the next piece of generated text (decoded with special tokens kept, e.g. from
  // IncrementalDetokenizer). A piece may end inside a UTF-8 character: emitted text never does.
  // Errors (a stray special token, malformed DSML, text after EOS) are final.
  Status feed(std::string_view text, OutputDelta* delta);
  // End of generation: emits held-back text. A DSML block that never closed is an error; a
  // missing </think> or EOS is not (generation may stop at max_tokens): check state().
  Status finish(OutputDelta* delta);

  OutputState state() const { return state_; }
  // Whether a DSML block has begun (the state may have moved on past it, to kDone).
  bool saw_tool_calls() const { return saw_tool_calls_; }

 private:
  Status advance(OutputDelta* delta, bool at_end);
  Status run_markers(OutputDelta* delta, bool at_end, bool* progressed);
  Status after_tools(bool* progressed);

  OutputState state_;
  bool saw_tool_calls_ = false;
  std::string pending_;  // received but not yet emitted or consumed
  DsmlBlockParser dsml_;
  Status error_;
};

// The whole completion at once (feed + finish).
struct ParsedOutput {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  OutputState final_state = OutputState::kContent;
};
Result<ParsedOutput> parse_output(std::string_view text, ThinkingMode mode);

}  // namespace dsv4::tok
