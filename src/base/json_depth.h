// json_depth.h: how deeply JSON text nests arrays and objects, and how large its objects are,
// found by one scan of the text before anything parses it.
// Depth: nlohmann parses any depth without recursion, but copying, dumping or rendering the value
// recurses once per level, so a body of a few hundred KB nesting 100k levels overflows the stack
// of the thread that handles it and kills the process. Untrusted JSON (request bodies, tool-call
// arguments in a conversation) is checked against kMaxJsonDepth before it is used.
// Object size: an ordered_json object (the server keeps members in their order: tool schemas are
// rendered into the prompt as written) finds each new key by a linear search of the ones before,
// so parsing an object of n members costs ~n^2 / 2 key comparisons: 80k members (1 MB) took 15 s
// of a handler thread. Request bodies are checked against kMaxJsonMemberPairs first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace dsv4 {

// Far beyond any real request (tool schemas nest a few levels); Python's json stops near 1000.
inline constexpr size_t kMaxJsonDepth = 512;

// Sum over the objects of n (n - 1) / 2 for their n members: the key comparisons an ordered map
// makes while parsing. 2^25 is one object of ~8200 members (~0.2 s), e.g. a logit_bias of that
// many tokens, or many small objects (a conversation of 100k three-member messages: 300k).
inline constexpr uint64_t kMaxJsonMemberPairs = uint64_t(1) << 25;

struct JsonShape {
  size_t depth = 0;           // the deepest nesting of [ and {
  uint64_t member_pairs = 0;  // sum over the objects of n (n - 1) / 2
  size_t largest = 0;         // members of the largest object
};

// One scan of JSON text outside string literals (a member is its ':'): exact for valid JSON, and
// for invalid JSON what the parser would have reached or built before failing. Members are
// counted only in objects within kMaxJsonDepth + 1 levels (text nested deeper is refused for its
// depth), so the scan holds at most that many counters whatever the text.
inline JsonShape json_shape(std::string_view text) {
  JsonShape r;
  std::vector<int64_t> open;  // the open containers within the counted levels: members so far, -1 for an array
  size_t depth = 0;
  auto close_counted = [&] {
    if (open.back() > 0) {
      const uint64_t n = uint64_t(open.back());
      r.member_pairs += n * (n - 1) / 2;
      if (n > r.largest) r.largest = size_t(n);
    }
    open.pop_back();
  };
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > r.depth) r.depth = depth;
      if (depth <= kMaxJsonDepth + 1) open.push_back(c == '{' ? 0 : -1);
    } else if (c == ':' && depth == open.size() && depth > 0 && open.back() >= 0) {
      ++open.back();
    } else if ((c == ']' || c == '}') && depth > 0) {
      if (depth == open.size()) close_counted();
      --depth;
    }
  }
  while (!open.empty()) close_counted();  // truncated text: the parser fails, but counts what it read
  return r;
}

inline size_t json_nesting_depth(std::string_view text) { return json_shape(text).depth; }

}  // namespace dsv4
