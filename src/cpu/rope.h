// rope.h: RoPE frequencies (plain, or YaRN-blended for compressed layers) and the interleaved
// rotation of the trailing rope dims of a vector (MODEL_SPEC.md §6.3).
#pragma once

#include <vector>

#include "model/config.h"

namespace dsv4::cpu {

class Rope {
 public:
  Rope() = default;
  Rope(const RopeConfig& cfg, int rope_dim);
  // Rotates the last rope_dim values of x (pairs (2i, 2i+1)) by +angle(pos), or by -angle(pos)
  // when `inverse`. fp32 math; the caller rounds.
  void rotate(float* x_tail, long pos, bool inverse = false) const;
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  std::vector<float> inv_freq_;  // [rope_dim / 2]
};

}  // namespace dsv4::cpu
