// linalg.h: the dense building blocks of the CPU reference: dot products, linear layers over any
// stored weight format (dequantized exactly, row block by row block, never materialized whole),
// RMSNorm and small helpers. Parallel over output rows or tokens with OpenMP.
#pragma once

#include <cstdint>

#include "model/linear_weight.h"

namespace dsv4::cpu {

// Sum of a[i] * b[i] in fp32 with 8 interleaved partial sums (vectorizable, order fixed).
float dot(const float* a, const float* b, int64_t n);

// y[t, n - n0] = sum_k x[t, k] * W[n, k] for t < T and n in [n0, n1).
// x: fp32 [T, ldx] (first W.k columns used); y: fp32 [T, ldy]. The result is unrounded fp32.
void linear(const LinearWeight& w, const float* x, int64_t T, int64_t ldx, float* y, int64_t ldy, int64_t n0,
            int64_t n1);
// All rows, contiguous x [T, K] and y [T, N].
inline void linear(const LinearWeight& w, const float* x, int64_t T, float* y) {
  linear(w, x, T, w.k, y, w.n, 0, w.n);
}

// out[i] = w[i] * x[i] / sqrt(mean(x^2) + eps) for one row of n (in place allowed).
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out);
// Same without a weight.
void rmsnorm_unweighted(const float* x, int64_t n, float eps, float* out);

float sigmoid(float x);
// torch.nn.functional.softplus with beta 1, threshold 20.
float softplus(float x);

}  // namespace dsv4::cpu
