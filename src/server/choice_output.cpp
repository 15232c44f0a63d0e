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

void ChoiceParser::account(tok::OutputState before, size_t before_size, size_t text_size, const tok::OutputDelta& d,
                           size_t* emitted, size_t* consumed) {
  const tok::OutputState after = parser_.state();
  *emitted = d.reasoning.size() + d.content.size();
  *consumed = 0;
  if (!text_state(before)) return;
  if (before == tok::OutputState::kReasoning && after != tok::OutputState::kReasoning) *consumed += kThinkEnd.size();
  if (after == tok::OutputState::kToolCalls || after == tok::OutputState::kAfterTools) {
    // The opener starts right after the emitted text.
    block_start_ = before_size - held_ + *emitted + *consumed;
    *consumed += kToolCallsStart.size();
  } else if (after == tok::OutputState::kDone) {
    *consumed += kEos.size();
  }
  if (text_state(after)) held_ = held_ + text_size - *emitted - *consumed;
}

void ChoiceParser::recover(tok::OutputState before, size_t before_size, size_t held_before, size_t emitted,
                           size_t consumed, tok::OutputDelta* delta) {
  const tok::OutputState at = parser_.state();
  raw_ = true;
  if (text_state(before) && (text_state(at) || at == tok::OutputState::kDone)) {
    // Everything after what was emitted and the markers consumed is unparsed text.
    raw_reasoning_ = at == tok::OutputState::kReasoning;
    const size_t from = before_size - held_before + emitted + consumed;
    std::string& out = raw_reasoning_ ? delta->reasoning : delta->content;
    if (from < all_.size()) out.append(all_, from, std::string::npos);
  } else if (n_tool_calls_ == 0 && delta->tool_calls.empty()) {
    // A DSML block that failed before any call: the client gets the raw block as content.
    raw_reasoning_ = false;
    if (block_start_ < all_.size()) delta->content.append(all_, block_start_, std::string::npos);
  } else {
    // Some calls were already delivered; what follows the last complete call is dropped (logged).
    raw_reasoning_ = false;
  }
  held_ = 0;
}

void ChoiceParser::feed(std::string_view text, tok::OutputDelta* delta) {
  if (raw_) {
    (raw_reasoning_ ? delta->reasoning : delta->content).append(text);
    return;
  }
  const tok::OutputState before = parser_.state();
  const size_t before_size = all_.size();
  const size_t held_before = held_;
  all_.append(text);
  tok::OutputDelta d;
  const Status st = parser_.feed(text, &d);
  take(before, before_size, held_before, text.size(), d, st, delta);
}

void ChoiceParser::finish(tok::OutputDelta* delta) {
  if (raw_) return;
  const tok::OutputState before = parser_.state();
  const size_t before_size = all_.size();
  const size_t held_before = held_;
  tok::OutputDelta d;
  const Status st = parser_.finish(&d);
  take(before, before_size, held_before, 0, d, st, delta);
}

void ChoiceParser::take(tok::OutputState before, size_t before_size, size_t held_before, size_t text_size,
                        tok::OutputDelta& d, const Status& st, tok::OutputDelta* delta) {
  size_t emitted = 0, consumed = 0;
  account(before, before_size, text_size, d, &emitted, &consumed);
  n_tool_calls_ += int(d.tool_calls.size());
  delta->reasoning += d.reasoning;
  delta->content += d.content;
  for (auto& c : d.tool_calls) delta->tool_calls.push_back(std::move(c));
  if (!st.is_ok()) {
    if (problem_.empty()) problem_ = st.message();
    recover(before, before_size, held_before, emitted, consumed, delta);
  }
}

}  // namespace dsv4::server
