// penalties.cpp: see penalties.h.
#include "engine/penalties.h"

#include <algorithm>

namespace dsv4::engine_detail {

bool PenaltyState::wanted(const SamplingParams& p) {
  return p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f ||
         !p.logit_bias.empty();
}

void PenaltyState::init(const SamplingParams& p, std::span<const int32_t> prompt) {
  entries_.clear();
  counts_.clear();
  active_ = wanted(p);
  if (!active_) return;
  presence_ = p.presence_penalty;
  frequency_ = p.frequency_penalty;
  repetition_ = p.repetition_penalty;
  std::vector<int32_t> ids;
  for (const auto& [id, b] : p.logit_bias) ids.push_back(id);
  if (repetition_ != 1.0f) ids.insert(ids.end(), prompt.begin(), prompt.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  entries_.resize(ids.size());
  counts_.assign(ids.size(), 0);
  for (size_t i = 0; i < ids.size(); ++i) entries_[i].token = ids[i];
  for (const auto& [id, b] : p.logit_bias) entries_[find_or_insert(id)].bias = b;
  if (repetition_ != 1.0f)
    for (const int32_t t : prompt) entries_[find_or_insert(t)].rep = repetition_;
}

size_t PenaltyState::find_or_insert(int32_t token) {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), token,
                                   [](const LogitAdjust& a, int32_t t) { return a.token < t; });
  const size_t i = size_t(it - entries_.begin());
  if (it == entries_.end() || it->token != token) {
    LogitAdjust a;
    a.token = token;
    entries_.insert(it, a);
    counts_.insert(counts_.begin() + ptrdiff_t(i), 0);
  }
  return i;
}

void PenaltyState::add_output(int32_t token) {
  // Only the bias touches tokens when no penalty is set: an output token then changes nothing.
  if (!active_ || (presence_ == 0.0f && frequency_ == 0.0f && repetition_ == 1.0f)) return;
  const size_t i = find_or_insert(token);
  const int32_t c = ++counts_[i];
  LogitAdjust& a = entries_[i];
  a.rep = repetition_;
  // vLLM subtracts the two terms one after the other; one subtraction here (the same up to
  // rounding), which the host and the GPU share.
  a.sub = frequency_ * float(c) + presence_;
}

}  // namespace dsv4::engine_detail
