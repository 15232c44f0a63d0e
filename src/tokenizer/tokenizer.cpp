// tokenizer.cpp: loading tokenizer.json (with a check of every top-level section) and the
// encode/decode pipelines. Encoding allocates its scratch once per call, never per piece.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace dsv4::tok {
namespace {

bool is_empty_normalizer(const nlohmann::json& n) {
  if (n.is_null()) return true;
  return section_type(n) == "Sequence" && n.contains("normalizers") &&
         n["normalizers"].is_array() && n["normalizers"].empty();
}

Status check_sections(const nlohmann::json& j) {
  if (!j.is_object()) return invalid_argument("tokenizer.json: expected a JSON object");
  for (const char* key : {"truncation", "padding"}) {
    if (j.contains(key) && !j[key].is_null()) {
      return unimplemented("tokenizer.json: \"{}\" is set; truncation and padding are not supported", key);
    }
  }
  if (j.contains("normalizer") && !is_empty_normalizer(j["normalizer"])) {
    return unimplemented("tokenizer.json: normalizer {} is not supported (only none or an empty Sequence)",
                         j["normalizer"].dump());
  }
  // ByteLevel post-processing only adjusts offsets; anything else (TemplateProcessing, ...)
  // would add tokens that we do not add.
  if (j.contains("post_processor") && !j["post_processor"].is_null() &&
      section_type(j["post_processor"]) != "ByteLevel") {
    return unimplemented("tokenizer.json: post_processor {} is not supported (only type ByteLevel)",
                         j["post_processor"].dump());
  }
  const auto it = j.find("decoder");
  if (it == j.end() || section_type(*it) != "ByteLevel") {
    return unimplemented("tokenizer.json: decoder {} is not supported (only ByteLevel)",
                         it == j.end() ? std::string("(missing)") : it->dump());
  }
  return Status::ok();
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open tokenizer file '{}'", path);
  // A directory opens, reads as empty and would be reported as invalid JSON.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return invalid_argument("tokenizer file '{}' is a directory, expected tokenizer.json", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return internal_error("error reading tokenizer file '{}'", path);
  auto tokenizer = from_json_text(buffer.str());
  if (!tokenizer.is_ok()) return tokenizer.status().with_context(path);
  return tokenizer;
}

Result<Tokenizer> Tokenizer::from_json_text(std::string_view json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("tokenizer.json is not valid JSON");
  DSV4_RETURN_IF_ERROR(check_sections(j));

  Tokenizer tok;
  {
    DSV4_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::from_json(j.value("model", nlohmann::json())));
    tok.bpe_ = std::move(bpe);
  }
  {
    DSV4_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json())));
    tok.pre_ = std::move(pre);
  }
  {
    DSV4_ASSIGN_OR_RETURN(AddedVocab added, AddedVocab::from_json(j.value("added_tokens", nlohmann::json())));
    tok.added_ = std::move(added);
  }

  // HF ignores the ids written for added tokens: a token already in the vocabulary takes its
  // vocabulary id, the others get consecutive ids after the vocabulary. Files where the two
  // disagree would decode differently from HF, so they are rejected.
  TokenId max_added = -1;
  for (const AddedToken& t : tok.added_.tokens()) {
    const auto in_vocab = tok.bpe_.find_text(t.content);
    TokenId expected;
    if (in_vocab) {
      expected = *in_vocab;
    } else {
      expected = max_added >= tok.bpe_.n_ids() ? max_added + 1 : tok.bpe_.n_ids();
    }
    if (t.id != expected) {
      return unimplemented("added token '{}' has id {}, but HF tokenizers would give it id {} "
                           "(added tokens must follow the vocabulary in order)", t.content, t.id, expected);
    }
    max_added = std::max(max_added, t.id);
  }

  int n_ids = tok.bpe_.n_ids();
  for (const AddedToken& t : tok.added_.tokens()) n_ids = std::max(n_ids, t.id + 1);
  tok.id_bytes_.assign(n_ids, std::string());
  tok.id_kind_.assign(n_ids, kNone);
  for (TokenId id = 0; id < tok.bpe_.n_ids(); ++id) {
    if (!tok.bpe_.has_id(id)) continue;
    tok.id_bytes_[id] = tok.bpe_.token_bytes(id);
    tok.id_kind_[id] = kVocab;
  }
  // Added tokens win over vocabulary entries with the same id, as in HF decode. The ByteLevel
  // decoder maps their characters through the byte alphabet when all of them are in it, and
  // keeps their UTF-8 bytes otherwise.
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  std::string bytes;
  for (const AddedToken& t : tok.added_.tokens()) {
    tok.id_bytes_[t.id] = alphabet.decode(t.content, &bytes) ? bytes : t.content;
    tok.id_kind_[t.id] = t.special ? kSpecial : kAdded;
  }
  return tok;
}

Result<std::vector<TokenId>> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<TokenId> ids;
  DSV4_RETURN_IF_ERROR(encode_append(text, parse_special, &ids));
  return ids;
}

Status Tokenizer::encode_append(std::string_view text, bool parse_special, std::vector<TokenId>* out) const {
  const size_t valid = utf8_valid_prefix(text);
  if (valid != text.size()) {
    return invalid_argument("text to tokenize is not valid UTF-8 (bad byte 0x{:02X} at offset {})",
                            static_cast<unsigned char>(text[valid]), valid);
  }
  std::vector<TextSegment> segments;
  added_.split(text, parse_special, &segments);
  RegexScratch regex_scratch;
  BpeScratch bpe_scratch;
  std::vector<Span> pieces;
  out->reserve(out->size() + text.size() / 3);
  for (const TextSegment& seg : segments) {
    if (seg.id >= 0) {
      out->push_back(seg.id);
      continue;
    }
    const std::string_view gap = text.substr(seg.begin, seg.end - seg.begin);
    pieces.clear();
    DSV4_RETURN_IF_ERROR(pre_.split(gap, regex_scratch, &pieces));
    for (const Span& p : pieces) {
      bpe_.encode_piece(gap.substr(p.begin, p.end - p.begin), bpe_scratch, out);
    }
  }
  return Status::ok();
}

Result<std::string> Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const TokenId id = ids[i];
    if (!is_valid(id)) {
      return invalid_argument("token id {} (position {}) is not in the vocabulary (0..{})", id, i,
                              n_ids() - 1);
    }
    if (skip_special && id_kind_[id] == kSpecial) continue;
    bytes += id_bytes_[id];
  }
  std::string text;
  text.reserve(bytes.size());
  utf8_lossy_append(bytes.data(), bytes.size(), /*final=*/true, &text);
  return text;
}

std::optional<TokenId> Tokenizer::added_token_id(std::string_view content) const {
  const AddedToken* t = added_.find_content(content);
  if (t == nullptr) return std::nullopt;
  return t->id;
}

std::string Tokenizer::token_text(TokenId id) const {
  if (const AddedToken* t = added_.find_id(id)) return t->content;
  if (bpe_.has_id(id)) return bpe_.token_text(id);
  return std::string();
}

}  // namespace dsv4::tok
