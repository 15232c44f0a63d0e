// text_output.h: one request's output text, built on the engine thread token by token: UTF-8-safe
// incremental detokenization, then stop-string matching. Text that could still be the start of a
// stop string is held back; once a stop string completes, the text before it is released and the
// stop string itself never is (OpenAI semantics).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::engine_detail {

class TextOutput {
 public:
  // tokenizer may be null: no text at all (then stops must be empty).
  TextOutput(const tok::Tokenizer* tokenizer, bool skip_special, std::vector<std::string> stops);

  // Adds token `id`. Appends newly final text to *out. Returns true when a stop string completed;
  // *matched is then the stop string and nothing more may be pushed.
  bool push(int32_t id, std::string* out, std::string* matched);
  // The stream ended (EOS, length, abort): releases held-back text and incomplete UTF-8 (as U+FFFD).
  void flush(std::string* out);
  size_t n_held_bytes() const { return held_.size(); }

 private:
  std::unique_ptr<tok::IncrementalDetokenizer> detok_;
  std::vector<std::string> stops_;
  std::string held_;   // decoded but not released
  size_t scanned_ = 0; // bytes of held_ known to start no complete stop string
};

}  // namespace dsv4::engine_detail
