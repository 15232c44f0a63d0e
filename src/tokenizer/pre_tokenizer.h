// pre_tokenizer.h: the HF pre-tokenizer subset used by DeepSeek V3/V4 tokenizer.json files: a
// Sequence of Split stages (regex or literal pattern, behavior "Isolated") followed by a
// ByteLevel stage without its own regex. Splits text into pieces; it does no byte mapping (the
// BPE model works on raw bytes) and rejects every other configuration with a clear error.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "tokenizer/regex.h"

namespace dsv4::tok {

// A piece of the input: bytes [begin, end) of the text passed to split().
struct Span {
  size_t begin;
  size_t end;
};

class PreTokenizer {
 public:
  // `config` is the "pre_tokenizer" object of tokenizer.json.
  static Result<PreTokenizer> from_json(const nlohmann::json& config);

  // Appends the pieces of `text` (valid UTF-8) to *out, in order. Every stage runs on each
  // piece of the previous stage separately, so lookarounds never see past a piece.
  Status split(std::string_view text, RegexScratch& scratch, std::vector<Span>* out) const;

  size_t n_stages() const { return stages_.size(); }

 private:
  Status split_stage(std::string_view text, Span piece, size_t stage_idx, RegexScratch& scratch,
                     std::vector<Span>* out) const;

  std::vector<Regex> stages_;
};

}  // namespace dsv4::tok
