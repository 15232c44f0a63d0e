// utf8.h: UTF-8 validation, lossy decoding with the same U+FFFD substitution as Rust's
// String::from_utf8_lossy (what HF tokenizers' decode uses), and the GPT-2 byte<->char map of
// the ByteLevel pre-tokenizer/decoder. Pure functions; no tokenizer state lives here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::tok {

// Byte length of the first malformed spot in `s`, or s.size() when all of `s` is valid UTF-8.
size_t utf8_valid_prefix(std::string_view s);
inline bool utf8_valid(std::string_view s) { return utf8_valid_prefix(s) == s.size(); }

// Appends the lossy decoding of bytes[0, n) to `out`: each maximal invalid subpart becomes one
// U+FFFD (the Unicode "substitution of maximal subparts" rule, as in Rust). When `final` is false
// an incomplete but so-far-valid sequence at the end is left undecoded, so that decoding a
// stream piece by piece gives exactly the bytes of decoding it at once. Returns the number of
// bytes consumed (n when `final`).
size_t utf8_lossy_append(const char* bytes, size_t n, bool final, std::string* out);

// Appends the UTF-8 encoding of code point `cp` (must be a valid scalar value).
void utf8_append(char32_t cp, std::string* out);

// Decodes the code point at s[i] (s must be valid UTF-8 there) and advances i.
char32_t utf8_next(std::string_view s, size_t* i);

// The GPT-2 ByteLevel alphabet: every byte maps to one printable code point. Bytes 33..126,
// 161..172 and 174..255 map to themselves; the other 68 map to 256, 257, ... in byte order.
struct ByteLevelAlphabet {
  std::array<char32_t, 256> byte_to_char;
  // Inverse over code points 0..323; -1 where a code point is not in the alphabet.
  std::array<int16_t, 324> char_to_byte;

  ByteLevelAlphabet();
  // Maps a byte-level string (e.g. "Ġhello") back to its bytes. False if a char is not in the
  // alphabet or `s` is not valid UTF-8.
  bool decode(std::string_view s, std::string* bytes) const;
  // Maps raw bytes to the byte-level string.
  std::string encode(std::string_view bytes) const;
};

const ByteLevelAlphabet& byte_level_alphabet();

}  // namespace dsv4::tok
