// text_output.cpp: see text_output.h.
#include "engine/text_output.h"

#include <algorithm>

namespace dsv4::engine_detail {

TextOutput::TextOutput(const tok::Tokenizer* tokenizer, bool skip_special, std::vector<std::string> stops)
    : stops_(std::move(stops)) {
  if (tokenizer != nullptr) detok_ = std::make_unique<tok::IncrementalDetokenizer>(*tokenizer, skip_special);
}

bool TextOutput::push(int32_t id, std::string* out, std::string* matched) {
  if (!detok_) return false;
  // An id the tokenizer does not know (a model vocabulary padded past the tokenizer's) has no text.
  if (!detok_->push(id, &held_).is_ok()) return false;
  if (stops_.empty()) {
    out->append(held_);
    held_.clear();
    return false;
  }
  // Earliest complete stop string; ties at one position go to the longer stop string.
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& s : stops_) {
    const size_t from = scanned_ >= s.size() ? scanned_ - s.size() + 1 : 0;
    const size_t p = held_.find(s, from);
    if (p != std::string::npos && (p < best || (p == best && s.size() > best_stop->size()))) {
      best = p;
      best_stop = &s;
    }
  }
  if (best_stop != nullptr) {
    out->append(held_, 0, best);
    *matched = *best_stop;
    held_.clear();
    scanned_ = 0;
    return true;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string. Stop strings are
  // valid UTF-8, so such a suffix starts on a character boundary.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  out->append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  scanned_ = held_.size();
  return false;
}

void TextOutput::flush(std::string* out) {
  if (detok_) detok_->finish(&held_);
  out->append(held_);
  held_.clear();
  scanned_ = 0;
}

}  // namespace dsv4::engine_detail
