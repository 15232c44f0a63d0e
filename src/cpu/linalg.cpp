// linalg.cpp: dot, linear (block dequantization + dot), RMSNorm.
#include "cpu/linalg.h"

#include <omp.h>

#include <cmath>
#include <vector>

namespace dsv4::cpu {

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

namespace {

typedef float F8 __attribute__((vector_size(32)));  // 8 lanes = dot()'s 8 partial sums

#define DSV4_LOAD8(p) ({ F8 v_; __builtin_memcpy(&v_, (p), sizeof(F8)); v_; })

// dot()'s final tree over the 8 partial sums, then the tail. By reference: its callers are AVX2
// clones and it is compiled for the baseline, where a 32-byte vector passed by value goes on the
// stack, not in a ymm register; wherever it was not inlined (-O0, sanitizer or coverage builds)
// it read stack garbage (linalg_unoptimized_test).
inline float finish8(const F8& a, float tail) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + tail;
}

// Dot products of 4 weight rows (w, stride ldw) with 4 tokens (x, stride ldx), each with exactly
// dot()'s summation order (8 interleaved partial sums, the same final tree, then the tail), so
// results are bit-identical to 16 dot() calls; each loaded vector is used four times. y[t * ldy
// + r]. Cloned for AVX2 (no FMA: a fused multiply-add would round differently) and a baseline
// build, chosen at load time.
__attribute__((target_clones("avx2", "default"))) void dot4x4(const float* w, int64_t ldw, const float* x,
                                                              int64_t ldx, int64_t n, float* y, int64_t ldy) {
  F8 acc[4][4] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F8 wv[4];
    for (int r = 0; r < 4; ++r) wv[r] = DSV4_LOAD8(w + r * ldw + i);
    for (int t = 0; t < 4; ++t) {
      const F8 xv = DSV4_LOAD8(x + t * ldx + i);
      for (int r = 0; r < 4; ++r) acc[t][r] += xv * wv[r];
    }
  }
  for (int t = 0; t < 4; ++t)
    for (int r = 0; r < 4; ++r) {
      float tail = 0.0f;
      for (int64_t k = i; k < n; ++k) tail += x[t * ldx + k] * w[r * ldw + k];
      y[t * ldy + r] = finish8(acc[t][r], tail);
    }
}

// One weight row against 4 tokens (rows left over from the 4-row groups), same order as dot().
__attribute__((target_clones("avx2", "default"))) void dot1x4(const float* w, const float* x, int64_t ldx, int64_t n,
                                                              float* y, int64_t ldy) {
  F8 acc[4] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const F8 wv = DSV4_LOAD8(w + i);
    for (int t = 0; t < 4; ++t) acc[t] += DSV4_LOAD8(x + t * ldx + i) * wv;
  }
  for (int t = 0; t < 4; ++t) {
    float tail = 0.0f;
    for (int64_t k = i; k < n; ++k) tail += x[t * ldx + k] * w[k];
    y[t * ldy] = finish8(acc[t], tail);
  }
}
#undef DSV4_LOAD8

}  // namespace

void linear(const LinearWeight& w, const float* x, int64_t T, int64_t ldx, float* y, int64_t ldy, int64_t n0,
            int64_t n1) {
  // Rows are dequantized in blocks so that each weight byte is read once per call while the
  // activations (T x K floats) stay hot in cache; tokens and rows go in groups of four.
  constexpr int64_t kRowBlock = 16;
  const int64_t K = w.k;
  const int64_t n_blocks = (n1 - n0 + kRowBlock - 1) / kRowBlock;
#pragma omp parallel
  {
    std::vector<float> buf(size_t(kRowBlock * K));
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t r0 = n0 + b * kRowBlock;
      const int64_t r1 = std::min(n1, r0 + kRowBlock);
      w.dequant_rows(r0, r1, buf.data());
      int64_t t = 0;
      for (; t + 4 <= T; t += 4) {
        const float* xt = x + t * ldx;
        float* yt = y + t * ldy - n0;
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) dot4x4(buf.data() + (r - r0) * K, K, xt, ldx, K, yt + r, ldy);
        for (; r < r1; ++r) dot1x4(buf.data() + (r - r0) * K, xt, ldx, K, yt + r, ldy);
      }
      for (; t < T; ++t) {
        const float* xt = x + t * ldx;
        float* yt = y + t * ldy - n0;
        for (int64_t r = r0; r < r1; ++r) yt[r] = dot(xt, buf.data() + (r - r0) * K, K);
      }
    }
  }
}

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  float ss = dot(x, x, n);
  const float r = 1.0f / std::sqrt(ss / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * r);
}

void rmsnorm_unweighted(const float* x, int64_t n, float eps, float* out) {
  float ss = dot(x, x, n);
  const float r = 1.0f / std::sqrt(ss / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace dsv4::cpu
