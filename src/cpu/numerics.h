// numerics.h: the two numerics modes of the CPU reference.
//   kFp32: no intermediate rounding and no quantization simulation. This is what Hugging Face
//          transformers computes in an fp32 forward, and what the HF golden tests compare with.
//   kBf16: bf16 at every op boundary where the official code stores bf16 (MODEL_SPEC.md §10.2),
//          fp32 inside ops; KV no-rope dims through fp8 (ue8m0 scale per 64); indexer queries and
//          keys through Hadamard + fp4. Linear layers take bf16 activations without fp8
//          simulation, because that is what the W4A16 GPU engine computes (the GPU oracle mode).
#pragma once

#include "base/numeric.h"

namespace dsv4::cpu {

enum class Numerics { kFp32, kBf16 };

const char* numerics_name(Numerics n);

// Rounds to bf16 in kBf16 mode, identity in kFp32 mode.
struct Rounder {
  bool bf16 = false;
  explicit Rounder(Numerics n) : bf16(n == Numerics::kBf16) {}
  float operator()(float x) const { return bf16 ? round_bf16(x) : x; }
  void apply(float* x, long n) const {
    if (!bf16) return;
    for (long i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
  }
};

}  // namespace dsv4::cpu
