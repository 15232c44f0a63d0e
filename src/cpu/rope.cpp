// rope.cpp: frequencies computed in fp32 the way the reference and HF do:
// f_k = 1 / theta^(2k / r); YaRN blends f_k / factor and f_k with a linear ramp between the
// floor/ceil correction dims (no attention-factor scaling: V4 applies none).
#include "cpu/rope.h"

#include <algorithm>
#include <cmath>

namespace dsv4::cpu {

Rope::Rope(const RopeConfig& cfg, int rope_dim) {
  const int half = rope_dim / 2;
  inv_freq_.resize(static_cast<size_t>(half));
  const float theta = float(cfg.theta);
  std::vector<float> base(static_cast<size_t>(half));
  for (int k = 0; k < half; ++k) {
    const float expo = float(2 * k) / float(rope_dim);
    base[size_t(k)] = std::pow(theta, expo);
  }
  if (!cfg.yarn) {
    for (int k = 0; k < half; ++k) inv_freq_[size_t(k)] = 1.0f / base[size_t(k)];
    return;
  }
  auto correction_dim = [&](double n_rot) {
    return double(rope_dim) * std::log(double(cfg.original_max_position) / (n_rot * 2.0 * M_PI)) /
           (2.0 * std::log(cfg.theta));
  };
  double low = std::floor(correction_dim(cfg.beta_fast));
  double high = std::ceil(correction_dim(cfg.beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, double(rope_dim - 1));
  if (low == high) high += 0.001;
  for (int k = 0; k < half; ++k) {
    float ramp = (float(k) - float(low)) / (float(high) - float(low));
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrapolation = 1.0f / base[size_t(k)];
    const float interpolation = 1.0f / (float(cfg.factor) * base[size_t(k)]);
    const float extrap_factor = 1.0f - ramp;
    inv_freq_[size_t(k)] = interpolation * (1.0f - extrap_factor) + extrapolation * extrap_factor;
  }
}

void Rope::rotate(float* x, long pos, bool inverse) const {
  const float p = float(pos);
  for (size_t k = 0; k < inv_freq_.size(); ++k) {
    const float angle = p * inv_freq_[k];
    const float c = std::cos(angle);
    const float s = inverse ? -std::sin(angle) : std::sin(angle);
    const float a = x[2 * k], b = x[2 * k + 1];
    x[2 * k] = a * c - b * s;
    x[2 * k + 1] = b * c + a * s;
  }
}

}  // namespace dsv4::cpu
