// json_depth_test.cpp: the scans of JSON text that guard the server's parse (base/json_depth.h):
// nesting depth, and the objects' member counts with the ordered parse's comparisons (json_shape).
#include "base/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace dsv4 {
namespace {

TEST(JsonDepth, NestingOutsideStrings) {
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}]})"), 4u);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[{{{", "b": "\"[["})"), 1u);
  EXPECT_EQ(json_nesting_depth("[[[["), 4u);  // truncated: what the parser reaches
  EXPECT_EQ(json_nesting_depth("3"), 0u);
}

TEST(JsonShape, CountsMembersPerObject) {
  // Objects of 3, 1 and 2 members (the array's elements are not members); colons and braces in
  // strings and escaped quotes do not count.
  const JsonShape s = json_shape(R"({"a": {"x": 1}, "b": [{"p": ":", "q": "\":{"}, 2], "c": "}:"})");
  EXPECT_EQ(s.largest, 3u);
  EXPECT_EQ(s.member_pairs, 3u + 0u + 1u);
  EXPECT_EQ(json_shape("{}").member_pairs, 0u);
  EXPECT_EQ(json_shape("[1, 2, 3]").largest, 0u);

  std::string big = "{";
  for (int i = 0; i < 9000; ++i) big += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  const JsonShape b = json_shape(big + "}");
  EXPECT_EQ(b.largest, 9000u);
  EXPECT_EQ(b.member_pairs, 9000ull * 8999 / 2);
  EXPECT_GT(b.member_pairs, kMaxJsonMemberPairs);
  // Truncated text still counts what a parser would have read.
  EXPECT_EQ(json_shape(big).largest, 9000u);
  // An object of ~8000 members is within the budget.
  std::string ok = "{";
  for (int i = 0; i < 8000; ++i) ok += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  EXPECT_LE(json_shape(ok + "}").member_pairs, kMaxJsonMemberPairs);
  // Past the counted levels only the depth is followed: members of an object nested deeper are
  // not counted, and the depth is still exact.
  const std::string deep =
      std::string(kMaxJsonDepth + 1, '[') + R"({"a": 1, "b": 2})" + std::string(kMaxJsonDepth + 1, ']');
  const JsonShape d = json_shape(deep);
  EXPECT_EQ(d.depth, kMaxJsonDepth + 2);
  EXPECT_EQ(d.largest, 0u);
  const std::string edge = std::string(kMaxJsonDepth, '[') + R"({"a": 1, "b": 2})" + std::string(kMaxJsonDepth, ']');
  EXPECT_EQ(json_shape(edge).largest, 2u);
}

}  // namespace
}  // namespace dsv4
