// regex.cpp: PCRE2 (8-bit) behind the Regex interface. Patterns come from tokenizer.json, where
// HF evaluates them with Oniguruma; for the V3/V4 patterns the two engines agree (the parity
// goldens check this), given UTF + UCP so that \s, \p{..} and classes are Unicode-aware.
#include "tokenizer/regex.h"

#include "tokenizer/onig_compat.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>

namespace dsv4::tok {

RegexScratch::RegexScratch()
    : match_data_(pcre2_match_data_create(1, nullptr)), match_context_(pcre2_match_context_create(nullptr)) {}

RegexScratch::~RegexScratch() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
  pcre2_match_context_free(static_cast<pcre2_match_context*>(match_context_));
}

namespace {
// PCRE2's default match limit, 10 million steps a search, runs out on one long whitespace run:
// the V3/V4 pattern's \s*[\r\n]+ branch takes the whole run and gives it back a character at a
// time, about a step a byte, so a ~10 MB run of spaces failed to tokenize (HF's Oniguruma fails on
// it too). The limit grows with the text searched; it still stops a runaway pattern.
constexpr uint32_t kMinMatchLimit = 10'000'000;
constexpr uint64_t kMatchStepsPerByte = 8;
}  // namespace

void Regex::CodeDeleter::operator()(void* code) const {
  pcre2_code_free(static_cast<pcre2_code*>(code));
}

Result<Regex> Regex::compile(std::string_view onig_pattern, bool literal) {
  std::string pattern(onig_pattern);
  if (!literal) {
    auto translated = onig_to_pcre2(onig_pattern);
    if (!translated.is_ok()) return translated.status().with_context("cannot compile pre-tokenizer regex");
    pattern = std::move(translated).value();
  }
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL admits UTF but not UCP (meaningless for a plain string).
  const uint32_t options = literal ? PCRE2_UTF | PCRE2_NO_UTF_CHECK | PCRE2_LITERAL
                                   : PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return invalid_argument("cannot compile pre-tokenizer regex '{}' (as PCRE2: '{}') at offset {}: {}",
                            onig_pattern, pattern, error_offset, reinterpret_cast<const char*>(message));
  }
  Regex regex;
  regex.code_.reset(code);
  // JIT is an optimisation only: fall back to the interpreter when it is unavailable.
  regex.jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  regex.pattern_ = std::string(onig_pattern);
  return regex;
}

int Regex::find(const char* subject, size_t n, size_t start, RegexScratch& scratch, size_t* begin,
                size_t* end) const {
  auto* code = static_cast<pcre2_code*>(code_.get());
  auto* md = static_cast<pcre2_match_data*>(scratch.match_data());
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject);
  auto* mc = static_cast<pcre2_match_context*>(scratch.match_context());
  pcre2_set_match_limit(mc, uint32_t(std::min<uint64_t>(
                                UINT32_MAX, std::max<uint64_t>(kMinMatchLimit, kMatchStepsPerByte * (n - start)))));
  // The text was validated once when it entered encode(); skip PCRE2's per-call UTF check.
  const int rc = jit_ ? pcre2_jit_match(code, s, n, start, PCRE2_NO_UTF_CHECK, md, mc)
                      : pcre2_match(code, s, n, start, PCRE2_NO_UTF_CHECK, md, mc);
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  if (rc < 0) return rc;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *begin = ov[0];
  *end = ov[1];
  return 1;
}

std::string Regex::error_message(int code) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(code, message, sizeof(message));
  return reinterpret_cast<const char*>(message);
}

}  // namespace dsv4::tok
