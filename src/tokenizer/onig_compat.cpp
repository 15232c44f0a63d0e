// onig_compat.cpp: the pattern rewrite behind onig_to_pcre2. The extra ranges were measured by
// classifying every code point with HF tokenizers 0.23.3 (Oniguruma) and with PCRE2 10.42; the
// test unicode_props_test re-checks every code point against tests/data/tokenizer/
// unicode_props.json and prints any new difference as ranges ready to paste here.
#include "tokenizer/onig_compat.h"

#include <fmt/format.h>

#include <cstdint>
#include <span>

namespace dsv4::tok {
namespace {

struct Range {
  uint32_t lo, hi;
};

// Code points in Oniguruma's (Unicode 16.0) general category but not in PCRE2 10.42's (14.0).
constexpr Range kExtraN[] = {
    {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11F50, 0x11F59}, {0x16130, 0x16139},
    {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3}, {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA}};
constexpr Range kExtraL[] = {
    {0x1C89, 0x1C8A},   {0xA7CB, 0xA7CD},   {0xA7DA, 0xA7DC},   {0x105C0, 0x105F3}, {0x10D4A, 0x10D65},
    {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x1123F, 0x11240}, {0x11380, 0x11389}, {0x1138B, 0x1138B},
    {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113B7}, {0x113D1, 0x113D1}, {0x113D3, 0x113D3},
    {0x11BC0, 0x11BE0}, {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x1342F, 0x1342F},
    {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x16100, 0x1611D}, {0x16D40, 0x16D6C}, {0x18CFF, 0x18CFF},
    {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E06D}, {0x1E4D0, 0x1E4EB},
    {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0}, {0x2B739, 0x2B739}, {0x2EBF0, 0x2EE5D}, {0x31350, 0x323AF}};
constexpr Range kExtraM[] = {
    {0x897, 0x897},     {0xCF3, 0xCF3},     {0xECE, 0xECE},     {0x10D69, 0x10D6D}, {0x10EFC, 0x10EFF},
    {0x11241, 0x11241}, {0x113B8, 0x113C0}, {0x113C2, 0x113C2}, {0x113C5, 0x113C5}, {0x113C7, 0x113CA},
    {0x113CC, 0x113D0}, {0x113D2, 0x113D2}, {0x113E1, 0x113E2}, {0x11F00, 0x11F01}, {0x11F03, 0x11F03},
    {0x11F34, 0x11F3A}, {0x11F3E, 0x11F42}, {0x11F5A, 0x11F5A}, {0x13440, 0x13440}, {0x13447, 0x13455},
    {0x1611E, 0x1612F}, {0x1E08F, 0x1E08F}, {0x1E4EC, 0x1E4EF}, {0x1E5EE, 0x1E5EF}};
constexpr Range kExtraP[] = {
    {0x1B4E, 0x1B4F},   {0x1B7F, 0x1B7F},   {0x10D6E, 0x10D6E}, {0x113D4, 0x113D5}, {0x113D7, 0x113D8},
    {0x11B00, 0x11B09}, {0x11BE1, 0x11BE1}, {0x11F43, 0x11F4F}, {0x16D6D, 0x16D6F}, {0x1E5FF, 0x1E5FF}};
constexpr Range kExtraS[] = {
    {0x2427, 0x2429},   {0x2FFC, 0x2FFF},   {0x31E4, 0x31E5},   {0x31EF, 0x31EF},   {0x10D8E, 0x10D8F},
    {0x1CC00, 0x1CCEF}, {0x1CD00, 0x1CEB3}, {0x1F6DC, 0x1F6DC}, {0x1F774, 0x1F776}, {0x1F77B, 0x1F77F},
    {0x1F7D9, 0x1F7D9}, {0x1F8B2, 0x1F8BB}, {0x1F8C0, 0x1F8C1}, {0x1FA75, 0x1FA77}, {0x1FA87, 0x1FA89},
    {0x1FA8F, 0x1FA8F}, {0x1FAAD, 0x1FAAF}, {0x1FABB, 0x1FABF}, {0x1FAC6, 0x1FAC6}, {0x1FACE, 0x1FACF},
    {0x1FADA, 0x1FADC}, {0x1FADF, 0x1FADF}, {0x1FAE8, 0x1FAE9}, {0x1FAF7, 0x1FAF8}, {0x1FBCB, 0x1FBEF}};

// Oniguruma's \s: the Unicode White_Space property (25 code points), as class items.
constexpr const char* kWhiteSpace =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::span<const Range> extra_ranges(char category) {
  switch (category) {
    case 'N': return kExtraN;
    case 'L': return kExtraL;
    case 'M': return kExtraM;
    case 'P': return kExtraP;
    case 'S': return kExtraS;
    default: return {};
  }
}

// Class items for \p{category}: the property itself plus the missing code points.
std::string property_items(char category) {
  std::string items = fmt::format("\\p{{{}}}", category);
  for (const Range& r : extra_ranges(category)) {
    items += r.lo == r.hi ? fmt::format("\\x{{{:X}}}", r.lo) : fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", r.lo, r.hi);
  }
  return items;
}

// Length of the UTF-8 character starting with byte c.
size_t char_length(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

}  // namespace

Result<std::string> onig_to_pcre2(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  size_t class_start = 0;  // index just after '[' or '[^' of the open class
  size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '\\') {
      if (i + 1 >= pattern.size()) return invalid_argument("regex '{}' ends with a lone backslash", pattern);
      const char e = pattern[i + 1];
      if (e == 'p' || e == 'P') {
        // \p{X} or \pX; only the one-letter categories need patching.
        std::string name;
        size_t next;
        if (i + 2 < pattern.size() && pattern[i + 2] == '{') {
          const size_t close = pattern.find('}', i + 3);
          if (close == std::string_view::npos) return invalid_argument("regex '{}': unterminated \\p{{", pattern);
          name = std::string(pattern.substr(i + 3, close - i - 3));
          next = close + 1;
        } else {
          name = std::string(pattern.substr(i + 2, 1));
          next = i + 3;
        }
        if (name.size() == 1 && !extra_ranges(name[0]).empty()) {
          if (e == 'P' && in_class) {
            return unimplemented("regex '{}': \\P{{{}}} inside a character class is not supported", pattern, name);
          }
          // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on chained operator+.
          if (!in_class) out += e == 'P' ? "[^" : "[";
          out += property_items(name[0]);
          if (!in_class) out += ']';
        } else {
          out.append(pattern.substr(i, next - i));
        }
        i = next;
        continue;
      }
      if (e == 's' || e == 'S') {
        if (in_class) {
          if (e == 'S') return unimplemented("regex '{}': \\S inside a character class is not supported", pattern);
          out += kWhiteSpace;
        } else {
          out += e == 's' ? fmt::format("[{}]", kWhiteSpace) : fmt::format("[^{}]", kWhiteSpace);
        }
        i += 2;
        continue;
      }
      if (e == 'Q') return unimplemented("regex '{}': \\Q...\\E quoting is not supported", pattern);
      const size_t len = 1 + char_length(static_cast<unsigned char>(e));
      out.append(pattern.substr(i, len));
      i += len;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < pattern.size() && pattern[i] == '^') {
        out += '^';
        ++i;
      }
      class_start = i;
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t close = pattern.find(":]", i + 2);
      if (close == std::string_view::npos) return invalid_argument("regex '{}': unterminated [: class", pattern);
      out.append(pattern.substr(i, close + 2 - i));
      i = close + 2;
      continue;
    }
    if (in_class && c == ']' && i != class_start) {  // a ']' right after '[' or '[^' is literal
      in_class = false;
    }
    const size_t len = char_length(static_cast<unsigned char>(c));
    out.append(pattern.substr(i, len));
    i += len;
  }
  if (in_class) return invalid_argument("regex '{}': unterminated character class", pattern);
  return out;
}

}  // namespace dsv4::tok
