// dsml.cpp: the DSML block grammar as a resumable "read until one of these tags" machine. Each
// unit (separator, invoke header, parameter) is checked only once its closing tag has arrived,
// so errors and results do not depend on how the text was split into pieces.
#include "tokenizer/dsml.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tokenizer/python_json.h"

namespace dsv4::tok {
namespace {

constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";
constexpr std::string_view kInvokeClose = "</｜DSML｜invoke";
constexpr std::string_view kParamOpen = "<｜DSML｜parameter";
constexpr std::string_view kParamClose = "/｜DSML｜parameter";
constexpr std::string_view kBlockClose = "</｜DSML｜tool_calls>";

// Shows a unit in an error message: JSON-quoted so newlines are visible, and shortened.
std::string quote(std::string_view s) {
  std::string out;
  python_json_string_append(s.size() > 200 ? s.substr(0, 200) : s, &out);
  if (s.size() > 200) out += "...";
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

int DsmlBlockParser::find_stop(std::initializer_list<std::string_view> stops, size_t* pos) {
  size_t best = std::string::npos;
  int best_idx = -1;
  size_t max_len = 0;
  int idx = 0;
  for (std::string_view stop : stops) {
    const size_t p = buf_.find(stop, search_from_);
    if (p != std::string::npos && p < best) {
      best = p;
      best_idx = idx;
    }
    max_len = std::max(max_len, stop.size());
    ++idx;
  }
  if (best_idx < 0) {
    // No stop yet: only the last max_len - 1 bytes could still begin one.
    search_from_ = buf_.size() >= max_len ? buf_.size() - max_len + 1 : 0;
    return -1;
  }
  // NOTE: no stop of one state can begin inside another one of the same state (they share no
  // overlapping prefix/suffix), so a complete stop cannot be pre-empted by an earlier partial one.
  *pos = best;
  return best_idx;
}

std::string DsmlBlockParser::expectation() const {
  switch (state_) {
    case State::kSeparator: return "\">\\n\" then <｜DSML｜invoke or </｜DSML｜tool_calls>";
    case State::kInvokeHead: return fmt::format("the header of invoke '{}'", name_.empty() ? "?" : name_);
    case State::kParam: return fmt::format("</｜DSML｜parameter> in invoke '{}'", name_);
    case State::kParamSeparator: return fmt::format("\">\\n\" after a parameter of invoke '{}'", name_);
    case State::kClosed: return "nothing";
  }
  return "";
}

Status DsmlBlockParser::feed(std::string_view text, std::vector<ParsedToolCall>* calls) {
  if (!error_.is_ok()) return error_;
  buf_.append(text);
  bool progressed = true;
  while (progressed && state_ != State::kClosed) {
    progressed = false;
    error_ = step(calls, &progressed);
    if (!error_.is_ok()) return error_;
  }
  return Status::ok();
}

Status DsmlBlockParser::finish_invoke(std::vector<ParsedToolCall>* calls) {
  std::string args = "{";
  for (size_t i = 0; i < args_.size(); ++i) {
    if (i > 0) args += ", ";
    python_json_string_append(args_[i].first, &args);
    args += ": ";
    args += args_[i].second;
  }
  args += "}";
  calls->push_back(ParsedToolCall{std::move(name_), std::move(args)});
  name_.clear();
  args_.clear();
  return Status::ok();
}

Status DsmlBlockParser::step(std::vector<ParsedToolCall>* calls, bool* progressed) {
  size_t pos = 0;
  auto consume = [&](size_t n) {
    buf_.erase(0, n);
    search_from_ = 0;
    *progressed = true;
  };
  // After an invoke's header or one of its parameters, the tag found at `pos`: stop 0 opens a
  // parameter, stop 1 closes the invoke.
  auto param_or_close = [&](int stop) -> Status {
    consume(pos + (stop == 0 ? kParamOpen : kInvokeClose).size());
    if (stop == 0) {
      state_ = State::kParam;
      return Status::ok();
    }
    DSV4_RETURN_IF_ERROR(finish_invoke(calls));
    state_ = State::kSeparator;
    return Status::ok();
  };
  switch (state_) {
    case State::kSeparator: {
      const int stop = find_stop({kInvokeOpen, kBlockClose}, &pos);
      if (stop < 0) return Status::ok();
      const std::string_view unit(buf_.data(), pos);
      if (unit != ">\n") {
        return invalid_argument("malformed DSML tool calls: expected \">\\n\" before {}, found {}",
                                stop == 0 ? kInvokeOpen : kBlockClose, quote(unit));
      }
      consume(pos + (stop == 0 ? kInvokeOpen : kBlockClose).size());
      state_ = stop == 0 ? State::kInvokeHead : State::kClosed;
      return Status::ok();
    }
    case State::kInvokeHead: {
      const int stop = find_stop({kParamOpen, kInvokeClose}, &pos);
      if (stop < 0) return Status::ok();
      std::string_view unit(buf_.data(), pos);
      size_t k = 0;
      while (k < unit.size() && is_space(unit[k])) ++k;
      std::string_view head = unit.substr(k);
      // The reference encoder writes an invoke without parameters as `name="f">\n\n</...`, and
      // the reference parser's `">\n$` accepts that extra newline; so do we.
      if (head.ends_with("\">\n\n")) head.remove_suffix(1);
      constexpr std::string_view kNameOpen = "name=\"";
      constexpr std::string_view kNameClose = "\">\n";
      if (head.size() < kNameOpen.size() + kNameClose.size() || !head.starts_with(kNameOpen) ||
          !head.ends_with(kNameClose)) {
        return invalid_argument("malformed DSML invoke header: expected ' name=\"NAME\">\\n', found {}", quote(unit));
      }
      name_ = std::string(head.substr(kNameOpen.size(), head.size() - kNameOpen.size() - kNameClose.size()));
      if (name_.empty() || name_.find_first_of("\"\n") != std::string::npos) {
        return invalid_argument("malformed DSML invoke header: bad tool name in {}", quote(unit));
      }
      return param_or_close(stop);
    }
    case State::kParam: {
      const int stop = find_stop({kParamClose}, &pos);
      if (stop < 0) return Status::ok();
      const std::string_view unit(buf_.data(), pos);
      // Expected: ` name="KEY" string="true|false">VALUE<` (the '<' of the closing tag).
      constexpr std::string_view kOpen = " name=\"";
      constexpr std::string_view kStringAttr = "\" string=\"";
      const size_t attr = unit.find(kStringAttr);
      if (!unit.starts_with(kOpen) || attr == std::string_view::npos || !unit.ends_with("<")) {
        return invalid_argument(
            "malformed DSML parameter in invoke '{}': expected ' name=\"KEY\" string=\"true|false\">VALUE</｜DSML｜parameter>', found {}",
            name_, quote(unit));
      }
      const std::string key(unit.substr(kOpen.size(), attr - kOpen.size()));
      std::string_view after = unit.substr(attr + kStringAttr.size());
      bool is_string;
      if (after.starts_with("true\">")) {
        is_string = true;
        after.remove_prefix(6);
      } else if (after.starts_with("false\">")) {
        is_string = false;
        after.remove_prefix(7);
      } else {
        return invalid_argument("malformed DSML parameter '{}' in invoke '{}': string must be \"true\" or \"false\", found {}",
                                key, name_, quote(unit));
      }
      const std::string_view value = after.substr(0, after.size() - 1);
      for (const auto& [k, v] : args_) {
        if (k == key) return invalid_argument("duplicate DSML parameter '{}' in invoke '{}'", key, name_);
      }
      std::string json_value;
      if (is_string) {
        python_json_string_append(value, &json_value);
      } else {
        if (nlohmann::json::parse(value, nullptr, false).is_discarded()) {
          return invalid_argument("DSML parameter '{}' of invoke '{}' has string=\"false\" but its value is not JSON: {}",
                                  key, name_, quote(value));
        }
        json_value = std::string(value);
      }
      args_.emplace_back(key, std::move(json_value));
      consume(pos + kParamClose.size());
      state_ = State::kParamSeparator;
      return Status::ok();
    }
    case State::kParamSeparator: {
      const int stop = find_stop({kParamOpen, kInvokeClose}, &pos);
      if (stop < 0) return Status::ok();
      const std::string_view unit(buf_.data(), pos);
      if (unit != ">\n") {
        return invalid_argument("malformed DSML invoke '{}': expected \">\\n\" after a parameter, found {}", name_,
                                quote(unit));
      }
      return param_or_close(stop);
    }
    case State::kClosed: return Status::ok();
  }
  return Status::ok();
}

}  // namespace dsv4::tok
