// added_tokens.cpp: loading added tokens and the two-phase leftmost-longest search. A match of a
// special token that must stay text is skipped as a whole (its bytes cannot start another
// match), which is what HF's aho-corasick iteration does.
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "tokenizer/json_fields.h"

namespace dsv4::tok {

void AddedVocab::Trie::insert(std::string_view key, int32_t token_idx) {
  if (nodes.empty()) nodes.emplace_back();
  int32_t node = 0;
  for (unsigned char c : key) {
    auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(c, int32_t{-1}),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it != children.end() && it->first == c) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(nodes.size());
      children.insert(it, {c, child});
      nodes.emplace_back();
      node = child;
    }
  }
  nodes[node].token_idx = token_idx;
  first_byte[static_cast<unsigned char>(key[0])] = true;
}

int32_t AddedVocab::Trie::longest_at(std::string_view text, size_t pos, size_t* len) const {
  int32_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& children = nodes[node].children;
    const auto c = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(c, int32_t{-1}),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it == children.end() || it->first != c) break;
    node = it->second;
    if (nodes[node].token_idx >= 0) {
      best = nodes[node].token_idx;
      *len = i + 1 - pos;
    }
  }
  return best;
}

Result<AddedVocab> AddedVocab::from_json(const nlohmann::json& tokens) {
  AddedVocab vocab;
  vocab.raw_trie_.nodes.emplace_back();
  vocab.normalized_trie_.nodes.emplace_back();
  if (tokens.is_null()) return vocab;
  if (!tokens.is_array()) return invalid_argument("\"added_tokens\" must be an array");
  for (const auto& t : tokens) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string()) {
      return invalid_argument("added token: expected {{\"id\": int, \"content\": string, ...}}, found {}",
                              t.dump());
    }
    AddedToken token;
    // get<TokenId>() would wrap: an id of 2^40 read as 0, a plausible id.
    constexpr uint64_t kMaxTokenId = uint64_t(std::numeric_limits<TokenId>::max());
    const nlohmann::json& id = t["id"];
    if (id.is_number_unsigned() ? id.get<uint64_t>() > kMaxTokenId : id.get<int64_t>() < 0)
      return invalid_argument("added token {}: id {} is outside [0, {}]", t["content"].dump(), id.dump(), kMaxTokenId);
    token.id = id.get<TokenId>();
    token.content = t["content"].get<std::string>();
    const std::string where = fmt::format("added token '{}' (id {})", token.content, token.id);
    DSV4_ASSIGN_OR_RETURN(token.special, bool_field(t, "special", false, where));
    DSV4_ASSIGN_OR_RETURN(token.normalized, bool_field(t, "normalized", !token.special, where));
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      DSV4_ASSIGN_OR_RETURN(const bool set, bool_field(t, flag, false, where));
      if (set) {
        return unimplemented("added token '{}' (id {}): \"{}\": true is not supported", token.content,
                             token.id, flag);
      }
    }
    if (token.content.empty() || token.id < 0) {
      return invalid_argument("added token id {}: empty content or negative id", token.id);
    }
    if (vocab.by_id_.count(token.id) || vocab.by_content_.count(token.content)) {
      return invalid_argument("added token '{}' (id {}) is defined twice", token.content, token.id);
    }
    const auto idx = static_cast<int32_t>(vocab.tokens_.size());
    vocab.by_id_.emplace(token.id, idx);
    vocab.by_content_.emplace(token.content, idx);
    (token.normalized ? vocab.normalized_trie_ : vocab.raw_trie_).insert(token.content, idx);
    vocab.tokens_.push_back(std::move(token));
  }
  return vocab;
}

const AddedToken* AddedVocab::find_id(TokenId id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocab::find_content(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocab::split(std::string_view text, bool parse_special, std::vector<TextSegment>* out) const {
  std::vector<TextSegment> raw;
  split_with(raw_trie_, text, 0, text.size(), parse_special, &raw);
  for (const TextSegment& seg : raw) {
    if (seg.id >= 0) {
      out->push_back(seg);
    } else {
      split_with(normalized_trie_, text, seg.begin, seg.end, parse_special, out);
    }
  }
}

void AddedVocab::split_with(const Trie& trie, std::string_view text, size_t begin, size_t end,
                            bool parse_special, std::vector<TextSegment>* out) const {
  const std::string_view window = text.substr(0, end);
  size_t gap = begin;  // start of the pending plain-text segment
  size_t pos = begin;
  while (pos < end) {
    if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    const int32_t idx = trie.longest_at(window, pos, &len);
    if (idx < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[idx];
    if (token.special && !parse_special) {
      pos += len;  // stays text, and no other token may start inside it
      continue;
    }
    if (pos > gap) out->push_back(TextSegment{gap, pos, -1});
    out->push_back(TextSegment{pos, pos + len, token.id});
    pos += len;
    gap = pos;
  }
  if (end > gap) out->push_back(TextSegment{gap, end, -1});
}

}  // namespace dsv4::tok
