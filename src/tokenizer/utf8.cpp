// utf8.cpp: UTF-8 scanning and the ByteLevel alphabet. The lossy decoder mirrors Rust's
// Utf8Chunks so that our decode() is byte-identical to HF tokenizers on invalid sequences.
#include "tokenizer/utf8.h"

namespace dsv4::tok {
namespace {

// Length of the sequence introduced by lead byte b, 0 if b cannot start one.
inline int lead_length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Valid range of the byte after lead byte b (the later continuation bytes are all 80..BF).
inline bool second_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

// Scans one sequence at p[0, n). Returns its length if valid and complete; otherwise returns
// -(k) where k >= 1 is the length of the maximal invalid subpart, or 0 if the sequence is a
// valid prefix cut off by the end of the input.
inline int scan_one(const uint8_t* p, size_t n) {
  const int len = lead_length(p[0]);
  if (len == 0) return -1;
  if (len == 1) return 1;
  for (int k = 1; k < len; ++k) {
    if (static_cast<size_t>(k) >= n) return 0;
    const bool ok = k == 1 ? second_ok(p[0], p[1]) : (p[k] >= 0x80 && p[k] <= 0xBF);
    if (!ok) return -k;
  }
  return len;
}

}  // namespace

size_t utf8_valid_prefix(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int r = scan_one(p + i, n - i);
    if (r <= 0) return i;
    i += static_cast<size_t>(r);
  }
  return n;
}

size_t utf8_lossy_append(const char* bytes, size_t n, bool final, std::string* out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  const auto* p = reinterpret_cast<const uint8_t*>(bytes);
  size_t i = 0;
  size_t run = 0;  // start of the current run of valid bytes, appended in one go
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int r = scan_one(p + i, n - i);
    if (r > 0) {
      i += static_cast<size_t>(r);
      continue;
    }
    out->append(bytes + run, i - run);
    if (r == 0) {  // truncated sequence at the end
      if (!final) return i;
      out->append(kReplacement, 3);
      return n;
    }
    out->append(kReplacement, 3);
    i += static_cast<size_t>(-r);
    run = i;
  }
  out->append(bytes + run, n - run);
  return n;
}

void utf8_append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t utf8_next(std::string_view s, size_t* i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + *i;
  char32_t cp;
  int len;
  if (p[0] < 0x80) {
    cp = p[0];
    len = 1;
  } else if (p[0] < 0xE0) {
    cp = p[0] & 0x1F;
    len = 2;
  } else if (p[0] < 0xF0) {
    cp = p[0] & 0x0F;
    len = 3;
  } else {
    cp = p[0] & 0x07;
    len = 4;
  }
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (p[k] & 0x3F);
  *i += static_cast<size_t>(len);
  return cp;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  char_to_byte.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const char32_t c = printable ? static_cast<char32_t>(b) : next++;
    byte_to_char[b] = c;
    char_to_byte[c] = static_cast<int16_t>(b);
  }
}

bool ByteLevelAlphabet::decode(std::string_view s, std::string* bytes) const {
  if (!utf8_valid(s)) return false;
  bytes->clear();
  size_t i = 0;
  while (i < s.size()) {
    const char32_t c = utf8_next(s, &i);
    if (c >= char_to_byte.size() || char_to_byte[c] < 0) return false;
    bytes->push_back(static_cast<char>(char_to_byte[c]));
  }
  return true;
}

std::string ByteLevelAlphabet::encode(std::string_view bytes) const {
  std::string out;
  for (unsigned char b : bytes) utf8_append(byte_to_char[b], &out);
  return out;
}

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

}  // namespace dsv4::tok
