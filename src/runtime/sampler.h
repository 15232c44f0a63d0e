// sampler.h: host-side token sampling from fp32 logits, used by the CPU runner and as the
// reference for the GPU sampler: greedy, temperature, min-p, top-k, top-p, and logprobs. The
// random draw is counter-based (seed, index), so a request's samples do not depend on which other
// requests share its steps, and a preempted request that is recomputed draws the same tokens.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "dsv4/engine.h"

namespace dsv4::runtime {

// A uniform double in [0, 1) from (seed, index): splitmix64 of both, mixed twice.
double counter_uniform(uint64_t seed, int64_t index);

// Below this temperature sampling is greedy (as vLLM's _SAMPLING_EPS).
inline constexpr float kGreedyTemperature = 1e-5f;

class Sampler {
 public:
  // Draws one token from logits [vocab]. logprob and top are the log-softmax of the raw logits
  // (before temperature and filters), as vLLM reports them; top has p.logprobs entries (if >= 0).
  TokenLogprob sample(std::span<const float> logits, const SamplingParams& p, uint64_t seed, int64_t index);

 private:
  std::vector<std::pair<float, int32_t>> cand_;  // (scaled logit or probability, token id)
};

}  // namespace dsv4::runtime
