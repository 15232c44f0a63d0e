// logit_adjust.h: logit_bias and the repetition / frequency / presence penalties of one sequence
// as a sparse list of per-token adjustments of its logits, one entry per token they touch. The
// engine builds the list from the request and its output so far (runtime/penalties.h); the
// runners apply it before sampling: the host with apply_logit_adjust, the GPU with
// cuda::adjust_logits, both through adjust_logit, so they agree bit for bit. vLLM's order: the
// bias first, then the repetition penalty (tokens of the prompt or the output), then frequency
// and presence (output counts).
#pragma once

#include <cstdint>
#if !defined(__CUDACC__)
#include <span>
#endif

#if defined(__CUDACC__)
#define DSV4_ADJUST_HD __host__ __device__ __forceinline__
#else
#define DSV4_ADJUST_HD inline
#endif

namespace dsv4 {

struct LogitAdjust {
  int32_t token = 0;
  float bias = 0.0f;  // added first (logit_bias)
  float rep = 1.0f;   // repetition penalty: x > 0 ? x / rep : x * rep (1: none)
  float sub = 0.0f;   // subtracted last: frequency * count + presence * (count > 0)
};
static_assert(sizeof(LogitAdjust) == 16, "LogitAdjust is copied to the GPU as is");

// Every step rounded on its own, so that host and device agree bit for bit: on the device the
// explicit intrinsics keep nvcc from fusing x * rep - sub into one FMA, on the host a volatile.
DSV4_ADJUST_HD float adjust_logit(float x, const LogitAdjust& a) {
#if defined(__CUDA_ARCH__)
  x = __fadd_rn(x, a.bias);
  if (a.rep != 1.0f) x = x > 0.0f ? __fdiv_rn(x, a.rep) : __fmul_rn(x, a.rep);
  return __fsub_rn(x, a.sub);
#else
  x += a.bias;
  if (a.rep != 1.0f) {
    // volatile: a host compiler allowed to contract (FMA targets, GNU modes) must not fuse
    // x * rep - sub either.
    volatile float scaled = x > 0.0f ? x / a.rep : x * a.rep;
    x = scaled;
  }
  return x - a.sub;
#endif
}

#if !defined(__CUDACC__)  // .cu files are C++17: no std::span
// Host: logits[a.token] for every entry (tokens must be < logits.size() and distinct).
inline void apply_logit_adjust(std::span<float> logits, std::span<const LogitAdjust> adjust) {
  for (const LogitAdjust& a : adjust) logits[size_t(a.token)] = adjust_logit(logits[size_t(a.token)], a);
}
#endif

}  // namespace dsv4
