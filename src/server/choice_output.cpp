// choice_output.cpp: see choice_output.h. The parser does not say how much text it holds back, so
// we account for it: in the reasoning and content states every byte fed is emitted, held, or part
// of a marker it consumed ("</think>", the "\n\n<｜DSML｜tool_calls" opener, EOS).
#include "server/choice_output.h"

#include <cstring>

namespace dsv4::server {
namespace {

constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kToolCallsStart = "\n\n<｜DSML｜tool_calls";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";

bool text_state(tok::OutputState s) { return s == tok::OutputState::kReasoning || s == tok::OutputState::kContent; }

}  // namespace

bool ChoiceParser::in_reasoning() const {
  return raw_ ? raw_reasoning_ : parser_.state() == tok::OutputState::kReasoning;
}

void ChoiceParser::account(tok::OutputState before, size_t before_size, size_t text_size, const tok::OutputDelta& d) {
  const tok::OutputState after = parser_.state();
  const size_t emitted = d.reasoning.size() + d.content.size();
  size_t consumed = 0;
  if (!text_state(before)) return;
  if (before == tok::OutputState::kReasoning && after != tok::OutputState::kReasoning) consumed += kThinkEnd.size();
  // Unless a block begins, what follows the emitted text and the consumed markers is unparsed. An
  // EOS the content ended with counts as unparsed too: if more text follows it (only with
  // ignore_eos and special tokens kept), recover() passes the EOS through with that text.
  unparsed_from_ = before_size - held_ + emitted + consumed;
  if (parser_.saw_tool_calls()) {
    // The block began in this feed (it may also have closed and met EOS already): the opener
    // starts right after the emitted text.
    block_start_ = unparsed_from_;
    consumed += kToolCallsStart.size();
  } else if (after == tok::OutputState::kDone) {
    consumed += kEos.size();
  }
  if (text_state(after)) held_ = held_ + text_size - emitted - consumed;
}

void ChoiceParser::recover(tok::OutputState at, tok::OutputDelta* delta) {
  raw_ = true;
  held_ = 0;
  if (!parser_.saw_tool_calls()) {
    // The error is in the reasoning or content, or in text after the EOS that ended the content
    // (ignore_eos with special tokens kept): everything not yet emitted or consumed as a marker
    // is unparsed text, whether it arrived with the error or in earlier pieces.
    raw_reasoning_ = at == tok::OutputState::kReasoning;
    std::string& out = raw_reasoning_ ? delta->reasoning : delta->content;
    if (unparsed_from_ < all_.size()) out.append(all_, unparsed_from_, std::string::npos);
  } else if (n_tool_calls_ == 0) {
    // A DSML block that failed before any call: the client gets the raw block as content.
    if (block_start_ < all_.size()) delta->content.append(all_, block_start_, std::string::npos);
  } else {
    // Some calls were already delivered; what follows the last complete call is dropped (logged),
    // now and in later pieces alike.
    raw_drop_ = true;
  }
}

void ChoiceParser::feed(std::string_view text, tok::OutputDelta* delta) {
  if (raw_) {
    if (!raw_drop_) (raw_reasoning_ ? delta->reasoning : delta->content).append(text);
    return;
  }
  const tok::OutputState before = parser_.state();
  const size_t before_size = all_.size();
  all_.append(text);
  tok::OutputDelta d;
  const Status st = parser_.feed(text, &d);
  take(before, before_size, text.size(), d, st, delta);
}

void ChoiceParser::finish(tok::OutputDelta* delta) {
  if (raw_) return;
  const tok::OutputState before = parser_.state();
  const size_t before_size = all_.size();
  tok::OutputDelta d;
  const Status st = parser_.finish(&d);
  take(before, before_size, 0, d, st, delta);
}

void ChoiceParser::take(tok::OutputState before, size_t before_size, size_t text_size, tok::OutputDelta& d,
                        const Status& st, tok::OutputDelta* delta) {
  account(before, before_size, text_size, d);
  n_tool_calls_ += int(d.tool_calls.size());
  delta->reasoning += d.reasoning;
  delta->content += d.content;
  for (auto& c : d.tool_calls) delta->tool_calls.push_back(std::move(c));
  if (!st.is_ok()) {
    if (problem_.empty()) problem_ = st.message();
    recover(parser_.state(), delta);
  }
}

}  // namespace dsv4::server
