// tokenizer.h: the byte-level BPE tokenizer of DeepSeek V3/V4, loaded from a Hugging Face
// tokenizer.json and byte-identical to HF `tokenizers` on it: added/special tokens are found
// first, the rest goes through the Split pre-tokenizer and the BPE merges. Immutable after load,
// so one instance may be shared by any number of threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace dsv4::tok {

class Tokenizer {
 public:
  // Reads tokenizer.json. Everything the file asks for that we do not implement (normalizers,
  // other models, post-processors that add tokens, ...) is an error naming the feature.
  static Result<Tokenizer> load(const std::string& path);
  static Result<Tokenizer> from_json_text(std::string_view json_text);

  // Token ids of `text` (valid UTF-8). Never adds BOS/EOS. parse_special: recognise special
  // tokens (special: true, e.g. <｜end▁of▁sentence｜>) written in the text, as HF does by default;
  // when false they are tokenized as plain text. Non-special added tokens (<｜User｜>, <think>,
  // ...) are always recognised, as in HF.
  Result<std::vector<TokenId>> encode(std::string_view text, bool parse_special = true) const;
  Status encode_append(std::string_view text, bool parse_special, std::vector<TokenId>* out) const;

  // Text of `ids`: the concatenated token bytes with invalid UTF-8 replaced by U+FFFD (as HF).
  // skip_special drops special tokens. Unknown ids are an error (HF skips them silently).
  Result<std::string> decode(std::span<const TokenId> ids, bool skip_special = false) const;

  // The raw bytes token `id` contributes to decoded text (may be a partial UTF-8 sequence).
  // `id` must be valid (see is_valid).
  std::string_view token_bytes(TokenId id) const { return id_bytes_[id]; }
  bool is_valid(TokenId id) const { return id >= 0 && id < n_ids() && id_kind_[id] != kNone; }
  bool is_special(TokenId id) const { return is_valid(id) && id_kind_[id] == kSpecial; }
  bool is_added(TokenId id) const { return is_valid(id) && id_kind_[id] != kVocab; }
  // One past the largest id (129280 for V4).
  int n_ids() const { return static_cast<int>(id_bytes_.size()); }

  // Id of an added token by its exact content, e.g. "<｜end▁of▁sentence｜>" or "<think>".
  std::optional<TokenId> added_token_id(std::string_view content) const;
  // The token as spelled in tokenizer.json (byte-level form for BPE tokens, e.g. "Ġhello").
  std::string token_text(TokenId id) const;

  const BpeModel& bpe() const { return bpe_; }
  const PreTokenizer& pre_tokenizer() const { return pre_; }
  const AddedVocab& added_vocab() const { return added_; }

 private:
  enum Kind : uint8_t { kNone, kVocab, kAdded, kSpecial };
  BpeModel bpe_;
  PreTokenizer pre_;
  AddedVocab added_;
  std::vector<std::string> id_bytes_;
  std::vector<Kind> id_kind_;
};

}  // namespace dsv4::tok
