// detokenizer.h: incremental (streaming) detokenization. Token bytes are buffered until they form
// complete UTF-8, so no piece ever ends inside a character, and the concatenation of all pieces
// equals Tokenizer::decode of all ids (invalid bytes become U+FFFD exactly as in decode).
#pragma once

#include <string>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::tok {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object. skip_special as in Tokenizer::decode.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // Appends to *out the text completed by token `id` (often all of it, sometimes nothing).
  Status push(TokenId id, std::string* out);
  // End of stream: appends what is still buffered (an incomplete sequence becomes U+FFFD).
  void finish(std::string* out);
  // Bytes held back because they do not yet form a complete character.
  size_t n_pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace dsv4::tok
