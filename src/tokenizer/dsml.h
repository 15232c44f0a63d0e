// dsml.h: the DSML tool-call block the model writes after its content, parsed strictly and
// incrementally. The block opens with "\n\n<｜DSML｜tool_calls" (recognised by OutputParser, which
// then hands the rest here) and closes with "</｜DSML｜tool_calls>"; its grammar and errors follow
// DeepSeek's reference parser (encoding_dsv4.py parse_tool_calls), with a few stricter checks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4::tok {

// One parsed call. arguments is a JSON object as text, e.g. {"city": "Paris", "days": 3}:
// string="true" values become JSON strings, string="false" values are kept as written (they must
// be valid JSON). Key order and spacing follow the reference parser.
struct ParsedToolCall {
  std::string name;
  std::string arguments;
};

class DsmlBlockParser {
 public:
  // Consumes text that follows the opening "\n\n<｜DSML｜tool_calls". Complete calls are appended
  // to *calls as soon as their </｜DSML｜invoke> arrives. Once the block has closed, the text after
  // it is kept in rest() and no longer parsed. Errors are final.
  Status feed(std::string_view text, std::vector<ParsedToolCall>* calls);
  bool closed() const { return state_ == State::kClosed; }
  // Text received after the closing tag (only meaningful once closed()).
  const std::string& rest() const { return buf_; }
  // Describes what the parser was waiting for, for "truncated block" errors.
  std::string expectation() const;

 private:
  enum class State { kSeparator, kInvokeHead, kParam, kParamSeparator, kClosed };
  // Finds the earliest complete stop in buf_ (from where the last search left off). Returns its
  // index in `stops` and position, or -1 when none has arrived yet.
  int find_stop(std::initializer_list<std::string_view> stops, size_t* pos);
  Status step(std::vector<ParsedToolCall>* calls, bool* progressed);
  Status finish_invoke(std::vector<ParsedToolCall>* calls);

  State state_ = State::kSeparator;
  std::string buf_;        // unconsumed text
  size_t search_from_ = 0; // bytes of buf_ already known to hold no stop start
  std::string name_;       // the invoke being parsed
  std::vector<std::pair<std::string, std::string>> args_;  // key, JSON value text
  Status error_;
};

}  // namespace dsv4::tok
