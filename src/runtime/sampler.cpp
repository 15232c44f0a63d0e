// sampler.cpp: see sampler.h. Filters are applied in vLLM V1's order: temperature, min-p, top-k,
// top-p; the draw walks the kept tokens in an order fixed by the logits alone (most likely first
// after top-p, id order otherwise), so the same (logits, params, seed, index) gives the same token.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "base/splitmix.h"

namespace dsv4::runtime {
namespace {

// Most likely first; ties broken by the lower id, so the order is total and deterministic.
bool more_likely(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

double counter_uniform(uint64_t seed, int64_t index) { return counter_uniform_draw(seed, index); }

TokenLogprob Sampler::sample(std::span<const float> logits, const SamplingParams& p, uint64_t seed,
                             int64_t index) {
  const int32_t V = static_cast<int32_t>(logits.size());
  DSV4_CHECK(V > 0, "sampling from empty logits");
  // Raw log-softmax normalizer, for logprobs. NaN logits are a runner bug.
  float max_logit = -std::numeric_limits<float>::infinity();
  int32_t argmax = 0;
  for (int32_t i = 0; i < V; ++i) {
    DSV4_CHECK(!std::isnan(logits[size_t(i)]), "NaN logit at token {}", i);
    if (logits[size_t(i)] > max_logit) {
      max_logit = logits[size_t(i)];
      argmax = i;
    }
  }
  double sum = 0.0;
  for (int32_t i = 0; i < V; ++i) sum += std::exp(double(logits[size_t(i)]) - max_logit);
  const double lse = double(max_logit) + std::log(sum);

  int32_t token = argmax;
  if (p.temperature > kGreedyTemperature) {
    const double inv_t = 1.0 / p.temperature;
    // Unnormalized probabilities relative to the most likely token: w = exp((l - max) / T) in (0, 1].
    // min-p keeps w >= min_p (p_i >= min_p * p_max is the same test).
    cand_.clear();
    const double min_w = p.min_p > 0.0f ? double(p.min_p) : 0.0;
    for (int32_t i = 0; i < V; ++i) {
      const double w = std::exp((double(logits[size_t(i)]) - max_logit) * inv_t);
      if (w > 0.0 && w >= min_w) cand_.emplace_back(float(w), i);
    }
    if (cand_.empty()) cand_.emplace_back(1.0f, argmax);  // underflow guard: w(argmax) == 1
    size_t n = cand_.size();
    if (p.top_k > 0 && size_t(p.top_k) < n) {
      std::nth_element(cand_.begin(), cand_.begin() + p.top_k, cand_.end(), more_likely);
      n = size_t(p.top_k);
      cand_.resize(n);
      // The draw walks id order unless top-p reorders below; nth_element leaves an arbitrary
      // order, which the GPU sampler could not reproduce.
      std::sort(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    }
    if (p.top_p < 1.0f) {
      double total = 0.0;
      for (size_t i = 0; i < n; ++i) total += cand_[i].first;
      const double target = double(p.top_p) * total;
      // The nucleus is usually small: try the 1024 most likely before sorting everything.
      size_t head = std::min<size_t>(n, 1024);
      std::partial_sort(cand_.begin(), cand_.begin() + ptrdiff_t(head), cand_.begin() + ptrdiff_t(n), more_likely);
      double cum = 0.0;
      size_t keep = 0;
      while (keep < head && cum < target) cum += cand_[keep++].first;
      if (cum < target && head < n) {
        std::sort(cand_.begin() + ptrdiff_t(head), cand_.begin() + ptrdiff_t(n), more_likely);
        while (keep < n && cum < target) cum += cand_[keep++].first;
      }
      n = std::max<size_t>(keep, 1);
      cand_.resize(n);
    }
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) total += cand_[i].first;
    const double u = counter_uniform(seed, index) * total;
    double cum = 0.0;
    token = cand_[n - 1].second;  // rounding guard: u may reach total
    for (size_t i = 0; i < n; ++i) {
      cum += cand_[i].first;
      if (u < cum) {
        token = cand_[i].second;
        break;
      }
    }
  }

  TokenLogprob out;
  out.token = token;
  out.logprob = float(double(logits[size_t(token)]) - lse);
  if (p.logprobs > 0) {
    const size_t k = std::min<size_t>(size_t(p.logprobs), size_t(V));
    cand_.clear();
    for (int32_t i = 0; i < V; ++i) cand_.emplace_back(logits[size_t(i)], i);
    std::partial_sort(cand_.begin(), cand_.begin() + ptrdiff_t(k), cand_.end(), more_likely);
    for (size_t i = 0; i < k; ++i) out.top.emplace_back(cand_[i].second, float(double(cand_[i].first) - lse));
  }
  return out;
}

}  // namespace dsv4::runtime
