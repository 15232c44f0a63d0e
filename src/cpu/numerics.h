// numerics.h: the two numerics modes of the CPU reference.
//   fp32: no intermediate rounding and no quantization simulation. This is what Hugging Face
//          transformers computes in an fp32 forward, and what the HF golden tests compare with.
//   bf16: bf16 at every op boundary where the official code stores bf16 (MODEL_SPEC.md §10.2),
//          fp32 inside ops; KV no-rope dims through fp8 (ue8m0 scale per 64); indexer queries and
//          keys through Hadamard + fp4. Linear layers take bf16 activations without fp8
//          simulation, because that is what the W4A16 GPU engine computes (the GPU oracle mode).
#pragma once

#include <string>

#include "base/numeric.h"

namespace dsv4::cpu {

// The two modes are fixed combinations of three switches; tests turn them on one at a time to
// attribute the bf16-vs-fp32 difference to its sources.
struct Numerics {
  bool bf16 = false;         // round to bf16 at op boundaries
  bool fp8_kv = false;       // KV no-rope dims (window and compressed entries) through fp8 e4m3
  bool fp4_indexer = false;  // indexer queries and keys through Hadamard + fp4 e2m1

  static Numerics fp32() { return {}; }
  static Numerics bf16_gpu() { return {true, true, true}; }
  bool operator==(const Numerics&) const = default;
  // "fp32", "bf16", or a description of a custom combination.
  std::string name() const;
};

// Rounds to bf16 when bf16 rounding is on, identity otherwise.
struct Rounder {
  bool bf16 = false;
  explicit Rounder(const Numerics& n) : bf16(n.bf16) {}
  float operator()(float x) const { return bf16 ? round_bf16(x) : x; }
  void apply(float* x, long n) const {
    if (!bf16) return;
    for (long i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
  }
};

}  // namespace dsv4::cpu
