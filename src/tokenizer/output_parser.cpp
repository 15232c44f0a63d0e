// output_parser.cpp: the marker scan behind OutputParser. In reasoning and content, text is
// emitted up to the first position where a marker occurs or could still begin; the markers are
// the stops of the reference parser plus the special tokens it forbids in reasoning/content.
#include "tokenizer/output_parser.h"

#include <fmt/format.h>

#include "tokenizer/utf8.h"

namespace dsv4::tok {
namespace {

constexpr std::string_view kToolCallsStart = "\n\n<｜DSML｜tool_calls";

enum class Marker { kThinkEnd, kToolCalls, kEos, kBos, kThinkStart, kDsml };

struct MarkerDef {
  Marker marker;
  std::string_view text;
};

// kToolCalls precedes kDsml so that a block start is reported as such, not as a stray ｜DSML｜.
constexpr MarkerDef kMarkers[] = {
    {Marker::kThinkEnd, "</think>"},
    {Marker::kToolCalls, kToolCallsStart},
    {Marker::kEos, "<｜end▁of▁sentence｜>"},
    {Marker::kBos, "<｜begin▁of▁sentence｜>"},
    {Marker::kThinkStart, "<think>"},
    {Marker::kDsml, "｜DSML｜"},
};

struct Hit {
  size_t pos = std::string::npos;  // where the marker starts (or may start)
  const MarkerDef* def = nullptr;  // null: only a possible start (wait for more text)
};

// The earliest position holding a complete marker or (unless at_end: the stream is over) the
// start of one cut off by the end of s.
Hit scan(std::string_view s, bool at_end) {
  for (size_t p = 0; p < s.size(); ++p) {
    const char c = s[p];
    if (c != '<' && c != '\n' && c != '\xEF') continue;  // first bytes of the markers ('｜' = EF BD 9C)
    bool partial = false;
    for (const MarkerDef& m : kMarkers) {
      const std::string_view rest = s.substr(p);
      if (rest.starts_with(m.text)) return Hit{p, &m};
      if (!at_end && rest.size() < m.text.size() && m.text.starts_with(rest)) partial = true;
    }
    if (partial) return Hit{p, nullptr};
  }
  return Hit{};
}

// Emittable length of s[0, n): never ends inside a UTF-8 character (an incomplete sequence at
// the end waits; the decoder hands us valid text, so nothing else is invalid).
size_t char_boundary(std::string_view s, size_t n) {
  size_t k = n;
  for (size_t back = 0; back < 4 && k > 0; ++back) {
    const auto c = static_cast<unsigned char>(s[k - 1]);
    if (c < 0x80) return n;
    if (c >= 0xC0) {  // lead byte of the last character
      const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      return n - (k - 1) >= len ? n : k - 1;
    }
    --k;
  }
  return n;
}

const char* marker_name(Marker m) {
  switch (m) {
    case Marker::kThinkEnd: return "</think>";
    case Marker::kToolCalls: return "a DSML tool-call block";
    case Marker::kEos: return "<｜end▁of▁sentence｜>";
    case Marker::kBos: return "<｜begin▁of▁sentence｜>";
    case Marker::kThinkStart: return "<think>";
    case Marker::kDsml: return "｜DSML｜";
  }
  return "?";
}

}  // namespace

Status OutputParser::feed(std::string_view text, OutputDelta* delta) {
  if (!error_.is_ok()) return error_;
  pending_.append(text);
  error_ = advance(delta, /*at_end=*/false);
  return error_;
}

Status OutputParser::advance(OutputDelta* delta, bool at_end) {
  bool progressed = true;
  while (progressed) {
    progressed = false;
    switch (state_) {
      case OutputState::kReasoning:
      case OutputState::kContent:
        DSV4_RETURN_IF_ERROR(run_markers(delta, at_end, &progressed));
        break;
      case OutputState::kToolCalls: {
        std::string text;
        text.swap(pending_);
        DSV4_RETURN_IF_ERROR(dsml_.feed(text, &delta->tool_calls));
        if (dsml_.closed()) {
          pending_ = dsml_.rest();
          state_ = OutputState::kAfterTools;
          progressed = true;
        }
        break;
      }
      case OutputState::kAfterTools:
        DSV4_RETURN_IF_ERROR(after_tools(&progressed));
        break;
      case OutputState::kDone:
        // NOTE: messages name no received text, so they do not depend on how it was split.
        if (!pending_.empty()) return invalid_argument("unexpected text after <｜end▁of▁sentence｜>");
        break;
    }
  }
  return Status::ok();
}

Status OutputParser::run_markers(OutputDelta* delta, bool at_end, bool* progressed) {
  std::string& out = state_ == OutputState::kReasoning ? delta->reasoning : delta->content;
  const Hit hit = scan(pending_, at_end);
  if (hit.def == nullptr) {  // no marker, or one that may still complete: emit up to it and wait
    const size_t emit = at_end ? pending_.size() : char_boundary(pending_, std::min(hit.pos, pending_.size()));
    out.append(pending_, 0, emit);
    pending_.erase(0, emit);
    return Status::ok();
  }
  out.append(pending_, 0, hit.pos);  // a marker starts on a character boundary
  const std::string_view where = state_ == OutputState::kReasoning ? "reasoning" : "content";
  const Marker m = hit.def->marker;
  pending_.erase(0, hit.pos + hit.def->text.size());
  *progressed = true;
  if (state_ == OutputState::kReasoning) {
    if (m == Marker::kThinkEnd) {
      state_ = OutputState::kContent;
      return Status::ok();
    }
    if (m == Marker::kToolCalls) {
      return invalid_argument("a DSML tool-call block started inside the reasoning (no </think> before it)");
    }
    return invalid_argument("unexpected {} in the {}", marker_name(m), where);
  }
  if (m == Marker::kEos) {
    state_ = OutputState::kDone;
    return Status::ok();
  }
  if (m == Marker::kToolCalls) {
    state_ = OutputState::kToolCalls;
    saw_tool_calls_ = true;
    return Status::ok();
  }
  return invalid_argument("unexpected {} in the {}", marker_name(m), where);
}

Status OutputParser::after_tools(bool* progressed) {
  constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
  if (std::string_view(pending_).starts_with(kEos)) {
    pending_.erase(0, kEos.size());
    state_ = OutputState::kDone;
    *progressed = true;
    return Status::ok();
  }
  if (!pending_.empty() && !kEos.starts_with(pending_)) {
    return invalid_argument("unexpected text after </｜DSML｜tool_calls> (only <｜end▁of▁sentence｜> may follow)");
  }
  return Status::ok();
}

Status OutputParser::finish(OutputDelta* delta) {
  if (!error_.is_ok()) return error_;
  // Held-back text is final now: a cut-off marker start is plain text, but complete markers in
  // it (e.g. the ｜DSML｜ of an unfinished "\n\n<｜DSML｜tool_calls") still count.
  error_ = advance(delta, /*at_end=*/true);
  if (!error_.is_ok()) return error_;
  switch (state_) {
    case OutputState::kReasoning:
    case OutputState::kContent:
      break;
    case OutputState::kToolCalls:
      error_ = invalid_argument("truncated DSML tool-call block: expected {}", dsml_.expectation());
      return error_;
    case OutputState::kAfterTools:
      if (!pending_.empty()) {
        error_ = invalid_argument("unexpected text after </｜DSML｜tool_calls> (only <｜end▁of▁sentence｜> may follow)");
        return error_;
      }
      break;
    case OutputState::kDone:
      break;
  }
  pending_.clear();
  return Status::ok();
}

Result<ParsedOutput> parse_output(std::string_view text, ThinkingMode mode) {
  OutputParser parser(mode);
  OutputDelta delta;
  DSV4_RETURN_IF_ERROR(parser.feed(text, &delta));
  DSV4_RETURN_IF_ERROR(parser.finish(&delta));
  return ParsedOutput{std::move(delta.reasoning), std::move(delta.content), std::move(delta.tool_calls),
                      parser.state()};
}

}  // namespace dsv4::tok
