// detokenizer.cpp: the streaming decoder. Only an incomplete but still valid UTF-8 prefix is held
// back; bytes that can no longer become valid are replaced at once, as a full decode would.
#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace dsv4::tok {

Status IncrementalDetokenizer::push(TokenId id, std::string* out) {
  if (!tokenizer_->is_valid(id)) {
    return invalid_argument("token id {} is not in the vocabulary (0..{})", id, tokenizer_->n_ids() - 1);
  }
  if (skip_special_ && tokenizer_->is_special(id)) return Status::ok();
  pending_ += tokenizer_->token_bytes(id);
  const size_t used = utf8_lossy_append(pending_.data(), pending_.size(), /*final=*/false, out);
  pending_.erase(0, used);
  return Status::ok();
}

void IncrementalDetokenizer::finish(std::string* out) {
  utf8_lossy_append(pending_.data(), pending_.size(), /*final=*/true, out);
  pending_.clear();
}

}  // namespace dsv4::tok
