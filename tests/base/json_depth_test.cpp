// json_depth_test.cpp: the scans of JSON text that guard the server's parse (base/json_depth.h):
// nesting depth, and the objects' member counts with the ordered parse's comparisons.
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

TEST(JsonObjectSizes, CountsMembersPerObject) {
  // Objects of 3, 1 and 2 members (the array's elements are not members); colons and braces in
  // strings and escaped quotes do not count.
  const JsonObjectSizes s = json_object_sizes(R"({"a": {"x": 1}, "b": [{"p": ":", "q": "\":{"}, 2], "c": "}:"})");
  EXPECT_EQ(s.largest, 3u);
  EXPECT_EQ(s.member_pairs, 3u + 0u + 1u);
  EXPECT_EQ(json_object_sizes("{}").member_pairs, 0u);
  EXPECT_EQ(json_object_sizes("[1, 2, 3]").largest, 0u);

  std::string big = "{";
  for (int i = 0; i < 9000; ++i) big += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  const JsonObjectSizes b = json_object_sizes(big + "}");
  EXPECT_EQ(b.largest, 9000u);
  EXPECT_EQ(b.member_pairs, 9000ull * 8999 / 2);
  EXPECT_GT(b.member_pairs, kMaxJsonMemberPairs);
  // Truncated text still counts what a parser would have read.
  EXPECT_EQ(json_object_sizes(big).largest, 9000u);
  // An object of ~8000 members is within the budget.
  std::string ok = "{";
  for (int i = 0; i < 8000; ++i) ok += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  EXPECT_LE(json_object_sizes(ok + "}").member_pairs, kMaxJsonMemberPairs);
}

}  // namespace
}  // namespace dsv4
