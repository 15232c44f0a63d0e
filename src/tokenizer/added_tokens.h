// added_tokens.h: the "added_tokens" of tokenizer.json and how HF finds them in text before
// pre-tokenization: leftmost-longest matching, first over the tokens with normalized=false, then
// over the normalized ones inside the remaining text. Tokens flagged special are matched only
// when the caller asks for it; the others always are (HF's encode_special_tokens semantics).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "tokenizer/bpe.h"

namespace dsv4::tok {

struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool special = false;
  bool normalized = false;
};

// A piece of the input: an added token (id >= 0) or plain text to pre-tokenize (id == -1).
struct TextSegment {
  size_t begin;
  size_t end;
  TokenId id;
};

class AddedVocab {
 public:
  // `tokens` is the "added_tokens" array of tokenizer.json. Rejects lstrip, rstrip and
  // single_word, which the DeepSeek files do not use.
  static Result<AddedVocab> from_json(const nlohmann::json& tokens);

  // Appends the segments of `text` to *out. With parse_special false, special tokens are left
  // in the text (HF: encode_special_tokens = true); non-special added tokens still match.
  void split(std::string_view text, bool parse_special, std::vector<TextSegment>* out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_id(TokenId id) const;
  const AddedToken* find_content(std::string_view content) const;

 private:
  // A byte trie over token contents; node 0 is the root.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token_idx = -1;                               // index into tokens_ if terminal
    };
    std::vector<Node> nodes;
    bool first_byte[256] = {};
    void insert(std::string_view key, int32_t token_idx);
    // Index into tokens_ and length of the longest token starting at text[pos], or -1.
    int32_t longest_at(std::string_view text, size_t pos, size_t* len) const;
  };
  void split_with(const Trie& trie, std::string_view text, size_t begin, size_t end, bool parse_special,
                  std::vector<TextSegment>* out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<TokenId, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Trie raw_trie_;         // normalized == false: matched on the raw text first
  Trie normalized_trie_;  // normalized == true: matched in what remains
};

}  // namespace dsv4::tok
