// json_depth.h: how deeply JSON text nests arrays and objects, found by one scan of the text.
// nlohmann parses any depth without recursion, but copying, dumping or rendering the value
// recurses once per level, so a body of a few hundred KB nesting 100k levels overflows the stack
// of the thread that handles it and kills the process. Untrusted JSON (request bodies, tool-call
// arguments in a conversation) is checked against kMaxJsonDepth before it is used.
#pragma once

#include <cstddef>
#include <string_view>

namespace dsv4 {

// Far beyond any real request (tool schemas nest a few levels); Python's json stops near 1000.
inline constexpr size_t kMaxJsonDepth = 512;

// The deepest nesting of [ and { outside string literals: exact for valid JSON, and for invalid
// JSON what the parser would have reached before failing.
inline size_t json_nesting_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace dsv4
