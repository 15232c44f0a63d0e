// penalties.h: the logit adjustments of one request (base/logit_adjust.h), kept up to date as it
// generates: built once from logit_bias and (with a repetition penalty) the prompt's tokens, then
// updated by each generated token in O(entries) (a sorted insert or an in-place update), so that
// a step only hands the runner a span. Entries are sorted by token id and distinct; a request
// that asks for no adjustment has none and costs nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/logit_adjust.h"
#include "dsv4/engine.h"

namespace dsv4::engine_detail {

class PenaltyState {
 public:
  // Whether p asks for any adjustment.
  static bool wanted(const SamplingParams& p);

  // p must be valid (the engine's validate): bias ids distinct and in the vocabulary.
  void init(const SamplingParams& p, std::span<const int32_t> prompt);
  // One generated token.
  void add_output(int32_t token);
  std::span<const LogitAdjust> adjustments() const { return entries_; }

 private:
  // The entry of `token`, inserted (with neither bias nor penalties) where missing.
  size_t find_or_insert(int32_t token);

  bool active_ = false;
  float presence_ = 0.0f, frequency_ = 0.0f, repetition_ = 1.0f;
  std::vector<LogitAdjust> entries_;  // sorted by token
  std::vector<int32_t> counts_;       // output occurrences of entries_[i].token
};

}  // namespace dsv4::engine_detail
