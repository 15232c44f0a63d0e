// regex.h: a small PCRE2 wrapper for the Split pre-tokenizer stages: compile once (UTF + UCP,
// JIT when available), then find successive matches inside one piece of text. The compiled
// pattern is immutable and shared by threads; each thread brings its own RegexScratch.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv4::tok {

// Per-thread match state (PCRE2 match data). Not thread-safe; cheap to keep per encode call.
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;
  void* match_data() const { return match_data_; }
  void* match_context() const { return match_context_; }

 private:
  void* match_data_;     // pcre2_match_data_8*
  void* match_context_;  // pcre2_match_context_8*: the match limit, set per search (Regex::find)
};

class Regex {
 public:
  // `pattern` is UTF-8 in Oniguruma syntax (as in tokenizer.json), translated for PCRE2 by
  // onig_to_pcre2; `literal` compiles it as a plain string (the Split "String" pattern).
  static Result<Regex> compile(std::string_view pattern, bool literal);

  // Finds the leftmost match in subject[start, n), where subject[0, n) is the whole piece: the
  // regex never looks outside it (lookarounds stop at the piece's ends, as in HF). `subject`
  // must be valid UTF-8 and `start` on a character boundary. Returns 1 and sets [begin, end)
  // on a match, 0 when there is none, and a negative PCRE2 error code when matching failed
  // (e.g. a resource limit); see error_message().
  int find(const char* subject, size_t n, size_t start, RegexScratch& scratch, size_t* begin,
           size_t* end) const;
  static std::string error_message(int code);

  const std::string& pattern() const { return pattern_; }

 private:
  struct CodeDeleter {
    void operator()(void* code) const;
  };
  std::unique_ptr<void, CodeDeleter> code_;  // pcre2_code_8*
  bool jit_ = false;
  std::string pattern_;
};

}  // namespace dsv4::tok
